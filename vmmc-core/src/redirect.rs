//! Transfer redirection (seed 004, "Transfer redirection").
//!
//! A redirectable receive buffer has a [`RedirSlot`]: a small structure in memory that both the
//! receiver and whoever places arriving data can reach (on SHRIMP it lived in the network
//! interface's SRAM; for shared memory it lives in the buffer's control page). The receiver
//! posts a destination; the placing side consults the slot chunk by chunk as a message
//! arrives, so a redirection posted before arrival takes the whole message, one posted during
//! arrival takes the rest of it, and one posted after takes nothing. A redirection is used by
//! at most one message and then cancels itself; [`RedirSlot::end`] reports exactly what went
//! where. The `ACTIVE` state plays the role of the firmware's `redirectionActive` flag: the
//! receiver cannot cancel while a message is being redirected, so nothing lands in the
//! destination after `end` returns.

use crate::error::{Error, Result};
use crate::types::BufId;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const EMPTY: u32 = 0;
const POSTED: u32 = 1;
const ACTIVE: u32 = 2;
const DONE: u32 = 3;
/// The receiver is writing a posting (senders ignore the slot meanwhile).
const POSTING: u32 = 4;
const NO_END: u64 = u64::MAX;

/// What a redirection did, as reported by `end_redir`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Redirected {
    /// Offset in the receive buffer of the first byte that went to the destination.
    pub buf_offset: usize,
    /// Number of bytes that went to the destination (0: the redirection was not used). They
    /// are the buffer offsets `buf_offset..buf_offset+len`, stored at the matching place of the
    /// destination; every other byte of the message is in the default buffer.
    pub len: usize,
}

/// The shared redirection structure of one redirectable buffer. `repr(C)`, only atomics:
/// valid in memory shared between processes, zero-initialised means "nothing posted".
#[repr(C)]
pub struct RedirSlot {
    state: AtomicU32,
    _pad: AtomicU32,
    dest_addr: AtomicU64,
    buf_off: AtomicU64,
    len: AtomicU64,
    done_start: AtomicU64,
    done_len: AtomicU64,
    /// Offset of the last word of the last message + 1; 0 means cleared.
    data_end: AtomicU64,
}

/// Where the placing side puts one piece of a message.
pub enum Piece<'a> {
    /// Into the default receive buffer at this offset.
    Default(usize, &'a [u8]),
    /// Into the receiver's memory at this address (the posted destination).
    Redirect(u64, &'a [u8]),
}

impl RedirSlot {
    /// A fresh slot (for in-process transports; shared memory starts zeroed).
    pub const fn new() -> RedirSlot {
        RedirSlot {
            state: AtomicU32::new(EMPTY),
            _pad: AtomicU32::new(0),
            dest_addr: AtomicU64::new(0),
            buf_off: AtomicU64::new(0),
            len: AtomicU64::new(0),
            done_start: AtomicU64::new(0),
            done_len: AtomicU64::new(0),
            data_end: AtomicU64::new(0),
        }
    }

    /// Receiver: posts a redirection of buffer offsets `buf_off..buf_off+len` to the receiver's
    /// address `dest_addr`.
    pub fn post(&self, buf: BufId, dest_addr: u64, buf_off: usize, len: usize) -> Result<()> {
        // Claim the slot first: two threads posting at once must not mix their fields.
        if self
            .state
            .compare_exchange(EMPTY, POSTING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(Error::RedirPosted(buf));
        }
        self.dest_addr.store(dest_addr, Ordering::Relaxed);
        self.buf_off.store(buf_off as u64, Ordering::Relaxed);
        self.len.store(len as u64, Ordering::Relaxed);
        self.done_start.store(0, Ordering::Relaxed);
        self.done_len.store(0, Ordering::Relaxed);
        self.state.store(POSTED, Ordering::Release);
        Ok(())
    }

    /// Receiver: cancels the redirection and reports what it did. Waits while a message is
    /// being redirected; `give_up` is polled then (e.g. to stop waiting on a dead sender).
    pub fn end(&self, mut give_up: impl FnMut() -> Result<()>) -> Result<Redirected> {
        let mut spins = 0u32;
        let mut wait = crate::wait::Wait::new(&REDIR_SITE);
        loop {
            match self.state.load(Ordering::Acquire) {
                EMPTY => return Ok(Redirected::default()),
                POSTED => {
                    if self
                        .state
                        .compare_exchange(POSTED, EMPTY, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return Ok(Redirected::default());
                    }
                }
                DONE => {
                    let r = Redirected {
                        buf_offset: self.done_start.load(Ordering::Relaxed) as usize,
                        len: self.done_len.load(Ordering::Relaxed) as usize,
                    };
                    self.state.store(EMPTY, Ordering::Release);
                    return Ok(r);
                }
                _ => {
                    spins = spins.wrapping_add(1);
                    if wait.resting() || spins.is_multiple_of(1024) {
                        if let Err(e) = give_up() {
                            // The sender may have finished just now: look again first.
                            if self
                                .state
                                .compare_exchange(
                                    ACTIVE,
                                    EMPTY,
                                    Ordering::AcqRel,
                                    Ordering::Acquire,
                                )
                                .is_ok()
                            {
                                // It died mid-message: free the slot for later postings.
                                return Err(e);
                            }
                            continue;
                        }
                    }
                    // The sender rings this process's bell when its transfer ends.
                    wait.idle();
                }
            }
        }
    }

    /// Receiver: offset of the last word of the last message, if any since the last clear.
    pub fn data_end(&self) -> Option<usize> {
        match self.data_end.load(Ordering::Acquire) {
            0 => None,
            v if v == NO_END => None,
            v => Some(v as usize - 1),
        }
    }

    /// Receiver: clears the end-of-data word.
    pub fn clear_data_end(&self) {
        self.data_end.store(0, Ordering::Release);
    }

    /// Placing side: delivers one message of `data` arriving at buffer offset `offset`, in
    /// chunks of `chunk` bytes, consulting the slot before each chunk. `place` does the copies
    /// and must return only when the piece is visible. The last word is placed last, and the
    /// end-of-data word is updated after it.
    pub fn deliver(
        &self,
        offset: usize,
        data: &[u8],
        chunk: usize,
        mut place: impl FnMut(Piece<'_>) -> Result<()>,
    ) -> Result<()> {
        let chunk = chunk.max(crate::types::WORD_SIZE);
        let mut owned = false;
        let (mut win_lo, mut win_hi, mut dest) = (0usize, 0usize, 0u64);
        let mut pos = 0usize;
        let result = (|| {
            while pos < data.len() {
                let end = (pos + chunk).min(data.len());
                let (lo, hi) = (offset + pos, offset + end);
                if !owned
                    && self.state.load(Ordering::Acquire) == POSTED
                    && self
                        .state
                        .compare_exchange(POSTED, ACTIVE, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    // The posting is ours and cannot change now: read it only after the claim.
                    let b = self.buf_off.load(Ordering::Relaxed) as usize;
                    let l = self.len.load(Ordering::Relaxed) as usize;
                    if b < offset + data.len() && lo < b + l {
                        owned = true;
                        win_lo = b;
                        win_hi = b + l;
                        dest = self.dest_addr.load(Ordering::Relaxed);
                    } else {
                        // Not for the rest of this message: give the posting back.
                        self.state.store(POSTED, Ordering::Release);
                    }
                }
                let piece = &data[pos..end];
                if owned && lo < win_hi && hi > win_lo {
                    let r_lo = lo.max(win_lo);
                    let r_hi = hi.min(win_hi);
                    if lo < r_lo {
                        place(Piece::Default(lo, &piece[..r_lo - lo]))?;
                    }
                    if self.done_len.load(Ordering::Relaxed) == 0 {
                        self.done_start.store(r_lo as u64, Ordering::Relaxed);
                    }
                    place(Piece::Redirect(
                        dest + (r_lo - win_lo) as u64,
                        &piece[r_lo - lo..r_hi - lo],
                    ))?;
                    self.done_len
                        .fetch_add((r_hi - r_lo) as u64, Ordering::Relaxed);
                    if r_hi < hi {
                        place(Piece::Default(r_hi, &piece[r_hi - lo..]))?;
                    }
                } else {
                    place(Piece::Default(lo, piece))?;
                }
                pos = end;
            }
            Ok(())
        })();
        if owned {
            self.state.store(DONE, Ordering::Release);
        }
        if result.is_ok() && !data.is_empty() {
            let last = offset + data.len() - crate::types::WORD_SIZE;
            self.data_end.store(last as u64 + 1, Ordering::Release);
        }
        result
    }
}

impl Default for RedirSlot {
    fn default() -> Self {
        RedirSlot::new()
    }
}

/// The receiver's wait for a message being redirected.
static REDIR_SITE: crate::wait::Site = crate::wait::Site::new("vmmc.redirect");

#[cfg(test)]
mod tests {
    use super::*;

    type Pieces = (Vec<(usize, Vec<u8>)>, Vec<(u64, Vec<u8>)>);

    fn run(slot: &RedirSlot, off: usize, data: &[u8], chunk: usize) -> Pieces {
        let (mut d, mut r) = (vec![], vec![]);
        slot.deliver(off, data, chunk, |p| {
            match p {
                Piece::Default(o, b) => d.push((o, b.to_vec())),
                Piece::Redirect(a, b) => r.push((a, b.to_vec())),
            }
            Ok(())
        })
        .unwrap();
        (d, r)
    }

    #[test]
    fn posted_before_takes_the_window_once() {
        let s = RedirSlot::new();
        s.post(1, 1000, 8, 8).unwrap();
        assert!(matches!(s.post(1, 0, 0, 4), Err(Error::RedirPosted(1))));
        let data: Vec<u8> = (0..24).collect();
        let (d, r) = run(&s, 0, &data, 4096);
        assert_eq!(r, vec![(1000, (8..16).collect())]);
        assert_eq!(d, vec![(0, (0..8).collect()), (16, (16..24).collect())]);
        assert_eq!(
            s.end(|| Ok(())).unwrap(),
            Redirected {
                buf_offset: 8,
                len: 8
            }
        );
        assert_eq!(s.data_end(), Some(20));
        // Used once: the next message lands in the default buffer.
        let (_, r) = run(&s, 0, &data, 4096);
        assert!(r.is_empty());
        s.clear_data_end();
        assert_eq!(s.data_end(), None);
    }

    #[test]
    fn posted_during_takes_the_rest() {
        let s = RedirSlot::new();
        let data: Vec<u8> = (0..16).collect();
        let mut n = 0;
        let mut redirected = vec![];
        s.deliver(0, &data, 4, |p| {
            n += 1;
            if n == 2 {
                s.post(1, 500, 0, 16).unwrap();
            }
            if let Piece::Redirect(a, b) = p {
                redirected.push((a, b.to_vec()));
            }
            Ok(())
        })
        .unwrap();
        let r = s.end(|| Ok(())).unwrap();
        assert_eq!(
            r,
            Redirected {
                buf_offset: 8,
                len: 8
            }
        );
        assert_eq!(
            redirected,
            vec![(508, vec![8, 9, 10, 11]), (512, vec![12, 13, 14, 15])]
        );
    }

    #[test]
    fn unused_redirection_ends_empty() {
        let s = RedirSlot::new();
        s.post(1, 0, 100, 4).unwrap();
        let (_, r) = run(&s, 0, &[0u8; 8], 4);
        assert!(r.is_empty());
        assert_eq!(s.end(|| Ok(())).unwrap(), Redirected::default());
    }
}
