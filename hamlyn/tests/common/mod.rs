//! The scenarios, written once and run on shm (real processes) and on the simulated SHRIMP
//! (threads in virtual time).
#![allow(dead_code)]

use hamlyn::protocols::{
    send_datagram, tagged_write, Datagram, DatagramReceiver, Record, Seed, StreamReceiver,
    StreamSender, TaggedReceiver,
};
use hamlyn::ticket::TICKET_LEN;
use hamlyn::wire::{Header, FAST_INDEX, F_BOOT, F_FIRST};
use hamlyn::{
    group_values, split_value, Config, Error, Gather, Hamlyn, MetaEntry, Mode, Result, SendOpts,
    Ticket,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LONG: Option<Duration> = Some(Duration::from_secs(30));

/// `send_boot`, retried while a non-blocking interface says `WouldBlock`.
fn send_boot(h: &mut Hamlyn, to: u32, b: &[u8]) -> Result<()> {
    let mut w = hamlyn::wait::Waiter::new();
    loop {
        match h.send_boot(to, b) {
            Err(Error::WouldBlock(_)) => {
                h.poll_links()?;
                w.relax();
            }
            r => return r,
        }
    }
}

/// Everybody meets at rank 0 (over the bootstrap channel).
pub fn barrier(h: &mut Hamlyn) -> Result<()> {
    if h.rank() == 0 {
        for r in 1..h.size() as u32 {
            assert_eq!(h.recv_boot(r)?, b"b");
        }
        for r in 1..h.size() as u32 {
            send_boot(h, r, b"B")?;
        }
    } else {
        send_boot(h, 0, b"b")?;
        assert_eq!(h.recv_boot(0)?, b"B");
    }
    Ok(())
}

fn pattern(seed: u32, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) as u8 ^ (i >> 9) as u8)
        .collect()
}

/// Datagrams of every size class (direct I/O, one packet, several packets) carrying a reply
/// ticket; the receiver replies with the ticket that came in the message.
pub fn datagram_ping_pong(h: &mut Hamlyn) -> Result<()> {
    let sizes = [0usize, 4, 60, 256, 257, 4000, 4096, 10_000, 70_000];
    let mut rx = DatagramReceiver::new(h, 80_000, Mode::Normal)?;
    if h.rank() == 0 {
        // Rank 1 learns our ticket through the bootstrap channel only once.
        h.send_boot(1, &rx.ticket(h)?.to_bytes())?;
        for (i, &n) in sizes.iter().enumerate() {
            let d = rx.receive_block(h, LONG)?;
            assert_eq!(
                rx.data(h, &d)?,
                &pattern(i as u32, n)[..],
                "datagram {i} of {n} bytes"
            );
            assert_eq!(d.from, 1);
            let reply = d.reply.expect("a reply ticket in the message");
            assert_eq!(reply.dest, 1);
            send_datagram(h, &reply, &pattern(100 + i as u32, n), Some(&rx.ticket(h)?))?;
        }
    } else if h.rank() == 1 {
        let to = Ticket::from_bytes(&h.recv_boot(0)?)?;
        let mine = rx.ticket(h)?;
        for (i, &n) in sizes.iter().enumerate() {
            send_datagram(h, &to, &pattern(i as u32, n), Some(&mine))?;
            let d = rx.receive_block(h, LONG)?;
            assert_eq!(
                rx.data(h, &d)?,
                &pattern(100 + i as u32, n)[..],
                "reply {i}"
            );
            assert_eq!(d.reply, Some(to), "the reply carries the first ticket back");
        }
    }
    // The blocking receives waited by the core's one policy (issue 19), which counted them.
    let waits = vmmc::wait::counts()
        .into_iter()
        .find(|c| c.name == "hamlyn")
        .map_or(0, |c| c.waits);
    assert!(waits > 0, "Hamlyn's waits go through vmmc::wait");
    barrier(h)
}

/// Packets of each message sent in a permuted order ([`Config::permute`]) are reassembled by
/// the packet accumulator: one notification per message, only when all of it arrived.
pub fn permuted_reassembly(h: &mut Hamlyn) -> Result<()> {
    const MSGS: usize = 20;
    let len = 37 * 256 + 100;
    if h.rank() == 0 {
        let slot = h.create_slot(len * MSGS, MSGS, Mode::Normal)?;
        let t = h.range_ticket(slot, 0, MSGS as u32)?;
        h.send_boot(1, &t.to_bytes())?;
        let mut seen = [false; MSGS];
        for _ in 0..MSGS {
            let e = h.h_recv_block(LONG)?;
            let i = e.meta_index as usize;
            assert!(!seen[i], "message {i} notified twice");
            seen[i] = true;
            let want = pattern(i as u32, len);
            assert_eq!(h.meta(slot, i as u32)?.metadata(), &[i as u8; 7]);
            assert!(
                h.area(slot)?[i * len..(i + 1) * len] == want[..],
                "message {i} complete when notified"
            );
        }
        let st = h.stats();
        assert_eq!(st.refused(), 0, "{st:?}");
        assert!(
            st.reordered > 0,
            "the test mode must really deliver first packets late: {st:?}"
        );
    } else if h.rank() == 1 {
        assert!(h.config().permute.is_some());
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        for i in 0..MSGS {
            let opts = SendOpts {
                meta_index: Some(i as u32),
                ..Default::default()
            };
            h.h_send_msg(
                &t,
                (i * len) as u64,
                &pattern(i as u32, len),
                &[i as u8; 7],
                opts,
            )?;
        }
    }
    barrier(h)
}

pub fn permuted_config() -> Config {
    Config {
        packet_size: 256,
        ring_cells: 16,
        permute: Some(0x5eed),
        ..Config::default()
    }
}

/// Group receive (§2.5): three senders with initial values summing to 2^32 write parts of one
/// message; the receiver is notified once, after the last packet. The third sender delegates
/// its value to two messages (splitting it).
pub fn group_receive(h: &mut Hamlyn) -> Result<()> {
    assert_eq!(h.size(), 4);
    let part = 9 * 1024 + 12;
    if h.rank() == 0 {
        let slot = h.create_slot(3 * part, 1, Mode::Normal)?;
        let t = h.ticket(slot, 0, 0, 3 * part as u64)?;
        let vals = group_values(3)?;
        for r in 1..4u32 {
            let mut b = t.to_bytes().to_vec();
            b.extend_from_slice(&vals[r as usize - 1].to_le_bytes());
            h.send_boot(r, &b)?;
        }
        let e = h.h_recv_block(LONG)?;
        assert_eq!((e.slot, e.meta_index), (slot, 0));
        let area = h.area(slot)?;
        for r in 0..3 {
            assert!(
                area[r * part..(r + 1) * part] == pattern(r as u32, part)[..],
                "part of sender {} complete at the notification",
                r + 1
            );
        }
        // Packets: parts of 9 KiB + 12 in 4 KiB packets (3 each), the third in two messages of
        // two packets.
        let packets = h.stats().packets;
        assert_eq!(packets, 3 + 3 + 2 + 2, "{:?}", h.stats());
        for r in 1..4 {
            assert_eq!(h.recv_boot(r)?, b"sent");
        }
        h.poll_links()?;
        assert_eq!(h.h_recv()?, None, "one notification for the whole group");
        assert_eq!(h.stats().notifications, 1);
    } else {
        let b = h.recv_boot(0)?;
        let t = Ticket::from_bytes(&b)?;
        let y = u32::from_le_bytes(b[44..48].try_into().unwrap());
        let r = h.rank() as usize - 1;
        let data = pattern(r as u32, part);
        let at = (r * part) as u64;
        if h.rank() == 3 {
            // Delegation: two messages whose values sum to ours.
            let ys = split_value(y, 2)?;
            let half = part / 2;
            h.h_send_msg(
                &t,
                at,
                &data[..half],
                &[],
                SendOpts {
                    counter: ys[0],
                    ..Default::default()
                },
            )?;
            h.h_send_msg(
                &t,
                at + half as u64,
                &data[half..],
                &[],
                SendOpts {
                    counter: ys[1],
                    ..Default::default()
                },
            )?;
        } else {
            h.h_send_msg(
                &t,
                at,
                &data,
                &[],
                SendOpts {
                    counter: y,
                    ..Default::default()
                },
            )?;
        }
        h.send_boot(0, b"sent")?;
    }
    barrier(h)
}

/// Protection (§2.2, §2.7): wrong key, out of the slot's bounds, out of a paranoid entry's
/// bounds, another entry's key and a revoked key are refused by the receiving side with
/// nothing written, and counted; revoking one sender's key leaves the other sender working.
/// Ranks: 0 receives, 1 misbehaves, 2 behaves.
pub fn protection(h: &mut Hamlyn) -> Result<()> {
    assert_eq!(h.size(), 3);
    if h.rank() == 0 {
        let normal = h.create_slot(4096, 1, Mode::Normal)?;
        let par = h.create_slot(8192, 2, Mode::Paranoid)?;
        let k1 = h.set_entry_bounds(par, 0, 0, 4096)?;
        let k2 = h.set_entry_bounds(par, 1, 4096, 8192)?;
        assert_ne!(k1, k2);
        let tn = h.ticket(normal, 0, 0, 4096)?;
        let t1 = h.ticket(par, 0, 0, 4096)?;
        let t2 = h.ticket(par, 1, 4096, 8192)?;
        let mut b1 = tn.to_bytes().to_vec();
        b1.extend_from_slice(&t1.to_bytes());
        h.send_boot(1, &b1)?;
        h.send_boot(2, &t2.to_bytes())?;
        // Round 1: rank 1's attempts, then its good message.
        assert_eq!(h.recv_boot(1)?, b"round1");
        let e = h.h_recv_block(LONG)?;
        assert_eq!((e.slot, e.meta_index), (par, 0));
        let st = h.stats();
        assert_eq!(st.refused_key, 2, "{st:?}");
        assert_eq!(st.refused_bounds, 2, "{st:?}");
        assert_eq!(st.refused_malformed, 1, "{st:?}");
        assert_eq!(st.notifications, 1, "{st:?}");
        assert!(
            h.area(normal)?.iter().all(|&b| b == 0),
            "nothing written to the normal slot"
        );
        let a = h.area(par)?;
        assert!(a[..64].iter().all(|&b| b == 1) && a[64..].iter().all(|&b| b == 0));
        // Round 2: rank 1 is cut off; rank 2 is not.
        h.revoke_entry(par, 0)?;
        h.send_boot(1, b"revoked")?;
        assert_eq!(h.recv_boot(1)?, b"round2");
        h.send_boot(2, b"go")?;
        let e = h.h_recv_block(LONG)?;
        assert_eq!((e.slot, e.meta_index, e.from), (par, 1, 2));
        assert_eq!(h.h_recv()?, None);
        let st = h.stats();
        assert_eq!(st.refused_revoked, 1, "{st:?}");
        let a = h.area(par)?;
        assert!(
            a[..64].iter().all(|&b| b == 1),
            "rank 1's revoked write left no trace"
        );
        assert!(a[64..4096].iter().all(|&b| b == 0));
        assert!(a[4096..4096 + 100].iter().all(|&b| b == 2));
    } else if h.rank() == 1 {
        let b = h.recv_boot(0)?;
        let tn = Ticket::from_bytes(&b)?;
        let t1 = Ticket::from_bytes(&b[44..])?;
        let o = SendOpts::default();
        // The sending library refuses a message outside its ticket's window...
        let r = h.h_send_msg(&tn, 4000, &[9; 200], &[], o);
        assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
        let r = h.h_send_msg(&tn, u64::MAX - 10, &[9; 200], &[], o);
        assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
        // ...but a ticket's fields can be anything: widened, every packet goes out, and the
        // receiving side is what refuses them.
        let wide = |t: Ticket| Ticket {
            base: 0,
            bound: u64::MAX,
            ..t
        };
        let bad_key = Ticket {
            key: tn.key ^ 1,
            ..tn
        };
        h.h_send_msg(&bad_key, 0, &[9; 100], &[], o)?;
        h.h_send_msg(&wide(tn), 4000, &[9; 200], &[], o)?; // beyond the slot
        h.h_send_msg(&wide(t1), 5000, &[9; 10], &[], o)?; // in the slot, beyond entry 0's bounds
        h.h_send_msg(
            &wide(Ticket {
                meta_index: 1,
                ..t1
            }),
            4096,
            &[9; 10],
            &[],
            o,
        )?; // entry 1, our key
        h.h_send_msg(&Ticket { slot: 77, ..tn }, 0, &[9; 10], &[], o)?; // no such slot
        h.h_send_msg(&t1, 0, &[1; 64], &[], o)?; // good
        h.send_boot(0, b"round1")?;
        // A sender reaches only its own ring: another sender's ring cannot be imported.
        let ep = h.endpoint().clone();
        let r0 = ep.proc_of(0).unwrap();
        match ep.import(r0, hamlyn::arch::RING_BUF_BASE + 2) {
            Err(vmmc::Error::PermissionDenied(_)) => {}
            other => panic!("importing rank 2's ring at rank 0: {other:?}"),
        }
        assert_eq!(h.recv_boot(0)?, b"revoked");
        h.h_send_msg(&t1, 0, &[7; 64], &[], o)?;
        h.send_boot(0, b"round2")?;
    } else {
        let t2 = Ticket::from_bytes(&h.recv_boot(0)?)?;
        assert_eq!(h.recv_boot(0)?, b"go");
        h.h_send_msg(&t2, 4096, &[2; 100], &[], SendOpts::default())?;
    }
    barrier(h)
}

/// paranoid_one_shot (§2.7): an entry takes one message, refuses the next until re-armed,
/// then takes exactly one more.
pub fn one_shot(h: &mut Hamlyn) -> Result<()> {
    if h.rank() == 0 {
        let slot = h.create_slot(4096, 1, Mode::ParanoidOneShot)?;
        let mark = TaggedReceiver::new(h, 64)?;
        let mut b = h.ticket(slot, 0, 0, 4096)?.to_bytes().to_vec();
        b.extend_from_slice(&mark.ticket(h)?.to_bytes());
        h.send_boot(1, &b)?;
        let mut mark = mark;
        for round in 0..2u8 {
            mark.get_specific_tag(h, round as u32, LONG)?;
            // The tagged receiver's polling recorded other arrivals in the raw class (0).
            let e = h.poll_class(0)?.expect("the first message");
            assert_eq!((e.slot, e.meta_index), (slot, 0));
            assert_eq!(h.poll_class(0)?, None, "the second message is not notified");
            let st = h.stats();
            assert_eq!(st.refused_one_shot, 2 * (round as u64 + 1), "{st:?}");
            let a = h.area(slot)?;
            assert!(
                a[..3000].iter().all(|&x| x == 10 * round + 1),
                "round {round}: first message only"
            );
            h.rearm(slot, 0)?;
            h.send_boot(1, b"rearmed")?;
        }
    } else if h.rank() == 1 {
        let b = h.recv_boot(0)?;
        let t = Ticket::from_bytes(&b)?;
        let mark = Ticket::from_bytes(&b[44..])?;
        for round in 0..2u8 {
            // Two packets each (4 KiB packets): both refused in the second message.
            h.h_send_msg(
                &t,
                0,
                &[10 * round + 1; 3000],
                &[1; 20],
                SendOpts::default(),
            )?;
            h.h_send_msg(
                &t,
                0,
                &[10 * round + 2; 4080],
                &[1; 20],
                SendOpts::default(),
            )?;
            tagged_write(h, &mark, 0, &[0; 4], round as u32)?;
            assert_eq!(h.recv_boot(0)?, b"rearmed");
        }
    }
    barrier(h)
}

/// Notification queue wrap-around (§2.6): a queue of 8 entries, many laps of tagged remote
/// writes; the receiver's cursor and wrap flag find every entry, in order; a sender that
/// outruns the receiver is held back, nothing is lost.
pub fn nq_wrap(h: &mut Hamlyn) -> Result<()> {
    const N: u32 = 2000;
    if h.rank() == 0 {
        let mut rx = TaggedReceiver::new(h, 4096)?;
        h.send_boot(1, &rx.ticket(h)?.to_bytes())?;
        let mut flips = 0;
        let mut wrap = h.nq_cursor().1;
        for i in 0..N {
            let mut w = hamlyn::wait::Waiter::new();
            let tag = loop {
                if let Some(t) = rx.get_tag(h)? {
                    break t;
                }
                w.relax();
            };
            assert_eq!(tag, i, "tags in order on one link");
            let (_, f) = h.nq_cursor();
            if f != wrap {
                flips += 1;
                wrap = f;
            }
            let v = u32::from_le_bytes(
                rx.area(h)?[(i as usize % 64) * 4..][..4]
                    .try_into()
                    .unwrap(),
            );
            assert_eq!(v, i);
        }
        assert_eq!(flips, N / 8, "one wrap flag flip per lap");
        assert_eq!(h.stats().notifications, N as u64);
    } else if h.rank() == 1 {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        for i in 0..N {
            tagged_write(h, &t, (i as u64 % 64) * 4, &i.to_le_bytes(), i)?;
        }
    }
    barrier(h)
}

pub fn small_nq_config() -> Config {
    Config {
        notify_queue: 8,
        ring_cells: 8,
        ..Config::default()
    }
}

/// A stream of `total` bytes in order, every byte checked, records received in place and
/// released; the sender mixes small writes (coalesced) and large ones.
pub fn stream(h: &mut Hamlyn, total: usize) -> Result<()> {
    if h.rank() == 0 {
        let mut rx = StreamReceiver::new(h, 4 << 20, 16)?;
        h.send_boot(1, &rx.make_seed(h)?.to_bytes())?;
        let mut got = 0usize;
        let mut records = 0;
        while got < total {
            let r = rx.receive_block(h, LONG)?;
            let d = rx.data(h, &r)?;
            for (i, &b) in d.iter().enumerate() {
                let at = got + i;
                if b != byte_at(at) {
                    panic!("stream byte {at}: {b} != {}", byte_at(at));
                }
            }
            got += d.len();
            records += 1;
            rx.release(h, &r)?;
        }
        assert_eq!(got, total);
        assert!(records > 2);
    } else if h.rank() == 1 {
        let seed = Seed::from_bytes(&h.recv_boot(0)?)?;
        let mut tx = StreamSender::from_seed(h, &seed)?;
        let mut at = 0usize;
        let mut k = 0usize;
        let mut buf = Vec::new();
        while at < total {
            // 7 B, 100 B, 3000 B (coalesced), 1 MiB + 3 (as is), ...
            let n = [7, 100, 3000, (1 << 20) + 3, 65_536][k % 5].min(total - at);
            buf.clear();
            buf.extend((at..at + n).map(byte_at));
            tx.send(h, &buf)?;
            at += n;
            k += 1;
        }
        tx.close(h)?;
    }
    barrier(h)
}

fn byte_at(i: usize) -> u8 {
    (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8
}

/// A sender that dies mid-stream is reported to the receiver (after every record it sent),
/// and the receiver goes on serving another sender. Ranks: 0 receives, 1 dies, 2 sends
/// datagrams.
pub fn dead_sender(h: &mut Hamlyn) -> Result<()> {
    assert_eq!(h.size(), 3);
    if h.rank() == 0 {
        let mut rx = StreamReceiver::new(h, 1 << 20, 8)?;
        let mut dg = DatagramReceiver::new(h, 1024, Mode::Normal)?;
        h.send_boot(1, &rx.make_seed(h)?.to_bytes())?;
        h.send_boot(2, &dg.ticket(h)?.to_bytes())?;
        let mut n = 0;
        let err = loop {
            match rx.receive_block(h, LONG) {
                Ok(r) => {
                    assert_eq!(rx.data(h, &r)?, &[n as u8; 1000][..]);
                    n += 1;
                    rx.release(h, &r)?;
                }
                Err(e) => break e,
            }
        };
        assert!(matches!(err, Error::PeerLost(_)), "{err}");
        assert_eq!(n, 5, "every record sent before the death");
        // Unharmed: the other sender's datagrams still arrive.
        h.send_boot(2, b"go")?;
        for i in 0..3u8 {
            let d = dg.receive_block(h, LONG)?;
            assert_eq!(dg.data(h, &d)?, &[i; 33][..]);
            if i < 2 {
                h.send_boot(2, b"next")?;
            }
        }
        println!("receiver saw: {err}");
    } else if h.rank() == 1 {
        let seed = Seed::from_bytes(&h.recv_boot(0)?)?;
        let mut tx = StreamSender::from_seed(h, &seed)?;
        for i in 0..5u8 {
            tx.send(h, &[i; 1000])?;
            tx.flush(h)?;
        }
        vmmc::conformance::die();
    } else {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        assert_eq!(h.recv_boot(0)?, b"go");
        for i in 0..3u8 {
            send_datagram(h, &t, &[i; 33], None)?;
            // One datagram at a time: the receiver instance has no queue.
            if i < 2 {
                assert_eq!(h.recv_boot(0)?, b"next");
            }
        }
        return Ok(());
    }
    Ok(())
}

/// Receivers that know no sender in particular (a tagged receiver, a datagram receiver,
/// `h_recv_block`, a stream receiver whose sender never said hello) wait forever, with no
/// time-out, while their one possible sender dies: each delivers what the sender wrote
/// before it died, then reports the death instead of waiting for what can no longer come.
pub fn dead_sender_unknown_to_receiver(h: &mut Hamlyn) -> Result<()> {
    assert_eq!(h.size(), 2);
    if h.rank() == 0 {
        let mut trx = TaggedReceiver::new(h, 64)?;
        let mut dg = DatagramReceiver::new(h, 64, Mode::Normal)?;
        let mut rx = StreamReceiver::new(h, 4096, 4)?;
        h.send_boot(1, &trx.ticket(h)?.to_bytes())?;
        h.send_boot(1, &dg.ticket(h)?.to_bytes())?;
        // Its last words arrive; then nothing more can.
        trx.get_specific_tag(h, 7, None)?;
        assert_eq!(&trx.area(h)?[..12], b"last words 7");
        let lost = |r: Result<()>, what: &str| match r {
            Err(Error::PeerLost(p)) => {
                println!("{what}: peer {p}");
                Ok(())
            }
            r => Err(Error::Protocol(format!("{what}: {r:?}, not PeerLost"))),
        };
        lost(trx.get_specific_tag(h, 8, None), "get_specific_tag")?;
        let d = dg.receive_block(h, None)?;
        assert_eq!(dg.data(h, &d)?, b"bye!");
        lost(
            dg.receive_block(h, None).map(drop),
            "datagram receive_block",
        )?;
        lost(rx.receive_block(h, None).map(drop), "stream receive_block")?;
        lost(h.h_recv_block(None).map(drop), "h_recv_block")?;
        assert_eq!(trx.get_tag(h)?, None);
    } else {
        let tt = Ticket::from_bytes(&h.recv_boot(0)?)?;
        let dt = Ticket::from_bytes(&h.recv_boot(0)?)?;
        tagged_write(h, &tt, 0, b"last words 7", 7)?;
        send_datagram(h, &dt, b"bye!", None)?;
        h.flush()?;
        vmmc::conformance::die();
    }
    Ok(())
}

/// Packets forged by a sender straight into its own ring (which it may write: its pages are
/// mapped into it on shm) are refused by the receiving side with nothing written: a length
/// over the packet size, metadata over 60 bytes, an offset that overflows, a guessed key, a
/// metadata index beyond the area, fast mode with metadata. The link goes on working.
pub fn forged_packets(h: &mut Hamlyn) -> Result<()> {
    if h.rank() == 0 {
        let slot = h.create_slot(4096, 2, Mode::Normal)?;
        h.send_boot(1, &h.ticket(slot, 0, 0, 4096)?.to_bytes())?;
        let e = h.h_recv_block(LONG)?;
        assert_eq!(
            (e.slot, e.meta_index),
            (slot, 1),
            "only the good packet is notified"
        );
        let st = h.stats();
        assert_eq!(st.refused_malformed, 4, "{st:?}");
        assert_eq!(st.refused_bounds, 1, "{st:?}");
        assert_eq!(st.refused_key, 1, "{st:?}");
        assert_eq!(st.packets, 1, "{st:?}");
        let a = h.area(slot)?;
        assert!(a[..8].iter().all(|&b| b == 5), "the good packet's data");
        assert!(a[8..].iter().all(|&b| b == 0), "nothing else written");
        assert_eq!(h.meta(slot, 0)?.meta_len, 0, "no metadata written");
    } else if h.rank() == 1 {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        let good = Header {
            slot: t.slot,
            meta_index: 0,
            key: t.key,
            offset: 0,
            delta: 0,
            flags: F_FIRST,
            len: 8,
            meta_len: 0,
            word: 0,
            seq: 0,
        };
        let pay = [9u8; 8];
        h.forge_packet(
            0,
            Header {
                len: 1 << 30,
                ..good
            },
            &pay,
        )?;
        h.forge_packet(
            0,
            Header {
                meta_len: 61,
                len: 64,
                ..good
            },
            &[9; 64],
        )?;
        h.forge_packet(
            0,
            Header {
                offset: u64::MAX - 2,
                ..good
            },
            &pay,
        )?;
        h.forge_packet(
            0,
            Header {
                key: t.key.wrapping_add(1),
                ..good
            },
            &pay,
        )?;
        h.forge_packet(
            0,
            Header {
                meta_index: 2,
                ..good
            },
            &pay,
        )?;
        h.forge_packet(
            0,
            Header {
                meta_index: FAST_INDEX,
                meta_len: 4,
                ..good
            },
            &pay,
        )?;
        h.forge_packet(
            0,
            Header {
                meta_index: 1,
                ..good
            },
            &[5; 8],
        )?;
    }
    barrier(h)
}

/// How the back-pressure scenario's sender tells its receiver that it saw `WouldBlock`,
/// without a Hamlyn call at the receiver (which would take packets).
pub trait Stop {
    /// The sender posts its message count.
    fn post(&self, n: usize) -> Result<()>;
    /// The receiver waits for it.
    fn wait(&self, h: &Hamlyn) -> Result<usize>;
}

/// The nodes of the simulator are threads: a shared atomic.
impl Stop for &AtomicUsize {
    fn post(&self, n: usize) -> Result<()> {
        self.store(n, Ordering::Release);
        Ok(())
    }
    fn wait(&self, h: &Hamlyn) -> Result<usize> {
        let mut w = hamlyn::wait::Waiter::new();
        loop {
            match self.load(Ordering::Acquire) {
                0 => {
                    assert!(h.peer_alive(1), "the sender is gone");
                    w.relax();
                }
                n => return Ok(n),
            }
        }
    }
}

/// Between processes: a word of a VMMC buffer of rank 0's that rank 1 imports (beside
/// Hamlyn, on the same endpoint). Made by rank 0 before it sends its ticket, by rank 1
/// after it received it.
pub struct WordStop {
    word: Option<vmmc::Region>,
    proxy: Option<vmmc::Proxy>,
}

const STOP_BUF: u32 = 0x5354_4f50;

impl WordStop {
    pub fn new(h: &Hamlyn) -> Result<WordStop> {
        let ep = h.endpoint();
        if h.rank() == 0 {
            let r = ep.alloc(vmmc::page_size(), vmmc::MemKind::Shared)?;
            ep.export(STOP_BUF, &r, vmmc::ExportOptions::new())?;
            Ok(WordStop {
                word: Some(r),
                proxy: None,
            })
        } else {
            let p = ep.import(ep.proc_of(0)?, STOP_BUF)?;
            Ok(WordStop {
                word: None,
                proxy: Some(p),
            })
        }
    }
}

impl Stop for WordStop {
    fn post(&self, n: usize) -> Result<()> {
        let p = self.proxy.as_ref().expect("rank 1 posts");
        Ok(p.send(0, &(n as u32).to_ne_bytes())?)
    }
    fn wait(&self, h: &Hamlyn) -> Result<usize> {
        let r = self.word.as_ref().expect("rank 0 waits");
        let peer = h.endpoint().proc_of(1)?;
        let v = r.wait_u32(0, |v| v != 0, || h.endpoint().check_peer(peer))?;
        Ok(v as usize)
    }
}

/// The send terminus (§2.3, §2.8) with gather lists over send buffer areas: without blocking,
/// a sender whose receiver does not take packets fills its link, then its work queue, then
/// gets `WouldBlock`; the completion word then advances in order as the receiver drains, and
/// the send buffers come back to the application. The receiver takes no packet until the
/// sender saw `WouldBlock` and said so through `stop`.
pub fn terminus_back_pressure<'a>(
    h: &mut Hamlyn,
    make_stop: impl FnOnce(&Hamlyn) -> Result<Box<dyn Stop + 'a>>,
) -> Result<()> {
    let part = 3000;
    if h.rank() == 0 {
        let slot = h.create_slot(64 * 2 * part, 64, Mode::Normal)?;
        let stop = make_stop(h)?;
        h.send_boot(1, &h.range_ticket(slot, 0, 64)?.to_bytes())?;
        let n = stop.wait(h)?;
        let mut seen = 0;
        while seen < n {
            let e = h.h_recv_block(LONG)?;
            let i = e.meta_index as usize;
            let a = &h.area(slot)?[i * 2 * part..(i + 1) * 2 * part];
            assert!(a[..part] == pattern(1, part)[..], "message {i}, first part");
            assert!(
                a[part..] == pattern(2, part)[..],
                "message {i}, second part"
            );
            assert_eq!(h.meta(slot, i as u32)?.metadata(), &[i as u8; 3]);
            seen += 1;
        }
    } else if h.rank() == 1 {
        assert!(!h.config().block);
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        let stop = make_stop(h)?;
        h.set_send_buffer(0, pattern(1, part).into())?;
        h.set_send_buffer(1, pattern(2, 2 * part).into())?;
        let list = [
            Gather {
                tag: 0,
                offset: 0,
                len: part,
            },
            Gather {
                tag: 1,
                offset: 0,
                len: part,
            },
        ];
        let mut handles = Vec::new();
        let err = loop {
            let i = handles.len() as u32;
            let opts = SendOpts {
                meta_index: Some(i),
                ..Default::default()
            };
            match h.h_send_gather(
                &t,
                (i as usize * 2 * part) as u64,
                &list,
                &[i as u8; 3],
                opts,
            ) {
                Ok(hd) => handles.push(hd),
                Err(e) => break e,
            }
            assert!(handles.len() < 64, "the terminus must push back");
        };
        assert!(matches!(err, Error::WouldBlock(_)), "{err}");
        // Two messages of two packets fill the 4-cell link; three more fill the queue.
        assert_eq!(
            handles.len(),
            2 + h.config().work_queue,
            "queue full behind a full link"
        );
        assert!(!h.is_sent(handles[2]) && h.is_sent(handles[1]));
        assert_eq!(h.completed(), 2);
        stop.post(handles.len())?;
        let mut w = hamlyn::wait::Waiter::new();
        while !handles.iter().all(|&hd| h.is_sent(hd)) {
            h.pump()?;
            w.relax();
        }
        assert_eq!(h.completed(), handles.last().unwrap().0 + 1);
        let mut b = h.take_send_buffer(0).expect("tag 0");
        assert!(
            Arc::get_mut(&mut b).is_some(),
            "the terminus let go of the send buffer"
        );
    }
    barrier(h)
}

pub fn back_pressure_config() -> Config {
    Config {
        block: false,
        ring_cells: 4,
        work_queue: 3,
        ..Config::default()
    }
}

/// Blocking wake-up (§2.6): a receiver asleep in `h_recv_block` is woken by one notification
/// per sleep from its sender (coalesced), and gets every message.
pub fn wakeup(h: &mut Hamlyn) -> Result<()> {
    assert!(h.config().wakeup);
    const N: usize = 5;
    if h.rank() == 0 {
        let slot = h.create_slot(64, 1, Mode::Normal)?;
        h.send_boot(1, &h.ticket(slot, 0, 0, 64)?.to_bytes())?;
        assert_eq!(h.recv_boot(1)?, b"ready");
        for i in 0..N {
            let e = h.h_recv_block(LONG)?;
            assert_eq!(e.slot, slot);
            assert_eq!(h.area(slot)?[4 * i], i as u8);
        }
        let st = h.stats();
        assert!(st.sleeps > 0, "{st:?}");
        assert!(h.wakeups_received() > 0, "woken by notifications: {st:?}");
        println!(
            "receiver slept {} times, woken {} times",
            st.sleeps,
            h.wakeups_received()
        );
    } else if h.rank() == 1 {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        h.send_boot(0, b"ready")?;
        for i in 0..N {
            // Pacing, not synchronisation: let the receiver fall asleep.
            std::thread::sleep(Duration::from_millis(30));
            h.h_send_msg(&t, 4 * i as u64, &[i as u8; 4], &[], SendOpts::default())?;
        }
        let sent = h.stats().wakeups_sent;
        assert!(
            (1..=N as u64).contains(&sent),
            "one notification per sleep at most: {sent}"
        );
    }
    barrier(h)
}

/// Stream flow control (§2.8, §3.3): a sender that runs out of tickets (metadata entries the
/// receiver has not released) is held back (`WouldBlock` without blocking), keeps its data,
/// and goes on once the receiver releases; every record arrives once, in order.
pub fn stream_out_of_tickets(h: &mut Hamlyn) -> Result<()> {
    assert!(!h.config().block);
    if h.rank() == 0 {
        let mut rx = StreamReceiver::new(h, 1 << 16, 4)?;
        h.send_boot(1, &rx.make_seed(h)?.to_bytes())?;
        assert_eq!(h.recv_boot(1)?, b"full");
        for i in 0..5u8 {
            let r = rx.receive_block(h, LONG)?;
            assert_eq!(rx.data(h, &r)?, &[i; 100][..], "record {i}");
            rx.release(h, &r)?;
        }
        assert!(matches!(rx.receive_block(h, LONG), Err(Error::Closed)));
    } else if h.rank() == 1 {
        let seed = Seed::from_bytes(&h.recv_boot(0)?)?;
        let mut tx = StreamSender::from_seed(h, &seed)?;
        // The hello and three records take the four tickets.
        for i in 0..3u8 {
            tx.send(h, &[i; 100])?;
            tx.flush(h)?;
        }
        tx.send(h, &[3; 100])?;
        let e = tx.flush(h).unwrap_err();
        assert!(matches!(e, Error::WouldBlock(_)), "{e}");
        send_boot(h, 0, b"full")?;
        let mut w = hamlyn::wait::Waiter::new();
        let retry = |h: &mut Hamlyn, tx: &mut StreamSender, w: &mut hamlyn::wait::Waiter| loop {
            match tx.flush(h) {
                Err(Error::WouldBlock(_)) => {
                    h.poll_links().expect("poll");
                    w.relax();
                }
                r => return r,
            }
        };
        retry(h, &mut tx, &mut w)?;
        tx.send(h, &[4; 100])?;
        retry(h, &mut tx, &mut w)?;
        loop {
            match tx.close(h) {
                Ok(()) => break,
                Err(Error::WouldBlock(_)) => {
                    h.poll_links()?;
                    w.relax();
                }
                Err(e) => return Err(e),
            }
        }
    }
    barrier(h)
}

pub fn non_blocking_config() -> Config {
    Config {
        block: false,
        ..Config::default()
    }
}

/// The stream receiver's buffer grows as needed (§3.3): an application that holds its
/// records makes the receiver allocate larger buffers, whose tickets reach the sender, which
/// goes on there instead of blocking; records stay valid where they arrived.
pub fn stream_grows(h: &mut Hamlyn) -> Result<()> {
    const N: u8 = 40;
    let rec = 8 << 10;
    if h.rank() == 0 {
        let mut rx = StreamReceiver::growing(h, 64 << 10, 1 << 20, 64)?;
        h.send_boot(1, &rx.make_seed(h)?.to_bytes())?;
        let mut held = Vec::new();
        let mut got = 0;
        while got < N as usize * rec {
            let r = rx.receive_block(h, LONG)?;
            got += r.len;
            held.push(r);
        }
        assert!(rx.grows() >= 2, "grew {} times", rx.grows());
        // Every record is intact where it arrived (nothing was released, nothing reused).
        let mut all = Vec::new();
        for r in &held {
            all.extend_from_slice(rx.data(h, r)?);
        }
        let want: Vec<u8> = (0..N).flat_map(|i| pattern(i as u32, rec)).collect();
        assert!(
            all == want,
            "the stream's bytes across {} buffers",
            rx.grows() + 1
        );
        rx.release(h, held.last().unwrap())?;
        assert!(matches!(rx.receive_block(h, LONG), Err(Error::Closed)));
    } else if h.rank() == 1 {
        let seed = Seed::from_bytes(&h.recv_boot(0)?)?;
        let mut tx = StreamSender::from_seed(h, &seed)?;
        for i in 0..N {
            tx.send(h, &pattern(i as u32, rec))?;
        }
        tx.close(h)?;
    }
    barrier(h)
}

/// Tagged remote write's short receive path (fast mode, §2.7) refuses what the long one
/// refuses: a wrong key, a write beyond the slot, a revoked key write nothing and are
/// counted; tags come back in any order; an arrival for another receiver's class waits in
/// that class.
pub fn tagged_protection(h: &mut Hamlyn) -> Result<()> {
    if h.rank() == 0 {
        let mut a = TaggedReceiver::new(h, 256)?;
        let mut b = TaggedReceiver::new(h, 64)?;
        let mut tickets = a.ticket(h)?.to_bytes().to_vec();
        tickets.extend_from_slice(&b.ticket(h)?.to_bytes());
        h.send_boot(1, &tickets)?;
        // Round 1 (rank 1 sent a wrong key, a write beyond the slot, tags 1 and 2, then 7
        // to b and 8 to a): asked first for 2, then 8, then 7, then 1.
        a.get_specific_tag(h, 2, LONG)?;
        a.get_specific_tag(h, 8, LONG)?;
        b.get_specific_tag(h, 7, LONG)?;
        a.get_specific_tag(h, 1, LONG)?;
        let st = h.stats();
        assert_eq!(st.refused_key, 1, "{st:?}");
        assert_eq!(st.refused_bounds, 1, "{st:?}");
        assert_eq!(st.packets, 4, "{st:?}");
        assert_eq!(st.notifications, 4, "{st:?}");
        let area = a.area(h)?;
        assert!(area[..16].iter().all(|&x| x == 1));
        assert!(area[16..32].iter().all(|&x| x == 2));
        assert!(area[32..64].iter().all(|&x| x == 8));
        assert!(area[64..].iter().all(|&x| x == 0), "nothing else written");
        assert!(b.area(h)?[..4].iter().all(|&x| x == 7));
        // Round 2: a's key is revoked; rank 1 writes with the old ticket, then the new.
        h.revoke_slot_key(a.slot())?;
        h.send_boot(1, &a.ticket(h)?.to_bytes())?;
        a.get_specific_tag(h, 4, LONG)?;
        assert_eq!(a.get_tag(h)?, None);
        let st = h.stats();
        assert_eq!(st.refused_revoked, 1, "{st:?}");
        let area = a.area(h)?;
        assert!(area[64..80].iter().all(|&x| x == 0), "the revoked write");
        assert!(area[80..96].iter().all(|&x| x == 4));
    } else if h.rank() == 1 {
        let b = h.recv_boot(0)?;
        let ta = Ticket::from_bytes(&b)?;
        let tb = Ticket::from_bytes(&b[44..])?;
        // The sending library refuses a write outside the ticket's window; a widened ticket
        // gets the packet out, and the receiving side refuses it.
        let r = tagged_write(h, &ta, 250, &[9; 16], 101);
        assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
        let bad_key = Ticket {
            key: ta.key ^ 1,
            ..ta
        };
        tagged_write(h, &bad_key, 0, &[9; 16], 100)?;
        tagged_write(
            h,
            &Ticket {
                bound: u64::MAX,
                ..ta
            },
            250,
            &[9; 16],
            101,
        )?;
        tagged_write(h, &ta, 0, &[1; 16], 1)?;
        tagged_write(h, &ta, 16, &[2; 16], 2)?;
        tagged_write(h, &tb, 0, &[7; 4], 7)?;
        tagged_write(h, &ta, 32, &[8; 32], 8)?;
        let new = Ticket::from_bytes(&h.recv_boot(0)?)?;
        tagged_write(h, &ta, 64, &[3; 16], 3)?;
        tagged_write(h, &new, 80, &[4; 16], 4)?;
    }
    barrier(h)
}

/// `get_specific_tag` with a timeout: it times out when its tag does not come, whether
/// nothing arrives or other tags do (those stay queued), and the tag that comes later is
/// still taken.
pub fn tagged_timeout(h: &mut Hamlyn) -> Result<()> {
    let short = Some(Duration::from_millis(50));
    if h.rank() == 0 {
        let mut r = TaggedReceiver::new(h, 64)?;
        h.send_boot(1, &r.ticket(h)?.to_bytes())?;
        assert!(matches!(
            r.get_specific_tag(h, 1, short),
            Err(Error::Timeout)
        ));
        send_boot(h, 1, b"2")?;
        assert!(matches!(
            r.get_specific_tag(h, 1, short),
            Err(Error::Timeout)
        ));
        r.get_specific_tag(h, 2, LONG)?;
        send_boot(h, 1, b"1")?;
        r.get_specific_tag(h, 1, LONG)?;
        assert_eq!(r.get_tag(h)?, None);
        assert_eq!(&r.area(h)?[..8], &[2, 2, 2, 2, 1, 1, 1, 1]);
    } else if h.rank() == 1 {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        assert_eq!(h.recv_boot(0)?, b"2");
        tagged_write(h, &t, 0, &[2; 4], 2)?;
        assert_eq!(h.recv_boot(0)?, b"1");
        tagged_write(h, &t, 4, &[1; 4], 1)?;
    }
    barrier(h)
}

/// Tagged writes of every length from 1 to 300 bytes (the one-line path up to 16, a short
/// packet staged whole up to 272, a packet of pieces above) at offsets of every alignment:
/// each lands exactly, nothing around it is written, and tags asked for in reverse order all
/// come back.
pub fn tagged_lengths(h: &mut Hamlyn) -> Result<()> {
    const N: usize = 300;
    // Apart by at least 2 bytes, which must stay zero.
    let at = |len: usize| (len * (len + 1) / 2 + 4 * len + len % 4) as u64;
    if h.rank() == 0 {
        let mut r = TaggedReceiver::new(h, 48 << 10)?;
        h.send_boot(1, &r.ticket(h)?.to_bytes())?;
        for len in (1..=N).rev() {
            r.get_specific_tag(h, len as u32, LONG)?;
        }
        assert_eq!(r.get_tag(h)?, None);
        let area = r.area(h)?;
        let mut expect = vec![0u8; area.len()];
        for len in 1..=N {
            let off = at(len) as usize;
            expect[off..off + len].copy_from_slice(&pattern(len as u32, len));
        }
        assert!(
            area == &expect[..],
            "every write exactly in place, nothing else"
        );
        assert_eq!(h.stats().refused(), 0);
    } else if h.rank() == 1 {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        for len in 1..=N {
            tagged_write(h, &t, at(len), &pattern(len as u32, len), len as u32)?;
        }
    }
    barrier(h)
}

/// Packets forged at random straight into the forger's ring: any slot, key, metadata index,
/// offset, length, metadata length, delta, flags (all but the bootstrap channel's) and
/// payload, from keys the forger holds (a normal slot's, a paranoid-one-shot entry's, a
/// revoked one, a tagged receiver's) and keys it guesses. The receiving side never panics, takes every packet and
/// counts each exactly once (accepted or refused), writes nothing into a slot whose key the
/// forger never held nor into its metadata, and the link goes on working: the message sent
/// after them arrives intact. `FORGED` packets; the seed is printed (`HAMLYN_FUZZ_SEED`
/// replays one).
pub fn fuzzed_packets(h: &mut Hamlyn) -> Result<()> {
    const FORGED: usize = 3000;
    const MARK: [u8; 16] = *b"the last message";
    if h.rank() == 0 {
        let a = h.create_slot(4096, 4, Mode::Normal)?;
        let p = h.create_slot(4096, 4, Mode::ParanoidOneShot)?;
        h.set_entry_bounds(p, 1, 1024, 2048)?;
        h.rearm(p, 1)?;
        let victim = h.create_slot(4096, 4, Mode::Normal)?;
        let revoked = h.create_slot(4096, 4, Mode::Normal)?;
        let last = h.create_slot(64, 1, Mode::Normal)?;
        let trx = TaggedReceiver::new(h, 256)?;
        let mut tickets = Vec::new();
        for t in [
            h.ticket(a, 0, 0, 4096)?,
            h.ticket(p, 1, 1024, 2048)?,
            h.ticket(revoked, 0, 0, 4096)?,
            trx.ticket(h)?,
            h.ticket(last, 0, 0, 64)?,
            // The victim's slot number with a key that is not its own.
            Ticket {
                slot: victim,
                key: 0,
                ..h.ticket(a, 0, 0, 4096)?
            },
        ] {
            tickets.extend_from_slice(&t.to_bytes());
        }
        h.revoke_slot_key(revoked)?;
        let before: Vec<MetaEntry> = (0..4).map(|i| *h.meta(victim, i).unwrap()).collect();
        send_boot(h, 1, &tickets)?;
        // Every notification up to the last message (the forged packets come first in the
        // link, so all of them have been taken when it is notified).
        let mut notified = 0u64;
        loop {
            let e = h.h_recv_block(LONG)?;
            notified += 1;
            if e.slot == last {
                break;
            }
        }
        let st = h.stats();
        assert_eq!(
            st.packets + st.refused(),
            FORGED as u64 + 1,
            "every packet counted once: {st:?}"
        );
        assert!(notified <= st.notifications, "{st:?}");
        assert!(st.refused_key > 0 && st.refused_malformed > 0 && st.refused_bounds > 0);
        assert!(
            st.packets > 1,
            "some forged packets carried a key they held: {st:?}"
        );
        println!("fuzzed_packets: {st:?}");
        for s in [victim, revoked] {
            assert!(h.area(s)?.iter().all(|&b| b == 0), "slot {s} written");
            for (i, m) in before.iter().enumerate() {
                let now = h.meta(s, i as u32)?;
                assert_eq!(
                    (now.user, now.acc, now.meta_len, now.bytes),
                    (m.user, m.acc, m.meta_len, m.bytes),
                    "slot {s} entry {i}"
                );
            }
        }
        assert_eq!(&h.area(last)?[..16], &MARK);
    } else if h.rank() == 1 {
        let seed: u64 = std::env::var("HAMLYN_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        println!("fuzzed_packets: HAMLYN_FUZZ_SEED={seed}");
        let b = h.recv_boot(0)?;
        let t: Vec<Ticket> = b
            .chunks(TICKET_LEN)
            .map(Ticket::from_bytes)
            .collect::<Result<_>>()?;
        let (last, held) = (t[4], [t[0], t[1], t[2], t[3], t[5]]);
        let mut rng = seed;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let packet = h.config().packet_size;
        for _ in 0..FORGED {
            let r = next();
            let base = held[(r % 5) as usize];
            // The first value (one a well-behaved sender would use) half of the time.
            let pick = |r: u64, v: &[u64]| {
                if r & 1 == 0 {
                    v[0]
                } else {
                    v[((r >> 1) % v.len() as u64) as usize]
                }
            };
            let plen = (next() % (packet as u64 + 1)) as usize;
            let plen = if next() % 2 == 0 { plen % 64 } else { plen };
            let payload: Vec<u8> = (0..plen).map(|i| (r >> (i % 8)) as u8 | 1).collect();
            let hdr = Header {
                slot: pick(next(), &[base.slot as u64, next() % 8, next()]) as u32,
                meta_index: pick(
                    next(),
                    &[
                        base.meta_index as u64,
                        next() % 6,
                        FAST_INDEX as u64,
                        next(),
                    ],
                ) as u32,
                key: pick(next(), &[base.key, next(), 0]),
                offset: pick(
                    next(),
                    &[
                        next() % 4096,
                        1024 + next() % 1024,
                        4096 - plen as u64,
                        4096,
                        u64::MAX - next() % 8,
                        next(),
                    ],
                ),
                delta: pick(next(), &[0, 1, u32::MAX as u64, next()]) as u32,
                flags: (next() as u32) & !F_BOOT,
                len: pick(next(), &[plen as u64, next() % 8192, u32::MAX as u64]) as u32,
                meta_len: pick(next(), &[0, next() % 61, 61, next()]) as u32,
                word: next() as u32,
                seq: 0,
            };
            h.forge_packet(0, hdr, &payload)?;
        }
        let mut m = MARK.to_vec();
        m.resize(64, 0);
        h.h_send_msg(&last, 0, &m, &[], SendOpts::default())?;
    }
    barrier(h)
}

/// Bad input to every public call gets an error, never a panic, and harms nothing: bad
/// configurations, tickets outside their slot, messages outside their ticket's window or past
/// the end of the address space, a group value below the packet count, seeds that are not a
/// stream receiver's, a datagram or record the receiver never returned, a time-out too long
/// to add to the clock; `h_recv_block` with a silent peer times out. The link works after.
pub fn bad_input(h: &mut Hamlyn) -> Result<()> {
    assert_eq!(h.size(), 2);
    for cfg in [
        Config {
            packet_size: 63,
            ..Config::default()
        },
        Config {
            ring_cells: 1,
            ..Config::default()
        },
        Config {
            work_queue: 0,
            ..Config::default()
        },
        Config {
            notify_queue: 1,
            ..Config::default()
        },
    ] {
        let what = format!("{cfg:?}");
        let r = Hamlyn::new(h.endpoint().clone(), cfg);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}");
    }
    if h.rank() == 0 {
        let slot = h.create_slot(4096, 2, Mode::Normal)?;
        let bad = [
            h.ticket(slot, 0, 100, 99),
            h.ticket(slot, 0, 0, 4097),
            h.ticket(slot, 2, 0, 4096),
            h.ticket(99, 0, 0, 64),
        ];
        assert!(bad.iter().all(Result::is_err), "{bad:?}");
        let t = h.ticket(slot, 0, 1024, 2048)?;
        let mut rx = StreamReceiver::new(h, 4096, 4)?;
        let dg = DatagramReceiver::new(h, 64, Mode::Normal)?;
        let mut trx = TaggedReceiver::new(h, 64)?;
        let mut b = t.to_bytes().to_vec();
        b.extend_from_slice(&rx.make_seed(h)?.to_bytes());
        h.send_boot(1, &b)?;
        // The peer is alive and silent: a bounded wait ends in time.
        let r = h.h_recv_block(Some(Duration::from_millis(20)));
        assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
        send_boot(h, 1, b"go")?;
        // Its one good message arrives, alone.
        let e = h.h_recv_block(LONG)?;
        assert_eq!((e.slot, e.meta_index), (slot, 0));
        assert_eq!(h.meta(slot, 0)?.bytes, 1024);
        assert!(h.area(slot)?[1024..2048].iter().all(|&x| x == 5));
        assert!(h.area(slot)?[..1024].iter().all(|&x| x == 0));
        assert!(h.area(slot)?[2048..].iter().all(|&x| x == 0));
        let st = h.stats();
        assert_eq!(st.notifications, 1, "{st:?}");
        // Handed-out things the receivers never returned.
        let r = rx.release(
            h,
            &Record {
                id: u64::MAX,
                slot,
                offset: 0,
                len: 1,
            },
        );
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        let forged = Datagram {
            offset: usize::MAX - 3,
            len: 8,
            reply: None,
            from: 1,
        };
        assert!(dg.data(h, &forged).is_err());
        // A time-out too long to add to the clock is a wait without one.
        h.send_boot(1, &trx.ticket(h)?.to_bytes())?;
        trx.get_specific_tag(h, 9, Some(Duration::MAX))?;
        assert_eq!(&trx.area(h)?[..4], &[9; 4]);
    } else {
        let b = h.recv_boot(0)?;
        let t = Ticket::from_bytes(&b)?;
        let seed = Seed::from_bytes(&b[TICKET_LEN..])?;
        let o = SendOpts::default();
        // Outside the window, before it, past the end of the address space.
        for (off, len) in [(1024, 1025), (1000, 100), (2048, 1), (u64::MAX - 3, 8)] {
            let r = h.h_send_msg(&t, off, &vec![9; len], &[], o);
            assert!(matches!(r, Err(Error::TooLarge(_))), "{off} {len}: {r:?}");
        }
        let r = h.h_send_fast(&t, 2040, &[9; 16], 1);
        assert!(matches!(r, Err(Error::TooLarge(_))), "{r:?}");
        // A group value below the message's packet count (3 packets, value 2).
        let p = h.config().packet_size;
        let r = h.h_send_msg(
            &Ticket {
                base: 0,
                bound: u64::MAX,
                ..t
            },
            0,
            &vec![9; 2 * p + 1],
            &[],
            SendOpts { counter: 2, ..o },
        );
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        // Seeds that no stream receiver made.
        let bad = [
            Seed { entries: 1, ..seed },
            Seed {
                ticket: Ticket {
                    bound: 0,
                    ..seed.ticket
                },
                ..seed
            },
            Seed {
                ticket: Ticket {
                    base: 64,
                    ..seed.ticket
                },
                ..seed
            },
            Seed {
                ticket: Ticket {
                    meta_index: u32::MAX - 1,
                    ..seed.ticket
                },
                ..seed
            },
            Seed {
                entries: 1 << 17,
                ..seed
            },
        ];
        for s in bad {
            let r = StreamSender::from_seed(h, &s);
            assert!(matches!(r, Err(Error::Protocol(_))), "{s:?}");
        }
        assert_eq!(h.recv_boot(0)?, b"go");
        h.h_send_msg(&t, 1024, &[5; 1024], &[], o)?;
        let tt = Ticket::from_bytes(&h.recv_boot(0)?)?;
        tagged_write(h, &tt, 0, &[9; 4], 9)?;
    }
    barrier(h)
}

pub fn tiny_ring_non_blocking_config() -> Config {
    Config {
        block: false,
        ring_cells: 4,
        ..Config::default()
    }
}

/// Without blocking (§2.8), a long message larger than the link's ring: `h_send_msg` either
/// refuses it whole (`WouldBlock`, nothing sent) or takes it, queueing what the ring cannot
/// hold yet; a retry after `WouldBlock` never sends a packet twice. Each message is notified
/// once, after its last packet, with its bytes, and the completion word counts it.
pub fn non_blocking_long_send(h: &mut Hamlyn) -> Result<()> {
    const LEN: usize = 20_000;
    const N: usize = 3;
    assert!(!h.config().block);
    if h.rank() == 0 {
        let slot = h.create_slot(N * 20_480, 1, Mode::Normal)?;
        send_boot(h, 1, &h.ticket(slot, 0, 0, (N * 20_480) as u64)?.to_bytes())?;
        for k in 0..N {
            let e = h.h_recv_block(LONG)?;
            assert_eq!((e.slot, e.meta_index), (slot, 0));
            let m = h.meta(slot, 0)?;
            assert_eq!(m.metadata(), &[k as u8; 8]);
            assert_eq!(m.bytes, LEN as u64, "message {k}");
            let at = k * 20_480;
            let a = h.area(slot)?;
            assert!(
                (0..LEN).all(|i| a[at + i] == (i as u8).wrapping_add(k as u8)),
                "message {k}'s data"
            );
        }
        assert_eq!(h.stats().notifications, N as u64);
        assert_eq!(h.stats().packets, (N * LEN.div_ceil(4096)) as u64);
    } else {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        let mut refused = 0;
        let mut last = None;
        for k in 0..N {
            let data: Vec<u8> = (0..LEN).map(|i| (i as u8).wrapping_add(k as u8)).collect();
            let mut w = hamlyn::wait::Waiter::new();
            let hd = loop {
                match h.h_send_msg(
                    &t,
                    (k * 20_480) as u64,
                    &data,
                    &[k as u8; 8],
                    SendOpts::default(),
                ) {
                    Ok(hd) => break hd,
                    Err(Error::WouldBlock(_)) => {
                        refused += 1;
                        h.pump()?;
                        h.poll_links()?;
                        w.relax();
                    }
                    Err(e) => return Err(e),
                }
            };
            last = Some(hd);
        }
        let last = last.expect("a handle");
        let mut w = hamlyn::wait::Waiter::new();
        while !h.is_sent(last) {
            h.pump()?;
            h.poll_links()?;
            w.relax();
        }
        assert_eq!(h.completed(), N as u64);
        println!("non_blocking_long_send: {refused} refusals");
    }
    barrier(h)
}

/// A stream into a receiver buffer smaller than the sender would coalesce (4 KiB), with
/// writes of every kind of size, each flushed: every byte arrives in order and the sender
/// never waits for room that cannot come.
pub fn small_stream_buffer(h: &mut Hamlyn) -> Result<()> {
    const SIZES: [usize; 9] = [2000, 3000, 1, 4096, 10_000, 3, 1500, 2500, 1024];
    let expect: Vec<u8> = SIZES
        .iter()
        .enumerate()
        .flat_map(|(k, &n)| (0..n).map(move |i| (i as u8) ^ (k as u8).wrapping_mul(37)))
        .collect();
    if h.rank() == 0 {
        let mut rx = StreamReceiver::new(h, 4096, 8)?;
        send_boot(h, 1, &rx.make_seed(h)?.to_bytes())?;
        let mut got = Vec::new();
        loop {
            let r = match rx.receive_block(h, LONG) {
                Ok(r) => r,
                Err(Error::Closed) => break,
                Err(e) => return Err(e),
            };
            got.extend_from_slice(rx.data(h, &r)?);
            rx.release(h, &r)?;
        }
        assert_eq!(got.len(), expect.len());
        assert!(got == expect, "the stream's bytes");
    } else {
        let seed = Seed::from_bytes(&h.recv_boot(0)?)?;
        let mut tx = StreamSender::from_seed(h, &seed)?;
        let mut at = 0;
        for n in SIZES {
            tx.send(h, &expect[at..at + n])?;
            tx.flush(h)?;
            at += n;
        }
        tx.close(h)?;
    }
    barrier(h)
}

/// A full notification queue (§2.6) stops the receiving side from taking packets (they wait
/// in the link, and the sender behind them) instead of overrunning an entry: with a queue of
/// 8 and 20 messages sent, polling the links fills it to 8 and no further; reading then
/// delivers all 20 in order, each with its data. A bootstrap message at the head of the
/// link is still taken (it needs no entry); one behind a message is refused with
/// `WouldBlock` rather than waited for while the queue stays full.
pub fn nq_back_pressure(h: &mut Hamlyn) -> Result<()> {
    const N: usize = 20;
    let cap = h.config().notify_queue;
    assert!(cap < N);
    if h.rank() == 0 {
        let slot = h.create_slot(N * 64, N, Mode::Normal)?;
        send_boot(h, 1, &h.ticket(slot, 0, 0, (N * 64) as u64)?.to_bytes())?;
        let mut w = hamlyn::wait::Waiter::new();
        while h.stats().notifications < cap as u64 {
            h.poll_links()?;
            w.relax();
        }
        // Full; the bootstrap message sent after the 8th message is taken all the same.
        assert_eq!(h.recv_boot(1)?, b"x");
        // Behind it, messages: further looks at the links take nothing, and a wait for the
        // next bootstrap message would never end.
        for _ in 0..1000 {
            assert_eq!(h.poll_links()?, 0);
        }
        assert_eq!(h.stats().notifications, cap as u64);
        let r = h.recv_boot(1);
        assert!(matches!(r, Err(Error::WouldBlock(_))), "{r:?}");
        for k in 0..N {
            let e = h.h_recv_block(LONG)?;
            assert_eq!((e.slot, e.meta_index), (slot, k as u32), "in order");
            assert_eq!(h.meta(slot, k as u32)?.metadata(), &[k as u8]);
        }
        assert!((0..N).all(|k| h.area(slot).unwrap()[k * 64..][..64] == [k as u8; 64]));
        assert_eq!(h.h_recv()?, None);
        assert_eq!(h.recv_boot(1)?, b"done");
    } else {
        let t = Ticket::from_bytes(&h.recv_boot(0)?)?;
        for k in 0..N {
            if k == cap {
                h.send_boot(0, b"x")?;
            }
            h.h_send_msg(
                &t,
                (k * 64) as u64,
                &[k as u8; 64],
                &[k as u8],
                SendOpts {
                    meta_index: Some(k as u32),
                    ..SendOpts::default()
                },
            )?;
        }
        h.send_boot(0, b"done")?;
        h.flush()?;
    }
    barrier(h)
}
