//! The parameter file (`params/shrimp.toml`, embedded as the default; `params/modern.toml`, a
//! present-day machine, embedded beside it) and its overrides.

use serde::{Deserialize, Serialize};
use vmmc::{Error, Result};

/// The default parameter file, with the source of every value.
pub const DEFAULT_PARAMS: &str = include_str!("../params/shrimp.toml");

/// The present-day parameter file (`params/modern.toml`: a ConnectX-6 HDR InfiniBand adapter
/// on PCIe 4.0 and one switch), with the source of every value; for [`Params::parse`], or
/// selected by path through [`PARAMS_VAR`].
pub const MODERN_PARAMS: &str = include_str!("../params/modern.toml");

/// Environment variable naming a parameter file that replaces the default.
pub const PARAMS_VAR: &str = "VMMC_SIM_PARAMS";
/// Environment variable with `section.key=value` overrides, comma-separated.
pub const SET_VAR: &str = "VMMC_SIM_SET";

/// Largest time parameter, ns (1000 s: far beyond any modelled cost, far below overflow).
pub(crate) const MAX_NS: i64 = 1_000_000_000_000;
/// Largest rate (MB/s, MHz) or scale.
const MAX_RATE: f64 = 1e6;
/// Largest size or count (1 GiB).
const MAX_COUNT: i64 = 1 << 30;

/// Every parameter of the model (see the parameter file for meanings and sources).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The node CPU.
    pub cpu: Cpu,
    /// Memory and I/O buses.
    pub bus: Bus,
    /// The network interface.
    pub ni: Ni,
    /// The backplane.
    pub network: Network,
    /// Software and interrupt costs.
    pub costs: Costs,
    /// The papers' what-if switches.
    pub switches: Switches,
}

/// CPU parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    /// Clock of the modelled CPU, MHz (informational).
    pub clock_mhz: f64,
    /// Host CPU time between library calls times this is charged as compute.
    pub compute_scale: f64,
    /// Host CPU time per interval not charged.
    pub compute_floor_ns: u64,
}

/// Bus parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Bus {
    /// Page size of the modelled machine.
    pub page_size: usize,
    /// Xpress memory bus burst write bandwidth (informational).
    pub xpress_burst_mb_s: f64,
    /// EISA burst bandwidth (informational).
    pub eisa_burst_mb_s: f64,
    /// Sustained DMA bandwidth of both DMA engines.
    pub dma_mb_s: f64,
}

/// Network interface parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ni {
    /// Outgoing FIFO capacity.
    pub fifo_capacity: usize,
    /// Threshold-interrupt level.
    pub fifo_threshold: usize,
    /// Level at which de-scheduled writers resume.
    pub fifo_resume: usize,
    /// FIFO drain bandwidth.
    pub fifo_drain_mb_s: f64,
    /// Snoop to packet header.
    pub snoop_ns: u64,
    /// Combining timer.
    pub combine_timer_ns: u64,
    /// Combining sub-page boundary.
    pub combine_subpage: usize,
    /// DU engine DMA start.
    pub du_dma_start_ns: u64,
    /// DU request queue depth.
    pub du_queue_depth: usize,
    /// Header bytes per packet.
    pub packet_header: usize,
    /// Outgoing arbiter + NIC.
    pub nic_out_ns: u64,
    /// Incoming NIC + arbiter.
    pub nic_in_ns: u64,
    /// Incoming DMA start per packet.
    pub in_dma_start_ns: u64,
    /// Network buffering ahead of the receiver's DMA.
    pub network_buffer_ns: u64,
}

/// Backplane parameters.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// Link bandwidth.
    pub link_mb_s: f64,
    /// Per-hop latency.
    pub hop_ns: u64,
    /// Mesh width (0: automatic).
    pub mesh_width: usize,
}

/// Software costs.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    /// User-level DMA initiation.
    pub du_initiate_ns: u64,
    /// System call per send (switch).
    pub syscall_ns: u64,
    /// Receive interrupt.
    pub interrupt_ns: u64,
    /// Successful poll.
    pub poll_ns: u64,
    /// AU store per word, uncached.
    pub au_store_uncached_ns: u64,
    /// AU store per word, write-through.
    pub au_store_writethrough_ns: u64,
    /// Extra AU delay with write-through caching.
    pub au_writethrough_delay_ns: u64,
    /// Import through the daemons.
    pub import_ns: u64,
    /// Export through the daemons.
    pub export_ns: u64,
    /// An access fault of shared virtual memory ([`vmmc::pace::Cost::AccessFault`]).
    pub access_fault_ns: u64,
    /// A synchronisation call satisfied locally ([`vmmc::pace::Cost::LocalSync`]).
    pub local_sync_ns: u64,
}

/// Memory mode of automatic-update pages.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub enum AuMemory {
    /// Cached write-through.
    #[serde(rename = "write-through")]
    WriteThrough,
    /// Caching disabled.
    #[serde(rename = "uncached")]
    Uncached,
}

/// The papers' what-ifs.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Switches {
    /// A system call per deliberate update.
    pub syscall_per_send: bool,
    /// An interrupt per arriving message.
    pub interrupt_every_message: bool,
    /// Automatic-update combining.
    pub combining: bool,
    /// Memory mode of automatic-update pages.
    pub au_memory: AuMemory,
}

impl Default for Params {
    fn default() -> Params {
        Params::parse(DEFAULT_PARAMS, &[]).expect("the embedded parameter file is valid")
    }
}

impl Params {
    /// Parses a parameter file and applies `section.key=value` overrides (values in TOML
    /// syntax; a bare word that is not TOML is taken as a string).
    pub fn parse(text: &str, overrides: &[&str]) -> Result<Params> {
        let mut v: toml::Table =
            toml::from_str(text).map_err(|e| Error::Bootstrap(format!("sim parameters: {e}")))?;
        for o in overrides.iter().map(|o| o.trim()).filter(|o| !o.is_empty()) {
            let (key, val) = o.split_once('=').ok_or_else(|| {
                Error::Bootstrap(format!(
                    "sim parameter override {o:?}: expected section.key=value"
                ))
            })?;
            let (sec, k) = key.trim().split_once('.').ok_or_else(|| {
                Error::Bootstrap(format!(
                    "sim parameter override {o:?}: the key must be section.key"
                ))
            })?;
            let val = val.trim();
            let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("x = {val}"))
                .ok()
                .and_then(|mut t| t.remove("x"))
                .unwrap_or_else(|| toml::Value::String(val.to_string()));
            let section = v
                .get_mut(sec)
                .and_then(|s| s.as_table_mut())
                .ok_or_else(|| {
                    Error::Bootstrap(format!("sim parameter override {o:?}: no section {sec:?}"))
                })?;
            if !section.contains_key(k) {
                return Err(Error::Bootstrap(format!(
                    "sim parameter override {o:?}: no parameter {k:?} in [{sec}]"
                )));
            }
            section.insert(k.to_string(), parsed);
        }
        let p: Params = toml::Value::Table(v)
            .try_into()
            .map_err(|e| Error::Bootstrap(format!("sim parameters: {e}")))?;
        p.check()?;
        Ok(p)
    }

    /// The parameters the environment asks for: the file named by [`PARAMS_VAR`] (or the
    /// default) with the overrides of [`SET_VAR`].
    pub fn from_env() -> Result<Params> {
        let text = match std::env::var(PARAMS_VAR) {
            Ok(path) if !path.is_empty() => std::fs::read_to_string(&path)
                .map_err(|e| Error::io("read the sim parameter file", e))?,
            _ => DEFAULT_PARAMS.to_string(),
        };
        let set = std::env::var(SET_VAR).unwrap_or_default();
        let overrides: Vec<&str> = set.split(',').collect();
        Params::parse(&text, &overrides)
    }

    fn check(&self) -> Result<()> {
        let bad = |what: &str| Err(Error::Bootstrap(format!("sim parameters: {what}")));
        // Every time, rate and size is bounded, so that the model's virtual-time arithmetic
        // cannot overflow (a fuzzed file found `u64::MAX` ns costs panicking in the model).
        let all = toml::Value::try_from(self)
            .map_err(|e| Error::Bootstrap(format!("sim parameters: {e}")))?;
        for (sec, t) in all.as_table().into_iter().flatten() {
            for (k, v) in t.as_table().into_iter().flatten() {
                let ok = match v {
                    toml::Value::Integer(n) if k.ends_with("_ns") => (0..=MAX_NS).contains(n),
                    toml::Value::Integer(n) => (0..=MAX_COUNT).contains(n),
                    toml::Value::Float(x) if k.ends_with("_mb_s") || k == "clock_mhz" => {
                        x.is_finite() && *x > 0.0 && *x <= MAX_RATE
                    }
                    toml::Value::Float(x) => x.is_finite() && *x >= 0.0 && *x <= MAX_RATE,
                    _ => true,
                };
                if !ok {
                    return Err(Error::Bootstrap(format!(
                        "sim parameters: {sec}.{k} = {v} is out of range (times up to {MAX_NS} \
                         ns, rates positive up to {MAX_RATE}, counts up to {MAX_COUNT})"
                    )));
                }
            }
        }
        if self.bus.page_size < 64 || !self.bus.page_size.is_power_of_two() {
            return bad("bus.page_size must be a power of two of at least 64");
        }
        if !(self.bus.dma_mb_s > 0.0
            && self.ni.fifo_drain_mb_s > 0.0
            && self.network.link_mb_s > 0.0)
        {
            return bad("bandwidths must be positive");
        }
        if self.cpu.compute_scale < 0.0 || !self.cpu.compute_scale.is_finite() {
            return bad("cpu.compute_scale must be a non-negative number");
        }
        if self.ni.fifo_capacity < 2 * (self.ni.packet_header + 4) {
            return bad("ni.fifo_capacity must hold two one-word packets");
        }
        if !(self.ni.fifo_resume < self.ni.fifo_threshold
            && self.ni.fifo_threshold <= self.ni.fifo_capacity)
        {
            return bad("need ni.fifo_resume < ni.fifo_threshold <= ni.fifo_capacity");
        }
        if self.ni.combine_subpage < 4 || !self.ni.combine_subpage.is_power_of_two() {
            return bad("ni.combine_subpage must be a power of two of at least 4");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_file_parses_and_overrides_apply() {
        let p = Params::default();
        assert_eq!(p.ni.fifo_capacity, 32768);
        assert!(p.switches.combining);
        let q = Params::parse(
            DEFAULT_PARAMS,
            &[
                "ni.fifo_capacity=8192",
                "ni.fifo_threshold = 6144",
                "ni.fifo_resume=2048",
                "switches.combining=false",
                "switches.au_memory=uncached",
            ],
        )
        .unwrap();
        assert_eq!(q.ni.fifo_capacity, 8192);
        assert!(!q.switches.combining);
        assert_eq!(q.switches.au_memory, AuMemory::Uncached);
    }

    #[test]
    fn bad_parameters_are_named() {
        let e = Params::parse(DEFAULT_PARAMS, &["ni.nonsense=1"]).unwrap_err();
        assert!(e.to_string().contains("nonsense"), "{e}");
        let e = Params::parse(DEFAULT_PARAMS, &["combining"]).unwrap_err();
        assert!(e.to_string().contains("section.key=value"), "{e}");
        let e = Params::parse(DEFAULT_PARAMS, &["ni.fifo_capacity=\"big\""]).unwrap_err();
        assert!(e.to_string().contains("sim parameters"), "{e}");
        let e = Params::parse(DEFAULT_PARAMS, &["bus.page_size=1000"]).unwrap_err();
        assert!(e.to_string().contains("page_size"), "{e}");
        assert!(Params::parse("not toml [", &[]).is_err());
    }
}
