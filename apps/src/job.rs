//! Starting an application as a job: `vmmc-run -n N --transport T -- shrimp rank APP ...`,
//! and reading back its report. Used by `shrimp run` and by the experiments ([`crate::paper`]).

use crate::report::REPORT_PREFIX;
use crate::{App, Params, Report};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Parameters that are plain flags on the command line (the others take a value).
pub(crate) const FLAGS: &[&str] = &["inject_fault", "inject_death"];

/// The command-line form of `p` for the ranks: every parameter that is set, so a parameter
/// added to [`Params`] reaches the ranks without more code.
pub fn param_args(p: &Params) -> Vec<String> {
    let serde_json::Value::Object(fields) = serde_json::to_value(p).expect("params serialize")
    else {
        unreachable!("Params is a struct");
    };
    let mut a = Vec::new();
    for (name, v) in fields {
        let flag = format!("--{}", name.replace('_', "-"));
        let value = match (name.as_str(), v) {
            (_, serde_json::Value::Null) => continue,
            (n, serde_json::Value::Bool(b)) if FLAGS.contains(&n) => {
                if b {
                    a.push(flag);
                }
                continue;
            }
            ("protocol", _) => p.protocol.map(|x| x.name().to_string()).unwrap_or_default(),
            ("version" | "size", serde_json::Value::String(s)) => s.to_lowercase(),
            (_, serde_json::Value::String(s)) => s,
            // Dimensions: `167x63x34`.
            (_, serde_json::Value::Array(v)) => v
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("x"),
            (_, v) => v.to_string(),
        };
        a.push(flag);
        a.push(value);
    }
    a
}

/// `vmmc-run` next to `exe` (the `shrimp` binary).
pub fn launcher_beside(exe: &Path) -> Result<PathBuf, String> {
    let l = exe.with_file_name("vmmc-run");
    if l.exists() {
        Ok(l)
    } else {
        Err(format!(
            "{} not found: build it beside shrimp (cargo build -p vmmc-run, same profile)",
            l.display()
        ))
    }
}

/// One run of an application as a job.
pub struct Job<'a> {
    /// The application.
    pub app: &'a App,
    /// Nodes.
    pub nodes: usize,
    /// Transport, as `vmmc-run --transport` takes it: `shm`, `sim`, `tcp`, `rdma`, or `mpi`
    /// where `vmmc-run` is built with it.
    pub transport: &'a str,
    /// The application's parameters.
    pub params: &'a Params,
    /// Extra environment of the job (`VMMC_SIM_SET`, `VMMC_SIM_PARAMS`, `SVM_*`).
    pub env: Vec<(String, String)>,
    /// Print what the ranks print (else only a failed job's output is shown).
    pub echo: bool,
}

impl Job<'_> {
    /// Runs the job with `exe` (the `shrimp` binary) as every rank's program and returns
    /// rank 0's report, with the simulator's statistics folded in on sim.
    pub fn run(&self, exe: &Path) -> Result<Report, String> {
        let a = self.app;
        a.check_options(self.params).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(launcher_beside(exe)?);
        cmd.args(["-n", &self.nodes.to_string(), "--transport", self.transport])
            .arg("--")
            .arg(exe)
            .args(["rank", a.name])
            .args(param_args(self.params))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped());
        if !self.echo {
            cmd.stderr(Stdio::piped());
        }
        let mut stats_file = None;
        if self.transport == "sim" {
            let path = match std::env::var_os(vmmc_run::SIM_STATS_VAR) {
                Some(p) if !p.is_empty() => PathBuf::from(p),
                _ => {
                    let p = std::env::temp_dir()
                        .join(format!("shrimp-sim-stats-{}.json", std::process::id()));
                    cmd.env(vmmc_run::SIM_STATS_VAR, &p);
                    p
                }
            };
            let _ = std::fs::remove_file(&path);
            stats_file = Some(path);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", cmd.get_program()))?;
        // Drain stderr on its own thread so a chatty job cannot block on a full pipe.
        let err_reader = child.stderr.take().map(|e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut BufReader::new(e), &mut s);
                s
            })
        });
        let mut report = None;
        let mut out = String::new();
        for line in BufReader::new(child.stdout.take().expect("piped stdout")).lines() {
            let line = line.map_err(|e| format!("reading the job's output: {e}"))?;
            match line.strip_prefix(REPORT_PREFIX) {
                Some(json) => {
                    report = Some(
                        serde_json::from_str::<Report>(json)
                            .map_err(|e| format!("a malformed report ({e}): {json}"))?,
                    )
                }
                None if self.echo => println!("{line}"),
                None => {
                    out += &line;
                    out.push('\n');
                }
            }
        }
        let status = child.wait().map_err(|e| format!("wait for the job: {e}"))?;
        let err = err_reader
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        if !status.success() {
            return Err(format!(
                "{} on {} x {} failed ({status}): no time is reported{}{}",
                a.name,
                self.nodes,
                self.transport,
                if out.is_empty() { "" } else { "\n" },
                out.trim_end()
            ) + &if err.is_empty() {
                String::new()
            } else {
                format!("\n{}", err.trim_end())
            });
        }
        let mut rep = report.ok_or_else(|| format!("{} printed no report", a.name))?;
        if let Some(p) = stats_file {
            rep.add_sim_stats(&p);
            if std::env::var_os(vmmc_run::SIM_STATS_VAR).is_none() {
                let _ = std::fs::remove_file(&p);
            }
        }
        Ok(rep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Size, Version};

    #[test]
    fn every_set_parameter_reaches_the_ranks() {
        let mut p = Params::new(Version::Du, Size::Test);
        p.keys = Some(4096);
        p.theta = Some(0.5);
        p.combining = Some(false);
        p.protocol = Some(svm::Protocol::HlrcAu);
        p.inject_fault = true;
        p.volume = Some([167, 63, 34]);
        p.image = Some("/tmp/Render.png".into());
        let a = param_args(&p).join(" ");
        for want in [
            "--version du",
            "--size test",
            "--keys 4096",
            "--theta 0.5",
            "--combining false",
            "--protocol hlrc-au",
            "--inject-fault",
            "--volume 167x63x34",
            "--image /tmp/Render.png",
        ] {
            assert!(a.contains(want), "{want:?} missing from {a:?}");
        }
        assert!(!a.contains("--seed"), "{a}");
        let mut q = param_args(&Params::new(Version::Au, Size::Paper));
        q.sort();
        assert_eq!(q, ["--size", "--version", "au", "paper"]);
    }
}
