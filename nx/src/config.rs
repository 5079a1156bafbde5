//! Run-time settings: which small-message path, where small ends and large begins.

use crate::error::{NxError, Result};

/// How small messages reach the receiver's packet buffer (seed 003 §4.1, Figure 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmallPath {
    /// Deliberate update, one copy: the data straight from the user's memory, then the
    /// descriptor, as two deliberate updates ("1copy"). Data of 256 bytes or less travels
    /// with its descriptor in one transfer, where a copy costs less than a second transfer.
    Du,
    /// Deliberate update after a local copy: data and descriptor marshalled together and sent
    /// with a single deliberate update ("2copy").
    DuMarshal,
    /// Automatic update: data and descriptor stored into the automatic-update image of the
    /// receiver's packet buffer, which propagates them.
    Au,
}

/// The library's settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// The small-message path (`NX_SMALL=du|du2|au`).
    pub small: SmallPath,
    /// Largest message sent by the one-copy protocol; longer ones use the zero-copy
    /// protocol (`NX_THRESHOLD=bytes`). `None` chooses it from the number of processes
    /// ([`Config::threshold_for`]).
    pub threshold: Option<usize>,
    /// Packet buffers per connection and direction (`NX_SLOTS`).
    pub slots: usize,
    /// The registration cache (`NX_REGCACHE=1`): receive memory of zero-copy messages stays
    /// exported after its receive, and senders keep their imports of it, so that receiving
    /// again into the same memory costs no export and no import. The library directs a
    /// sender's writes into that memory only while a receive into it is in progress; but
    /// the memory stays registered with the VMMC layer after the receive returns, so it is off
    /// by default in the Rust API (C programs, which manage their memory themselves, have it
    /// on unless `NX_REGCACHE=0`).
    pub reg_cache: bool,
    /// Receiver-assisted zero-copy (`NX_PULL=1`, the default; `0` keeps seed 003's protocol
    /// as it is): when a blocking receive takes a zero-copy message of at least
    /// [`PULL_MIN`] bytes and the registration cache is on, the sender writes the first half
    /// into the receiver's memory while the receiver reads the second half from the sender's
    /// (remote read), so that both processes copy at once.
    pub pull: bool,
}

/// Smallest zero-copy message split between the sender's writes and the receiver's reads.
pub const PULL_MIN: usize = 128 << 10;

/// Smallest automatic threshold ([`Config::threshold_for`]).
pub const AUTO_MIN: usize = 16 << 10;
/// Largest automatic threshold.
pub const AUTO_MAX: usize = 256 << 10;
/// Bytes of packet buffers (towards all peers together) the automatic threshold keeps to.
/// Memory is touched only where messages land: a packet buffer holds its message at its end.
pub const PACKET_BUDGET: usize = 64 << 20;

impl Default for Config {
    fn default() -> Config {
        Config {
            small: SmallPath::Du,
            threshold: None,
            slots: 16,
            reg_cache: false,
            pull: true,
        }
    }
}

impl Config {
    /// The defaults overridden by `NX_SMALL`, `NX_THRESHOLD` and `NX_SLOTS`.
    pub fn from_env() -> Result<Config> {
        let mut c = Config::default();
        if let Ok(v) = std::env::var("NX_SMALL") {
            c.small = match v.trim() {
                "du" | "du1" | "" => SmallPath::Du,
                "du2" => SmallPath::DuMarshal,
                "au" => SmallPath::Au,
                other => {
                    return Err(NxError::Config(format!(
                        "NX_SMALL={other:?}: expected du, du2 or au"
                    )))
                }
            };
        }
        if let Ok(v) = std::env::var("NX_THRESHOLD") {
            c.threshold = Some(v.trim().parse().map_err(|_| {
                NxError::Config(format!("NX_THRESHOLD={v:?}: expected a number of bytes"))
            })?);
        }
        if let Ok(v) = std::env::var("NX_SLOTS") {
            c.slots = v.trim().parse().map_err(|_| {
                NxError::Config(format!("NX_SLOTS={v:?}: expected a number of buffers"))
            })?;
        }
        if let Some(on) = switch("NX_REGCACHE")? {
            c.reg_cache = on;
        }
        if let Some(on) = switch("NX_PULL")? {
            c.pull = on;
        }
        c.check()?;
        Ok(c)
    }

    /// The threshold in force for `n` processes: the one set, or the largest power of two
    /// from [`AUTO_MIN`] to [`AUTO_MAX`] whose packet buffers towards the `n - 1` peers take
    /// at most [`PACKET_BUDGET`] bytes. On shared memory a one-copy message up to a few
    /// hundred KiB (two copies that overlap, in cache) arrives sooner than a zero-copy one
    /// (a handshake, then a copy through the kernel): 64 KiB in 4.5 us against 9.5 us.
    pub fn threshold_for(&self, n: usize) -> usize {
        if let Some(t) = self.threshold {
            return t;
        }
        let per_peer = PACKET_BUDGET / n.saturating_sub(1).max(1) / self.slots;
        let mut t = AUTO_MAX;
        while t > AUTO_MIN && t > per_peer {
            t /= 2;
        }
        t
    }

    /// Refuses settings the protocol cannot work with.
    pub fn check(&self) -> Result<()> {
        if let Some(t) = self.threshold.filter(|&t| t > 1 << 20) {
            return Err(NxError::Config(format!(
                "threshold {t} above the 1 MiB packet-buffer limit"
            )));
        }
        if !(2..=1024).contains(&self.slots) {
            return Err(NxError::Config(format!(
                "{} packet buffers per connection: expected 2 to 1024",
                self.slots
            )));
        }
        Ok(())
    }
}

/// An on/off setting of the environment, if set.
fn switch(name: &str) -> Result<Option<bool>> {
    let Ok(v) = std::env::var(name) else {
        return Ok(None);
    };
    match v.trim() {
        "1" | "on" | "yes" => Ok(Some(true)),
        "0" | "off" | "no" => Ok(Some(false)),
        other => Err(NxError::Config(format!(
            "{name}={other:?}: expected 1 or 0"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_automatic_threshold_keeps_packet_buffers_within_the_budget() {
        let c = Config::default();
        assert_eq!(c.threshold_for(1), AUTO_MAX);
        assert_eq!(c.threshold_for(2), AUTO_MAX);
        assert_eq!(c.threshold_for(17), AUTO_MAX);
        assert_eq!(c.threshold_for(64), 64 << 10);
        assert_eq!(c.threshold_for(65535), AUTO_MIN);
        for n in [2, 17, 18, 64, 200] {
            let t = c.threshold_for(n);
            assert!(
                t == AUTO_MIN || (n - 1) * c.slots * t <= PACKET_BUDGET,
                "{n}: {t}"
            );
        }
        let set = Config {
            threshold: Some(1000),
            ..Config::default()
        };
        assert_eq!(set.threshold_for(64), 1000);
    }
}
