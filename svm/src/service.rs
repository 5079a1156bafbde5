//! The half of a node that answers other nodes: homes apply diffs and version updates and
//! serve page requests, lock requests move on towards their queue's tail, token holders
//! grant locks, flag managers release waiters. It runs on the endpoint's notification handler when a request
//! arrives while the program computes (the SHRIMP SVM's interrupt-driven service, seed 001
//! Table 3), and on the program's own thread whenever that thread waits in the library
//! (polling). One mutex keeps the two apart; the program's thread only tries it, so it never
//! waits behind the handler.

use crate::stats::Stats;
use crate::wire::*;
use crate::{Error, Result};
use std::sync::{Mutex, MutexGuard, OnceLock};
use vmmc::{Endpoint, Proxy, Region};

/// The imports a node needs to answer (set once set-up has imported them).
pub(crate) struct Peers {
    pub ctl: Vec<Option<Proxy>>,
    pub space: Vec<Option<Proxy>>,
    pub bar: Option<Proxy>,
}

/// A request that waits for its turn (a lock's next holder, a flag's waiter).
#[derive(Clone, Debug)]
pub(crate) struct Waiter {
    pub from: usize,
    pub seq: u32,
    pub vt: Vec<u32>,
}

#[derive(Default)]
pub(crate) struct FlagState {
    value: u32,
    waiters: Vec<(Waiter, u32)>,
}

/// What the service and the program share, under one mutex.
pub(crate) struct State {
    /// Bytes consumed of each sender's ring.
    rpos: Vec<u32>,
    /// The words [`Service::serve`] reads, kept to be reused.
    scan: Vec<u32>,
    req_seen: Vec<u32>,
    fwd_seen: Vec<u32>,
    /// Page requests waiting for diffs: (requester, seq, page, need).
    pending: Vec<(usize, u32, usize, Vec<u32>)>,
    /// Vector timestamp: the last interval of each node whose write notices are known here.
    pub vt: Vec<u32>,
    /// Write notices: `log[j][k - 1]` lists the pages node j wrote in its interval k. It may
    /// run ahead of `vt`: a flag's manager keeps the notices its setters send with their sets
    /// ([`State::absorb`]), which its own program has not acquired.
    pub log: Vec<Vec<Vec<u32>>>,
    /// Per sender: the write notices of its flag sets that are still arriving (a set's
    /// notices may take several ring records; the set itself comes last).
    set_notices: Vec<Vec<u32>>,
    /// Per lock: the node this one last knew to request it (Naimi and Tréhel's `last`,
    /// the probable tail of its queue); this node is the tail when it is itself.
    last: Vec<u16>,
    /// Per lock: this node holds its token / holds the lock / who gets it next.
    pub token: Vec<bool>,
    pub held: Vec<bool>,
    pub waiter: Vec<Option<Waiter>>,
    flags: Vec<FlagState>,
    /// Counters of the service side.
    pub stats: Stats,
    /// Transfers to make once the lock is released ([`Service::unlock`]).
    pub outbox: Vec<Out>,
}

pub(crate) struct Service {
    pub ep: Endpoint,
    pub me: usize,
    pub n: usize,
    pub page: usize,
    pub lay: Layout,
    pub space: Region,
    pub vers: Region,
    pub ctl: Region,
    pub bar: Option<Region>,
    pub peers: OnceLock<Peers>,
    pub st: Mutex<State>,
    /// The first error the handler met (reported by the program's next call).
    pub failed: Mutex<Option<(Option<usize>, String)>>,
    /// Whether `failed` holds an error (read on every call without the mutex).
    pub has_failed: std::sync::atomic::AtomicBool,
    /// Set by a thread whose [`Service::try_serve`] found the state locked: the holder (the
    /// notification handler; the program's thread serves again itself before it leaves the
    /// library) serves once more after it lets go.
    pub again: std::sync::atomic::AtomicBool,
    /// Messages the service sent.
    pub sent: Mutex<Stats>,
    /// The transport reads remote memory: a sender can see a receiver's `awake` word and
    /// spare the notification (and its interrupt or wake-up) of a node that polls anyway.
    pub remote_read: bool,
    /// Deliberate updates go out asynchronously ([`crate::Config::async_sends`]).
    pub async_sends: bool,
    /// Those not known to be done: a write into this node's own memory waits for them, so it
    /// cannot overtake them.
    pub in_flight: Mutex<Vec<vmmc::AsyncSend>>,
    /// Nesting of the program's calls into the library.
    pub depth: std::sync::atomic::AtomicU32,
    /// The `awake` word's value: odd while the program is inside the library (in a call,
    /// where a wait that sleeps is woken by the process's doorbell, `vmmc::wait`), and one
    /// more at every entry and exit, so that a sender can tell whether the program has been
    /// inside since it looked.
    pub epoch: std::sync::atomic::AtomicU32,
    /// Notifications held back ([`Service::ring_due`]); only the program's thread, inside a
    /// call, holds one back, so that its own wait or the call's end sends it.
    pub bells: Mutex<Vec<Bell>>,
    /// Whether `bells` has any (read on every turn of a wait without the mutex).
    pub bells_held: std::sync::atomic::AtomicBool,
    /// Hold notifications back at all: the transport reads remote memory and the node does
    /// not run in virtual time (on the simulated SHRIMP every notification is sent, as the
    /// SHRIMP SVM did).
    pub defer_bells: bool,
    /// The program's thread (the one that may hold notifications back).
    pub program: std::thread::ThreadId,
}

/// A notification held back: to `node`, whose `awake` word read `epoch` (outside the
/// library) at `since`. A request whose reply the program waits for (`ask`) is held back
/// without a look at the word, which costs a remote read of a line its owner writes at
/// every call (and its next write a wait for that line): the word is read only once the
/// reply is [`LOOK_DELAY`] late, and the bell goes when the reply comes
/// ([`Service::answered`]).
pub(crate) struct Bell {
    node: usize,
    epoch: Option<u32>,
    since: Option<std::time::Instant>,
    ask: bool,
}

/// How long a request to a node outside the library waits for the node to come back in (it
/// serves what waits whenever it enters or leaves a call) before a notification is sent.
/// A notification costs the receiver a thread wake-up, several microseconds on Linux and
/// a core for the woken thread; a program that calls the library in a loop (acquire,
/// release, acquire...) is outside for well under a microsecond at a time.
const BELL_DELAY: std::time::Duration = std::time::Duration::from_micros(5);

/// How late the reply to a request must be before the requester looks whether its node is
/// inside the library: a lock handed over between two nodes that call the library in a
/// loop comes back within about a microsecond (bench svm-peer, `lock_contended`), and then
/// nobody reads the other's word.
const LOOK_DELAY: std::time::Duration = std::time::Duration::from_micros(2);

/// A transfer's error, naming the node when it is gone.
fn lost(node: usize, e: vmmc::Error) -> Error {
    match e {
        vmmc::Error::PeerLost(m) => Error::PeerLost(node, m),
        e => Error::Vmmc(e),
    }
}

/// A transfer decided under the state's lock and made after it is released: nobody holds
/// the lock while a transfer waits (on sim a transfer waits for the node's turn, and the
/// program's thread, which may hold the turn, must never wait for the lock meanwhile).
pub(crate) struct Out {
    to: To,
    off: usize,
    bytes: Bytes,
    wake: Wake,
}

/// The longest transfer kept inside its [`Out`] (a slot of up to 57 nodes).
const INLINE: usize = 256;

/// A transfer's bytes: a slot or a word inline, anything longer on the heap. A lock's grant
/// and a ring's credit are slots and words, and two allocations (about 35 ns each here) were
/// a sixth of a lock hand-over on shm. (The inline variant is large on purpose: an `Out`
/// lives in the outbox for one lock's hold, which keeps its capacity.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Bytes {
    Inline([u8; INLINE], usize),
    Heap(Vec<u8>),
}

impl Bytes {
    fn inline(b: &[u8]) -> Bytes {
        if b.len() > INLINE {
            return Bytes::Heap(b.to_vec());
        }
        let mut a = [0u8; INLINE];
        a[..b.len()].copy_from_slice(b);
        Bytes::Inline(a, b.len())
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Inline(a, n) => &a[..*n],
            Bytes::Heap(v) => v,
        }
    }
}

thread_local! {
    /// An emptied outbox whose capacity the next [`Service::unlock`] of this thread reuses.
    static SPARE: std::cell::Cell<Vec<Out>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Whether a transfer must get its receiver's attention.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Data that something later announces.
    No,
    /// A reply its receiver polls for. The receiver waits inside the library, where a wait
    /// that sleeps is woken by the transport's doorbell after the transfer (`vmmc::wait`):
    /// no look at its `awake` word (on tcp a remote read is a round trip) and never a
    /// notification.
    Reply,
    /// A request: a notification unless the receiver is inside the library.
    Request,
    /// A request whose reply the program's thread waits for next (a page, a lock, a flag):
    /// as `Request`, but the receiver's word is read only if the reply is late.
    Ask,
}

/// Where a transfer goes.
#[derive(Clone, Copy)]
pub(crate) enum To {
    Ctl(usize),
    Space(usize),
    Bar,
}

impl State {
    pub fn new(n: usize, me: usize, locks: u32, flags: u32) -> State {
        let managed = |count: u32| (count as usize).div_ceil(n);
        State {
            rpos: vec![0; n],
            scan: Vec::with_capacity(3 * n),
            req_seen: vec![0; n],
            fwd_seen: vec![0; n],
            pending: Vec::new(),
            vt: vec![0; n],
            log: vec![Vec::new(); n],
            set_notices: vec![Vec::new(); n],
            last: (0..locks).map(|l| (l as usize % n) as u16).collect(),
            token: (0..locks).map(|l| l as usize % n == me).collect(),
            held: vec![false; locks as usize],
            waiter: vec![None; locks as usize],
            flags: (0..managed(flags)).map(|_| FlagState::default()).collect(),
            stats: Stats::default(),
            outbox: Vec::new(),
        }
    }

    /// The write notices that a node knowing `known` lacks, as
    /// `[node, interval, count, pages...]*`.
    pub fn notices_since(&self, known: &[u32]) -> Vec<u32> {
        self.notices_between(known, &self.vt)
    }

    /// As [`State::notices_since`], with every notice held here, also those only a flag's
    /// setters sent (what a flag's grant hands over).
    pub fn notices_held(&self, known: &[u32]) -> Vec<u32> {
        let held: Vec<u32> = self.log.iter().map(|l| l.len() as u32).collect();
        self.notices_between(known, &held)
    }

    fn notices_between(&self, known: &[u32], upto: &[u32]) -> Vec<u32> {
        let mut out = Vec::new();
        for (j, log) in self.log.iter().enumerate() {
            for k in known[j] as usize + 1..=upto[j] as usize {
                let pages = &log[k - 1];
                out.extend_from_slice(&[j as u32, k as u32, pages.len() as u32]);
                out.extend_from_slice(pages);
            }
        }
        out
    }

    /// Takes in notices (from a grant or a barrier release); returns those that were new.
    pub fn learn(&mut self, words: &[u32]) -> Result<Vec<(usize, u32, Vec<u32>)>> {
        let mut new = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let bad = || Error::Protocol("malformed write notices".into());
            let (j, k, c) = match words.get(i..i + 3) {
                Some(&[j, k, c]) => (j as usize, k, c as usize),
                _ => return Err(bad()),
            };
            let pages = words.get(i + 3..i + 3 + c).ok_or_else(bad)?;
            i += 3 + c;
            if j >= self.vt.len() {
                return Err(bad());
            }
            if k <= self.vt[j] {
                continue;
            }
            if k != self.vt[j] + 1 {
                return Err(Error::Protocol(format!(
                    "write notices of node {j} skip from interval {} to {k}",
                    self.vt[j]
                )));
            }
            self.vt[j] = k;
            // A flag's manager may hold it already (`absorb`).
            if self.log[j].len() < k as usize {
                self.log[j].push(pages.to_vec());
            }
            new.push((j, k, pages.to_vec()));
        }
        Ok(new)
    }

    /// Keeps the notices a flag's setter sent with its set, for the flag's waiters; this
    /// node's program has not acquired them (`vt` does not move).
    fn absorb(&mut self, words: &[u32]) -> Result<()> {
        let mut i = 0;
        while i < words.len() {
            let bad = || Error::Protocol("malformed write notices of a flag set".into());
            let (j, k, c) = match words.get(i..i + 3) {
                Some(&[j, k, c]) => (j as usize, k as usize, c as usize),
                _ => return Err(bad()),
            };
            let pages = words.get(i + 3..i + 3 + c).ok_or_else(bad)?;
            i += 3 + c;
            let log = self.log.get_mut(j).ok_or_else(bad)?;
            if k <= log.len() {
                continue;
            }
            if k != log.len() + 1 {
                return Err(Error::Protocol(format!(
                    "write notices of node {j} with a flag set skip from interval {} to {k}",
                    log.len()
                )));
            }
            log.push(pages.to_vec());
        }
        Ok(())
    }
}

fn vec_bytes(w: &[u32]) -> Vec<u8> {
    words_to_bytes(w)
}

impl Service {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn peers(&self) -> Option<&Peers> {
        self.peers.get()
    }

    /// Writes `bytes` at `off` of a buffer of node `to`: locally (the last word last, with
    /// release ordering) when it is this node's, else by one deliberate update.
    pub fn send(&self, st: &mut Stats, to: To, off: usize, bytes: &[u8], wake: Wake) -> Result<()> {
        let (node, local, proxy) = match to {
            To::Ctl(x) => (x, &self.ctl, self.peers().and_then(|p| p.ctl[x].as_ref())),
            To::Space(x) => (
                x,
                &self.space,
                self.peers().and_then(|p| p.space[x].as_ref()),
            ),
            To::Bar => (
                0,
                self.bar.as_ref().unwrap_or(&self.ctl),
                self.peers().and_then(|p| p.bar.as_ref()),
            ),
        };
        if node == self.me {
            if self.async_sends {
                let pending =
                    std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
                for h in pending {
                    h.wait()?;
                }
            }
            let body = bytes.len() - 4;
            local.write(off, &bytes[..body])?;
            let last = u32::from_ne_bytes(bytes[body..].try_into().expect("word"));
            local.store_u32(off + body, last)?;
            return Ok(());
        }
        let p = proxy.ok_or_else(|| Error::Protocol(format!("node {node} is not imported")))?;
        let lost = |e| lost(node, e);
        if self.async_sends {
            // The data is captured now; later transfers to the node stay in order.
            let mut h = p.send_async(off, bytes.to_vec()).map_err(lost)?;
            if !matches!(h.status(), Ok(vmmc::AsyncStatus::Done)) {
                let mut v = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
                // Keep only what is still in flight (errors surface at the next wait).
                v.retain_mut(|h| !matches!(h.status(), Ok(vmmc::AsyncStatus::Done)));
                v.push(h);
            }
        } else {
            p.send(off, bytes).map_err(lost)?;
        }
        if matches!(wake, Wake::Request | Wake::Ask) {
            let hold = self.defer_bells
                && self.depth.load(std::sync::atomic::Ordering::Relaxed) > 0
                && std::thread::current().id() == self.program;
            if hold && wake == Wake::Ask {
                // Its word is looked at only if the reply is late (see `Bell`).
                self.hold_bell(Bell {
                    node,
                    epoch: None,
                    since: None,
                    ask: true,
                });
            } else {
                // Dekker with the receiver's `Awake` guard and its sleep: our data is
                // visible before we read its word; it clears the word before it looks one
                // last time.
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                // A node that left since the transfer has nothing to be woken for: whoever
                // waits for it sees the loss.
                let outside = match self.outside(node) {
                    Err(Error::PeerLost(..)) => None,
                    x => x?,
                };
                if let Some(epoch) = outside {
                    if hold {
                        self.hold_bell(Bell {
                            node,
                            epoch: Some(epoch),
                            since: Some(std::time::Instant::now()),
                            ask: false,
                        });
                    } else {
                        match self.notify(st, node) {
                            Err(Error::PeerLost(..)) => {}
                            x => x?,
                        }
                    }
                }
            }
        }
        st.messages += 1;
        st.message_bytes += bytes.len() as u64;
        Ok(())
    }

    /// `node`'s `awake` word if its program is outside the library (or cannot be seen:
    /// where remote memory cannot be read every request is notified, as on SHRIMP); `None`
    /// if it is inside, and so serves what waits before it leaves.
    fn outside(&self, node: usize) -> Result<Option<u32>> {
        if !self.remote_read {
            return Ok(Some(0));
        }
        let Some(p) = self.peers().and_then(|p| p.ctl[node].as_ref()) else {
            return Ok(Some(0));
        };
        let mut w = [0u8; 4];
        p.get_data(self.lay.awake(), &mut w)
            .map_err(|e| lost(node, e))?;
        let w = u32::from_ne_bytes(w);
        Ok((w & 1 == 0).then_some(w))
    }

    /// Sends `node` a notification: it rides on a word of its own in the control buffer,
    /// whose handler serves (an empty transfer cannot carry one).
    fn notify(&self, st: &mut Stats, node: usize) -> Result<()> {
        let ctl = self
            .peers()
            .and_then(|p| p.ctl[node].as_ref())
            .ok_or_else(|| Error::Protocol(format!("node {node} is not imported")))?;
        ctl.send_notify_wait(self.lay.awake() + 4, &[0; 4])
            .map_err(|e| lost(node, e))?;
        st.notifications_sent += 1;
        st.messages += 1;
        st.message_bytes += 4;
        Ok(())
    }

    fn hold_bell(&self, b: Bell) {
        self.bells.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        self.bells_held
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The reply to the program's request has come: the node it went to (or the node that
    /// passed it on) has served it, and its held-back notification is moot (a node has one
    /// request outstanding at a time).
    pub fn answered(&self) {
        use std::sync::atomic::Ordering;
        if !self.bells_held.load(Ordering::Relaxed) {
            return;
        }
        let mut bells = self.bells.lock().unwrap_or_else(|e| e.into_inner());
        bells.retain(|b| !b.ask);
        self.bells_held.store(!bells.is_empty(), Ordering::Relaxed);
    }

    /// Sends the notifications held back whose receivers have not been inside the library
    /// since (those that have were served, or will be before they leave): all of them with
    /// `now`, else those held for [`BELL_DELAY`].
    pub fn ring_due(&self, now: bool) -> Result<()> {
        use std::sync::atomic::Ordering;
        if !self.bells_held.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut bells = self.bells.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = Stats::default();
        let mut r = Ok(());
        let mut clock = None;
        let mut now_at = || *clock.get_or_insert_with(std::time::Instant::now);
        bells.retain_mut(|b| {
            if r.is_err() {
                return true;
            }
            let since = *b.since.get_or_insert_with(&mut now_at);
            if b.epoch.is_none() && !now {
                // A request without a reply yet: look at its node's word once the reply is
                // late (the look comes after the request, as the Dekker pairing wants).
                if now_at().duration_since(since) < LOOK_DELAY {
                    return true;
                }
                std::sync::atomic::fence(Ordering::SeqCst);
                return match self.outside(b.node) {
                    Ok(Some(w)) => {
                        b.epoch = Some(w);
                        true
                    }
                    // Inside: it serves the request before it leaves.
                    Ok(None) | Err(Error::PeerLost(..)) => false,
                    Err(e) => {
                        r = Err(e);
                        true
                    }
                };
            }
            // Not due yet: no look at the node's word (a remote read) before it is.
            if !now && now_at().duration_since(since) < BELL_DELAY {
                return true;
            }
            match self.outside(b.node) {
                Ok(Some(w)) if b.epoch.is_none_or(|e| e == w) => {
                    r = match self.notify(&mut st, b.node) {
                        // A held-back bell only hurries a node: one that has left the job
                        // needs none (whoever waits for it sees the loss).
                        Err(Error::PeerLost(..)) => Ok(()),
                        x => x,
                    };
                    r.is_err()
                }
                Ok(_) => false,
                // Gone: nothing to hurry (see above).
                Err(Error::PeerLost(..)) => false,
                Err(e) => {
                    r = Err(e);
                    true
                }
            }
        });
        self.bells_held.store(!bells.is_empty(), Ordering::Relaxed);
        drop(bells);
        if st.messages > 0 {
            self.sent.lock().unwrap_or_else(|e| e.into_inner()).add(&st);
        }
        r
    }

    /// Marks the program inside (`on`) or outside the library in the `awake` word (the
    /// program's thread, which owns it): a new epoch, odd inside.
    pub fn set_awake(&self, on: bool) {
        self.mark(on)
    }

    fn mark(&self, on: bool) {
        use std::sync::atomic::Ordering;
        let e = self.epoch.load(Ordering::Relaxed);
        if (e & 1 == 1) != on {
            let e = e.wrapping_add(1);
            self.epoch.store(e, Ordering::Relaxed);
            let _ = self.ctl.store_u32(self.lay.awake(), e);
        }
    }

    /// Marks the program as inside the library until the guard drops.
    pub fn awake(self: &std::sync::Arc<Self>) -> Awake {
        use std::sync::atomic::Ordering;
        // Only the program's thread changes the depth (a plain load and store: no locked
        // instruction on every call).
        let d = self.depth.load(Ordering::Relaxed);
        self.depth.store(d + 1, Ordering::Relaxed);
        if d == 0 && self.remote_read {
            self.set_awake(true);
        }
        Awake(self.clone())
    }

    /// Posts a slot now (one transfer; the sequence number first and last).
    pub fn post_slot(
        &self,
        st: &mut Stats,
        to: To,
        off: usize,
        m: SlotMsg<'_>,
        wake: Wake,
    ) -> Result<()> {
        // On the stack where it fits (a request is on the requester's path).
        let slot = self.lay.slot;
        if slot <= 256 {
            let mut b = [0u8; 256];
            m.encode_into(&mut b[..slot]);
            return self.send(st, to, off, &b[..slot], wake);
        }
        self.send(st, to, off, &m.encode(slot), wake)
    }

    /// Posts a mailbox now: the payload, then its header slot.
    pub fn post_mailbox(
        &self,
        st: &mut Stats,
        to: To,
        at: (usize, usize),
        seq: u32,
        status: u32,
        payload: &[u32],
    ) -> Result<()> {
        let mut q = Vec::new();
        self.queue_mailbox(&mut q, to, at, seq, status, payload)?;
        self.flush(&mut q, st)
    }

    fn queue_slot(&self, q: &mut Vec<Out>, to: To, off: usize, m: SlotMsg<'_>, wake: Wake) {
        let slot = self.lay.slot;
        let bytes = if slot <= INLINE {
            let mut a = [0u8; INLINE];
            m.encode_into(&mut a[..slot]);
            Bytes::Inline(a, slot)
        } else {
            Bytes::Heap(m.encode(slot))
        };
        q.push(Out {
            to,
            off,
            bytes,
            wake,
        });
    }

    /// Queues a mailbox: the payload, then its header slot.
    pub fn queue_mailbox(
        &self,
        q: &mut Vec<Out>,
        to: To,
        (hdr, data): (usize, usize),
        seq: u32,
        status: u32,
        payload: &[u32],
    ) -> Result<()> {
        if payload.len() * 4 > self.lay.area {
            return Err(Error::TooLarge {
                what: "write notices",
                len: payload.len() * 4,
                cap: self.lay.area,
            });
        }
        if !payload.is_empty() {
            q.push(Out {
                to,
                off: data,
                bytes: Bytes::Heap(vec_bytes(payload)),
                wake: Wake::No,
            });
        }
        let m = SlotMsg {
            seq,
            kind: status,
            id: payload.len() as u32,
            arg: 0,
            from: self.me as u32,
            aux: 0,
            vector: &[],
        };
        self.queue_slot(q, to, hdr, m, Wake::Reply);
        Ok(())
    }

    /// Makes queued transfers, in order (`q` is left empty).
    pub fn flush(&self, q: &mut Vec<Out>, st: &mut Stats) -> Result<()> {
        for o in q.drain(..) {
            self.send(st, o.to, o.off, &o.bytes, o.wake)?;
        }
        Ok(())
    }

    /// Releases the state's lock, then makes the transfers decided under it.
    pub fn unlock(&self, mut st: MutexGuard<'_, State>) -> Result<()> {
        if st.outbox.is_empty() {
            return Ok(());
        }
        let mut q = std::mem::replace(&mut st.outbox, SPARE.take());
        drop(st);
        let mut s = Stats::default();
        let r = self.flush(&mut q, &mut s);
        q.clear();
        SPARE.set(q);
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).add(&s);
        r
    }

    /// A slot of a local buffer whose last word, `last`, is new: the whole slot if its first word
    /// matches (else the transfer is still landing).
    fn read_new_slot(&self, region: &Region, off: usize, last: u32) -> Result<Option<Slot>> {
        if region.load_u32(off)? != last {
            return Ok(None);
        }
        let mut head = [0u8; 4 * SLOT_HEAD];
        region.read(off, &mut head)?;
        let mut vector = vec![0u32; self.n];
        region.read(
            off + 4 * SLOT_HEAD,
            bytemuck::cast_slice_mut(vector.as_mut_slice()),
        )?;
        Ok(Some(Slot::decode(&head, vector)))
    }

    /// Reads a mailbox whose header carries `seq`: (status, payload words).
    pub fn read_mailbox(
        &self,
        region: &Region,
        (hdr, data): (usize, usize),
        seq: u32,
    ) -> Result<Option<(u32, Vec<u32>)>> {
        let last = region.load_u32(hdr + self.lay.slot - 4)?;
        if last != seq || region.load_u32(hdr)? != seq {
            return Ok(None);
        }
        // The header's kind and length words (see `SlotMsg`): no copy of the whole slot.
        let (kind, words) = (
            region.load_u32(hdr + 4)?,
            region.load_u32(hdr + 8)? as usize,
        );
        if words * 4 > self.lay.area {
            return Err(Error::Protocol(format!("a mailbox of {} bytes", words * 4)));
        }
        let mut w = vec![0u32; words];
        if words > 0 {
            region.read(data, bytemuck::cast_slice_mut(&mut w))?;
        }
        Ok(Some((kind, w)))
    }

    /// One pass over everything that may have arrived. Call with the state locked.
    ///
    /// The words that tell what is new (each sender's ring tail, the last word of each
    /// sender's request and forward slot) are all read first and looked at after: the loads
    /// do not wait for one another. On many nodes they are the pass's cost: two slots per
    /// sender, each on its own cache line, which on sim the other nodes' turns leave cold.
    /// Measured on 16 sim nodes (31 lines; the lock ping-pong of `svm-peer`, four runs each),
    /// a pass took a median of 210-320 ns with each word looked at as it was read, 150-230 ns
    /// this way. On sim a pass in `acquire` is host time charged as computation.
    pub fn serve(&self, st: &mut State) -> Result<()> {
        if self.peers().is_none() {
            return Ok(());
        }
        let n = self.n;
        let last = self.lay.slot - 4;
        let mut w = std::mem::take(&mut st.scan);
        w.clear();
        for s in 0..n {
            w.push(self.ctl.load_u32(self.lay.tail(s))?);
        }
        for a in 0..n {
            w.push(self.ctl.load_u32(self.lay.req(a) + last)?);
            w.push(self.ctl.load_u32(self.lay.fwd(a) + last)?);
        }
        let r = self.serve_seen(st, &w);
        st.scan = w;
        r
    }

    /// [`Service::serve`] once the words are read: `w` holds the n ring tails, then each
    /// sender's request and forward slot's last word.
    fn serve_seen(&self, st: &mut State, w: &[u32]) -> Result<()> {
        let n = self.n;
        for s in (0..n).filter(|&s| s != self.me) {
            if st.rpos[s] != w[s] {
                self.drain_ring(st, s, w[s])?;
            }
        }
        // A node's own requests and forwards never use its slots (they are served at once).
        for a in (0..n).filter(|&a| a != self.me) {
            let (req, fwd) = (w[n + 2 * a], w[n + 2 * a + 1]);
            if req != 0 && req != st.req_seen[a] {
                if let Some(m) = self.read_new_slot(&self.ctl, self.lay.req(a), req)? {
                    st.req_seen[a] = m.seq;
                    st.stats.requests_served += 1;
                    self.request(st, a, m)?;
                }
            }
            if fwd != 0 && fwd != st.fwd_seen[a] {
                if let Some(m) = self.read_new_slot(&self.ctl, self.lay.fwd(a), fwd)? {
                    st.fwd_seen[a] = m.seq;
                    st.stats.requests_served += 1;
                    self.forward(st, m)?;
                }
            }
        }
        Ok(())
    }

    /// Serves if nobody else is (the program's thread while it waits or as it leaves the
    /// library); if somebody is, that one serves again after it lets go
    /// ([`Service::served_by_handler`]): its pass may have looked at a slot before our
    /// request landed there, and the requester, which saw this node inside the library,
    /// left the answer to it and rings nobody.
    pub fn try_serve(&self) -> Result<()> {
        use std::sync::atomic::{fence, Ordering};
        self.check_failed()?;
        // Dekker with the holder's look in `served_by_handler`: either our attempt finds the
        // lock free or the holder sees the flag.
        self.again.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Ok(mut st) = self.st.try_lock() {
            self.again.store(false, Ordering::Relaxed);
            self.serve(&mut st)?;
            self.unlock(st)?;
        }
        Ok(())
    }

    /// The notification handler's pass: serves everything, then once more while the
    /// program's thread found the state locked meanwhile (`try_serve`).
    pub fn served_by_handler(&self) -> Result<()> {
        use std::sync::atomic::{fence, Ordering};
        loop {
            let mut st = self.lock();
            self.again.store(false, Ordering::Relaxed);
            self.serve(&mut st)?;
            self.unlock(st)?;
            fence(Ordering::SeqCst);
            if !self.again.load(Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    /// Records the first error the service met outside the program's calls.
    pub fn fail(&self, e: Error) {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        let node = match &e {
            Error::PeerLost(n, _) => Some(*n),
            _ => None,
        };
        f.get_or_insert_with(|| (node, e.to_string()));
        self.has_failed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Waits for every asynchronous send still in flight; one to a node that has left since
    /// needs no delivery.
    pub fn drain_async(&self) -> Result<()> {
        let pending =
            std::mem::take(&mut *self.in_flight.lock().unwrap_or_else(|e| e.into_inner()));
        for h in pending {
            match h.wait() {
                Ok(_) | Err(vmmc::Error::PeerLost(_)) => {}
                Err(e) => return Err(Error::Vmmc(e)),
            }
        }
        Ok(())
    }

    pub fn check_failed(&self) -> Result<()> {
        if !self.has_failed.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        match &*self.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            // A service that failed because a node is lost reports that loss as such.
            Some((Some(n), e)) => Err(Error::PeerLost(*n, format!("the service failed: {e}"))),
            Some((None, e)) => Err(Error::Protocol(format!("the service failed: {e}"))),
            None => Ok(()),
        }
    }

    fn drain_ring(&self, st: &mut State, s: usize, tail: u32) -> Result<()> {
        let ring = self.lay.ring;
        let base = self.lay.ring(s);
        while st.rpos[s] != tail {
            let pos = st.rpos[s] as usize % ring;
            let mut h = [0u8; 8];
            self.ctl.read(base + pos, &mut h)?;
            let kind = u32::from_ne_bytes(h[..4].try_into().expect("word"));
            let len = u32::from_ne_bytes(h[4..].try_into().expect("word")) as usize;
            if kind == R_WRAP {
                st.rpos[s] = st.rpos[s].wrapping_add((ring - pos) as u32);
                continue;
            }
            if pos + record_len(len) > ring {
                return Err(Error::Protocol(format!(
                    "record of {len} bytes past the ring's end"
                )));
            }
            let mut b = vec![0u8; len];
            self.ctl.read(base + pos + 8, &mut b)?;
            self.record(st, s, kind, &b)?;
            st.rpos[s] = st.rpos[s].wrapping_add(record_len(len) as u32);
        }
        let credit = st.rpos[s];
        st.outbox.push(Out {
            to: To::Ctl(s),
            off: self.lay.credit(self.me),
            bytes: Bytes::inline(&credit.to_ne_bytes()),
            wake: Wake::Reply,
        });
        Ok(())
    }

    fn version(&self, page: usize, node: usize) -> Result<u32> {
        Ok(self.vers.load_u32(4 * (page * self.n + node))?)
    }

    fn set_version(&self, page: usize, node: usize, k: u32) -> Result<()> {
        if k > self.version(page, node)? {
            self.vers.store_u32(4 * (page * self.n + node), k)?;
        }
        Ok(())
    }

    fn versions_reached(&self, page: usize, need: &[u32]) -> Result<bool> {
        for (j, &k) in need.iter().enumerate() {
            if self.version(page, j)? < k {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn check_page(&self, page: usize) -> Result<()> {
        if (page + 1) * self.page > self.space.len() {
            return Err(Error::Protocol(format!("page {page} is outside the space")));
        }
        Ok(())
    }

    fn record(&self, st: &mut State, from: usize, kind: u32, b: &[u8]) -> Result<()> {
        let mut r = Words::new(b);
        match kind {
            R_DIFF => {
                // [page, writer, interval, bitmap of changed words, changed words]
                let (page, writer, k) = (r.next()? as usize, r.next()? as usize, r.next()?);
                self.check_page(page)?;
                let words = self.page / 4;
                let bitmap = r.bytes(words.div_ceil(8))?;
                let base = page * self.page;
                let mut applied = 0;
                for i in 0..words {
                    if bitmap[i / 8] & (1 << (i % 8)) != 0 {
                        let w = r.bytes(4)?;
                        self.space.write(base + 4 * i, w)?;
                        applied += 4;
                    }
                }
                st.stats.diffs_applied += 1;
                st.stats.diff_bytes_applied += applied;
                self.set_version(page, writer.min(self.n - 1), k)?;
                self.pages_changed(st)
            }
            R_VERSION => {
                let (writer, k, count) = (r.next()? as usize, r.next()?, r.next()?);
                for _ in 0..count {
                    let page = r.next()? as usize;
                    self.check_page(page)?;
                    self.set_version(page, writer.min(self.n - 1), k)?;
                }
                self.pages_changed(st)
            }
            R_NOTICES => {
                if !b.len().is_multiple_of(4) {
                    return Err(Error::Protocol(format!(
                        "write notices of {} bytes",
                        b.len()
                    )));
                }
                st.set_notices[from].extend(
                    b.chunks_exact(4)
                        .map(|w| u32::from_ne_bytes(w.try_into().expect("word"))),
                );
                Ok(())
            }
            R_FLAG_SET => {
                let (flag, value) = (r.next()?, r.next()?);
                let notices = std::mem::take(&mut st.set_notices[from]);
                st.absorb(&notices)?;
                self.flag_set(st, flag, value)
            }
            other => Err(Error::Protocol(format!("unknown record kind {other}"))),
        }
    }

    /// Answers the page requests that the versions now allow.
    fn pages_changed(&self, st: &mut State) -> Result<()> {
        let mut i = 0;
        while i < st.pending.len() {
            let (_, _, page, need) = &st.pending[i];
            if self.versions_reached(*page, need)? {
                let (from, seq, page, _) = st.pending.swap_remove(i);
                self.reply_page(&mut st.outbox, from, seq, page)?;
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    fn reply_page(&self, q: &mut Vec<Out>, from: usize, seq: u32, page: usize) -> Result<()> {
        let mut b = vec![0u8; self.page];
        self.space.read(page * self.page, &mut b)?;
        q.push(Out {
            to: To::Space(from),
            off: page * self.page,
            bytes: Bytes::Heap(b),
            wake: Wake::No,
        });
        let m = SlotMsg {
            seq,
            kind: S_PAGE,
            id: page as u32,
            arg: 0,
            from: self.me as u32,
            aux: 0,
            vector: &[],
        };
        self.queue_slot(q, To::Ctl(from), self.lay.reply(), m, Wake::Reply);
        Ok(())
    }

    fn request(&self, st: &mut State, a: usize, m: Slot) -> Result<()> {
        let w = Waiter {
            from: a,
            seq: m.seq,
            vt: m.vector,
        };
        match m.kind {
            S_PAGE => {
                let page = m.id as usize;
                self.check_page(page)?;
                if self.versions_reached(page, &w.vt)? {
                    self.reply_page(&mut st.outbox, a, w.seq, page)
                } else {
                    st.pending.push((a, w.seq, page, w.vt));
                    Ok(())
                }
            }
            S_LOCK => self.lock_request(st, m.id, w),
            S_FLAG => self.flag_wait(st, m.id, m.arg, w),
            k => Err(Error::Protocol(format!("unknown request kind {k}"))),
        }
    }

    /// Where this node's own request for `lock` goes (the probable tail of its queue); the
    /// node becomes the tail itself.
    pub fn lock_target(&self, st: &mut State, lock: u32) -> Result<usize> {
        let last = st
            .last
            .get_mut(lock as usize)
            .ok_or(Error::LockOutOfRange(lock, 0))?;
        let to = *last as usize;
        *last = self.me as u16;
        Ok(to)
    }

    /// A request for `lock` reached this node (Naimi and Tréhel's algorithm): if this node
    /// is the tail of the lock's queue, the requester goes next (it gets the token at once
    /// if the lock is free here); otherwise the request moves on towards the tail. Either
    /// way the requester becomes the tail as far as this node knows, so that a node's
    /// later requests go straight to the node that last had the lock, not through a third
    /// node (with more processes than cores, a third node is asleep more often than not).
    pub fn lock_request(&self, st: &mut State, lock: u32, w: Waiter) -> Result<()> {
        let l = lock as usize;
        let last = *st.last.get(l).ok_or(Error::LockOutOfRange(lock, 0))? as usize;
        if w.from >= self.n || w.from == self.me {
            return Err(Error::Protocol(format!(
                "request for lock {lock} from node {} reached node {}",
                w.from, self.me
            )));
        }
        st.last[l] = w.from as u16;
        if last != self.me {
            return self.forward_to(st, last, S_LOCK, lock, w);
        }
        if st.token[l] && !st.held[l] {
            st.token[l] = false;
            self.grant(st, &w, S_LOCK)
        } else if st.waiter[l].is_some() {
            Err(Error::Protocol(format!(
                "a second node queued behind this one for lock {lock}"
            )))
        } else {
            st.waiter[l] = Some(w);
            Ok(())
        }
    }

    fn forward_to(&self, st: &mut State, to: usize, kind: u32, id: u32, w: Waiter) -> Result<()> {
        if to == self.me {
            let m = Slot {
                seq: w.seq,
                kind,
                id,
                arg: 0,
                from: w.from as u32,
                vector: w.vt,
            };
            return self.forward(st, m);
        }
        let m = SlotMsg {
            seq: w.seq,
            kind,
            id,
            arg: 0,
            from: w.from as u32,
            aux: 0,
            vector: &w.vt,
        };
        self.queue_slot(
            &mut st.outbox,
            To::Ctl(to),
            self.lay.fwd(w.from),
            m,
            Wake::Request,
        );
        Ok(())
    }

    fn forward(&self, st: &mut State, m: Slot) -> Result<()> {
        let w = Waiter {
            from: m.from as usize,
            seq: m.seq,
            vt: m.vector,
        };
        if w.from >= self.n {
            return Err(Error::Protocol(format!("forward from node {}", w.from)));
        }
        match m.kind {
            S_LOCK => {
                if m.id as usize >= st.token.len() {
                    return Err(Error::Protocol(format!("forward of lock {}", m.id)));
                }
                self.lock_request(st, m.id, w)
            }
            k => Err(Error::Protocol(format!("unknown forward kind {k}"))),
        }
    }

    /// Sends the grant of a lock or flag with the write notices the requester lacks: a
    /// lock's, those this node's program knows; a flag's, every one its manager holds.
    pub fn grant(&self, st: &mut State, w: &Waiter, kind: u32) -> Result<()> {
        let notices = if kind == S_FLAG {
            st.notices_held(&w.vt)
        } else {
            st.notices_since(&w.vt)
        };
        self.queue_mailbox(
            &mut st.outbox,
            To::Ctl(w.from),
            self.lay.grant(),
            w.seq,
            kind,
            &notices,
        )
    }

    /// Hands a released lock to the node waiting for it, if any.
    pub fn pass_on(&self, st: &mut State, lock: u32) -> Result<()> {
        if let Some(w) = st.waiter[lock as usize].take() {
            st.token[lock as usize] = false;
            self.grant(st, &w, S_LOCK)?;
        }
        Ok(())
    }

    /// A wait for `flag` to reach `value` reached its manager (this node): granted at once
    /// if it has, else when a set makes it. The grant carries every write notice the
    /// manager holds: those of every set it has taken in (each set brings what its setter
    /// knew, [`State::absorb`]), so the waiter sees every write made before any of them.
    pub fn flag_wait(&self, st: &mut State, flag: u32, value: u32, w: Waiter) -> Result<()> {
        let i = flag as usize / self.n;
        let f = st.flags.get_mut(i).ok_or(Error::FlagOutOfRange(flag, 0))?;
        if f.value >= value && value > 0 {
            self.grant(st, &w, S_FLAG)
        } else {
            f.waiters.push((w, value));
            Ok(())
        }
    }

    /// A set of `flag` to `value` reached its manager (this node), its setter's write
    /// notices taken in before: the flag keeps the largest value, and the waits that it
    /// now satisfies are granted.
    pub fn flag_set(&self, st: &mut State, flag: u32, value: u32) -> Result<()> {
        let i = flag as usize / self.n;
        let f = st.flags.get_mut(i).ok_or(Error::FlagOutOfRange(flag, 0))?;
        f.value = f.value.max(value);
        let now = f.value;
        let (go, stay): (Vec<_>, Vec<_>) = std::mem::take(&mut f.waiters)
            .into_iter()
            .partition(|(_, v)| *v <= now);
        f.waiters = stay;
        for (w, _) in go {
            self.grant(st, &w, S_FLAG)?;
        }
        Ok(())
    }
}

/// The program is inside the library while this lives ([`Service::awake`]).
pub(crate) struct Awake(std::sync::Arc<Service>);

impl Drop for Awake {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        let s = &self.0;
        let d = s.depth.load(Ordering::Relaxed);
        s.depth.store(d - 1, Ordering::Relaxed);
        if d == 1 && s.remote_read {
            s.set_awake(false);
            std::sync::atomic::fence(Ordering::SeqCst);
            // What a sender left without notifying, because we were inside, is served now,
            // and what this call held back goes out.
            if let Err(e) = s.try_serve().and_then(|_| s.ring_due(true)) {
                s.fail(e);
            }
        }
    }
}
