//! Record marking for RPC over byte streams (RFC 5531 §11).
//!
//! A record is sent as one or more fragments, each preceded by a four-byte header: the top bit
//! marks the last fragment, the other 31 bits give the fragment's length. The reader accepts
//! fragments of any size, split across reads at any byte, and refuses records larger than its
//! limit without allocating for them first.

use crate::Error;
use std::io::{self, Read, Write};

/// The last-fragment bit of a fragment header.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;
/// The largest fragment length a header can carry.
pub const MAX_FRAGMENT: usize = 0x7fff_ffff;
/// Default limit on the size of a record read (16 MiB).
pub const DEFAULT_MAX_RECORD: usize = 16 << 20;

/// How much of a fragment is read (and allocated for) at a time.
const READ_CHUNK: usize = 256 << 10;

/// Writes `record` as fragments of at most `max_fragment` bytes (at least 1), in one write.
pub fn write_record<W: Write>(mut writer: W, record: &[u8], max_fragment: usize) -> io::Result<()> {
    let max_fragment = max_fragment.clamp(1, MAX_FRAGMENT);
    let fragments = record.len().div_ceil(max_fragment).max(1);
    let mut out = Vec::with_capacity(record.len() + 4 * fragments);
    let mut chunks = record.chunks(max_fragment).peekable();
    if record.is_empty() {
        out.extend_from_slice(&LAST_FRAGMENT.to_be_bytes());
    }
    while let Some(chunk) = chunks.next() {
        let last = if chunks.peek().is_none() {
            LAST_FRAGMENT
        } else {
            0
        };
        out.extend_from_slice(&(last | chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    writer.write_all(&out)?;
    writer.flush()
}

/// Reads one record into `buf` (which is cleared first).
///
/// Returns `Ok(false)` if the stream ended cleanly before the first byte of a record, and
/// [`Error::ConnectionClosed`] if it ended inside one.
pub fn read_record<R: Read>(
    mut reader: R,
    buf: &mut Vec<u8>,
    max_record: usize,
) -> Result<bool, Error> {
    buf.clear();
    let mut first = true;
    loop {
        let mut header = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match reader.read(&mut header[got..]) {
                Ok(0) if first && got == 0 => return Ok(false),
                Ok(0) => return Err(Error::ConnectionClosed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::from_io(e)),
            }
        }
        first = false;
        let header = u32::from_be_bytes(header);
        let len = (header & !LAST_FRAGMENT) as usize;
        let total = buf.len() + len;
        if total > max_record {
            return Err(Error::RecordTooLarge {
                len: total,
                max: max_record,
            });
        }
        // The buffer grows with the data that actually arrives, a chunk at a time, not with
        // the announced length.
        let mut left = len;
        while left > 0 {
            let start = buf.len();
            let chunk = left.min(READ_CHUNK);
            buf.resize(start + chunk, 0);
            if let Err(e) = reader.read_exact(&mut buf[start..]) {
                buf.truncate(start);
                return Err(Error::from_io(e));
            }
            left -= chunk;
        }
        if header & LAST_FRAGMENT != 0 {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out its data in the given chunk sizes, cycling.
    struct Chunked<'a> {
        data: &'a [u8],
        sizes: Vec<usize>,
        turn: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let size = self.sizes[self.turn % self.sizes.len()].max(1);
            self.turn += 1;
            let n = size.min(out.len()).min(self.data.len());
            out[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    #[test]
    fn records_survive_any_fragmentation_and_any_read_split() {
        let record: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        for max_fragment in [1, 3, 4, 999, 1000, 5000] {
            let mut wire = Vec::new();
            write_record(&mut wire, &record, max_fragment).unwrap();
            write_record(&mut wire, b"second", max_fragment).unwrap();
            write_record(&mut wire, b"", max_fragment).unwrap();
            for sizes in [
                vec![1],
                vec![2, 5],
                vec![3],
                vec![7, 1, 4096],
                vec![1 << 20],
            ] {
                let mut reader = Chunked {
                    data: &wire,
                    sizes,
                    turn: 0,
                };
                let mut buf = Vec::new();
                assert!(read_record(&mut reader, &mut buf, 1 << 20).unwrap());
                assert_eq!(buf, record);
                assert!(read_record(&mut reader, &mut buf, 1 << 20).unwrap());
                assert_eq!(buf, b"second");
                assert!(read_record(&mut reader, &mut buf, 1 << 20).unwrap());
                assert!(buf.is_empty());
                assert!(!read_record(&mut reader, &mut buf, 1 << 20).unwrap());
            }
        }
    }

    #[test]
    fn fragment_headers_carry_the_last_bit() {
        let mut wire = Vec::new();
        write_record(&mut wire, &[1, 2, 3, 4, 5], 4).unwrap();
        assert_eq!(wire, [0, 0, 0, 4, 1, 2, 3, 4, 0x80, 0, 0, 1, 5]);
    }

    #[test]
    fn oversized_and_truncated_records_are_errors() {
        let mut buf = Vec::new();
        // Announces 2 GiB - 1: refused before anything is allocated.
        let huge = [0xff, 0xff, 0xff, 0xff, 1, 2];
        assert!(matches!(
            read_record(&huge[..], &mut buf, 1024),
            Err(Error::RecordTooLarge {
                len: 0x7fff_ffff,
                max: 1024
            })
        ));
        // Two fragments that together exceed the limit.
        let mut wire = Vec::new();
        write_record(&mut wire, &[0; 600], 300).unwrap();
        assert!(matches!(
            read_record(&wire[..], &mut buf, 500),
            Err(Error::RecordTooLarge { len: 600, max: 500 })
        ));
        // Ends inside a header, inside a fragment, after a non-last fragment.
        assert!(matches!(
            read_record(&[0x80, 0][..], &mut buf, 99),
            Err(Error::ConnectionClosed)
        ));
        assert!(matches!(
            read_record(&[0x80, 0, 0, 8, 1][..], &mut buf, 99),
            Err(Error::ConnectionClosed)
        ));
        assert!(matches!(
            read_record(&[0, 0, 0, 1, 1][..], &mut buf, 99),
            Err(Error::ConnectionClosed)
        ));
    }

    proptest::proptest! {
        #[test]
        fn random_streams_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut reader = &bytes[..];
            let mut buf = Vec::new();
            while let Ok(true) = read_record(&mut reader, &mut buf, 64) {
                proptest::prop_assert!(buf.len() <= 64);
            }
        }
    }
}
