//! The report of a run: one JSON line (prefixed with [`REPORT_PREFIX`] on the ranks' stdout)
//! and a readable summary.

use crate::{Params, Stats};
use serde::{Deserialize, Serialize};

/// The prefix of the report line a rank prints; `shrimp run` picks it out of the job's output.
pub const REPORT_PREFIX: &str = "SHRIMP-REPORT ";

/// What one run of an application measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// The application (`radix-vmmc`, ...).
    pub app: String,
    /// The communication library.
    pub library: String,
    /// `AU` or `DU`.
    pub version: String,
    /// The transport the job ran on.
    pub transport: String,
    /// Nodes.
    pub nodes: usize,
    /// The size preset (`paper`, `test`).
    pub size: String,
    /// Every problem parameter in force.
    pub problem: serde_json::Value,
    /// Time of the timed phase (start-up and the check excluded), the slowest node's, in ns
    /// of `vmmc::pace::now_ns` (virtual on sim).
    pub time_ns: u64,
    /// The same in seconds.
    pub time_s: f64,
    /// Messages sent by all nodes.
    pub messages: u64,
    /// Bytes sent by all nodes (messages and automatic-update stores).
    pub bytes: u64,
    /// Words stored through automatic-update bindings by all nodes.
    pub au_words: u64,
    /// What the check verified.
    pub check: String,
    /// On sim: the run's virtual end time and the interface's statistics summed over nodes
    /// (`VMMC_SIM_STATS`'s `total`), when the file was available.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sim: Option<serde_json::Value>,
    /// SVM applications: the protocol's statistics of the timed phase, every node and their sum
    /// ([`svm::RunStats`], from [`svm::Svm::gather_stats`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub svm: Option<serde_json::Value>,
}

impl Report {
    /// A report of `app` from rank 0's view of the job.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        app: &str,
        library: &str,
        ep: &vmmc::Endpoint,
        params: &Params,
        problem: serde_json::Value,
        time_ns: u64,
        stats: Stats,
        check: String,
    ) -> Report {
        Report {
            app: app.into(),
            library: library.into(),
            version: params.version.name().into(),
            transport: ep.transport_name().into(),
            nodes: ep.size(),
            size: format!("{:?}", params.size).to_lowercase(),
            problem,
            time_ns,
            time_s: time_ns as f64 / 1e9,
            messages: stats.messages,
            bytes: stats.bytes,
            au_words: stats.au_words,
            check,
            sim: None,
            svm: None,
        }
    }

    /// The JSON line.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a report serializes")
    }

    /// Folds in the simulator's statistics file (`VMMC_SIM_STATS`), if readable.
    pub fn add_sim_stats(&mut self, path: &std::path::Path) {
        let Ok(text) = std::fs::read_to_string(path) else {
            return;
        };
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            return;
        };
        let total = v.get("total").cloned().unwrap_or(serde_json::Value::Null);
        self.sim = Some(serde_json::json!({
            "virtual_end_ns": total.get("end_ns"),
            "combining_ratio": v.get("combining_ratio"),
            "total": total,
        }));
    }

    /// A readable summary (a few lines).
    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} ({} {}) on {} x {}, size {}: {:.6} s{}\n  {} messages, {} bytes sent, {} AU words; check: {}",
            self.app,
            self.library,
            self.version,
            self.nodes,
            self.transport,
            self.size,
            self.time_s,
            if self.transport == "sim" { " (virtual)" } else { "" },
            self.messages,
            self.bytes,
            self.au_words,
            self.check
        );
        if let Some(v) = &self.svm {
            if let Ok(t) = serde_json::from_value::<svm::Stats>(v["total"].clone()) {
                s += &format!("\n  svm {}: {t}", v["protocol"].as_str().unwrap_or("?"));
            }
        }
        if let Some(sim) = &self.sim {
            let t = &sim["total"];
            s += &format!(
                "\n  sim interface: {} packets out, {} bytes out, {} DU messages, {} AU packets, {} interrupts",
                t["packets_out"], t["bytes_out"], t["du_messages"], t["au_packets"], t["interrupts"]
            );
        }
        s
    }
}
