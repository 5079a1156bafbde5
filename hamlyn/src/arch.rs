//! The architecture (seed 002 §2) as a library over VMMC that plays the interface's part.
//!
//! # How the interface is emulated
//!
//! There is no Hamlyn card: each process's [`Hamlyn`] is its own sending and receiving
//! interface. Between every pair of processes runs a *link*: a ring of packet cells exported
//! by the receiver to that one sender (VMMC export permissions name the sender's process),
//! and a small credit buffer exported by the sender to that one receiver. The sending side
//! writes each packet (payload, then the [`Header`] whose last word is the cell's sequence
//! number) into the ring by deliberate update, in order; the receiving side, whenever its
//! application calls in (`h_recv`, a protocol's `receive`, or any wait loop), reads the cells,
//! **checks each header against its slot table** and only then copies the payload into the
//! slot's message area, updates the packet accumulator and appends to the notification queue
//! (Figure 2). The consumed-cell count goes back through the credit buffer: that is the
//! link-level back-pressure of §2.8 (a sender whose ring is full waits; its work queue fills;
//! then it blocks or gets `WouldBlock`).
//!
//! # Protection, precisely (§2.2, §2.7)
//!
//! * Message areas, metadata areas and the notification queue are the receiver's private
//!   memory: they are never exported, so on no transport can a sender write them. Only the
//!   receiving side writes them, after the checks (key, slot bounds, paranoid entry bounds
//!   and key, revoked keys, one-shot arming). A refused packet writes nothing and is counted
//!   ([`Stats`]).
//! * What a sender *can* write is its own ring at each receiver. On shm the ring's pages are
//!   mapped into that sender (and only that sender: the export lists it alone), so the
//!   guarantee is at page granularity as in seed 000: a sender may scribble anywhere in the
//!   whole pages of its own ring, which only ever produces packets the receiving side checks
//!   like any other; it cannot reach another sender's ring (import refused) nor any slot.
//! * The sending library's one protection check is that a message lies in its ticket's window
//!   (an early, clear error for the sender's own mistake, [`Error::TooLarge`]; it also refuses
//!   malformed requests: metadata over 60 bytes, a fast message over one packet, a group value
//!   below the packet count, an unknown rank); keys and bounds are the receiver's to enforce,
//!   as a receiving interface would, and it enforces them whatever the ticket says (a
//!   ticket's fields can be anything).
//!
//! # Differences from the hardware
//!
//! * The receiving interface runs when the receiving application calls in (any Hamlyn call),
//!   not concurrently. When the notification queue is full it stops taking packets from the
//!   rings (back-pressure) instead of overwriting an entry (§2.6's only overrun).
//! * One send terminus per [`Hamlyn`], whose work queue serves every destination in order.

use crate::error::{Error, Result};
use crate::key::random_key;
use crate::ticket::{Ticket, T_ANY_ENTRY, T_FAST};
use crate::wait::{now_ns, Waiter};
use crate::wire::{pad4, Header, RingLayout, FAST_INDEX, F_BOOT, F_FIRST, HEADER_LEN};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use vmmc::region::copy_bytes;
use vmmc::{Endpoint, ExportOptions, MemKind, Proxy, Region};

/// First buffer id of the rings this library exports (one per sending rank).
pub const RING_BUF_BASE: u32 = 0x4841_0000;
/// First buffer id of the credit buffers (one per receiving rank).
pub const CREDIT_BUF_BASE: u32 = 0x4842_0000;
/// Bytes of user metadata in a metadata entry (§2.4, Table 2).
pub const USER_META: usize = 60;
/// The number of send buffer areas of a terminus (§2.3: 8 base and bounds registers).
pub const SEND_BUFFERS: usize = 8;
/// Largest packet, header included, that the fast-mode path builds on the stack.
const SMALL_PACKET: usize = 320;

/// Payload bytes that share one 64-byte cache line with the header at the end of a ring cell
/// (a cell is a whole number of lines): such a packet is sent and taken as one line.
const LINE_DATA: usize = 64 - HEADER_LEN;

/// Parameters of one process's interface.
#[derive(Clone, Debug)]
pub struct Config {
    /// Payload bytes per packet (§4.3: a parameter; 1 KB recommended for the prototype).
    pub packet_size: usize,
    /// Cells in each link's ring.
    pub ring_cells: usize,
    /// Entries of the send terminus's work queue (§2.3: 63 in the prototype).
    pub work_queue: usize,
    /// Entries of the notification queue (§2.6).
    pub notify_queue: usize,
    /// Largest message (metadata + data) sent by direct I/O: copied into the work queue entry
    /// and written with one deliberate update per packet.
    pub direct_max: usize,
    /// A sender without resources blocks (`true`) or gets `WouldBlock`.
    pub block: bool,
    /// Test mode: the send terminus transmits each message's packets in an order permuted by
    /// this seed (reassembly by the packet accumulator, §2.5).
    pub permute: Option<u64>,
    /// Optional blocking wake-up (§2.6): a receiver that falls asleep in `h_recv_block` says
    /// so to its senders, and each sender raises one VMMC notification per sleep (coalesced).
    pub wakeup: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            packet_size: 4096,
            ring_cells: 64,
            work_queue: 63,
            notify_queue: 1024,
            direct_max: 256,
            block: true,
            permute: None,
            wakeup: false,
        }
    }
}

/// Slot modes (§2.7). Fast mode is chosen per packet (metadata index all 1s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The slot's key and bounds only.
    Normal,
    /// Also the metadata entry's secondary bounds and key, which supersedes the slot's.
    Paranoid,
    /// Paranoid, and an entry accepts one message until the application re-arms it.
    ParanoidOneShot,
}

/// A 128-byte metadata entry (§2.4, Table 2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MetaEntry {
    /// User metadata (60 bytes), from the message's first packet.
    pub user: [u8; USER_META],
    /// The packet accumulator (§2.5).
    pub acc: u32,
    /// Paranoid-mode protection key (0: none).
    pub key: u64,
    /// Paranoid-mode message area low limit (slot offset).
    pub lo: u64,
    /// Paranoid-mode message area high limit (exclusive).
    pub hi: u64,
    /// The library's receive class pointer (§3.3).
    pub class: u64,
    /// Paranoid-one-shot: whether the entry accepts a message.
    pub armed: u32,
    /// Bytes of user metadata that arrived.
    pub meta_len: u32,
    /// Data bytes accepted for the current message (of a group receive, for the whole
    /// group): counted from the message's first packet to arrive, kept after its
    /// notification until the next message's first packet.
    pub bytes: u64,
    _pad: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<MetaEntry>() == 128);

impl Default for MetaEntry {
    fn default() -> Self {
        MetaEntry {
            user: [0; USER_META],
            acc: 0,
            key: 0,
            lo: 0,
            hi: 0,
            class: 0,
            armed: 1,
            meta_len: 0,
            bytes: 0,
            _pad: [0; 16],
        }
    }
}

impl MetaEntry {
    /// The user metadata of the last message whose first packet arrived (empty if it had
    /// none).
    pub fn metadata(&self) -> &[u8] {
        &self.user[..(self.meta_len as usize).min(USER_META)]
    }
}

/// A notification queue entry (§2.6, Table 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NqEntry {
    /// The wrap flag of the lap it was written in.
    pub wrap: bool,
    /// The slot the message arrived in.
    pub slot: u32,
    /// Its metadata entry ([`FAST_INDEX`] in fast mode).
    pub meta_index: u32,
    /// Fast mode: the word of metadata carried by the header.
    pub word: u32,
    /// The rank whose link delivered the last packet (what the interface knows).
    pub from: u32,
}

impl NqEntry {
    /// Whether this is a fast-mode notification (`word` is the metadata).
    pub fn is_fast(&self) -> bool {
        self.meta_index == FAST_INDEX
    }
}

/// Counters of the receiving and sending sides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets accepted into slots.
    pub packets: u64,
    /// Notification queue entries written.
    pub notifications: u64,
    /// Refused: key does not match the slot's (or the entry's in paranoid modes).
    pub refused_key: u64,
    /// Refused: key was revoked.
    pub refused_revoked: u64,
    /// Refused: outside the slot's bounds, or the entry's in paranoid modes.
    pub refused_bounds: u64,
    /// Refused: a paranoid-one-shot entry that was not re-armed.
    pub refused_one_shot: u64,
    /// Refused: no such slot or metadata entry, or a malformed header.
    pub refused_malformed: u64,
    /// First packets of a message that arrived after another of its packets (reassembly
    /// out of order, §2.5).
    pub reordered: u64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Wake-up notifications raised by this sender (§2.6, coalesced).
    pub wakeups_sent: u64,
    /// Times `h_recv_block` slept.
    pub sleeps: u64,
}

impl Stats {
    /// Every refused packet.
    pub fn refused(&self) -> u64 {
        self.refused_key
            + self.refused_revoked
            + self.refused_bounds
            + self.refused_one_shot
            + self.refused_malformed
    }
}

/// Slot number.
pub type SlotId = u32;

struct Slot {
    area: Vec<u8>,
    key: u64,
    mode: Mode,
    meta: Vec<MetaEntry>,
    /// Receive class of fast-mode notifications for this slot.
    fast_class: u64,
}

/// Where a fast-mode packet's data goes when it passes the common case's checks (the fast
/// paths of the receiving side): a well-formed one-packet fast-mode message, with the
/// slot's key, inside the slot, and for `class` a slot of that receive class. `None` for
/// anything else, which the long way checks again and counts.
#[inline(always)]
fn fast_dest<'a>(
    slots: &'a mut [Option<Slot>],
    h: &Header,
    packet: usize,
    class: Option<u64>,
) -> Option<&'a mut [u8]> {
    let dlen = h.len as usize;
    if h.meta_index != FAST_INDEX || h.flags & F_BOOT != 0 || h.meta_len != 0 || dlen > packet {
        return None;
    }
    let slot = slots.get_mut(h.slot as usize)?.as_mut()?;
    if h.key != slot.key || class.is_some_and(|c| c != slot.fast_class) {
        return None;
    }
    let start = usize::try_from(h.offset).ok()?;
    slot.area.get_mut(start..start.checked_add(dlen)?)
}

/// The header of a fast-mode packet of `len` bytes to `offset` of `t`'s slot.
#[inline(always)]
fn fast_header(t: &Ticket, offset: u64, len: usize, word: u32) -> Header {
    Header {
        slot: t.slot,
        meta_index: FAST_INDEX,
        key: t.key,
        offset,
        delta: 0,
        flags: F_FIRST,
        len: len as u32,
        meta_len: 0,
        word,
        seq: 0,
    }
}

/// The sending library's look at a message against its ticket: `total` bytes at `offset`
/// must lie in the ticket's window. A courtesy to the sender, which learns of its mistake at
/// once; protection does not rest on it (a ticket's fields can be anything, and the
/// receiving side checks every packet against the slot and, in paranoid modes, the entry).
#[inline]
fn check_window(t: &Ticket, offset: u64, total: usize) -> Result<()> {
    match offset.checked_add(total as u64) {
        Some(end) if offset >= t.base && end <= t.bound => Ok(()),
        _ => Err(Error::TooLarge("data beyond the ticket's window")),
    }
}

/// What [`Hamlyn::take_fast`] found.
pub(crate) enum Fast {
    /// A fast-mode message for the class, placed, its entry written and read.
    Took(NqEntry),
    /// No packet in any link, no entry in the notification queue, none in the class's.
    Empty,
    /// Something for the long way (`poll_class`): an entry, an arrival already in the
    /// class's queue, or a packet of another kind.
    Other,
}

/// A gather list element (§2.3): `<send_buffer_tag, offset, length>`.
#[derive(Clone, Copy, Debug)]
pub struct Gather {
    /// Send buffer area tag (0..8).
    pub tag: usize,
    /// Offset in that area.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// A message's send options.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendOpts {
    /// The packet counter's initial value Y (§2.5): 0 for a lone message, a group value for
    /// group receive.
    pub counter: u32,
    /// Metadata entry to use instead of the ticket's (for tickets over a range of entries).
    pub meta_index: Option<u32>,
}

/// A posted message: its sequence number on the terminus; it is done when the completion
/// word reaches it ([`Hamlyn::completed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Handle(pub u64);

enum Source {
    Inline(Vec<u8>),
    Gather(Vec<(Arc<[u8]>, usize, usize)>),
}

struct WorkEntry {
    dest: u32,
    hdr: Header,
    counter: u32,
    meta: Vec<u8>,
    src: Source,
    total: usize,
    npackets: usize,
    next: usize,
    order: Option<Vec<u32>>,
}

struct Outgoing {
    /// The peer's ring for us, imported on first use.
    ring: Option<Proxy>,
    /// Our credit buffer that the peer writes: word 0 cells consumed, word 1 sleep epoch.
    credit: Region,
    sent: u32,
    /// The ring cell of the next packet (`sent` modulo the cells, kept without a division).
    cell: usize,
    /// Cells known to be free: a lower bound on [`Hamlyn::room`] that every packet
    /// decrements, so that the fast path reads the credit word (which the receiver writes)
    /// only when it runs out.
    free: usize,
    notified_epoch: u32,
    /// Whether a packet ever went out on this link (for a process's link to itself: whether
    /// the receiving side's fast path need look at it at all).
    used: bool,
}

impl Outgoing {
    /// Takes the next cell of the ring: its index and its sequence number.
    #[inline]
    fn claim(&mut self, cells: usize) -> (usize, u32) {
        let cell = self.cell;
        self.cell = if cell + 1 == cells { 0 } else { cell + 1 };
        self.sent = self.sent.wrapping_add(1);
        self.free = self.free.saturating_sub(1);
        self.used = true;
        (cell, self.sent)
    }
}

struct Incoming {
    ring: Region,
    consumed: u32,
    /// The ring cell of the next packet (`consumed` modulo the cells).
    cell: usize,
    credited: u32,
    /// The sender's credit buffer, imported on the first packet.
    credit: Option<Proxy>,
    /// Bootstrap messages from this sender.
    boot: VecDeque<Vec<u8>>,
}

/// Wakes an `h_recv_block` that sleeps (the handler of the ring exports).
#[derive(Default)]
struct Wake {
    count: Mutex<u64>,
    cv: Condvar,
    woken: AtomicU64,
}

/// One process's Hamlyn interface and manager (`hamlyn_manager`, §3.3): its slots, metadata
/// areas, notification queue, send terminus and links. Not thread-safe, as the seed's upper
/// layer: use it from one thread.
pub struct Hamlyn {
    ep: Endpoint,
    cfg: Config,
    me: u32,
    layout: RingLayout,
    slots: Vec<Option<Slot>>,
    revoked: std::collections::HashSet<u64>,
    // The notification queue (§2.6): the interface's cursor and wrap flag, the
    // application's.
    nq: Vec<NqEntry>,
    nq_tail: usize,
    nq_wrap: bool,
    nq_head: usize,
    app_wrap: bool,
    nq_written: u64,
    nq_read: u64,
    // The send terminus (§2.3).
    wq: VecDeque<WorkEntry>,
    posted: u64,
    completion: u64,
    send_buffers: [Option<Arc<[u8]>>; SEND_BUFFERS],
    out: Vec<Outgoing>,
    inc: Vec<Incoming>,
    stats: Stats,
    wake: Arc<Wake>,
    sleep_epoch: u32,
    // The library's receive classes (§3.3): queues of arrivals per class.
    classes: Vec<VecDeque<NqEntry>>,
    /// The link the receiving interface looks at first (round robin).
    next_link: usize,
    stage: Vec<u8>,
    /// Where the fast path builds a small packet (never zeroed: every byte sent is written).
    small: [u8; SMALL_PACKET],
    rng: u64,
}

impl Hamlyn {
    /// Sets up this process's interface on `ep`: exports one ring per rank of the job (only
    /// that rank may import it) and one credit buffer per rank.
    pub fn new(ep: Endpoint, cfg: Config) -> Result<Hamlyn> {
        if cfg.packet_size < 64 {
            return Err(Error::InvalidArgument(
                "packet_size must be at least 64 bytes",
            ));
        }
        if cfg.ring_cells < 2 {
            return Err(Error::InvalidArgument("ring_cells must be at least 2"));
        }
        if cfg.work_queue == 0 {
            return Err(Error::InvalidArgument("work_queue must be at least 1"));
        }
        if cfg.notify_queue < 2 {
            return Err(Error::InvalidArgument("notify_queue must be at least 2"));
        }
        let me = ep.rank() as u32;
        let layout = RingLayout::new(cfg.ring_cells, cfg.packet_size);
        let wake = Arc::new(Wake::default());
        let mut out = Vec::new();
        let mut inc = Vec::new();
        for r in 0..ep.size() {
            let peer = ep.proc_of(r)?;
            let ring = ep.alloc(layout.bytes(), MemKind::Shared)?;
            let mut opts = ExportOptions::new().importers([peer]);
            if cfg.wakeup {
                let w = wake.clone();
                opts = opts.handler(move |_| {
                    let mut c = w.count.lock().unwrap_or_else(|e| e.into_inner());
                    *c += 1;
                    w.woken.fetch_add(1, Ordering::Relaxed);
                    w.cv.notify_all();
                });
            }
            ep.export(RING_BUF_BASE + r as u32, &ring, opts)?;
            let credit = ep.alloc(vmmc::page_size(), MemKind::Shared)?;
            ep.export(
                CREDIT_BUF_BASE + r as u32,
                &credit,
                ExportOptions::new().importers([peer]),
            )?;
            out.push(Outgoing {
                ring: None,
                credit,
                sent: 0,
                cell: 0,
                free: 0,
                notified_epoch: 0,
                used: false,
            });
            inc.push(Incoming {
                ring,
                consumed: 0,
                cell: 0,
                credited: 0,
                credit: None,
                boot: VecDeque::new(),
            });
        }
        let nq = vec![NqEntry::default(); cfg.notify_queue];
        Ok(Hamlyn {
            me,
            layout,
            slots: Vec::new(),
            revoked: Default::default(),
            nq,
            nq_tail: 0,
            nq_wrap: true,
            nq_head: 0,
            app_wrap: true,
            nq_written: 0,
            nq_read: 0,
            wq: VecDeque::new(),
            posted: 0,
            completion: 0,
            send_buffers: Default::default(),
            out,
            inc,
            stats: Stats::default(),
            wake,
            sleep_epoch: 0,
            classes: vec![VecDeque::new()],
            next_link: 0,
            stage: Vec::with_capacity(cfg.packet_size + HEADER_LEN + 4),
            small: [0; SMALL_PACKET],
            rng: cfg.permute.unwrap_or(1) | 1,
            cfg,
            ep,
        })
    }

    /// The endpoint underneath.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.me
    }
    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.ep.size()
    }
    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }
    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Wake-up notifications this receiver took (blocking wake-up, §2.6).
    pub fn wakeups_received(&self) -> u64 {
        self.wake.woken.load(Ordering::Relaxed)
    }

    // ----- slots, message areas, metadata areas (§2.2, §2.4) -----

    /// Creates a slot over a new message area of `len` bytes with `entries` metadata entries,
    /// in `mode`, with a fresh random key; in paranoid modes every entry gets its own key and
    /// the whole slot as its bounds.
    pub fn create_slot(&mut self, len: usize, entries: usize, mode: Mode) -> Result<SlotId> {
        let mut meta = vec![MetaEntry::default(); entries];
        if mode != Mode::Normal {
            for e in &mut meta {
                e.key = random_key()?;
                e.hi = len as u64;
            }
        }
        let slot = Slot {
            area: vec![0; len],
            key: random_key()?,
            mode,
            meta,
            fast_class: 0,
        };
        if let Some(i) = self.slots.iter().position(Option::is_none) {
            self.slots[i] = Some(slot);
            Ok(i as SlotId)
        } else {
            self.slots.push(Some(slot));
            Ok((self.slots.len() - 1) as SlotId)
        }
    }

    /// Destroys a slot: its key is revoked and later packets to it are refused.
    pub fn destroy_slot(&mut self, s: SlotId) -> Result<()> {
        let sl = self
            .slots
            .get_mut(s as usize)
            .and_then(Option::take)
            .ok_or(Error::NoSuch("slot"))?;
        self.revoked.insert(sl.key);
        self.revoked
            .extend(sl.meta.iter().map(|e| e.key).filter(|&k| k != 0));
        Ok(())
    }

    // Matched, not `ok_or`: the receive loop looks slots up on every message, and `ok_or`
    // makes (and drops) the error value every time.
    fn slot(&self, s: SlotId) -> Result<&Slot> {
        match self.slots.get(s as usize) {
            Some(Some(sl)) => Ok(sl),
            _ => Err(Error::NoSuch("slot")),
        }
    }
    fn slot_mut(&mut self, s: SlotId) -> Result<&mut Slot> {
        match self.slots.get_mut(s as usize) {
            Some(Some(sl)) => Ok(sl),
            _ => Err(Error::NoSuch("slot")),
        }
    }

    /// The slot's message area.
    pub fn area(&self, s: SlotId) -> Result<&[u8]> {
        Ok(&self.slot(s)?.area)
    }
    /// The slot's message area, for the receiving application's own use.
    pub fn area_mut(&mut self, s: SlotId) -> Result<&mut [u8]> {
        Ok(&mut self.slot_mut(s)?.area)
    }
    /// The slot's key.
    pub fn slot_key(&self, s: SlotId) -> Result<u64> {
        Ok(self.slot(s)?.key)
    }
    /// The slot's mode.
    pub fn slot_mode(&self, s: SlotId) -> Result<Mode> {
        Ok(self.slot(s)?.mode)
    }
    /// Metadata entry `i` of slot `s`.
    pub fn meta(&self, s: SlotId, i: u32) -> Result<&MetaEntry> {
        self.slot(s)?
            .meta
            .get(i as usize)
            .ok_or(Error::NoSuch("metadata entry"))
    }
    fn meta_mut(&mut self, s: SlotId, i: u32) -> Result<&mut MetaEntry> {
        self.slot_mut(s)?
            .meta
            .get_mut(i as usize)
            .ok_or(Error::NoSuch("metadata entry"))
    }

    /// Paranoid modes: sets entry `i`'s secondary bounds `[lo, hi)` and draws it a new key
    /// (the application does this without the OS, §2.7); returns the key.
    pub fn set_entry_bounds(&mut self, s: SlotId, i: u32, lo: u64, hi: u64) -> Result<u64> {
        let len = self.slot(s)?.area.len() as u64;
        if lo > hi || hi > len {
            return Err(Error::InvalidArgument("entry bounds outside the slot"));
        }
        let k = random_key()?;
        let e = self.meta_mut(s, i)?;
        e.lo = lo;
        e.hi = hi;
        e.key = k;
        Ok(k)
    }

    /// Paranoid-one-shot: lets entry `i` accept one more message.
    pub fn rearm(&mut self, s: SlotId, i: u32) -> Result<()> {
        let e = self.meta_mut(s, i)?;
        e.armed = 1;
        e.acc = 0;
        e.bytes = 0;
        Ok(())
    }

    /// Revokes entry `i`'s key (paranoid modes): the sender holding it is cut off, no other
    /// (§2.7). Returns the entry's new key.
    pub fn revoke_entry(&mut self, s: SlotId, i: u32) -> Result<u64> {
        let k = random_key()?;
        let e = self.meta_mut(s, i)?;
        let old = std::mem::replace(&mut e.key, k);
        self.revoked.insert(old);
        Ok(k)
    }

    /// Revokes the slot's key: every holder of a ticket with it is cut off. Returns the new one.
    pub fn revoke_slot_key(&mut self, s: SlotId) -> Result<u64> {
        let k = random_key()?;
        let old = std::mem::replace(&mut self.slot_mut(s)?.key, k);
        self.revoked.insert(old);
        Ok(k)
    }

    /// Sets the receive class pointer of entry `i` (§3.3).
    pub fn set_class(&mut self, s: SlotId, i: u32, class: u64) -> Result<()> {
        self.meta_mut(s, i)?.class = class;
        Ok(())
    }

    /// Sets the receive class of the slot's fast-mode notifications.
    pub fn set_fast_class(&mut self, s: SlotId, class: u64) -> Result<()> {
        self.slot_mut(s)?.fast_class = class;
        Ok(())
    }

    /// A ticket for entry `i` of slot `s` over the window `[base, bound)`: the slot's key in
    /// normal mode, the entry's in paranoid modes.
    pub fn ticket(&self, s: SlotId, i: u32, base: u64, bound: u64) -> Result<Ticket> {
        let sl = self.slot(s)?;
        if base > bound || bound > sl.area.len() as u64 {
            return Err(Error::InvalidArgument(
                "ticket window outside the slot (base <= bound <= the slot's length)",
            ));
        }
        if i as usize >= sl.meta.len() {
            return Err(Error::NoSuch("metadata entry"));
        }
        let key = match sl.mode {
            Mode::Normal => sl.key,
            _ => self.meta(s, i)?.key,
        };
        Ok(Ticket {
            dest: self.me,
            slot: s,
            meta_index: i,
            key,
            base,
            bound,
            flags: 0,
        })
    }

    /// A fast-mode ticket for the slot (tagged remote write, §3.3).
    pub fn fast_ticket(&self, s: SlotId) -> Result<Ticket> {
        let sl = self.slot(s)?;
        Ok(Ticket {
            dest: self.me,
            slot: s,
            meta_index: FAST_INDEX,
            key: sl.key,
            base: 0,
            bound: sl.area.len() as u64,
            flags: T_FAST,
        })
    }

    /// A ticket over `count` entries from `first` (normal mode), for a protocol that picks
    /// the entry per message.
    pub fn range_ticket(&self, s: SlotId, first: u32, count: u32) -> Result<Ticket> {
        let sl = self.slot(s)?;
        Ok(Ticket {
            dest: self.me,
            slot: s,
            meta_index: first,
            key: sl.key,
            base: 0,
            bound: sl.area.len() as u64,
            flags: T_ANY_ENTRY | (count.min(0xffff) << 16),
        })
    }

    // ----- the send terminus (§2.3) -----

    /// Installs send buffer area `tag` (the OS-set base and bounds registers of §2.3). The
    /// terminus holds a reference while queued messages use it.
    pub fn set_send_buffer(&mut self, tag: usize, buf: Arc<[u8]>) -> Result<()> {
        *self
            .send_buffers
            .get_mut(tag)
            .ok_or(Error::NoSuch("send buffer tag"))? = Some(buf);
        Ok(())
    }

    /// Removes send buffer area `tag` (to reuse its memory once its messages completed).
    pub fn take_send_buffer(&mut self, tag: usize) -> Option<Arc<[u8]>> {
        self.send_buffers.get_mut(tag).and_then(Option::take)
    }

    /// The completion sequence word (§2.3): every message with a handle below it has left.
    pub fn completed(&self) -> u64 {
        self.completion
    }

    /// Whether the message of `h` has been sent (its buffers may be reused).
    pub fn is_sent(&self, h: Handle) -> bool {
        h.0 < self.completion
    }

    /// `h_send_msg` (§3.2): sends `meta` (at most 60 bytes) and `data` to `t`'s slot at `offset`
    /// (an offset in the slot). A short message is copied into the work queue (direct I/O);
    /// a long one is sent from `data` before the call returns (it cannot outlive the borrow:
    /// use [`Hamlyn::h_send_gather`] for asynchronous zero-copy sends).
    pub fn h_send_msg(
        &mut self,
        t: &Ticket,
        offset: u64,
        data: &[u8],
        meta: &[u8],
        opts: SendOpts,
    ) -> Result<Handle> {
        if meta.len() > USER_META {
            return Err(Error::TooLarge("metadata over 60 bytes"));
        }
        let total = meta.len() + data.len();
        if total <= self.cfg.direct_max {
            let e = self.entry(
                t,
                offset,
                meta,
                Source::Inline(data.to_vec()),
                data.len(),
                opts,
            )?;
            return self.post(e);
        }
        // A long message from borrowed memory: drain the queue, then stream it out.
        self.drain_queue()?;
        let mut e = self.entry(
            t,
            offset,
            meta,
            Source::Inline(Vec::new()),
            data.len(),
            opts,
        )?;
        while e.next < e.npackets {
            match self.wait_room(e.dest) {
                Ok(()) => {}
                // Without blocking, a full link before the first packet refuses the message
                // (nothing of it went); after it, the rest is queued with a copy of the data
                // and leaves as the link drains (`pump`): the packets already sent have been
                // counted by the receiver's accumulator, and a retry would count them twice.
                Err(Error::WouldBlock(why)) if e.next == 0 => return Err(Error::WouldBlock(why)),
                Err(Error::WouldBlock(_)) => {
                    e.src = Source::Inline(data.to_vec());
                    let h = Handle(self.posted);
                    self.posted += 1;
                    self.wq.push_back(e);
                    return Ok(h);
                }
                Err(err) => return Err(err),
            }
            while e.next < e.npackets && self.room(e.dest) > 0 {
                self.put_next(&mut e, Some(data))?;
            }
        }
        let h = Handle(self.posted);
        self.posted += 1;
        self.completion += 1;
        Ok(h)
    }

    /// `h_send_msg` with a gather list over send buffer areas (§2.3): queued and sent as the
    /// links allow; returns at once unless the work queue is full.
    pub fn h_send_gather(
        &mut self,
        t: &Ticket,
        offset: u64,
        list: &[Gather],
        meta: &[u8],
        opts: SendOpts,
    ) -> Result<Handle> {
        if meta.len() > USER_META {
            return Err(Error::TooLarge("metadata over 60 bytes"));
        }
        let mut parts = Vec::with_capacity(list.len());
        let mut total = 0;
        for g in list {
            let b = self
                .send_buffers
                .get(g.tag)
                .and_then(Option::as_ref)
                .ok_or(Error::NoSuch("send buffer tag"))?;
            if g.offset.checked_add(g.len).is_none_or(|end| end > b.len()) {
                return Err(Error::InvalidArgument(
                    "gather element outside its send buffer area",
                ));
            }
            parts.push((b.clone(), g.offset, g.len));
            total += g.len;
        }
        let e = self.entry(t, offset, meta, Source::Gather(parts), total, opts)?;
        self.post(e)
    }

    /// Fast mode (§2.7): a one-packet message whose header carries `word` to the receiver's
    /// notification entry instead of a metadata entry.
    pub fn h_send_fast(&mut self, t: &Ticket, offset: u64, data: &[u8], word: u32) -> Result<()> {
        if data.len() > self.cfg.packet_size {
            return Err(Error::TooLarge("a fast-mode message is one packet"));
        }
        check_window(t, offset, data.len())?;
        // Fast path: nothing queued and room in the ring: straight out, no queue entry.
        if self.wq.is_empty() && data.len() <= self.cfg.direct_max {
            let dest = self.dest_of(t)?;
            // Made where it is used, so that the one-line path builds its words in registers.
            let hdr = || fast_header(t, offset, data.len(), word);
            let o = &self.out[dest as usize];
            if pad4(data.len()) + HEADER_LEN <= SMALL_PACKET && o.ring.is_some() && !self.cfg.wakeup
            {
                if o.free == 0 {
                    self.out[dest as usize].free = self.room(dest);
                }
                if self.out[dest as usize].free > 0 {
                    self.posted += 1;
                    if data.len() <= LINE_DATA {
                        self.put_line(dest, hdr(), data)?;
                    } else {
                        self.put_small(dest, hdr(), data)?;
                    }
                    self.completion += 1;
                    return Ok(());
                }
            }
        }
        self.h_send_fast_queued(t, offset, data, word)
    }

    /// [`Hamlyn::h_send_fast`] past its one-line fast path: a packet built in full, or a queue
    /// entry (kept out of line, so that the fast path stays small).
    #[inline(never)]
    fn h_send_fast_queued(
        &mut self,
        t: &Ticket,
        offset: u64,
        data: &[u8],
        word: u32,
    ) -> Result<()> {
        if self.wq.is_empty() && data.len() <= self.cfg.direct_max {
            let dest = self.dest_of(t)?;
            if self.room(dest) > 0 {
                self.posted += 1;
                self.put_packet(dest, fast_header(t, offset, data.len(), word), &[data])?;
                self.completion += 1;
                return Ok(());
            }
        }
        let opts = SendOpts {
            meta_index: Some(FAST_INDEX),
            ..Default::default()
        };
        let mut e = self.entry(
            t,
            offset,
            &[],
            Source::Inline(data.to_vec()),
            data.len(),
            opts,
        )?;
        e.hdr.word = word;
        self.post(e).map(|_| ())
    }

    fn dest_of(&self, t: &Ticket) -> Result<u32> {
        if (t.dest as usize) < self.out.len() {
            Ok(t.dest)
        } else {
            Err(Error::InvalidArgument("ticket names no rank of this job"))
        }
    }

    fn entry(
        &mut self,
        t: &Ticket,
        offset: u64,
        meta: &[u8],
        src: Source,
        total: usize,
        opts: SendOpts,
    ) -> Result<WorkEntry> {
        let dest = self.dest_of(t)?;
        let meta_index = opts.meta_index.unwrap_or(t.meta_index);
        let p = self.cfg.packet_size;
        let first = p - meta.len();
        let npackets = if meta_index == FAST_INDEX {
            if total > p {
                return Err(Error::TooLarge("a fast-mode message is one packet"));
            }
            1
        } else if total <= first {
            1
        } else {
            1 + (total - first).div_ceil(p)
        };
        check_window(t, offset, total)?;
        // §2.5: each packet but the last carries 1 and the last what is left of the value,
        // so a value below the packet count would wrap the last delta and could bring a
        // group's accumulator to 0 before its last packet.
        if npackets > 1 && opts.counter != 0 && (opts.counter as usize) < npackets {
            return Err(Error::InvalidArgument(
                "packet counter value below the message's packet count (section 2.5)",
            ));
        }
        let order = match self.cfg.permute {
            Some(_) if npackets > 1 => {
                let mut o: Vec<u32> = (0..npackets as u32).collect();
                for i in (1..o.len()).rev() {
                    self.rng ^= self.rng << 13;
                    self.rng ^= self.rng >> 7;
                    self.rng ^= self.rng << 17;
                    o.swap(i, (self.rng % (i as u64 + 1)) as usize);
                }
                Some(o)
            }
            _ => None,
        };
        Ok(WorkEntry {
            dest,
            hdr: Header {
                slot: t.slot,
                meta_index,
                key: t.key,
                offset,
                ..Default::default()
            },
            counter: opts.counter,
            meta: meta.to_vec(),
            src,
            total,
            npackets,
            next: 0,
            order,
        })
    }

    fn post(&mut self, e: WorkEntry) -> Result<Handle> {
        if self.wq.len() >= self.cfg.work_queue {
            self.pump()?;
            if self.wq.len() >= self.cfg.work_queue {
                if !self.cfg.block {
                    return Err(Error::WouldBlock("send terminus work queue full"));
                }
                let mut w = Waiter::new();
                while self.wq.len() >= self.cfg.work_queue {
                    self.pump()?;
                    self.poll_links()?;
                    if w.due() {
                        if let Some(d) = self.wq.front().map(|e| e.dest) {
                            self.check_peer(d)?;
                        }
                    }
                    w.relax();
                }
            }
        }
        let h = Handle(self.posted);
        self.posted += 1;
        self.wq.push_back(e);
        self.pump()?;
        Ok(h)
    }

    /// Moves work queue entries out as far as the links allow (the terminus's engine).
    #[inline]
    pub fn pump(&mut self) -> Result<()> {
        // Every wait loop turns through here: an empty queue costs one look.
        if self.wq.is_empty() {
            return Ok(());
        }
        self.pump_queue()
    }

    fn pump_queue(&mut self) -> Result<()> {
        while let Some(mut e) = self.wq.pop_front() {
            while e.next < e.npackets && self.room(e.dest) > 0 {
                if let Err(err) = self.put_next(&mut e, None) {
                    self.wq.push_front(e);
                    return Err(err);
                }
            }
            if e.next < e.npackets {
                self.wq.push_front(e);
                return Ok(());
            }
            self.completion += 1;
        }
        Ok(())
    }

    /// Waits until the work queue is empty.
    pub fn drain_queue(&mut self) -> Result<()> {
        self.pump()?;
        let mut w = Waiter::new();
        while let Some(d) = self.wq.front().map(|e| e.dest) {
            if !self.cfg.block {
                return Err(Error::WouldBlock("send terminus work queue busy"));
            }
            self.poll_links()?;
            self.pump()?;
            if w.due() {
                self.check_peer(d)?;
            }
            w.relax();
        }
        Ok(())
    }

    fn check_peer(&self, r: u32) -> Result<()> {
        let p = self.ep.proc_of(r as usize)?;
        self.ep.check_peer(p).map_err(Error::from)
    }

    /// Cells free in the link to `dest`.
    fn room(&self, dest: u32) -> usize {
        let o = &self.out[dest as usize];
        let consumed = o.credit.load_u32(0).unwrap_or(0);
        self.cfg
            .ring_cells
            .saturating_sub(o.sent.wrapping_sub(consumed) as usize)
    }

    fn wait_room(&mut self, dest: u32) -> Result<()> {
        if self.room(dest) > 0 {
            return Ok(());
        }
        if !self.cfg.block {
            return Err(Error::WouldBlock("link to the receiver full"));
        }
        let mut w = Waiter::new();
        while self.room(dest) == 0 {
            self.poll_links()?;
            if w.due() {
                self.check_peer(dest)?;
            }
            w.relax();
        }
        Ok(())
    }

    /// Transmits the next packet of `e` (segmentation, §2.3): the header replicated with the
    /// offset adjusted, the metadata in the first packet, the deltas of §2.5.
    fn put_next(&mut self, e: &mut WorkEntry, borrowed: Option<&[u8]>) -> Result<()> {
        let p = self.cfg.packet_size;
        let k = match &e.order {
            Some(o) => o[e.next] as usize,
            None => e.next,
        };
        let first_data = p - e.meta.len();
        let (d0, d1, with_meta) = if k == 0 {
            (0, first_data.min(e.total), true)
        } else {
            let d0 = first_data + (k - 1) * p;
            (d0, (d0 + p).min(e.total), false)
        };
        let i = e.next;
        let last = i + 1 == e.npackets;
        let delta = if e.hdr.meta_index == FAST_INDEX {
            0
        } else if e.npackets == 1 {
            e.counter
        } else {
            // §2.5: the packet counter starts at Y; each packet but the last carries 1 and
            // decrements it; the last carries what is left.
            if last {
                e.counter
            } else {
                e.counter = e.counter.wrapping_sub(1);
                1
            }
        };
        let meta_len = if with_meta { e.meta.len() } else { 0 };
        let hdr = Header {
            offset: e.hdr.offset + d0 as u64,
            delta,
            flags: if with_meta { F_FIRST } else { 0 },
            len: (meta_len + d1 - d0) as u32,
            meta_len: meta_len as u32,
            ..e.hdr
        };
        let m: &[u8] = if with_meta { &e.meta } else { &[] };
        let r = match (&e.src, borrowed) {
            (_, Some(b)) => put_packet_split(self, e.dest, hdr, &[m, &b[d0..d1]]),
            (Source::Inline(v), None) => put_packet_split(self, e.dest, hdr, &[m, &v[d0..d1]]),
            (Source::Gather(parts), None) => {
                let mut pieces: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                pieces.push(m);
                let mut at = 0;
                for (b, off, len) in parts {
                    let (s, t) = (at.max(d0), (at + len).min(d1));
                    if s < t {
                        pieces.push(&b[off + s - at..off + t - at]);
                    }
                    at += len;
                }
                put_packet_split(self, e.dest, hdr, &pieces)
            }
        };
        r?;
        e.next += 1;
        Ok(())
    }

    /// A packet of at most [`SMALL_PACKET`] bytes (header included), built in `small` and
    /// written with one deliberate update: payload, padding and header in as few cache lines
    /// as the layout allows (a 16 B payload and its header are one line), the sequence word
    /// last. The caller checked that the link was imported and has a free cell.
    #[inline(always)]
    fn put_small(&mut self, dest: u32, mut hdr: Header, data: &[u8]) -> Result<()> {
        let o = &mut self.out[dest as usize];
        let (cell, seq) = o.claim(self.layout.cells);
        hdr.seq = seq;
        let len = data.len();
        let plen = pad4(len);
        let n = plen + HEADER_LEN;
        let b = &mut self.small;
        // The padding word first (no byte of an earlier packet goes out), then the data: by
        // the core's copy, which moves up to 64 bytes inline and more in wide moves (a loop
        // of double words here cost 5 to 9 ns more at 256 bytes, one way).
        if plen >= 4 {
            b[plen - 4..plen].fill(0);
        }
        copy_bytes(&mut b[..len], data);
        let hb: &mut [u8; HEADER_LEN] = (&mut b[plen..n]).try_into().expect("a header");
        hdr.encode_into(hb);
        let proxy = o.ring.as_ref().expect("imported");
        let r = proxy.send(self.layout.header_at(cell) - plen, &b[..n]);
        self.stats.packets_sent += 1;
        r.map_err(Error::from)
    }

    /// A packet of at most [`LINE_DATA`] bytes: the payload and its header fill the cell's
    /// last 64 bytes (one cache line), built on the stack with moves of constant size
    /// ([`copy_bytes`]: no call to `memcpy`) and written with one deliberate update, the
    /// sequence word last. The bytes before a shorter payload are zeros (nothing of an
    /// earlier packet goes out). The caller checked that the link was imported and has a
    /// free cell.
    #[inline(always)]
    fn put_line(&mut self, dest: u32, mut hdr: Header, data: &[u8]) -> Result<()> {
        let o = &mut self.out[dest as usize];
        let (cell, seq) = o.claim(self.layout.cells);
        hdr.seq = seq;
        let mut line = [0u8; LINE_DATA + HEADER_LEN];
        let (payload, header) = line.split_at_mut(LINE_DATA);
        let len = data.len();
        if len == LINE_DATA {
            // The common size: one fixed-size move, no call.
            payload.copy_from_slice(data);
        } else {
            copy_bytes(&mut payload[LINE_DATA - pad4(len)..][..len], data);
        }
        hdr.encode_into(header.try_into().expect("a header"));
        let proxy = o.ring.as_ref().expect("imported");
        let r = proxy.send(self.layout.header_at(cell) - LINE_DATA, &line);
        self.stats.packets_sent += 1;
        r.map_err(Error::from)
    }

    fn put_packet(&mut self, dest: u32, hdr: Header, pieces: &[&[u8]]) -> Result<()> {
        put_packet_split(self, dest, hdr, pieces)
    }

    fn ring_proxy(&mut self, dest: u32) -> Result<Proxy> {
        if let Some(p) = &self.out[dest as usize].ring {
            return Ok(p.clone());
        }
        let owner = self.ep.proc_of(dest as usize)?;
        let p = self.ep.import(owner, RING_BUF_BASE + self.me)?;
        self.out[dest as usize].ring = Some(p.clone());
        Ok(p)
    }

    /// Writes a packet with any header into this process's own ring at `dest`: what a
    /// misbehaving or malicious process can do, since the ring's pages are mapped into it (on
    /// shm) and nothing on the sending side checks anything. The header's `len` may lie; the
    /// payload is placed as for a packet of `payload.len()` bytes. For tests of the receiving
    /// side's checks.
    pub fn forge_packet(&mut self, dest: u32, mut hdr: Header, payload: &[u8]) -> Result<()> {
        if payload.len() > self.cfg.packet_size || dest as usize >= self.out.len() {
            return Err(Error::InvalidArgument(
                "forged packet: payload or destination",
            ));
        }
        self.drain_queue()?;
        self.wait_room(dest)?;
        if self.out[dest as usize].ring.is_none() {
            self.ring_proxy(dest)?;
        }
        let o = &mut self.out[dest as usize];
        let (cell, seq) = o.claim(self.layout.cells);
        hdr.seq = seq;
        let mut b = payload.to_vec();
        b.resize(pad4(payload.len()), 0);
        b.extend_from_slice(&hdr.encode());
        let at = self.layout.payload_at(cell, payload.len());
        o.ring.as_ref().expect("imported").send(at, &b)?;
        Ok(())
    }

    // ----- the receiving interface (§2.2, §2.5, §2.6, §2.7) -----

    /// Takes every packet waiting in the links, as the receiving interface would (checks,
    /// placement, accumulators, notifications). Returns the packets processed.
    pub fn poll_links(&mut self) -> Result<usize> {
        self.take_packets(false)
    }

    /// The receiving interface's work: every packet waiting or, with `first`, up to the
    /// first that writes a notification entry (what `h_recv` needs: the message that
    /// arrived is not held up by a look at every other link). The links are visited from
    /// the one after the link that gave the last notification, so that none is starved.
    fn take_packets(&mut self, first: bool) -> Result<usize> {
        let links = self.inc.len();
        let mut n = 0;
        for k in 0..links {
            let from = if self.next_link + k >= links {
                self.next_link + k - links
            } else {
                self.next_link + k
            };
            let mut taken = 0;
            loop {
                // A full queue stops the taking of packets (back-pressure), except for the
                // bootstrap channel's at the head of a link, which write no entry.
                let full = self.nq_written - self.nq_read >= self.nq.len() as u64;
                if full && self.head_is_boot(from)? != Some(true) {
                    break;
                }
                let cell = self.inc[from].cell;
                let want = self.inc[from].consumed.wrapping_add(1);
                let ring = &self.inc[from].ring;
                if ring.load_u32(self.layout.seq_at(cell))? != want {
                    // Credit is given when a link is found empty, off the path of a message
                    // that just arrived (its receiver is waiting for it), or below.
                    let i = &self.inc[from];
                    if taken == 0
                        && i.consumed.wrapping_sub(i.credited) as usize
                            >= (self.layout.cells / 4).max(1)
                    {
                        self.give_credit(from)?;
                    }
                    break;
                }
                let mut hb = [0u8; HEADER_LEN];
                // In 16-byte pieces: each an inline copy rather than a call to memcpy.
                let at = self.layout.header_at(cell);
                for (i, piece) in hb.chunks_exact_mut(16).enumerate() {
                    ring.read(at + 16 * i, piece)?;
                }
                let h = Header::decode(&hb);
                let written = self.nq_written;
                if !self.accept_fast(from, cell, &h)? {
                    self.accept(from as u32, cell, &h)?;
                }
                n += 1;
                taken += 1;
                let notified = self.nq_written != written;
                let i = &mut self.inc[from];
                i.consumed = want;
                i.cell = if cell + 1 == self.layout.cells {
                    0
                } else {
                    cell + 1
                };
                // A receiver that keeps finding packets credits at half a ring.
                if i.consumed.wrapping_sub(i.credited) as usize >= (self.layout.cells / 2).max(1) {
                    self.give_credit(from)?;
                }
                if notified {
                    self.next_link = if from + 1 == links { 0 } else { from + 1 };
                    if first {
                        return Ok(n);
                    }
                }
            }
        }
        Ok(n)
    }

    /// Whether the next packet in `from`'s link is a bootstrap packet (`None`: no packet).
    fn head_is_boot(&self, from: usize) -> Result<Option<bool>> {
        let i = &self.inc[from];
        if i.ring.load_u32(self.layout.seq_at(i.cell))? != i.consumed.wrapping_add(1) {
            return Ok(None);
        }
        let mut hb = [0u8; HEADER_LEN];
        i.ring.read(self.layout.header_at(i.cell), &mut hb)?;
        Ok(Some(Header::decode(&hb).flags & F_BOOT != 0))
    }

    fn give_credit(&mut self, from: usize) -> Result<()> {
        if self.inc[from].credit.is_none() {
            let owner = self.ep.proc_of(from)?;
            match self.ep.import(owner, CREDIT_BUF_BASE + self.me) {
                Ok(p) => self.inc[from].credit = Some(p),
                // A sender that died takes no credit: nothing to report here (what it sent
                // is still delivered).
                Err(vmmc::Error::PeerLost(_)) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
        let i = &mut self.inc[from];
        i.credited = i.consumed;
        let p = i.credit.as_ref().expect("imported");
        match p.send(0, &i.consumed.to_ne_bytes()) {
            Ok(()) => Ok(()),
            // A sender that died takes no credit: nothing to report here.
            Err(vmmc::Error::PeerLost(_)) | Err(vmmc::Error::Unexported) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The common case of [`Hamlyn::accept`] made short: a well-formed fast-mode packet with
    /// the slot's key, inside the slot. Anything else (`false`) goes through `accept`, which
    /// checks again and counts the refusal.
    #[inline]
    fn accept_fast(&mut self, from: usize, cell: usize, h: &Header) -> Result<bool> {
        let Some(dst) = fast_dest(&mut self.slots, h, self.layout.packet, None) else {
            return Ok(false);
        };
        let at = self.layout.payload_at(cell, dst.len());
        self.inc[from].ring.read(at, dst)?;
        self.stats.packets += 1;
        self.notify(NqEntry {
            wrap: false,
            slot: h.slot,
            meta_index: FAST_INDEX,
            word: h.word,
            from: from as u32,
        });
        Ok(true)
    }

    /// The receiving interface and `h_recv` in one short step, for the common case of a
    /// receive loop (tagged remote write's): the notification queue holds nothing unread, no
    /// arrival waits in the class's queue, and the next packet that the interface would take
    /// is a well-formed fast-mode packet for a slot of `class`, with the slot's key, inside
    /// the slot. Then the data is placed, the entry written and at once read, with the very
    /// checks and counts of the long way (`take_packets`, `accept`, `notify`, `h_recv`,
    /// `class_of`). Anything else is left to the long way: [`Fast::Other`] when something
    /// waits for it, [`Fast::Empty`] when nothing has arrived (then
    /// [`Hamlyn::wait_fast`] waits, then takes what lands).
    #[inline(always)]
    pub(crate) fn take_fast(&mut self, class: u64) -> Result<Fast> {
        // An entry not yet read, or an arrival already queued for the class, goes first.
        if self.nq[self.nq_head].wrap == self.app_wrap
            || self
                .classes
                .get(class as usize)
                .is_none_or(|q| !q.is_empty())
        {
            return Ok(Fast::Other);
        }
        match self.ready_link()? {
            Some(from) => self.take_line(from, class),
            None => Ok(Fast::Empty),
        }
    }

    /// The first link, from the one after the last that gave a notification, whose next
    /// cell holds a packet.
    #[inline(always)]
    fn ready_link(&self) -> Result<Option<usize>> {
        let links = self.inc.len();
        let mut from = self.next_link;
        let me = self.me as usize;
        for _ in 0..links {
            let i = &self.inc[from];
            // A process's link to itself carries nothing until it sends itself a packet.
            if (from != me || self.out[me].used)
                && i.ring.load_u32(self.layout.seq_at(i.cell))? == i.consumed.wrapping_add(1)
            {
                return Ok(Some(from));
            }
            from = if from + 1 == links { 0 } else { from + 1 };
        }
        Ok(None)
    }

    /// [`Hamlyn::take_fast`]'s work on the packet in `from`'s next cell.
    #[inline(always)]
    fn take_line(&mut self, from: usize, class: u64) -> Result<Fast> {
        let i = &self.inc[from];
        let (cell, want) = (i.cell, i.consumed.wrapping_add(1));
        // The cell's last line, header and (for a one-line packet) payload, in one read.
        let mut line = [0u8; LINE_DATA + HEADER_LEN];
        let at = self.layout.header_at(cell);
        i.ring.read(at - LINE_DATA, &mut line)?;
        let (head, hb) = line.split_at(LINE_DATA);
        let h = Header::decode(hb.try_into().expect("a header"));
        let Some(dst) = fast_dest(&mut self.slots, &h, self.layout.packet, Some(class)) else {
            return Ok(Fast::Other);
        };
        let dlen = dst.len();
        if dlen == LINE_DATA {
            // The common size of a one-line packet: one fixed-size move, no call.
            dst.copy_from_slice(&head[..LINE_DATA]);
        } else if dlen < LINE_DATA {
            copy_bytes(dst, &head[LINE_DATA - pad4(dlen)..][..dlen]);
        } else {
            i.ring.read(self.layout.payload_at(cell, dlen), dst)?;
        }
        self.stats.packets += 1;
        let e = NqEntry {
            wrap: self.nq_wrap,
            slot: h.slot,
            meta_index: FAST_INDEX,
            word: h.word,
            from: from as u32,
        };
        // Written and read: the queue was empty, so the interface's cursor is the
        // application's.
        self.notify(e);
        self.nq_head = self.nq_tail;
        self.app_wrap = self.nq_wrap;
        self.nq_read += 1;
        let i = &mut self.inc[from];
        i.consumed = want;
        i.cell = if cell + 1 == self.layout.cells {
            0
        } else {
            cell + 1
        };
        if i.consumed.wrapping_sub(i.credited) as usize >= (self.layout.cells / 2).max(1) {
            self.give_credit(from)?;
        }
        let links = self.inc.len();
        self.next_link = if from + 1 == links { 0 } else { from + 1 };
        Ok(Fast::Took(e))
    }

    /// Waits until a packet lies in some link, `deadline` (the clock of [`now_ns`])
    /// passes ([`Error::Timeout`]) or nothing can arrive any more ([`Error::PeerLost`]: no
    /// other rank alive, see [`Hamlyn::anyone_to_wait_for`]), then does [`Hamlyn::take_fast`]'s work on it in the same
    /// step. For a receive loop whose `take_fast` found nothing ([`Fast::Empty`]): nothing
    /// but the links can change that answer while it waits (only taking packets writes the
    /// notification queue or a class's queue, and `pump`, called here only when the work
    /// queue holds something, never takes any), so each turn is one look at each link's
    /// next sequence word, as tight as a wait on one word, and the receiving side's work
    /// starts the moment a packet lands.
    pub(crate) fn wait_fast(
        &mut self,
        class: u64,
        w: &mut Waiter,
        deadline: Option<u64>,
    ) -> Result<Fast> {
        loop {
            if let Some(from) = self.ready_link()? {
                return self.take_line(from, class);
            }
            if !self.wq.is_empty() {
                self.pump_queue()?;
            }
            if w.due() {
                if deadline.is_some_and(|d| now_ns() >= d) {
                    return Err(Error::Timeout);
                }
                if let Err(e) = self.anyone_to_wait_for() {
                    return match self.ready_link()? {
                        Some(from) => self.take_line(from, class),
                        None => Err(e),
                    };
                }
            }
            w.relax();
        }
    }

    /// Waits, taking nothing, until a packet lies in some link, `deadline` passes
    /// ([`Error::Timeout`]) or nothing can arrive any more ([`Error::PeerLost`]):
    /// [`Hamlyn::wait_fast`]'s wait, for the long way's loop.
    pub(crate) fn wait_packet(&mut self, w: &mut Waiter, deadline: Option<u64>) -> Result<()> {
        loop {
            if self.ready_link()?.is_some() {
                return Ok(());
            }
            if !self.wq.is_empty() {
                self.pump_queue()?;
            }
            if w.due() {
                if deadline.is_some_and(|d| now_ns() >= d) {
                    return Err(Error::Timeout);
                }
                if let Err(e) = self.anyone_to_wait_for() {
                    return match self.ready_link()? {
                        Some(_) => Ok(()),
                        None => Err(e),
                    };
                }
            }
            w.relax();
        }
    }

    /// The checks and the placement of one packet (Figure 2).
    fn accept(&mut self, from: u32, cell: usize, h: &Header) -> Result<()> {
        let plen = h.len as usize;
        let mlen = h.meta_len as usize;
        if plen > self.layout.packet || mlen > USER_META || mlen > plen {
            self.stats.refused_malformed += 1;
            return Ok(());
        }
        let at = self.layout.payload_at(cell, plen);
        if h.flags & F_BOOT != 0 {
            let mut b = vec![0u8; plen];
            self.inc[from as usize].ring.read(at, &mut b)?;
            self.inc[from as usize].boot.push_back(b);
            return Ok(());
        }
        let Some(Some(slot)) = self.slots.get_mut(h.slot as usize) else {
            self.stats.refused_malformed += 1;
            return Ok(());
        };
        let dlen = plen - mlen;
        let fast = h.meta_index == FAST_INDEX;
        let end = h.offset.checked_add(dlen as u64);
        // Primary bounds: the slot's message area.
        let Some(end) = end.filter(|&e| e <= slot.area.len() as u64) else {
            self.stats.refused_bounds += 1;
            return Ok(());
        };
        let key_fail = |revoked: &std::collections::HashSet<u64>, st: &mut Stats| {
            if revoked.contains(&h.key) {
                st.refused_revoked += 1
            } else {
                st.refused_key += 1
            }
        };
        if fast {
            if h.key != slot.key {
                key_fail(&self.revoked, &mut self.stats);
                return Ok(());
            }
            if mlen != 0 {
                self.stats.refused_malformed += 1;
                return Ok(());
            }
        } else {
            let Some(e) = slot.meta.get(h.meta_index as usize) else {
                self.stats.refused_malformed += 1;
                return Ok(());
            };
            match slot.mode {
                Mode::Normal => {
                    if h.key != slot.key {
                        key_fail(&self.revoked, &mut self.stats);
                        return Ok(());
                    }
                }
                Mode::Paranoid | Mode::ParanoidOneShot => {
                    if e.key == 0 || h.key != e.key {
                        key_fail(&self.revoked, &mut self.stats);
                        return Ok(());
                    }
                    if h.offset < e.lo || end > e.hi {
                        self.stats.refused_bounds += 1;
                        return Ok(());
                    }
                    if slot.mode == Mode::ParanoidOneShot && e.armed == 0 {
                        self.stats.refused_one_shot += 1;
                        return Ok(());
                    }
                }
            }
        }
        // Accepted: place the data, then the metadata.
        let ring = &self.inc[from as usize].ring;
        let off = h.offset as usize;
        ring.read(at + mlen, &mut slot.area[off..off + dlen])?;
        self.stats.packets += 1;
        let notify = if fast {
            true
        } else {
            let e = &mut slot.meta[h.meta_index as usize];
            if h.flags & F_FIRST != 0 && e.acc != 0 {
                self.stats.reordered += 1;
            }
            if h.flags & F_FIRST != 0 {
                // The message's metadata, none included: `metadata()` is this message's.
                ring.read(at, &mut e.user[..mlen])?;
                e.meta_len = mlen as u32;
            }
            // The first packet to arrive of a message (or of a group's messages) finds the
            // accumulator at 0 and starts the count of its bytes.
            if h.delta == 0 || e.acc == 0 {
                e.bytes = 0;
            }
            e.bytes += dlen as u64;
            let done = if h.delta == 0 {
                true
            } else {
                e.acc = e.acc.wrapping_add(h.delta);
                e.acc == 0
            };
            if done && slot.mode == Mode::ParanoidOneShot {
                e.armed = 0;
            }
            done
        };
        if notify {
            self.notify(NqEntry {
                wrap: false,
                slot: h.slot,
                meta_index: h.meta_index,
                word: h.word,
                from,
            });
        }
        Ok(())
    }

    /// Appends to the notification queue at the interface's cursor (§2.6).
    #[inline(always)]
    fn notify(&mut self, mut e: NqEntry) {
        e.wrap = self.nq_wrap;
        self.nq[self.nq_tail] = e;
        self.nq_tail += 1;
        if self.nq_tail == self.nq.len() {
            self.nq_tail = 0;
            self.nq_wrap = !self.nq_wrap;
        }
        self.nq_written += 1;
        self.stats.notifications += 1;
    }

    /// `h_recv` (§3.2): the next notification queue entry, if a message has arrived. The
    /// application's cursor and wrap flag find it (§2.6: the entry is new when its wrap flag
    /// matches the application's).
    pub fn h_recv(&mut self) -> Result<Option<NqEntry>> {
        let e = self.nq[self.nq_head];
        if e.wrap != self.app_wrap {
            self.take_packets(true)?;
        }
        let e = self.nq[self.nq_head];
        if e.wrap != self.app_wrap {
            return Ok(None);
        }
        self.nq_head += 1;
        if self.nq_head == self.nq.len() {
            self.nq_head = 0;
            self.app_wrap = !self.app_wrap;
        }
        self.nq_read += 1;
        Ok(Some(e))
    }

    /// Whether [`Hamlyn::h_recv`] may find something now: a notification entry waiting or a
    /// packet in a link. A cheap look for wait loops; it takes nothing.
    #[inline]
    pub fn may_have_arrived(&self) -> bool {
        self.nq[self.nq_head].wrap == self.app_wrap
            || self.inc.iter().any(|i| {
                i.ring
                    .load_u32(self.layout.seq_at(i.cell))
                    .map_or(true, |v| v == i.consumed.wrapping_add(1))
            })
    }

    /// The application's notification queue cursor and wrap flag.
    pub fn nq_cursor(&self) -> (usize, bool) {
        (self.nq_head, self.app_wrap)
    }

    /// `h_recv_block` (§3.2): waits for a message up to `timeout` (`None`: forever). With
    /// [`Config::wakeup`], a receiver past its spinning phase tells its senders it sleeps and
    /// each sends one notification per sleep (coalesced); the sleep is bounded by
    /// [`crate::wait::MAX_NAP`], which also bounds a wake-up lost to the race between the
    /// announcement and a packet already written. When no other rank of the job is alive and
    /// nothing is left to arrive, it returns [`Error::PeerLost`] rather than wait forever.
    pub fn h_recv_block(&mut self, timeout: Option<Duration>) -> Result<NqEntry> {
        let deadline = crate::wait::deadline_after(timeout);
        let mut w = Waiter::new();
        loop {
            if let Some(e) = self.h_recv()? {
                return Ok(e);
            }
            self.pump()?;
            if w.due() {
                if deadline.is_some_and(|d| now_ns() >= d) {
                    return Err(Error::Timeout);
                }
                if let Err(e) = self.anyone_to_wait_for() {
                    return self.h_recv()?.ok_or(e);
                }
            }
            if self.cfg.wakeup && w.sleepy() {
                self.sleep_once()?;
            } else {
                w.relax();
            }
        }
    }

    fn sleep_once(&mut self) -> Result<()> {
        self.sleep_epoch = self.sleep_epoch.wrapping_add(1);
        let epoch = self.sleep_epoch;
        for from in 0..self.inc.len() {
            if self.inc[from].credit.is_none() && self.inc[from].consumed == 0 {
                continue;
            }
            if self.inc[from].credit.is_none() {
                self.give_credit(from)?;
            }
            if let Some(p) = &self.inc[from].credit {
                let _ = p.send(4, &epoch.to_ne_bytes());
            }
        }
        let seen = *self.wake.count.lock().unwrap_or_else(|e| e.into_inner());
        if self.poll_links()? > 0 {
            return Ok(());
        }
        self.stats.sleeps += 1;
        let g = self.wake.count.lock().unwrap_or_else(|e| e.into_inner());
        if *g == seen {
            let _ = self
                .wake
                .cv
                .wait_timeout(g, crate::wait::MAX_NAP)
                .unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    }

    // ----- bootstrap channel (§6.3) -----

    /// Sends `bytes` (one packet) to the manager of `dest` on the well-known bootstrap channel
    /// that §6.3 leaves to the OS: how seeds and first tickets reach a new peer.
    pub fn send_boot(&mut self, dest: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() > self.cfg.packet_size {
            return Err(Error::TooLarge("a bootstrap message is one packet"));
        }
        if dest as usize >= self.out.len() {
            return Err(Error::InvalidArgument("no such rank"));
        }
        self.drain_queue()?;
        self.wait_room(dest)?;
        let hdr = Header {
            flags: F_BOOT,
            len: bytes.len() as u32,
            ..Default::default()
        };
        self.put_packet(dest, hdr, &[bytes])
    }

    /// Waits for the next bootstrap message from `from`.
    pub fn recv_boot(&mut self, from: u32) -> Result<Vec<u8>> {
        if from as usize >= self.inc.len() {
            return Err(Error::InvalidArgument("no such rank"));
        }
        let mut w = Waiter::new();
        loop {
            self.poll_links()?;
            if let Some(b) = self.inc[from as usize].boot.pop_front() {
                return Ok(b);
            }
            // Behind a message that needs a notification entry, with every entry unread:
            // nothing changes until the application reads the queue, which it cannot while
            // it waits here.
            if self.nq_written - self.nq_read >= self.nq.len() as u64
                && self.head_is_boot(from as usize)? == Some(false)
            {
                return Err(Error::WouldBlock(
                    "the notification queue is full and the bootstrap message waits behind \
                     a message that needs an entry: read the queue (h_recv) first",
                ));
            }
            self.pump()?;
            if w.due() {
                if let Err(e) = self.check_peer(from) {
                    // What it sent before it went is still good.
                    self.poll_links()?;
                    return self.inc[from as usize].boot.pop_front().ok_or(e);
                }
            }
            w.relax();
        }
    }

    // ----- receive classes (§3.3) -----

    /// A new receive class (the library's receiver end points record arrivals by class).
    pub fn new_class(&mut self) -> u64 {
        self.classes.push(VecDeque::new());
        (self.classes.len() - 1) as u64
    }

    /// `poll_nowait` (§3.3): the next arrival for `class`. Notification entries for other
    /// classes met on the way are recorded in their classes' arrival queues.
    pub fn poll_class(&mut self, class: u64) -> Result<Option<NqEntry>> {
        // Matched, not `ok_or`: this is the receive loop's turn, which must not make and
        // drop an error value on every call.
        let Some(q) = self.classes.get_mut(class as usize) else {
            return Err(Error::NoSuch("receive class"));
        };
        if let Some(e) = q.pop_front() {
            return Ok(Some(e));
        }
        if let Fast::Took(e) = self.take_fast(class)? {
            return Ok(Some(e));
        }
        while let Some(e) = self.h_recv()? {
            let c = self.class_of(&e);
            if c == class {
                return Ok(Some(e));
            }
            if let Some(q) = self.classes.get_mut(c as usize) {
                q.push_back(e);
            }
        }
        Ok(None)
    }

    /// [`Hamlyn::poll_class`], waiting up to `timeout`; gives up with `PeerLost` when `peer`
    /// (the one sender of a connection) is gone or, with no `peer`, when no other rank of the
    /// job is alive (what arrived before goes out first).
    pub fn wait_class(
        &mut self,
        class: u64,
        timeout: Option<Duration>,
        peer: Option<u32>,
    ) -> Result<NqEntry> {
        let deadline = crate::wait::deadline_after(timeout);
        let mut w = Waiter::new();
        loop {
            if let Some(e) = self.poll_class(class)? {
                return Ok(e);
            }
            self.pump()?;
            if w.due() {
                if deadline.is_some_and(|d| now_ns() >= d) {
                    return Err(Error::Timeout);
                }
                let alive = match peer {
                    Some(p) => self.check_peer(p),
                    None => self.anyone_to_wait_for(),
                };
                if let Err(e) = alive {
                    // What arrived before the death is still good.
                    if let Some(e) = self.poll_class(class)? {
                        return Ok(e);
                    }
                    return Err(e);
                }
            }
            w.relax();
        }
    }

    fn class_of(&self, e: &NqEntry) -> u64 {
        let Ok(sl) = self.slot(e.slot) else { return 0 };
        if e.is_fast() {
            sl.fast_class
        } else {
            sl.meta.get(e.meta_index as usize).map_or(0, |m| m.class)
        }
    }

    /// Whether a sender is alive.
    pub fn peer_alive(&self, r: u32) -> bool {
        self.check_peer(r).is_ok()
    }

    /// Whether a wait that knows no sender in particular (a receiver end point before its
    /// first message, `h_recv_block`, a tagged receiver) can still be answered: some other
    /// rank of the job is alive, or this process's own work queue still holds messages (to
    /// itself). If not, nothing can ever land in a link again, and the wait ends with
    /// [`Error::PeerLost`] after one last look at the links (what the dead sent before they
    /// went is still delivered). A job of one process keeps waiting: its only sender is
    /// itself.
    fn anyone_to_wait_for(&self) -> Result<()> {
        let others = (0..self.inc.len() as u32).filter(|&r| r != self.me);
        let alive = |r: u32| {
            self.ep
                .proc_of(r as usize)
                .is_ok_and(|p| self.ep.peer_alive(p))
        };
        if self.inc.len() < 2 || !self.wq.is_empty() || others.clone().any(alive) {
            return Ok(());
        }
        let ranks: Vec<String> = others.map(|r| r.to_string()).collect();
        Err(Error::PeerLost(format!(
            "{} (every other rank of the job; nothing can arrive)",
            ranks.join(", ")
        )))
    }

    /// Waits, taking packets meanwhile, until `done(self)` holds (or `peer` dies; with no
    /// `peer`, until no other rank of the job is alive).
    pub fn wait_until(
        &mut self,
        peer: Option<u32>,
        mut done: impl FnMut(&mut Hamlyn) -> Result<bool>,
    ) -> Result<()> {
        let mut w = Waiter::new();
        loop {
            self.pump()?;
            if done(self)? {
                return Ok(());
            }
            self.poll_links()?;
            if w.due() {
                let alive = match peer {
                    Some(p) => self.check_peer(p),
                    None => self.anyone_to_wait_for(),
                };
                if let Err(e) = alive {
                    // One last look: what the dead sent before they went.
                    self.poll_links()?;
                    if done(self)? {
                        return Ok(());
                    }
                    return Err(e);
                }
            }
            w.relax();
        }
    }

    /// Waits until every queued message has left and every link's packets were taken by the
    /// receivers (before a process exits, so that its rings stay mapped long enough).
    pub fn flush(&mut self) -> Result<()> {
        self.drain_queue()?;
        for d in 0..self.out.len() as u32 {
            let mut w = Waiter::new();
            while self.room(d) < self.cfg.ring_cells
                && self.out[d as usize].ring.is_some()
                && self.peer_alive(d)
            {
                self.poll_links()?;
                // A receiver credits when it finds the link empty (a quarter ring or more)
                // and, while it keeps taking packets, at half a ring: it may hold less than
                // half a ring until it calls in again, so a full flush is best effort.
                if self.room(d) + self.layout.cells / 2 >= self.cfg.ring_cells {
                    break;
                }
                w.relax();
            }
        }
        Ok(())
    }
}

/// Writes one packet into the link's ring: the payload pieces, then the header with the
/// sequence word last. Short packets go out as one deliberate update built in the staging
/// buffer (direct I/O); long aligned pieces go straight from the sender's memory ("DMA"),
/// followed by the header. VMMC keeps the updates of one link in order, so the receiver
/// that sees the sequence word sees the whole packet.
fn put_packet_split(h: &mut Hamlyn, dest: u32, mut hdr: Header, pieces: &[&[u8]]) -> Result<()> {
    if h.out[dest as usize].ring.is_none() {
        h.ring_proxy(dest)?;
    }
    let o = &mut h.out[dest as usize];
    let (cell, seq) = o.claim(h.layout.cells);
    hdr.seq = seq;
    let mut notify = false;
    if h.cfg.wakeup {
        let epoch = o.credit.load_u32(4)?;
        if epoch != o.notified_epoch {
            o.notified_epoch = epoch;
            notify = true;
            h.stats.wakeups_sent += 1;
        }
    }
    let proxy = o.ring.as_ref().expect("imported");
    let plen = hdr.len as usize;
    let start = h.layout.payload_at(cell, plen);
    let stage = &mut h.stage;
    stage.clear();
    let mut dst = start;
    let direct = plen <= h.cfg.direct_max;
    for p in pieces {
        let mut p: &[u8] = p;
        if direct || p.len() < 256 {
            stage.extend_from_slice(p);
            continue;
        }
        // Top the staged bytes up to a word, send them, then the word-aligned bulk directly.
        let fill = (4 - stage.len() % 4) % 4;
        let fill = fill.min(p.len());
        stage.extend_from_slice(&p[..fill]);
        p = &p[fill..];
        if !stage.is_empty() && stage.len().is_multiple_of(4) {
            proxy.send(dst, stage)?;
            dst += stage.len();
            stage.clear();
        }
        if stage.is_empty() {
            let bulk = p.len() & !3;
            if bulk > 0 {
                proxy.send(dst, &p[..bulk])?;
                dst += bulk;
            }
            stage.extend_from_slice(&p[bulk..]);
        } else {
            stage.extend_from_slice(p);
        }
    }
    // Pad the rest of the payload to a word; then the header, the sequence word last.
    stage.resize(pad4(stage.len()), 0);
    debug_assert_eq!(dst + stage.len(), h.layout.header_at(cell));
    stage.extend_from_slice(&hdr.encode());
    // A notification that meets a full queue is posted again once there is room: the
    // receiver's interface never loses one.
    let r = if notify {
        proxy.send_notify_wait(dst, stage)
    } else {
        proxy.send(dst, stage)
    };
    h.stats.packets_sent += 1;
    r.map_err(Error::from)
}
