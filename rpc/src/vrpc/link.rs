//! One side of a binding: the queue it receives on and the proxy of the queue it sends to
//! (seed 003 §4.2). See the module documentation of [`crate::vrpc`] for the layout.

use crate::record::LAST_FRAGMENT;
use crate::Error;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use vmmc::{BufId, Endpoint, ExportOptions, MemKind, ProcId, Proxy, Region};

/// Offset (after the ring) of the word holding the credit for the other direction.
pub(crate) const CREDIT: usize = 0;
/// Offset (after the ring) of the total bytes written into the ring: the flag.
pub(crate) const TOTAL: usize = 4;
/// Offset (after the ring) of the word set when the writer closes the binding.
pub(crate) const CLOSED: usize = 8;
/// Offset (after the ring) of the server's answer to a bind: queue id, queue size, sequence.
pub(crate) const ACCEPT: usize = 12;
/// Offset (after the ring) of the total at which the writer went back to the ring's start
/// (0: none pending). Written before the total that covers it; cleared by the reader.
pub(crate) const RESTART: usize = 24;
/// Bytes of control words after the ring (room to spare: a cache line).
pub(crate) const CONTROL: usize = 64;

/// The largest fragment's data. A larger record travels in several fragments, which the
/// receiver copies out while the sender writes the next. Measured on the 2-core machine
/// (bench-rpc's 64 KB echo, 256 KB queues): fragments of up to 64 KB gave a 25 us round
/// trip, one fragment for the whole record (half a queue allowed) 80 to 120 us; the cliff
/// lies between 65540 and 65544 bytes of data, and 16 to 32 KB fragments sat between (35 to
/// 45 us: more control updates and credit returns).
pub(crate) const MAX_FRAGMENT: usize = 64 << 10;
/// Once a fragment would end beyond this offset of an empty ring, the writer goes back to
/// the ring's start (see [`Link::put`]).
const RESTART_AFTER: usize = 64 << 10;
/// A server's binding keeps a buffer of up to this for its calls between them; a larger
/// call's buffer goes when it has been served.
const KEEP_RECORD: usize = 64 << 10;

/// Ids of the queues this process exports: above the listen buffers, below NX's ids.
const QUEUE_FIRST: BufId = 0x4100_0000;
const QUEUE_SPAN: u32 = 0x0d00_0000;

/// A queue size as used: a power of two in [`super::MIN_QUEUE`, `super::MAX_QUEUE`].
pub(crate) fn check_queue(bytes: usize) -> Result<usize, Error> {
    if (super::MIN_QUEUE..=super::MAX_QUEUE).contains(&bytes) && bytes.is_power_of_two() {
        Ok(bytes)
    } else {
        Err(Error::Config(format!(
            "a VRPC queue is a power of two from {} to {} bytes, not {bytes}",
            super::MIN_QUEUE,
            super::MAX_QUEUE
        )))
    }
}

/// Allocates and exports a queue of `cap` bytes that only `importer` may write.
pub(crate) fn export_queue(
    ep: &Endpoint,
    cap: usize,
    importer: ProcId,
) -> Result<(Region, BufId), Error> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let region = ep.alloc(cap + CONTROL, MemKind::Shared)?;
    // Ids in use (by another binding of this process) are skipped.
    for _ in 0..1024 {
        let id = QUEUE_FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % QUEUE_SPAN;
        match ep.export(id, &region, ExportOptions::new().importers([importer])) {
            Ok(()) => return Ok((region, id)),
            Err(vmmc::Error::BufIdInUse(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Error::Config(
        "no free receive-buffer id for a VRPC queue".into(),
    ))
}

/// The deadline `timeout` from now on the calling thread's clock.
fn deadline(timeout: Option<Duration>) -> Option<u64> {
    vmmc::pace::deadline_after(timeout)
}

/// Imports buffer `id` of `owner`, giving up if the owner dies or the timeout passes (a
/// plain import would wait for an export that may never come).
pub(crate) fn import_within(
    ep: &Endpoint,
    owner: ProcId,
    id: BufId,
    timeout: Option<Duration>,
) -> Result<Proxy, Error> {
    let deadline = deadline(timeout);
    let mut req = ep.import_async(owner, id)?;
    // The answer comes from the trusted party, not by a transfer that rings: naps.
    let nap = vmmc::wait::Nap::new();
    let mut wait = vmmc::wait::Wait::on(&IMPORT_SITE, &nap);
    loop {
        if let Some(proxy) = req.status()? {
            return Ok(proxy);
        }
        ep.check_peer(owner)?;
        if deadline.is_some_and(|d| vmmc::pace::now_ns() >= d) {
            return Err(Error::Timeout);
        }
        wait.idle();
    }
}

/// VRPC's waits for its queues' words (replies, requests, room), in `vmmc::wait`'s counts.
pub(crate) static WAIT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("rpc.vrpc");
/// VRPC's waits for an import of a peer's queue.
static IMPORT_SITE: vmmc::wait::Site = vmmc::wait::Site::new("rpc.vrpc.import");

fn bad(what: &str) -> Error {
    Error::BadMessage(format!("VRPC queue: {what}"))
}

/// Waits until the word at `off` of `rx` satisfies `done`, giving up when `peer` dies, when
/// the peer closes the binding (the CLOSED word of `rx` at `closed_off`), or at the deadline.
pub(crate) fn wait_word(
    ep: &Endpoint,
    peer: ProcId,
    rx: &Region,
    off: usize,
    closed_off: Option<usize>,
    timeout: Option<Duration>,
    done: impl FnMut(u32) -> bool,
) -> Result<u32, Error> {
    let deadline = deadline(timeout);
    let mut why: Option<Error> = None;
    let r = rx.wait_u32_at(&WAIT_SITE, off, done, || {
        let e = if let Err(e) = ep.check_peer(peer) {
            Error::from(e)
        } else if closed_off.is_some_and(|c| rx.load_u32(c).is_ok_and(|v| v != 0)) {
            Error::ConnectionClosed
        } else if deadline.is_some_and(|d| vmmc::pace::now_ns() >= d) {
            Error::Timeout
        } else {
            return Ok(());
        };
        why = Some(e);
        Err(vmmc::Error::Protocol("VRPC wait given up".into()))
    });
    r.map_err(|e| why.take().unwrap_or_else(|| e.into()))
}

/// One side of a binding.
pub(crate) struct Link {
    ep: Endpoint,
    /// The process at the other end.
    pub(crate) peer: ProcId,
    /// The queue this side receives on (exported, written by the peer).
    rx: Region,
    rx_id: BufId,
    rx_cap: usize,
    /// The peer's queue (imported).
    tx: Proxy,
    tx_cap: usize,
    /// Bytes written into the peer's ring (wrapping).
    sent: u32,
    /// Bytes consumed from our ring (wrapping).
    taken: u32,
    /// Everything before this total of the peer's ring is free (set when we restart at the
    /// ring's start: the reader skips the tail without reading it).
    floor: u32,
    /// How long a wait may last.
    timeout: Option<Duration>,
    /// The server's record in the making: the fragments taken so far (`pending[..pending_len]`)
    /// of a record whose last fragment has not arrived.
    pending: Vec<u8>,
    pending_len: usize,
    /// The server's reply in the making: the record (mark word first), where its next
    /// fragment starts and its length, when the peer's queue had no room for all of it.
    outgoing: Option<(Vec<u8>, usize, usize)>,
    /// When the server's side last moved a fragment of an unfinished call or reply (the
    /// clock of [`vmmc::pace::now_ns`]).
    moved: u64,
}

impl Link {
    /// A link over an exported queue and an imported one.
    pub(crate) fn new(
        ep: Endpoint,
        peer: ProcId,
        (rx, rx_id, rx_cap): (Region, BufId, usize),
        (tx, tx_cap): (Proxy, usize),
        timeout: Option<Duration>,
    ) -> Link {
        Link {
            ep,
            peer,
            rx,
            rx_id,
            rx_cap,
            tx,
            tx_cap,
            sent: 0,
            taken: 0,
            floor: 0,
            timeout,
            pending: Vec::new(),
            pending_len: 0,
            outgoing: None,
            moved: 0,
        }
    }

    fn wait(&self, off: usize, done: impl FnMut(u32) -> bool) -> Result<u32, Error> {
        wait_word(
            &self.ep,
            self.peer,
            &self.rx,
            self.rx_cap + off,
            Some(self.rx_cap + CLOSED),
            self.timeout,
            done,
        )
    }

    /// Writes the server's answer to a bind into the client's queue (at `off`).
    pub(crate) fn answer_bind(&self, off: usize, answer: &[u8]) -> Result<(), Error> {
        Ok(self.tx.send(off, answer)?)
    }

    /// Sets how long a wait may last.
    pub(crate) fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = timeout;
    }

    /// Whether a fragment has arrived and not been taken.
    pub(crate) fn has_data(&self) -> bool {
        self.rx
            .load_u32(self.rx_cap + TOTAL)
            .is_ok_and(|t| t != self.taken)
    }

    /// Whether the peer closed the binding.
    pub(crate) fn peer_closed(&self) -> bool {
        self.rx.load_u32(self.rx_cap + CLOSED).is_ok_and(|v| v != 0)
    }

    /// Whether the peer process is still running.
    pub(crate) fn peer_alive(&self) -> bool {
        self.ep.peer_alive(self.peer)
    }

    /// Sends `buf[4..]` as one record. The first word of `buf` is room for the record mark;
    /// the contents of `buf` are spent (later fragments' marks overwrite sent data).
    pub(crate) fn send_record(&mut self, buf: &mut Vec<u8>) -> Result<(), Error> {
        let len = record_len(buf)?;
        self.send_from(buf, 0, len, true).map(|_| ())
    }

    /// The server's send, which never waits: sends `buf[4..]` as [`Link::send_record`]
    /// does as far as the peer's queue has room, and keeps the rest (taking `buf`'s
    /// contents) for [`Link::resume_send`]. Whether the whole record went.
    pub(crate) fn offer_record(&mut self, buf: &mut Vec<u8>) -> Result<bool, Error> {
        let len = record_len(buf)?;
        match self.send_from(buf, 0, len, false)? {
            None => Ok(true),
            Some(p) => {
                self.outgoing = Some((std::mem::take(buf), p, len));
                self.moved = vmmc::pace::now_ns();
                Ok(false)
            }
        }
    }

    /// Whether a record offered by [`Link::offer_record`] is still going out.
    pub(crate) fn sending(&self) -> bool {
        self.outgoing.is_some()
    }

    /// Sends what the peer now has room for of the record [`Link::offer_record`] kept;
    /// whether it moved anything.
    pub(crate) fn resume_send(&mut self) -> Result<bool, Error> {
        let Some((mut buf, p, len)) = self.outgoing.take() else {
            return Ok(false);
        };
        match self.send_from(&mut buf, p, len, false)? {
            None => Ok(true),
            Some(q) => {
                if q != p {
                    self.moved = vmmc::pace::now_ns();
                }
                self.outgoing = Some((buf, q, len));
                Ok(q != p)
            }
        }
    }

    /// Whether an unfinished call or reply of the server's side has not moved for
    /// `timeout`: its client stopped in the middle of it.
    pub(crate) fn stalled(&self, timeout: Option<Duration>) -> bool {
        (self.pending_len > 0 || self.outgoing.is_some())
            && timeout.is_some_and(|t| {
                let t = u64::try_from(t.as_nanos()).unwrap_or(u64::MAX);
                vmmc::pace::now_ns().saturating_sub(self.moved) > t
            })
    }

    /// Sends the fragments of `buf[4..4 + len]` from data offset `p` on; without `wait`,
    /// stops before a fragment the peer's queue has no room for and returns where it starts.
    fn send_from(
        &mut self,
        buf: &mut [u8],
        mut p: usize,
        len: usize,
        wait: bool,
    ) -> Result<Option<usize>, Error> {
        // At most half a ring per fragment: the sender can write one while the receiver
        // reads one.
        let max = (self.tx_cap / 2 - 4).min(MAX_FRAGMENT);
        loop {
            let n = (len - p).min(max);
            let last = p + n == len;
            let mark = n as u32 | if last { LAST_FRAGMENT } else { 0 };
            // The mark goes in the word before the fragment's data: the reserved first word,
            // or the last word of the previous fragment, which has left.
            buf[p..p + 4].copy_from_slice(&mark.to_be_bytes());
            let end = p + 4 + n.next_multiple_of(4);
            if !self.put_if(&buf[p..end], wait)? {
                return Ok(Some(p));
            }
            if last {
                return Ok(None);
            }
            p += n;
        }
    }

    /// Sends `buf[4..]` as one record in two fragments, the first `split` bytes and then the
    /// rest, running `between` after the first: a sender that stalls in the middle of a record
    /// (for tests of a receiver's patience). Same contract as [`Link::send_record`].
    pub(crate) fn send_split(
        &mut self,
        buf: &mut Vec<u8>,
        split: usize,
        between: impl FnOnce(),
    ) -> Result<(), Error> {
        let len = record_len(buf)?;
        let max = (self.tx_cap / 2 - 4).min(MAX_FRAGMENT);
        let split = split.next_multiple_of(4);
        if split == 0 || split >= len || len - split > max || split > max {
            return Err(Error::Config(
                "send_split: each part must be whole words that fit a fragment".into(),
            ));
        }
        buf[..4].copy_from_slice(&(split as u32).to_be_bytes());
        self.put(&buf[..4 + split])?;
        between();
        let rest = len - split;
        buf[split..split + 4].copy_from_slice(&(rest as u32 | LAST_FRAGMENT).to_be_bytes());
        let end = split + 4 + rest.next_multiple_of(4);
        self.put(&buf[split..end])
    }

    /// Writes one fragment (mark and data, whole words) into the peer's ring, then the
    /// control words.
    ///
    /// When the peer has consumed everything (the credit has caught up with what was sent)
    /// and the fragment would end beyond [`RESTART_AFTER`], it goes to the ring's start
    /// rather than after the previous one: the records of a call-and-reply exchange then stay
    /// in the first bytes of the ring, in the caches of both processors, instead of walking
    /// through the whole ring.
    fn put(&mut self, frag: &[u8]) -> Result<(), Error> {
        self.put_if(frag, true).map(|_| ())
    }

    /// [`Link::put`]; without `wait`, a fragment the peer's queue has no room for is not
    /// written (`false`).
    fn put_if(&mut self, frag: &[u8], wait: bool) -> Result<bool, Error> {
        let cap = self.tx_cap;
        let need = frag.len();
        let mut credit = self.rx.load_u32(self.rx_cap + CREDIT)?;
        let off = self.sent as usize & (cap - 1);
        if off != 0 && credit == self.sent && off + need > cap.min(RESTART_AFTER) {
            // Tell the reader where to skip to the start: the word is written before the
            // total that covers the new fragment, and the reader clears it once used.
            let at = self.sent;
            self.tx.send(cap + RESTART, &at.to_ne_bytes())?;
            self.sent = at.wrapping_add(cap as u32 - (at & (cap as u32 - 1)));
            self.floor = self.sent;
            credit = self.sent;
        }
        let sent = self.sent;
        let floor = self.floor;
        let room = |credit: u32| {
            // Credit from before a restart counts as the restart's total.
            let credit = if (credit.wrapping_sub(floor) as i32) < 0 {
                floor
            } else {
                credit
            };
            let used = sent.wrapping_sub(credit) as usize;
            used <= cap && cap - used >= need
        };
        if !room(credit) {
            if !wait {
                return Ok(false);
            }
            self.wait(CREDIT, room)?;
        }
        let off = sent as usize & (cap - 1);
        let first = need.min(cap - off);
        self.tx.send(off, &frag[..first])?;
        if first < need {
            self.tx.send(0, &frag[first..])?;
        }
        self.sent = sent.wrapping_add(need as u32);
        // [CREDIT, TOTAL] in one transfer, the total (the flag) last.
        let mut ctl = [0u8; 8];
        ctl[..4].copy_from_slice(&self.taken.to_ne_bytes());
        ctl[4..].copy_from_slice(&self.sent.to_ne_bytes());
        self.tx.send(cap + CREDIT, &ctl)?;
        Ok(true)
    }

    /// Receives one record into `out[..len]` and returns `len`. `out` only grows, so that a
    /// buffer reused across records is not cleared each time.
    pub(crate) fn recv_record(
        &mut self,
        out: &mut Vec<u8>,
        max_record: usize,
    ) -> Result<usize, Error> {
        self.gather(out, 0, max_record, true).map(|(len, _)| len)
    }

    /// The server's receive, which never waits: takes the fragments that have arrived and
    /// returns `Some(len)` when they end a record (then in [`Link::record`]`[..len]`), `None`
    /// when its last fragment has not arrived yet (what came is kept for the next call).
    pub(crate) fn poll_record(&mut self, max_record: usize) -> Result<Option<usize>, Error> {
        let mut buf = std::mem::take(&mut self.pending);
        let r = self.gather(&mut buf, self.pending_len, max_record, false);
        self.pending = buf;
        let (len, whole) = r?;
        if len != self.pending_len {
            self.moved = vmmc::pace::now_ns();
        }
        self.pending_len = if whole { 0 } else { len };
        Ok(whole.then_some(len))
    }

    /// The record [`Link::poll_record`] completed.
    pub(crate) fn record(&self) -> &[u8] {
        &self.pending
    }

    /// The record [`Link::poll_record`] completed has been served: a large one's buffer is
    /// let go, so that a binding does not keep the memory of its largest call.
    pub(crate) fn record_done(&mut self) {
        if self.pending.capacity() > KEEP_RECORD {
            self.pending = Vec::new();
        }
    }

    /// Appends fragments to `out[..len]` until one ends the record (`(len, true)`), waiting for
    /// each when `wait`, else stopping when none has arrived (`(len, false)`).
    fn gather(
        &mut self,
        out: &mut Vec<u8>,
        mut len: usize,
        max_record: usize,
        wait: bool,
    ) -> Result<(usize, bool), Error> {
        let cap = self.rx_cap;
        loop {
            let mut taken = self.taken;
            let mut total = self.rx.load_u32(cap + TOTAL)?;
            if total == taken {
                if !wait {
                    return Ok((len, false));
                }
                total = self.wait(TOTAL, |t| t != taken)?;
            }
            // The writer went back to the ring's start at our position: skip the tail.
            let restart = self.rx.load_u32(cap + RESTART)?;
            if restart != 0 && restart == taken {
                self.rx.store_u32(cap + RESTART, 0)?;
                taken = taken.wrapping_add(cap as u32 - (taken & (cap as u32 - 1)));
            }
            let avail = total.wrapping_sub(taken) as usize;
            if !(4..=cap).contains(&avail) {
                return Err(bad("the total runs ahead of the queue"));
            }
            let off = taken as usize & (cap - 1);
            let mut mark = [0u8; 4];
            self.rx.read(off, &mut mark)?;
            let mark = u32::from_be_bytes(mark);
            let n = (mark & !LAST_FRAGMENT) as usize;
            let size = 4 + n.next_multiple_of(4);
            if size > avail {
                return Err(bad("a fragment longer than what was written"));
            }
            if len + n > max_record {
                return Err(Error::RecordTooLarge {
                    len: len + n,
                    max: max_record,
                });
            }
            if out.len() < len + n {
                out.resize(len + n, 0);
            }
            // The one copy on the receiving side: out of the queue.
            let start = (off + 4) & (cap - 1);
            let first = n.min(cap - start);
            self.rx.read(start, &mut out[len..len + first])?;
            if first < n {
                self.rx.read(0, &mut out[len + first..len + n])?;
            }
            len += n;
            self.taken = taken.wrapping_add(size as u32);
            if mark & LAST_FRAGMENT != 0 {
                return Ok((len, true));
            }
            // The sender may be waiting for room for the next fragment. A peer that wrote
            // the rest of the record and closed the binding no longer needs the credit, so
            // a failure here is not the record's: if the rest is missing, the wait for it
            // reports why.
            let _ = self
                .tx
                .send(self.tx_cap + CREDIT, &self.taken.to_ne_bytes());
        }
    }
}

/// The length of the record in `buf[4..]`, whose first word is room for the mark; pads
/// `buf` to whole words.
fn record_len(buf: &mut Vec<u8>) -> Result<usize, Error> {
    let len = buf
        .len()
        .checked_sub(4)
        .ok_or_else(|| bad("no room for the mark"))?;
    // XDR messages are whole words already; anything else is padded.
    buf.resize(4 + len.next_multiple_of(4), 0);
    Ok(len)
}

impl Drop for Link {
    /// Tells the peer the binding is closed and withdraws our queue (the proxy of the peer's
    /// queue is released with it). A dead peer is not told.
    fn drop(&mut self) {
        if self.ep.peer_alive(self.peer) {
            let _ = self.tx.send(self.tx_cap + CLOSED, &1u32.to_ne_bytes());
        }
        let _ = self.ep.unexport(self.rx_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    /// This test process as a job of one: it exports queues and imports its own.
    fn ep() -> Endpoint {
        static EP: OnceLock<Endpoint> = OnceLock::new();
        EP.get_or_init(|| vmmc_run::init().expect("a job of one"))
            .clone()
    }

    /// Two links joined to each other: what one sends, the other receives.
    fn pair(cap_a: usize, cap_b: usize, timeout: Duration) -> (Link, Link) {
        let ep = ep();
        let me = ep.me();
        let (ra, ia) = export_queue(&ep, cap_a, me).unwrap();
        let (rb, ib) = export_queue(&ep, cap_b, me).unwrap();
        let pa = ep.import(me, ia).unwrap();
        let pb = ep.import(me, ib).unwrap();
        let t = Some(timeout);
        (
            Link::new(ep.clone(), me, (ra, ia, cap_a), (pb, cap_b), t),
            Link::new(ep, me, (rb, ib, cap_b), (pa, cap_a), t),
        )
    }

    fn record(data: &[u8]) -> Vec<u8> {
        let mut v = vec![0; 4];
        v.extend_from_slice(data);
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Records of any length, most larger than half a queue, through small queues of
        /// both sizes, echoed by a second thread: every byte comes back, in order.
        #[test]
        fn records_cross_small_queues_in_order(
            cap_a in prop::sample::select(vec![256usize, 512, 1024, 4096]),
            cap_b in prop::sample::select(vec![256usize, 1024]),
            lens in prop::collection::vec(0usize..9000, 1..12),
            seed in any::<u8>(),
        ) {
            let (mut a, mut b) = pair(cap_a, cap_b, Duration::from_secs(20));
            let n = lens.len();
            let echo = std::thread::spawn(move || -> Result<(), Error> {
                let mut buf = Vec::new();
                for _ in 0..n {
                    let len = b.recv_record(&mut buf, 1 << 20)?;
                    let mut back = record(&buf[..len]);
                    b.send_record(&mut back)?;
                }
                Ok(())
            });
            let mut got = Vec::new();
            let mut ours = Ok(());
            for (i, &len) in lens.iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|k| (k * 7 + i) as u8 ^ seed).collect();
                let r = a
                    .send_record(&mut record(&data))
                    .and_then(|()| a.recv_record(&mut got, 1 << 20));
                match r {
                    Ok(n) => prop_assert!(got[..n] == data[..], "record {i} of {len} bytes"),
                    Err(e) => {
                        ours = Err(format!("record {i} of {len} bytes: {e}"));
                        break;
                    }
                }
            }
            drop(a);
            let theirs = echo.join().unwrap();
            prop_assert!(theirs.is_ok() && ours.is_ok(), "echo: {theirs:?}, ours: {ours:?}");
        }

        /// Whatever a peer writes into a queue, receiving gives a record or an error, never a
        /// panic or a read out of the queue.
        #[test]
        fn garbage_in_a_queue_is_an_error_not_a_panic(
            ring in prop::collection::vec(any::<u8>(), 256),
            total in prop_oneof![4u32..=260, any::<u32>()],
            marks in prop::collection::vec((0usize..64, any::<u32>()), 0..4),
        ) {
            let (a, mut b) = pair(256, 256, Duration::from_millis(5));
            b.rx.write(0, &ring).unwrap();
            for (w, m) in marks {
                b.rx.write(w * 4, &m.to_be_bytes()).unwrap();
            }
            b.rx.store_u32(256 + TOTAL, total).unwrap();
            let mut out = Vec::new();
            match b.recv_record(&mut out, 4096) {
                Ok(n) => prop_assert!(n <= 4096),
                Err(e) => prop_assert!(
                    matches!(
                        e,
                        Error::BadMessage(_) | Error::RecordTooLarge { .. } | Error::Timeout
                    ),
                    "{e}"
                ),
            }
            drop(a);
        }
    }

    /// Call-and-reply traffic through large queues stays in the ring's first 64 KB (plus one
    /// record), and records larger than a fragment cross in order.
    #[test]
    fn exchanges_stay_at_the_start_of_large_rings() {
        let cap = 1 << 20;
        let (mut a, mut b) = pair(cap, cap, Duration::from_secs(20));
        let lens = [1000usize, 70_000, 5, 300_000, 65_536, 1000];
        let echo = std::thread::spawn(move || -> Result<Vec<usize>, Error> {
            let mut buf = Vec::new();
            let mut offsets = Vec::new();
            for _ in 0..60 * lens.len() {
                let len = b.recv_record(&mut buf, 1 << 20)?;
                let mut back = record(&buf[..len]);
                b.send_record(&mut back)?;
                offsets.push(b.sent as usize & (cap - 1));
            }
            Ok(offsets)
        });
        let mut got = Vec::new();
        for round in 0..60 {
            for (i, &len) in lens.iter().enumerate() {
                let data: Vec<u8> = (0..len).map(|k| (k * 13 + i + round) as u8).collect();
                a.send_record(&mut record(&data)).unwrap();
                let n = a.recv_record(&mut got, 1 << 20).unwrap();
                assert!(got[..n] == data[..], "round {round}, record {i}");
                let off = a.sent as usize & (cap - 1);
                assert!(
                    off <= RESTART_AFTER + 300_008,
                    "the writer is {off} bytes in"
                );
            }
        }
        drop(a);
        for off in echo.join().unwrap().unwrap() {
            assert!(off <= RESTART_AFTER + 300_008, "the echo is {off} bytes in");
        }
    }

    #[test]
    fn a_closed_peer_ends_the_wait() {
        let (a, mut b) = pair(256, 256, Duration::from_secs(30));
        drop(a);
        let mut out = Vec::new();
        let r = b.recv_record(&mut out, 4096);
        assert!(
            matches!(r, Err(Error::ConnectionClosed)),
            "{:?}",
            r.map(|_| ())
        );
    }

    #[test]
    fn queue_sizes_are_powers_of_two_in_bounds() {
        assert_eq!(check_queue(256).unwrap(), 256);
        assert_eq!(check_queue(1 << 30).unwrap(), 1 << 30);
        for bad in [0, 128, 300, 1000, 1 << 31] {
            assert!(matches!(check_queue(bad), Err(Error::Config(_))), "{bad}");
        }
    }
}
