//! 64-bit protection keys drawn from the OS's random source (seed 002 §2.2, §6.5: "large and
//! sparsely allocated", from a cryptographic-quality generator).

use crate::error::{Error, Result};
use std::io::Read;

/// A fresh random key, never 0 (0 marks "no key" in a metadata entry).
pub fn random_key() -> Result<u64> {
    loop {
        let mut b = [0u8; 8];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut b))
            .map_err(Error::Random)?;
        let k = u64::from_ne_bytes(b);
        if k != 0 {
            return Ok(k);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn keys_differ() {
        let a = super::random_key().unwrap();
        let b = super::random_key().unwrap();
        assert_ne!(a, b);
        assert_ne!(a, 0);
    }
}
