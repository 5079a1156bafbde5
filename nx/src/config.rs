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
    /// protocol (`NX_THRESHOLD=bytes`).
    pub threshold: usize,
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
}

impl Default for Config {
    fn default() -> Config {
        Config {
            small: SmallPath::Du,
            threshold: 16384,
            slots: 16,
            reg_cache: false,
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
            c.threshold = v.trim().parse().map_err(|_| {
                NxError::Config(format!("NX_THRESHOLD={v:?}: expected a number of bytes"))
            })?;
        }
        if let Ok(v) = std::env::var("NX_SLOTS") {
            c.slots = v.trim().parse().map_err(|_| {
                NxError::Config(format!("NX_SLOTS={v:?}: expected a number of buffers"))
            })?;
        }
        if let Ok(v) = std::env::var("NX_REGCACHE") {
            c.reg_cache = match v.trim() {
                "1" | "on" | "yes" => true,
                "0" | "off" | "no" => false,
                other => {
                    return Err(NxError::Config(format!(
                        "NX_REGCACHE={other:?}: expected 1 or 0"
                    )))
                }
            };
        }
        c.check()?;
        Ok(c)
    }

    /// Refuses settings the protocol cannot work with.
    pub fn check(&self) -> Result<()> {
        if self.threshold > 1 << 20 {
            return Err(NxError::Config(format!(
                "threshold {} above the 1 MiB packet-buffer limit",
                self.threshold
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
