//! The library's upper layer (seed 002 §3.3): receiver end points with their receive class
//! and `process_arrival`, seeds, and the three protocols.
//!
//! A receiver end point owns a receive class of the manager ([`Hamlyn::new_class`]); the
//! class pointer is stored in each of its metadata entries (Table 2). `receive` returns an
//! arrival of its own class if there is one; else the manager's `poll_nowait`
//! ([`Hamlyn::poll_class`]) takes notification queue entries, recording those of other
//! classes in their end points' arrival queues, until one for this end point turns up; the
//! end point's `process_arrival` then reads the metadata and makes the result.

use crate::arch::{Fast, Hamlyn, Mode, NqEntry, SendOpts, SlotId};
use crate::error::{Error, Result};
use crate::ticket::{Ticket, TICKET_LEN, T_ANY_ENTRY};
use crate::wait::Waiter;
use crate::Handle;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}

// ----- seeds -----

/// What a seed creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedKind {
    /// A [`StreamSender`].
    Stream,
    /// A datagram sender (the ticket alone).
    Datagram,
}

/// A seed (§3.3): tickets for preallocated buffers and metadata, and what else a remote
/// node needs to create the sender end point that matches a receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed {
    /// The kind of end point it grows.
    pub kind: SeedKind,
    /// The ticket over the receiver's buffer and metadata entries.
    pub ticket: Ticket,
    /// Metadata entries (tickets) the sender may have outstanding.
    pub entries: u32,
}

impl Seed {
    /// The seed as bytes, to send to the remote node.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(TICKET_LEN + 8);
        b.extend_from_slice(&(self.kind as u32).to_le_bytes());
        b.extend_from_slice(&self.entries.to_le_bytes());
        b.extend_from_slice(&self.ticket.to_bytes());
        b
    }
    /// Parses a seed.
    pub fn from_bytes(b: &[u8]) -> Result<Seed> {
        if b.len() < 8 + TICKET_LEN {
            return Err(Error::Protocol("short seed".into()));
        }
        let kind = match u32_at(b, 0) {
            0 => SeedKind::Stream,
            1 => SeedKind::Datagram,
            k => return Err(Error::Protocol(format!("seed of kind {k}"))),
        };
        Ok(Seed {
            kind,
            entries: u32_at(b, 4),
            ticket: Ticket::from_bytes(&b[8..])?,
        })
    }
}

// ----- simple datagram -----

/// A datagram as received: where its data lies in the receiver's slot (read it in place
/// with [`DatagramReceiver::data`] until the next datagram) and the reply ticket that came
/// with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Offset of the data in the receiver's slot.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    /// A ticket to reply with, if the sender put one in.
    pub reply: Option<Ticket>,
    /// The rank whose link delivered it.
    pub from: u32,
}

const DG_REPLY: u32 = 1;

/// Simple datagram protocol (§3.3): raw Hamlyn semantics. One receiver instance per metadata
/// entry, either ready or not ready: no queue.
pub struct DatagramReceiver {
    slot: SlotId,
    class: u64,
}

impl DatagramReceiver {
    /// A receiver for datagrams of up to `max_len` bytes, in `mode` (paranoid_one_shot makes
    /// the instance refuse a second datagram until this one is received).
    pub fn new(h: &mut Hamlyn, max_len: usize, mode: Mode) -> Result<DatagramReceiver> {
        let slot = h.create_slot(max_len.max(4), 1, mode)?;
        let class = h.new_class();
        h.set_class(slot, 0, class)?;
        Ok(DatagramReceiver { slot, class })
    }
    /// The ticket that lets a sender send one datagram at a time here.
    pub fn ticket(&self, h: &Hamlyn) -> Result<Ticket> {
        h.ticket(self.slot, 0, 0, h.area(self.slot)?.len() as u64)
    }
    /// The slot (for the protection tests: revocation, statistics).
    pub fn slot(&self) -> SlotId {
        self.slot
    }
    /// A seed for this receiver.
    pub fn make_seed(&self, h: &Hamlyn) -> Result<Seed> {
        Ok(Seed {
            kind: SeedKind::Datagram,
            ticket: self.ticket(h)?,
            entries: 1,
        })
    }
    /// The datagram, if one arrived.
    pub fn receive(&mut self, h: &mut Hamlyn) -> Result<Option<Datagram>> {
        match h.poll_class(self.class)? {
            Some(e) => self.process_arrival(h, &e).map(Some),
            None => Ok(None),
        }
    }
    /// Waits up to `timeout` (`None`: forever) for the datagram; [`Error::PeerLost`] when no
    /// other rank of the job is alive to send one.
    pub fn receive_block(&mut self, h: &mut Hamlyn, timeout: Option<Duration>) -> Result<Datagram> {
        let e = h.wait_class(self.class, timeout, None)?;
        self.process_arrival(h, &e)
    }
    /// Reads the metadata the sender made (offset, length, reply ticket) and makes the
    /// instance ready again (re-arms a one-shot entry).
    pub fn process_arrival(&mut self, h: &mut Hamlyn, e: &NqEntry) -> Result<Datagram> {
        let m = h.meta(self.slot, 0)?;
        let md = m.metadata().to_vec();
        if md.len() < 12 {
            return Err(Error::Protocol("datagram without its metadata".into()));
        }
        let (off, len, flags) = (
            u32_at(&md, 0) as usize,
            u32_at(&md, 4) as usize,
            u32_at(&md, 8),
        );
        let area_len = h.area(self.slot)?.len();
        if off.checked_add(len).is_none_or(|end| end > area_len) {
            return Err(Error::Protocol("datagram outside its slot".into()));
        }
        let reply = if flags & DG_REPLY != 0 {
            Some(Ticket::from_bytes(&md[12..])?)
        } else {
            None
        };
        h.rearm(self.slot, 0)?;
        Ok(Datagram {
            offset: off,
            len,
            reply,
            from: e.from,
        })
    }

    /// The data of `d`, in place (valid until the next datagram arrives here).
    pub fn data<'a>(&self, h: &'a Hamlyn, d: &Datagram) -> Result<&'a [u8]> {
        d.offset
            .checked_add(d.len)
            .and_then(|end| h.area(self.slot).ok()?.get(d.offset..end))
            .ok_or_else(|| Error::Protocol("datagram outside its slot".into()))
    }
}

/// Sends a datagram to `t` (a wrapper of `h_send_msg` that makes the metadata: offset, length
/// and an optional reply ticket).
pub fn send_datagram(
    h: &mut Hamlyn,
    t: &Ticket,
    data: &[u8],
    reply: Option<&Ticket>,
) -> Result<Handle> {
    let mut md = [0u8; 12 + TICKET_LEN];
    md[0..4].copy_from_slice(&(t.base as u32).to_le_bytes());
    md[4..8].copy_from_slice(&(data.len() as u32).to_le_bytes());
    let mut n = 12;
    if let Some(r) = reply {
        md[8..12].copy_from_slice(&DG_REPLY.to_le_bytes());
        md[12..].copy_from_slice(&r.to_bytes());
        n = md.len();
    }
    h.h_send_msg(t, t.base, data, &md[..n], SendOpts::default())
}

// ----- tagged remote write -----

/// Tagged remote write (§3.3): fast mode, one packet per message, tags queued at the
/// receiver, no ordering promise.
pub struct TaggedReceiver {
    slot: SlotId,
    class: u64,
    tags: VecDeque<u32>,
}

impl TaggedReceiver {
    /// A receiver over a message area of `len` bytes.
    pub fn new(h: &mut Hamlyn, len: usize) -> Result<TaggedReceiver> {
        let slot = h.create_slot(len, 0, Mode::Normal)?;
        let class = h.new_class();
        h.set_fast_class(slot, class)?;
        Ok(TaggedReceiver {
            slot,
            class,
            tags: VecDeque::new(),
        })
    }
    /// The fast-mode ticket senders write with.
    pub fn ticket(&self, h: &Hamlyn) -> Result<Ticket> {
        h.fast_ticket(self.slot)
    }
    /// The message area.
    pub fn area<'a>(&self, h: &'a Hamlyn) -> Result<&'a [u8]> {
        h.area(self.slot)
    }
    /// The slot.
    pub fn slot(&self) -> SlotId {
        self.slot
    }
    /// `get_tag`: the oldest tag that arrived, if any.
    pub fn get_tag(&mut self, h: &mut Hamlyn) -> Result<Option<u32>> {
        if self.tags.is_empty() {
            if let Some(e) = h.poll_class(self.class)? {
                return Ok(Some(e.word));
            }
        }
        Ok(self.tags.pop_front())
    }
    /// `get_specific_tag`: waits up to `timeout` (`None`: forever) for `tag` (other tags stay
    /// queued); [`Error::PeerLost`] when it has not arrived and no other rank of the job is
    /// alive to send it.
    #[inline]
    pub fn get_specific_tag(
        &mut self,
        h: &mut Hamlyn,
        tag: u32,
        timeout: Option<Duration>,
    ) -> Result<()> {
        if !self.tags.is_empty() {
            if let Some(i) = self.tags.iter().position(|&t| t == tag) {
                self.tags.remove(i);
                return Ok(());
            }
        }
        // The tag has arrived and waits at the head of its link: taken here, with no loop
        // to set up.
        match h.take_fast(self.class)? {
            Fast::Took(e) if e.word == tag => Ok(()),
            next => self.wait_specific_tag(h, tag, timeout, next),
        }
    }

    /// [`TaggedReceiver::get_specific_tag`]'s loop, from what the first look found.
    #[inline(never)]
    fn wait_specific_tag(
        &mut self,
        h: &mut Hamlyn,
        tag: u32,
        timeout: Option<Duration>,
        mut next: Fast,
    ) -> Result<()> {
        let deadline = crate::wait::deadline_after(timeout);
        let mut w: Option<Waiter> = None;
        loop {
            // The fast path first: a tagged write for this receiver is placed the moment it
            // lands; with nothing in the links, wait on their next sequence words alone and
            // take what lands in the same step.
            match next {
                Fast::Took(e) if e.word == tag => return Ok(()),
                Fast::Took(e) => self.tags.push_back(e.word),
                Fast::Empty => {
                    next = h.wait_fast(self.class, w.get_or_insert_with(Waiter::new), deadline)?;
                    continue;
                }
                // The long way, one arrival at a time: the tag asked for returns at once,
                // the others queue in their order of arrival.
                Fast::Other => match h.poll_class(self.class)? {
                    Some(e) if e.word == tag => return Ok(()),
                    Some(e) => self.tags.push_back(e.word),
                    // What waited was not for this receiver (another class's, a refused
                    // packet): the links are empty now; wait as for nothing, unless the
                    // time is up (others' traffic must not hold off the deadline).
                    None => {
                        if deadline.is_some_and(|d| crate::wait::now_ns() >= d) {
                            return Err(Error::Timeout);
                        }
                        h.wait_packet(w.get_or_insert_with(Waiter::new), deadline)?;
                    }
                },
            }
            next = h.take_fast(self.class)?;
        }
    }
}

/// Sends `data` to offset `offset` of `t`'s slot with `tag` (one packet, fast mode).
pub fn tagged_write(h: &mut Hamlyn, t: &Ticket, offset: u64, data: &[u8], tag: u32) -> Result<()> {
    h.h_send_fast(t, offset, data, tag)
}

// ----- stream -----

/// A received stream record: `<start, length>` in the receiver's buffer (no copy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// Position in the stream (1 is the first record).
    pub id: u64,
    /// The receiver's slot that holds it (the buffer grows by new slots).
    pub slot: SlotId,
    /// Offset of the data in the receiver's buffer.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

const ST_HELLO: u32 = 1;
const ST_CLOSE: u32 = 2;
/// A credit word with this bit announces a new, larger buffer (its ticket is the data).
const GROW: u32 = 0x8000_0000;

/// Stream protocol (§3.3), receiving end: one-way, one-to-one, in order. `receive` returns a
/// record in place, `release` frees every record up to one and returns the tickets to the
/// sender.
pub struct StreamReceiver {
    slot: SlotId,
    class: u64,
    entries: u32,
    peer: Option<u32>,
    credit: Option<Ticket>,
    next: u64,
    early: BTreeMap<u64, (Record, u32)>,
    released: u64,
    /// Released but not yet reported to the sender: messages and bytes.
    unreported: (u64, u64),
    /// Records handed out and not released: id and length.
    handed: VecDeque<(u64, u64)>,
    closed: bool,
    buf_len: usize,
    /// The buffer may grow up to this many bytes.
    max_len: usize,
    /// A new buffer announced to the sender, until its first record arrives.
    grow_pending: Option<SlotId>,
    grows: u32,
}

impl StreamReceiver {
    /// A receiver with a buffer of `buf_len` bytes and `entries` metadata entries (the most
    /// records the sender may have unreleased).
    pub fn new(h: &mut Hamlyn, buf_len: usize, entries: u32) -> Result<StreamReceiver> {
        if entries < 2 || buf_len < 64 {
            return Err(Error::InvalidArgument(
                "a stream needs 2 entries and 64 bytes",
            ));
        }
        let slot = h.create_slot(buf_len, entries as usize, Mode::Normal)?;
        let class = h.new_class();
        for i in 0..entries {
            h.set_class(slot, i, class)?;
        }
        Ok(StreamReceiver {
            slot,
            class,
            entries,
            peer: None,
            credit: None,
            next: 0,
            early: BTreeMap::new(),
            released: 0,
            unreported: (0, 0),
            handed: VecDeque::new(),
            closed: false,
            buf_len,
            max_len: buf_len,
            grow_pending: None,
            grows: 0,
        })
    }

    /// A receiver whose buffer starts at `buf_len` bytes and grows (§3.3: "it automatically
    /// allocates more buffers if needed"), doubling up to `max_len`, when the application
    /// holds more than half of it in unreleased records: a new slot, whose ticket goes to
    /// the sender, which places its next records there. Records already received stay where
    /// they are until released.
    pub fn growing(
        h: &mut Hamlyn,
        buf_len: usize,
        max_len: usize,
        entries: u32,
    ) -> Result<StreamReceiver> {
        let mut r = StreamReceiver::new(h, buf_len, entries)?;
        r.max_len = max_len.max(buf_len);
        Ok(r)
    }

    /// How many times the buffer grew.
    pub fn grows(&self) -> u32 {
        self.grows
    }

    fn maybe_grow(&mut self, h: &mut Hamlyn) -> Result<()> {
        let held: u64 = self.handed.iter().map(|&(_, len)| len).sum();
        if self.grow_pending.is_some()
            || held <= self.buf_len as u64 / 2
            || self.buf_len * 2 > self.max_len
        {
            return Ok(());
        }
        let Some(credit) = self.credit else {
            return Ok(());
        };
        let len = self.buf_len * 2;
        let slot = h.create_slot(len, self.entries as usize, Mode::Normal)?;
        for i in 0..self.entries {
            h.set_class(slot, i, self.class)?;
        }
        let t = h.range_ticket(slot, 0, self.entries)?;
        h.h_send_fast(&credit, 0, &t.to_bytes(), GROW)?;
        self.slot = slot;
        self.buf_len = len;
        self.grow_pending = Some(slot);
        self.grows += 1;
        Ok(())
    }

    /// `make_seed`: the seed that creates the matching [`StreamSender`] remotely.
    pub fn make_seed(&self, h: &Hamlyn) -> Result<Seed> {
        Ok(Seed {
            kind: SeedKind::Stream,
            ticket: h.range_ticket(self.slot, 0, self.entries)?,
            entries: self.entries,
        })
    }

    /// The sender's rank, once it said hello.
    pub fn peer(&self) -> Option<u32> {
        self.peer
    }

    /// Records the arrival of a message: reads its metadata (sequence, offset, length, and in
    /// the hello message the sender's credit ticket).
    pub fn process_arrival(&mut self, h: &mut Hamlyn, e: &NqEntry) -> Result<()> {
        let md = h.meta(e.slot, e.meta_index)?.metadata().to_vec();
        if self.grow_pending == Some(e.slot) {
            self.grow_pending = None;
        }
        if md.len() < 16 {
            return Err(Error::Protocol(
                "stream message without its metadata".into(),
            ));
        }
        let seq = u32_at(&md, 0) as u64;
        // Sequence numbers travel as 32 bits: extend them near the next one expected.
        let seq = self.next + (seq.wrapping_sub(self.next) & 0xffff_ffff);
        let (off, len, flags) = (
            u32_at(&md, 4) as usize,
            u32_at(&md, 8) as usize,
            u32_at(&md, 12),
        );
        if flags & ST_HELLO != 0 {
            self.credit = Some(Ticket::from_bytes(&md[16..])?);
            self.peer = Some(e.from);
        }
        self.early.insert(
            seq,
            (
                Record {
                    id: seq,
                    slot: e.slot,
                    offset: off,
                    len,
                },
                flags,
            ),
        );
        Ok(())
    }

    fn take_ready(&mut self) -> Option<(Record, u32)> {
        let r = self.early.remove(&self.next)?;
        self.next += 1;
        Some(r)
    }

    fn next_record(&mut self, h: &mut Hamlyn, timeout: Option<Duration>) -> Result<Option<Record>> {
        loop {
            if let Some((r, flags)) = self.take_ready() {
                if flags & (ST_HELLO | ST_CLOSE) != 0 {
                    // Consumed by the protocol itself.
                    self.closed |= flags & ST_CLOSE != 0;
                    self.release_to(h, r.id, 0)?;
                    continue;
                }
                self.handed.push_back((r.id, r.len as u64));
                self.maybe_grow(h)?;
                return Ok(Some(r));
            }
            if self.closed() {
                return Err(Error::Closed);
            }
            let e = match timeout {
                Some(t) if t.is_zero() => match h.poll_class(self.class)? {
                    Some(e) => e,
                    None => return Ok(None),
                },
                _ => h.wait_class(self.class, timeout, self.peer)?,
            };
            self.process_arrival(h, &e)?;
        }
    }

    /// `receive`: the next record in order, if it arrived.
    pub fn receive(&mut self, h: &mut Hamlyn) -> Result<Option<Record>> {
        self.next_record(h, Some(Duration::ZERO))
    }

    /// Waits up to `timeout` (`None`: forever) for the next record. A sender that died is
    /// reported as [`Error::PeerLost`] once every record it sent has been received (before
    /// its hello, when no other rank of the job is alive); a closed stream as
    /// [`Error::Closed`].
    pub fn receive_block(&mut self, h: &mut Hamlyn, timeout: Option<Duration>) -> Result<Record> {
        self.next_record(h, timeout)?.ok_or(Error::Timeout)
    }

    /// The bytes of a record, in place in the receiver's buffer.
    pub fn data<'a>(&self, h: &'a Hamlyn, r: &Record) -> Result<&'a [u8]> {
        r.offset
            .checked_add(r.len)
            .and_then(|end| h.area(r.slot).ok()?.get(r.offset..end))
            .ok_or_else(|| Error::Protocol("record outside the stream buffer".into()))
    }

    /// `release`: frees every record up to and including `r`; the sender gets the tickets
    /// and buffer space back.
    pub fn release(&mut self, h: &mut Hamlyn, r: &Record) -> Result<()> {
        if r.id >= self.next {
            return Err(Error::InvalidArgument(
                "release of a record this receiver has not returned",
            ));
        }
        let mut bytes = 0;
        while self.handed.front().is_some_and(|&(id, _)| id <= r.id) {
            bytes += self.handed.pop_front().expect("front").1;
        }
        self.release_to(h, r.id, bytes)
    }

    /// Whether the sender closed the stream (and every record before the close was
    /// received).
    pub fn closed(&self) -> bool {
        self.closed && self.early.is_empty()
    }

    fn release_to(&mut self, h: &mut Hamlyn, id: u64, bytes: u64) -> Result<()> {
        if id < self.released {
            return Ok(());
        }
        self.unreported.0 += id + 1 - self.released;
        self.unreported.1 += bytes;
        self.released = id + 1;
        // Tickets go back in batches: a quarter of the entries or an eighth of the buffer.
        // A sender whose receiver released everything is then never short of either (its
        // unreported share, one skipped tail and its next message fit in the buffer).
        if self.unreported.0 < (self.entries as u64 / 4).max(1)
            && self.unreported.1 < self.buf_len as u64 / 8
        {
            return Ok(());
        }
        self.unreported = (0, 0);
        let t = self
            .credit
            .ok_or_else(|| Error::Protocol("release before the sender's hello".into()))?;
        match h.h_send_fast(&t, 0, &[], self.released as u32 & !GROW) {
            // A sender that is gone takes no tickets back; `receive` reports it.
            Err(Error::PeerLost(_)) => Ok(()),
            r => r,
        }
    }
}

/// A receiver's stream ticket as the sender needs it: a window from the slot's start of at
/// least 64 bytes, over `entries` metadata entries that exist.
fn check_stream_ticket(t: &Ticket, entries: u32) -> Result<()> {
    let count = (t.flags >> 16) & 0xffff;
    if t.base != 0
        || t.len() < 64
        || t.len() > u32::MAX as u64
        || t.flags & T_ANY_ENTRY == 0
        || count < entries.min(0xffff)
        || t.meta_index.checked_add(entries).is_none()
    {
        return Err(Error::Protocol("not a stream receiver's ticket".into()));
    }
    Ok(())
}

/// Stream protocol (§3.3), sending end, grown from a seed. `send` coalesces small writes by
/// copying and sends large ones as they are; `flush` forces out what is coalesced. The
/// sender blocks (or gets `WouldBlock`) when it runs out of tickets or buffer space.
pub struct StreamSender {
    t: Ticket,
    entries: u32,
    buf_len: u64,
    dest: u32,
    credit_slot: SlotId,
    credit_class: u64,
    seq: u64,
    /// Stream buffer position (bytes allocated, wasted tails included).
    wpos: u64,
    /// End position of every unreleased message, by sequence.
    inflight: VecDeque<u64>,
    released: u64,
    released_pos: u64,
    pending: Vec<u8>,
    coalesce: usize,
    closed: bool,
}

impl StreamSender {
    /// Grows the sender end point of `seed`: makes a credit slot here and says hello with its
    /// ticket (a ticket travelling in a message, used by the receiver to reply).
    pub fn from_seed(h: &mut Hamlyn, seed: &Seed) -> Result<StreamSender> {
        if seed.kind != SeedKind::Stream || seed.entries < 2 {
            return Err(Error::Protocol("not a stream seed".into()));
        }
        check_stream_ticket(&seed.ticket, seed.entries)?;
        let credit_slot = h.create_slot(64, 0, Mode::Normal)?;
        let credit_class = h.new_class();
        h.set_fast_class(credit_slot, credit_class)?;
        let mut s = StreamSender {
            t: seed.ticket,
            entries: seed.entries,
            buf_len: seed.ticket.len(),
            dest: seed.ticket.dest,
            credit_slot,
            credit_class,
            seq: 0,
            wpos: 0,
            inflight: VecDeque::new(),
            released: 0,
            released_pos: 0,
            pending: Vec::new(),
            coalesce: 0,
            closed: false,
        };
        s.coalesce = h.config().packet_size.min(16 << 10).min(s.max_message());
        let ct = h.fast_ticket(credit_slot)?;
        s.message(h, &[], ST_HELLO, Some(&ct))?;
        Ok(s)
    }

    /// The largest message: a quarter of the receiver's buffer. A message of up to half the
    /// buffer always fits once everything before it is released (before the position, or
    /// after it with the tail skipped); coalesced writes are held to it too.
    fn max_message(&self) -> usize {
        (self.buf_len / 4).max(1) as usize
    }

    fn take_credit(&mut self, h: &mut Hamlyn) -> Result<()> {
        while let Some(e) = h.poll_class(self.credit_class)? {
            if e.word & GROW != 0 {
                // A larger buffer: the next records go there; the old one's space no longer
                // limits us (its records hold tickets until released).
                let t = Ticket::from_bytes(&h.area(self.credit_slot)?[..TICKET_LEN])?;
                check_stream_ticket(&t, self.entries)?;
                if t.len() < self.buf_len {
                    return Err(Error::Protocol("a stream buffer that shrinks".into()));
                }
                self.t = t;
                self.buf_len = t.len();
                self.wpos = 0;
                self.released_pos = 0;
                self.inflight.iter_mut().for_each(|end| *end = 0);
                continue;
            }
            // Released counts travel as 31 bits.
            let word = (e.word & !GROW) as u64;
            let r = self.released + (word.wrapping_sub(self.released) & 0x7fff_ffff);
            while self.released < r {
                if let Some(end) = self.inflight.pop_front() {
                    self.released_pos = end;
                }
                self.released += 1;
            }
        }
        Ok(())
    }

    fn message(
        &mut self,
        h: &mut Hamlyn,
        data: &[u8],
        flags: u32,
        reply: Option<&Ticket>,
    ) -> Result<()> {
        let len = data.len() as u64;
        let mut w = Waiter::new();
        let (skip, need_end) = loop {
            self.take_credit(h)?;
            // Place it contiguously in the receiver's buffer: skip the tail if it does not
            // fit (computed after the credit, which may have brought a new buffer).
            let at = self.wpos % self.buf_len;
            let skip = if at + len > self.buf_len {
                self.buf_len - at
            } else {
                0
            };
            let need_end = self.wpos + skip + len;
            let tickets_ok = self.seq - self.released < self.entries as u64;
            let space_ok = need_end - self.released_pos <= self.buf_len;
            if tickets_ok && space_ok {
                break (skip, need_end);
            }
            if !h.config().block {
                return Err(Error::WouldBlock("stream sender out of tickets"));
            }
            h.pump()?;
            h.poll_links()?;
            if w.due() && !h.peer_alive(self.dest) {
                return Err(Error::PeerLost(format!("rank {}", self.dest)));
            }
            w.relax();
        };
        let off = (self.wpos + skip) % self.buf_len;
        let mut md = [0u8; 16 + TICKET_LEN];
        md[0..4].copy_from_slice(&(self.seq as u32).to_le_bytes());
        md[4..8].copy_from_slice(&(off as u32).to_le_bytes());
        md[8..12].copy_from_slice(&(len as u32).to_le_bytes());
        md[12..16].copy_from_slice(&flags.to_le_bytes());
        let mut n = 16;
        if let Some(r) = reply {
            md[16..].copy_from_slice(&r.to_bytes());
            n = md.len();
        }
        let idx = self.t.meta_index + (self.seq % self.entries as u64) as u32;
        let opts = SendOpts {
            meta_index: Some(idx),
            ..Default::default()
        };
        h.h_send_msg(&self.t, off, data, &md[..n], opts)?;
        self.seq += 1;
        self.wpos = need_end;
        self.inflight.push_back(need_end);
        Ok(())
    }

    /// `send`: appends `data` to the stream.
    pub fn send(&mut self, h: &mut Hamlyn, data: &[u8]) -> Result<()> {
        if self.pending.len() + data.len() <= self.coalesce {
            self.pending.extend_from_slice(data);
            return Ok(());
        }
        self.flush(h)?;
        if data.len() <= self.coalesce {
            self.pending.extend_from_slice(data);
            return Ok(());
        }
        for chunk in data.chunks(self.max_message()) {
            self.message(h, chunk, 0, None)?;
        }
        Ok(())
    }

    /// `flush`: transmits everything posted so far.
    pub fn flush(&mut self, h: &mut Hamlyn) -> Result<()> {
        if !self.pending.is_empty() {
            let p = std::mem::take(&mut self.pending);
            let r = self.message(h, &p, 0, None);
            self.pending = p;
            // Out of tickets without blocking: the data stays posted for the next flush.
            r?;
            self.pending.clear();
        }
        h.drain_queue()
    }

    /// A graceful close by the sender (§6.4): flushes, then tells the receiver the stream
    /// ends (its `receive_block` then returns [`Error::Closed`] after the last record). The
    /// data is in the receiver's memory once sent: the sender may go away at once.
    /// Without blocking it may return `WouldBlock`: call it again after progress.
    pub fn close(&mut self, h: &mut Hamlyn) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.flush(h)?;
        self.message(h, &[], ST_CLOSE, None)?;
        self.closed = true;
        let _ = h.destroy_slot(self.credit_slot);
        h.drain_queue()
    }

    /// Records sent (the hello included).
    pub fn sent(&self) -> u64 {
        self.seq
    }
}
