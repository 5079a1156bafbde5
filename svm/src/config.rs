//! How a space is set up: the protocol and the sizes, from code or from the environment.

use crate::{Error, Result};

/// The coherence protocol (seed 001 §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Protocol {
    /// Home-based lazy release consistency: twins, diffs sent to the home by deliberate
    /// update at releases, whole pages fetched from the home (Zhou, Iftode, Li, OSDI '96).
    Hlrc,
    /// HLRC whose diffs are written to the home page through an automatic-update binding as
    /// they are produced, instead of being buffered and sent (seed 001 §4.2).
    HlrcAu,
    /// Automatic-update release consistency: every store to a non-home page propagates to
    /// the home copy by automatic update; no twins, no diffs (Iftode, Dubnicki, Felten, Li,
    /// HPCA '96).
    Aurc,
}

impl Protocol {
    /// Every protocol.
    pub const ALL: [Protocol; 3] = [Protocol::Hlrc, Protocol::HlrcAu, Protocol::Aurc];

    /// The name `SVM_PROTOCOL` takes.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Hlrc => "hlrc",
            Protocol::HlrcAu => "hlrc-au",
            Protocol::Aurc => "aurc",
        }
    }

    /// Whether the protocol propagates updates by automatic update.
    pub fn uses_au(self) -> bool {
        self != Protocol::Hlrc
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Protocol {
    type Err = Error;
    fn from_str(s: &str) -> Result<Protocol> {
        match s.trim().to_ascii_lowercase().as_str() {
            "hlrc" => Ok(Protocol::Hlrc),
            "hlrc-au" | "hlrcau" | "hlrc_au" => Ok(Protocol::HlrcAu),
            "aurc" => Ok(Protocol::Aurc),
            other => Err(Error::Config(format!(
                "unknown protocol {other:?} (hlrc, hlrc-au or aurc)"
            ))),
        }
    }
}

/// The set-up of a shared space; every node must pass the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The coherence protocol (`SVM_PROTOCOL`).
    pub protocol: Protocol,
    /// Bytes of shared space (`SVM_SPACE`, default 64 MiB; `K`, `M`, `G` suffixes).
    pub space: usize,
    /// The coherence unit (`SVM_PAGE`, default the host page): a power of two, 256 B to 1 MiB.
    pub page_size: usize,
    /// Number of locks (`SVM_LOCKS`, default 1024).
    pub locks: u32,
    /// Number of flags (`SVM_FLAGS`, default 1024).
    pub flags: u32,
    /// Bytes of the areas that carry write notices with a grant or a barrier
    /// (`SVM_NOTICE_AREA`, default 4 MiB; memory is touched only as far as it is used).
    pub notice_area: usize,
    /// Combine automatic-update stores into packets (`SVM_COMBINING=1|0`). By default on
    /// where the transport packetizes automatic update itself (the simulated SHRIMP's
    /// snooping hardware), off where single stores propagate at memory speed (shm).
    pub combining: Option<bool>,
    /// Send the protocol's deliberate updates asynchronously (`SVM_ASYNC=1|0`, default off):
    /// a send returns once initiated instead of once its data has left memory, as in seed
    /// 001 §4.5.3's deliberate-update queueing experiment.
    pub async_sends: bool,
}

impl Config {
    /// The defaults with `protocol`.
    pub fn new(protocol: Protocol) -> Config {
        Config {
            protocol,
            space: 64 << 20,
            page_size: vmmc::page_size(),
            locks: 1024,
            flags: 1024,
            notice_area: 4 << 20,
            combining: None,
            async_sends: false,
        }
    }

    /// The space's size.
    pub fn space(mut self, bytes: usize) -> Config {
        self.space = bytes;
        self
    }

    /// The page size.
    pub fn page_size(mut self, bytes: usize) -> Config {
        self.page_size = bytes;
        self
    }

    /// The number of locks.
    pub fn locks(mut self, n: u32) -> Config {
        self.locks = n;
        self
    }

    /// The number of flags.
    pub fn flags(mut self, n: u32) -> Config {
        self.flags = n;
        self
    }

    /// The defaults overridden by the environment (`SVM_PROTOCOL`, default HLRC, and the
    /// variables named on each field).
    pub fn from_env() -> Result<Config> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let protocol = match var("SVM_PROTOCOL") {
            Some(p) => p.parse()?,
            None => Protocol::Hlrc,
        };
        let mut c = Config::new(protocol);
        c.apply_env(&var)?;
        Ok(c)
    }

    /// `self` with the sizes and switches the environment sets (the protocol stays).
    pub fn with_env(mut self) -> Result<Config> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        self.apply_env(&var)?;
        Ok(self)
    }

    fn apply_env(&mut self, var: &dyn Fn(&str) -> Option<String>) -> Result<()> {
        if let Some(v) = var("SVM_SPACE") {
            self.space = parse_size("SVM_SPACE", &v)?;
        }
        if let Some(v) = var("SVM_PAGE") {
            self.page_size = parse_size("SVM_PAGE", &v)?;
        }
        if let Some(v) = var("SVM_LOCKS") {
            self.locks = parse_size("SVM_LOCKS", &v)? as u32;
        }
        if let Some(v) = var("SVM_FLAGS") {
            self.flags = parse_size("SVM_FLAGS", &v)? as u32;
        }
        if let Some(v) = var("SVM_NOTICE_AREA") {
            self.notice_area = parse_size("SVM_NOTICE_AREA", &v)?;
        }
        if let Some(v) = var("SVM_ASYNC") {
            self.async_sends = match v.trim() {
                "1" | "on" | "true" => true,
                "0" | "off" | "false" => false,
                other => return Err(Error::Config(format!("SVM_ASYNC={other:?}: 1 or 0"))),
            };
        }
        if let Some(v) = var("SVM_COMBINING") {
            self.combining = Some(match v.trim() {
                "1" | "on" | "true" => true,
                "0" | "off" | "false" => false,
                other => return Err(Error::Config(format!("SVM_COMBINING={other:?}: 1 or 0"))),
            });
        }
        Ok(())
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        let p = self.page_size;
        if !p.is_power_of_two() || !(256..=1 << 20).contains(&p) {
            return Err(Error::Config(format!(
                "page size {p}: a power of two from 256 B to 1 MiB"
            )));
        }
        if self.space < p || self.space / p > u32::MAX as usize / 2 {
            return Err(Error::Config(format!(
                "space of {} bytes with {p}-byte pages",
                self.space
            )));
        }
        if self.notice_area < 4096 {
            return Err(Error::Config("notice area under 4 KiB".into()));
        }
        Ok(())
    }
}

/// Parses `123`, `64K`, `64M`, `1G`.
pub(crate) fn parse_size(name: &str, v: &str) -> Result<usize> {
    let v = v.trim();
    let (num, mult) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 1 << 10),
        Some((i, 'm' | 'M')) => (&v[..i], 1 << 20),
        Some((i, 'g' | 'G')) => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.trim()
        .parse::<usize>()
        .ok()
        .and_then(|x| x.checked_mul(mult))
        .ok_or_else(|| Error::Config(format!("{name}={v:?} is not a size")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_sizes_parse() {
        for p in Protocol::ALL {
            assert_eq!(p.name().parse::<Protocol>().unwrap(), p);
        }
        assert!("mesi".parse::<Protocol>().is_err());
        assert_eq!(parse_size("x", "64K").unwrap(), 65536);
        assert_eq!(parse_size("x", " 2m ").unwrap(), 2 << 20);
        assert!(parse_size("x", "lots").is_err());
        assert!(Config::new(Protocol::Aurc)
            .page_size(1000)
            .validate()
            .is_err());
        assert!(Config::new(Protocol::Aurc).validate().is_ok());
    }
}
