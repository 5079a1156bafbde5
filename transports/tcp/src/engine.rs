//! The progress engine: one thread per process that blocks in epoll (mio) until a data
//! connection has bytes, reads each frame, checks it on arrival and places it straight into
//! the exported region; and the thread that sends the fence acknowledgements it owes.

use super::*;

/// Where the payload of the frame being received goes.
enum Dest {
    /// Straight into the buffer: the body as it comes, the last word at the end.
    Place(Busy),
    /// Into the staging vector, placed whole at the end (redirectable buffers).
    Stage(Busy),
    /// Nowhere (refused, or a frame without data).
    Discard,
}

struct Cur {
    h: Header,
    got: usize,
    dest: Dest,
    last: [u8; 4],
}

/// A connection's receive state in the progress engine.
struct Rx {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    cur: Option<Cur>,
    stage: Vec<u8>,
}

impl Rx {
    fn new() -> Rx {
        Rx {
            buf: vec![0u8; RX_BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            cur: None,
            stage: Vec::new(),
        }
    }
}

/// Why a connection stopped being read.
enum Stop {
    /// Nothing more to read now.
    Drained,
    /// End of stream or error: the peer is gone.
    Gone(u32),
}

fn body_end(h: &Header) -> usize {
    h.len as usize - WORD_SIZE
}

/// Takes the next `bytes` of the current frame's payload.
fn consume(c: &mut Cur, bytes: &[u8], stage: &mut Vec<u8>) {
    match &c.dest {
        Dest::Place(b) => {
            let be = body_end(&c.h);
            let n = bytes.len();
            let body = if c.got < be { (be - c.got).min(n) } else { 0 };
            if body > 0 {
                // SAFETY: offset + got + body <= offset + len - 4, checked in `admit` against
                // the buffer's length; the buffer stays valid while `Busy` is held.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        b.0.base.add(c.h.offset as usize + c.got),
                        body,
                    )
                };
            }
            for (i, byte) in bytes[body..].iter().enumerate() {
                c.last[c.got + body + i - be] = *byte;
            }
        }
        Dest::Stage(_) => stage.extend_from_slice(bytes),
        Dest::Discard => {}
    }
    c.got += bytes.len();
}

/// The progress engine's work on one connection: reads until the socket is empty.
/// With `short_reads`, a read that returns less than asked ends the turn (the next arrival
/// raises a new edge); without (the peer closed its side: the end of stream is reported by a
/// read of its own, with no edge after it), reads go on until the socket says so.
fn read_conn(sh: &Shared, conn: &Conn, rx: &mut Rx, short_reads: bool) -> Stop {
    let fd = conn.fd();
    let mut drained = false;
    loop {
        // Frames already in the buffer.
        loop {
            if rx.cur.is_none() {
                if rx.end - rx.start < HEADER {
                    break;
                }
                let hb: &[u8; HEADER] = rx.buf[rx.start..rx.start + HEADER]
                    .try_into()
                    .expect("a header");
                let h = Header::decode(hb);
                rx.start += HEADER;
                bump(&sh.stats.frames_received, 1);
                bump(&sh.stats.bytes_received, HEADER as u64 + h.len);
                match begin(sh, conn, rx, h) {
                    Ok(Some(c)) => rx.cur = Some(c),
                    Ok(None) => continue,
                    Err(()) => return Stop::Gone(LOST),
                }
            }
            let c = rx.cur.as_mut().expect("set");
            let avail = rx.end - rx.start;
            if avail == 0 {
                break;
            }
            let n = avail.min(c.h.len as usize - c.got);
            consume(c, &rx.buf[rx.start..rx.start + n], &mut rx.stage);
            rx.start += n;
            if c.got == c.h.len as usize {
                let c = rx.cur.take().expect("set");
                finish_frame(sh, c, &mut rx.stage);
            }
        }
        if rx.start == rx.end {
            rx.start = 0;
            rx.end = 0;
        } else if rx.start > 0 {
            rx.buf.copy_within(rx.start..rx.end, 0);
            rx.end -= rx.start;
            rx.start = 0;
        }
        // More bytes: a large body straight into its buffer, everything else into ours.
        let direct = match &rx.cur {
            Some(Cur {
                dest: Dest::Place(b),
                h,
                got,
                ..
            }) if rx.end == 0 && body_end(h).saturating_sub(*got) >= DIRECT => {
                // SAFETY: in bounds as in `consume`.
                Some((
                    unsafe { b.0.base.add(h.offset as usize + got) },
                    body_end(h) - got,
                ))
            }
            _ => None,
        };
        if drained {
            return Stop::Drained;
        }
        let (r, asked) = match direct {
            // SAFETY: the range lies in the buffer being placed (checked on arrival).
            Some((p, n)) => (unsafe { sys::recv_raw(fd, p, n) }, n),
            None => {
                let spare = &mut rx.buf[rx.end..];
                let n = spare.len();
                // SAFETY: our own buffer's spare part.
                (unsafe { sys::recv_raw(fd, spare.as_mut_ptr(), n) }, n)
            }
        };
        // A short read emptied the socket: parse what came, then wait for the next edge
        // (data arriving after this read raises one) instead of asking again.
        drained = short_reads && matches!(r, Ok(n) if n > 0 && n < asked);
        match r {
            Ok(0) => {
                return Stop::Gone(if conn.saw_bye.load(Ordering::Acquire) {
                    ENDED
                } else {
                    LOST
                })
            }
            Ok(n) => match direct {
                Some(_) => rx.cur.as_mut().expect("direct").got += n,
                None => rx.end += n,
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Stop::Drained,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Stop::Gone(LOST),
        }
    }
}

/// A frame's header has arrived: checks it and says where its data goes.
fn begin(sh: &Shared, conn: &Conn, rx: &mut Rx, h: Header) -> std::result::Result<Option<Cur>, ()> {
    if h.len > MAX_FRAME {
        return Err(());
    }
    let dest = match h.kind {
        kind::WRITE => match sh.admit(conn.rank, &h) {
            Some(b) if b.0.redirectable => {
                rx.stage.clear();
                rx.stage.reserve(h.len as usize);
                Dest::Stage(b)
            }
            Some(b) => Dest::Place(b),
            None => Dest::Discard,
        },
        kind::REVOKE => {
            let l = sh.link(conn.rank, h.key);
            l.revoked.store(1, Ordering::SeqCst);
            // An embedding transport's one-sided writes through this link may be under way
            // on program threads: the frames after this one (a fence's) wait until they are
            // complete, so the exporter's unexport returns only after the last of them.
            let mut spins = 0u32;
            while l.in_flight.load(Ordering::SeqCst) != 0 {
                spins = spins.wrapping_add(1);
                if spins > 100 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Dest::Discard
        }
        kind::PLACED => {
            if h.len != 0 {
                return Err(());
            }
            let at = h.offset & 0xffff_ffff;
            let value = (h.offset >> 32) as u32;
            let probe = Header {
                kind: kind::WRITE,
                flags: 0,
                len: WORD_SIZE as u64,
                key: h.key,
                offset: at,
            };
            if let Some(b) = sh.admit(conn.rank, &probe) {
                let e = b.0.clone();
                drop(b);
                let notify = h.flags & FLAG_NOTIFY != 0;
                sh.placed(&e, at as usize, WORD_SIZE, &value.to_ne_bytes(), notify);
            }
            Dest::Discard
        }
        kind::UNREVOKE => {
            sh.forget_link(conn.rank, h.key);
            Dest::Discard
        }
        kind::FENCE => {
            let mut a = lock(&sh.acks);
            let e = a.entry(conn.rank).or_insert(0);
            *e = (*e).max(h.offset);
            sh.acks_cv.notify_one();
            Dest::Discard
        }
        kind::FENCE_ACK => {
            let mut a = lock(&conn.acked);
            *a = (*a).max(h.offset);
            conn.acked_cv.notify_all();
            Dest::Discard
        }
        kind::BYE => {
            conn.saw_bye.store(true, Ordering::Release);
            // A send that met the peer's reset before this goodbye was read took it for a
            // crash: it was not one.
            let _ = conn
                .state
                .compare_exchange(LOST, ENDED, Ordering::AcqRel, Ordering::Acquire);
            Dest::Discard
        }
        _ => return Err(()),
    };
    let c = Cur {
        h,
        got: 0,
        dest,
        last: [0; 4],
    };
    if h.len == 0 {
        finish_frame(sh, c, &mut rx.stage);
        return Ok(None);
    }
    Ok(Some(c))
}

fn finish_frame(sh: &Shared, c: Cur, stage: &mut Vec<u8>) {
    let notify = c.h.flags & FLAG_NOTIFY != 0;
    match c.dest {
        Dest::Place(b) => {
            let at = c.h.offset as usize + body_end(&c.h);
            let v = u32::from_ne_bytes(c.last);
            // SAFETY: the last word of the checked range; word-aligned (checked), valid while
            // `b` is held.
            unsafe { AtomicU32::from_ptr(b.0.base.add(at).cast()).store(v, Ordering::Release) };
            let e = b.0.clone();
            // Out of the busy section before queueing the notification: waiting for room in
            // the queue must never hold up an unexport.
            drop(b);
            sh.placed(&e, c.h.offset as usize, c.h.len as usize, &c.last, notify);
        }
        Dest::Stage(b) => {
            let e = b.0.clone();
            let placed = sh.deliver(&e, c.h.offset as usize, stage).is_ok();
            drop(b);
            if placed {
                let last = &stage[stage.len() - WORD_SIZE..];
                sh.placed(&e, c.h.offset as usize, stage.len(), last, notify);
            }
            stage.clear();
            if stage.capacity() > RX_BUF {
                *stage = Vec::new();
            }
        }
        Dest::Discard => {}
    }
}

/// The progress engine: blocks in epoll until a connection has data or the waker fires.
pub(crate) fn progress_engine(sh: Arc<Shared>, mut poll: Poll) {
    let mut events = Events::with_capacity(64);
    let mut rx: Vec<Option<Rx>> = (0..sh.conns.len())
        .map(|r| sh.conns.get(r).map(|_| Rx::new()))
        .collect();
    // Ranks whose connection ended (a spawned process's starts later, with no state yet).
    let mut ended: Vec<bool> = vec![false; sh.conns.len()];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            eprintln!("vmmc-tcp: progress engine stops: {e}");
            return;
        }
        if sh.stop.load(Ordering::SeqCst) {
            return;
        }
        let gone = |r: usize, rx: &mut Vec<Option<Rx>>, ended: &mut Vec<bool>, how: u32| {
            let Some(conn) = sh.conns.get(r) else { return };
            ended[r] = true;
            // A frame cut short releases its buffer (unexport must not wait for it).
            rx[r] = None;
            let _ = poll.registry().deregister(&mut SourceFd(&conn.fd()));
            let _ = conn.sock.shutdown(Shutdown::Both);
            conn.mark(how);
        };
        for ev in events.iter() {
            let r = ev.token().0;
            if ev.token() == WAKE {
                // Peers the rendezvous reported gone: place what their connection holds (a
                // peer that left cleanly had every byte acknowledged first), then mark them.
                for r in 0..sh.conns.len() {
                    let Some(c) = sh.conns.get(r) else { continue };
                    let how = c.reported.swap(ALIVE, Ordering::SeqCst);
                    if how == ALIVE {
                        continue;
                    }
                    if let Some(state) = rx[r].as_mut() {
                        if let Stop::Gone(h) = read_conn(&sh, c, state, false) {
                            gone(r, &mut rx, &mut ended, h);
                        } else {
                            gone(r, &mut rx, &mut ended, how);
                        }
                    } else if !ended[r] {
                        // A spawned process gone before it sent anything.
                        gone(r, &mut rx, &mut ended, how);
                    }
                }
                continue;
            }
            if r < rx.len() && rx[r].is_none() && !ended[r] && sh.conns.get(r).is_some() {
                rx[r] = Some(Rx::new());
            }
            let (Some(conn), Some(state)) =
                (sh.conns.get(r), rx.get_mut(r).and_then(|x| x.as_mut()))
            else {
                continue;
            };
            let closing = ev.is_read_closed() || ev.is_error();
            if let Stop::Gone(how) = read_conn(&sh, conn, state, !closing) {
                gone(r, &mut rx, &mut ended, how);
            }
        }
    }
}

/// Sends the fence acknowledgements the progress engine owes (it never blocks on a send
/// itself: a full socket must not stop it from reading).
pub(crate) fn ack_sender(sh: Arc<Shared>) {
    loop {
        let owed = {
            let mut a = lock(&sh.acks);
            while a.is_empty() && !sh.stop.load(Ordering::SeqCst) {
                a = sh.acks_cv.wait(a).unwrap_or_else(|e| e.into_inner());
            }
            if sh.stop.load(Ordering::SeqCst) {
                return;
            }
            std::mem::take(&mut *a)
        };
        for (rank, seq) in owed {
            if let Some(c) = sh.conns.get(rank) {
                let h = Header {
                    kind: kind::FENCE_ACK,
                    offset: seq,
                    ..Default::default()
                };
                let _ = c.send_frame(&h, &[], &sh.stats);
            }
        }
    }
}
