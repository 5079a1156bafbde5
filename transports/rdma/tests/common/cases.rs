//! The transport's checks of what an HCA enforces, as cases that run as jobs of real
//! processes (on the stand-in in `tests/verbs.rs`, on a real device in `tests/device.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use vmmc::conformance::Sync;
use vmmc::{Endpoint, Error, ExportOptions, MemKind, Region};
use vmmc_rdma::abi::*;
use vmmc_rdma::verbs::{Device, QpAddr};
use vmmc_rdma::RdmaTransport;

/// Names the case a re-executed test binary runs as one rank.
pub const CASE: &str = "VMMC_RDMA_TEST_CASE";
pub type Check = Result<(), String>;

macro_rules! ensure {
    ($c:expr, $($m:tt)+) => {
        if !$c {
            return Err(format!("line {}: {}", line!(), format!($($m)+)));
        }
    };
}

fn e<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> Result<T, String> {
    r.map_err(|x| format!("{what}: {x}"))
}

/// A case: its name, its number of processes, the rank that dies (if any), its body.
pub struct Case {
    pub name: &'static str,
    pub procs: usize,
    pub dies: Option<usize>,
    pub run: fn(&Endpoint, &RdmaTransport) -> Check,
}

pub const CASES: &[Case] = &[
    Case {
        name: "revoked_key",
        procs: 2,
        dies: None,
        run: revoked_key,
    },
    Case {
        name: "write_beyond_registration",
        procs: 2,
        dies: None,
        run: beyond_registration,
    },
    Case {
        name: "peer_dies",
        procs: 2,
        dies: Some(1),
        run: peer_dies,
    },
    Case {
        name: "data_moves_by_rdma",
        procs: 2,
        dies: None,
        run: data_by_rdma,
    },
    Case {
        name: "notifications_by_immediate",
        procs: 2,
        dies: None,
        run: notifications_by_immediate,
    },
    Case {
        name: "unexport_during_notifications",
        procs: 2,
        dies: None,
        run: unexport_during_notifications,
    },
    Case {
        name: "access_flags",
        procs: 1,
        dies: None,
        run: access_flags,
    },
];

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len / 4)
        .flat_map(|i| (seed.wrapping_mul(0x9e37_79b9) ^ i as u32).to_ne_bytes())
        .collect()
}

/// A write with a key that unexport revoked fails with `Unexported` (the HCA's remote access
/// error) and writes nothing, also once the registration's slot serves a new export; the pair
/// keeps working (its queue pair is in error, writes take the control connection).
fn revoked_key(ep: &Endpoint, t: &RdmaTransport) -> Check {
    let mut sync = Sync::new(ep)?;
    let first = pattern(1, 4096);
    if ep.rank() == 1 {
        let r = e(Region::alloc(4096, MemKind::Private), "alloc")?;
        e(ep.export(7, &r, ExportOptions::new()), "export")?;
        sync.barrier()?; // 1: exported
        sync.barrier()?; // 2: rank 0 wrote with the live key
        let mut got = vec![0u8; 4096];
        e(r.read(0, &mut got), "read")?;
        ensure!(got == first, "the write with the live key landed");
        e(ep.unexport(7), "unexport")?;
        let r2 = e(Region::alloc(4096, MemKind::Private), "alloc")?;
        e(ep.export(8, &r2, ExportOptions::new()), "export again")?;
        sync.barrier()?; // 3: revoked, and a new registration made
        sync.barrier()?; // 4: rank 0 tried the old key
        e(r.read(0, &mut got), "read")?;
        ensure!(got == first, "nothing written after unexport");
        e(r2.read(0, &mut got), "read")?;
        ensure!(
            got.iter().all(|&b| b == 0),
            "the new registration got nothing"
        );
    } else {
        sync.barrier()?;
        let (key, len) = e(t.key_of(1, 7), "key from the trusted party")?;
        ensure!(len == 4096, "length {len}");
        e(t.raw_write(1, key, 0, &first), "write with the live key")?;
        sync.barrier()?;
        sync.barrier()?;
        let r = t.raw_write(1, key, 0, &pattern(2, 4096));
        ensure!(
            matches!(r, Err(Error::Unexported)),
            "write with a revoked key: {r:?}"
        );
        ensure!(t.lane_broken(1), "the queue pair is in error after it");
        sync.barrier()?;
    }
    // Both ends' queue pairs are in error now: the barrier's writes take the control
    // connection.
    sync.barrier()?;
    Ok(())
}

/// A write that runs past the end of a registration fails as a whole (remote access error)
/// and writes nothing, neither inside the registration nor after it.
fn beyond_registration(ep: &Endpoint, t: &RdmaTransport) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let big = e(Region::alloc(8192, MemKind::Private), "alloc")?;
        // SAFETY: the first half of `big`, which outlives this region (both live until the
        // end of this function, and the export ends with the endpoint).
        let half = unsafe { Region::from_raw_parts(big.as_ptr(), 4096) };
        e(ep.export(9, &half, ExportOptions::new()), "export")?;
        sync.barrier()?; // 1
        sync.barrier()?; // 2: rank 0 wrote in bounds, then past the end
        ensure!(
            e(big.load_u32(4092), "load")? == 0x1111_1111,
            "the in-bounds write landed"
        );
        ensure!(
            e(big.load_u32(4096), "load")? == 0,
            "nothing written past the registration"
        );
        ensure!(
            e(big.load_u32(4088), "load")? == 0,
            "nothing of the refused write landed inside"
        );
        ep.unexport(9).ok();
    } else {
        sync.barrier()?;
        let (key, len) = e(t.key_of(1, 9), "key")?;
        ensure!(len == 4096, "length {len}");
        e(
            t.raw_write(1, key, 4092, &0x1111_1111u32.to_ne_bytes()),
            "in-bounds write",
        )?;
        let mut past = Vec::new();
        past.extend_from_slice(&0x2222_2222u32.to_ne_bytes());
        past.extend_from_slice(&0x3333_3333u32.to_ne_bytes());
        past.extend_from_slice(&0x4444_4444u32.to_ne_bytes());
        let r = t.raw_write(1, key, 4088, &past);
        ensure!(
            matches!(r, Err(Error::Unexported)),
            "write beyond the registration: {r:?}"
        );
        // Through the core, the same write is refused before it reaches the transport.
        let p = e(ep.import(e(ep.proc_of(1), "rank")?, 9), "import")?;
        let r = p.send(4088, &past);
        ensure!(
            matches!(r, Err(Error::OutOfBounds { .. })),
            "send past the end: {r:?}"
        );
        sync.barrier()?;
    }
    sync.barrier()?;
    Ok(())
}

/// A peer that dies: writes and reads fail with `PeerLost` in bounded time, and the peer is
/// reported dead.
fn peer_dies(ep: &Endpoint, _t: &RdmaTransport) -> Check {
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let r = e(Region::alloc(4096, MemKind::Private), "alloc")?;
        e(ep.export(10, &r, ExportOptions::new()), "export")?;
        sync.barrier()?; // exported
        sync.barrier()?; // imported
        vmmc::conformance::die();
    }
    sync.barrier()?;
    let victim = e(ep.proc_of(1), "rank")?;
    let p = e(ep.import(victim, 10), "import")?;
    sync.barrier()?;
    let start = Instant::now();
    let err = loop {
        if let Err(x) = p.send(0, &[7u8; 256]) {
            break x;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(30),
            "writes to a dead peer keep succeeding"
        );
    };
    ensure!(matches!(err, Error::PeerLost(_)), "write: {err}");
    ensure!(!ep.peer_alive(victim), "reported dead");
    let r = p.get_data(0, &mut [0u8; 16]);
    ensure!(matches!(r, Err(Error::PeerLost(_))), "read: {r:?}");
    ensure!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
    Ok(())
}

/// Deliberate updates and remote reads go over the queue pair: the RDMA counters move and
/// the data does not cross the control connection.
fn data_by_rdma(ep: &Endpoint, t: &RdmaTransport) -> Check {
    let mut sync = Sync::new(ep)?;
    let data = pattern(3, 3 << 20);
    if ep.rank() == 1 {
        let r = e(ep.alloc(3 << 20, MemKind::Private), "alloc")?;
        e(ep.export(11, &r, ExportOptions::new()), "export")?;
        sync.barrier()?;
        sync.barrier()?;
        let mut got = vec![0u8; data.len()];
        e(r.read(0, &mut got), "read")?;
        ensure!(got == data, "3 MiB arrived intact");
    } else {
        sync.barrier()?;
        let p = e(ep.import(e(ep.proc_of(1), "rank")?, 11), "import")?;
        e(p.send(0, &data), "send")?;
        let mut back = vec![0u8; data.len()];
        e(p.get_data(0, &mut back), "get_data")?;
        ensure!(back == data, "read back intact");
        let s = t.rdma_stats();
        ensure!(
            s.writes >= 1 && s.bytes_written >= data.len() as u64,
            "{s:?}"
        );
        ensure!(s.reads >= 1, "{s:?}");
        sync.barrier()?;
    }
    sync.barrier()?;
    // The control connection carried announcements and the start-up exchange only: far
    // less than the 3 MiB that went each way.
    let c = t.control_stats();
    ensure!(
        c.bytes_sent < 64 * 1024 && c.bytes_received < 64 * 1024,
        "the data crossed the control connection: {c:?}"
    );
    Ok(())
}

/// Notifications travel as WRITE_WITH_IMM (a record in the receiver's ring, the immediate
/// naming the export): each arrives once, in order, with the value sent even when the word
/// is overwritten at once, more of them than receives are posted; none crosses TCP.
fn notifications_by_immediate(ep: &Endpoint, t: &RdmaTransport) -> Check {
    const N: u32 = 300; // more than the receives posted per queue pair (128)
    let mut sync = Sync::new(ep)?;
    if ep.rank() == 1 {
        let r = e(ep.alloc(4096, MemKind::Private), "alloc")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        e(
            ep.export(
                12,
                &r,
                ExportOptions::new().handler(move |n| l.lock().expect("log").push(n)),
            ),
            "export",
        )?;
        sync.barrier()?;
        let start = Instant::now();
        while log.lock().expect("log").len() < N as usize {
            ensure!(
                start.elapsed() < Duration::from_secs(30),
                "notifications missing"
            );
            std::thread::yield_now();
        }
        let got: Vec<(usize, u32)> = log
            .lock()
            .expect("log")
            .iter()
            .map(|n| (n.offset, n.value))
            .collect();
        let want: Vec<(usize, u32)> = (0..N).map(|i| (60, i)).collect();
        ensure!(got == want, "in order, values as sent: {got:?}");
        let s = t.rdma_stats();
        ensure!(s.imm_arrived == u64::from(N), "{s:?}");
        ensure!(
            t.control_stats().notifications == 0,
            "none came over TCP: {:?}",
            t.control_stats()
        );
        sync.barrier()?;
    } else {
        sync.barrier()?;
        let p = e(ep.import(e(ep.proc_of(1), "rank")?, 12), "import")?;
        for i in 0..N {
            // The word is overwritten by the next send at once: the value must come from the
            // notification, not from memory.
            let mut m = vec![0u8; 64];
            m[60..].copy_from_slice(&i.to_ne_bytes());
            e(p.send_notify(0, &m), "send_notify")?;
        }
        let s = t.rdma_stats();
        ensure!(s.imm_sent == u64::from(N), "{s:?}");
        sync.barrier()?;
    }
    Ok(())
}

/// Unexport while notifications stream in: the sender's writes end with `Unexported`, the
/// ones delivered are a prefix in order, each once; a buffer exported next (which takes the
/// freed notification slot) gets none of the old ones: the first notification it sees is
/// the one sent to it.
fn unexport_during_notifications(ep: &Endpoint, _t: &RdmaTransport) -> Check {
    let mut sync = Sync::new(ep)?;
    type Log = Arc<Mutex<Vec<vmmc::Notification>>>;
    let logged = |id: u32, r: &Region| -> Result<Log, String> {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        e(
            ep.export(
                id,
                r,
                ExportOptions::new().handler(move |n| l.lock().expect("log").push(n)),
            ),
            "export",
        )?;
        Ok(log)
    };
    if ep.rank() == 1 {
        let r = e(ep.alloc(4096, MemKind::Private), "alloc")?;
        let log13 = logged(13, &r)?;
        sync.barrier()?; // 1: exported
        let start = Instant::now();
        while log13.lock().expect("log").len() < 50 {
            ensure!(
                start.elapsed() < Duration::from_secs(30),
                "no notifications"
            );
            std::thread::yield_now();
        }
        e(ep.unexport(13), "unexport")?;
        let r2 = e(ep.alloc(4096, MemKind::Private), "alloc")?;
        let log14 = logged(14, &r2)?;
        sync.barrier()?; // 2: rank 0 saw Unexported
        sync.barrier()?; // 3: rank 0 sent one notification to 14
        let start = Instant::now();
        while log14.lock().expect("log").is_empty() {
            ensure!(
                start.elapsed() < Duration::from_secs(30),
                "no notification on 14"
            );
            std::thread::yield_now();
        }
        let first = log14.lock().expect("log")[0];
        ensure!(
            first.value == 0xffff && first.offset == 0,
            "the new buffer got an old notification first: {first:?}"
        );
        let vals: Vec<u32> = log13.lock().expect("log").iter().map(|n| n.value).collect();
        let want: Vec<u32> = (0..vals.len() as u32).collect();
        ensure!(vals == want, "delivered once, in order: {vals:?}");
    } else {
        sync.barrier()?;
        let owner = e(ep.proc_of(1), "rank")?;
        let p = e(ep.import(owner, 13), "import")?;
        let mut i = 0u32;
        let err = loop {
            match p.send_notify(0, &i.to_ne_bytes()) {
                Ok(()) => i += 1,
                Err(x) => break x,
            }
        };
        ensure!(matches!(err, Error::Unexported), "sender's error: {err}");
        sync.barrier()?;
        let p14 = e(ep.import(owner, 14), "import")?;
        e(p14.send_notify(0, &0xffffu32.to_ne_bytes()), "notify 14")?;
        sync.barrier()?;
    }
    sync.barrier()?;
    Ok(())
}

/// At the verbs level, in one process, two queue pairs connected to each other: memory
/// registered for remote read only refuses a write (remote access error, both queue pairs
/// then in error), reads work, a wrong local key is a local protection error, a full send
/// queue is `WouldBlock`, and a queue pair takes work only in the states that allow it.
fn access_flags(_ep: &Endpoint, _t: &RdmaTransport) -> Check {
    let dev = e(Device::open(), "open")?;
    let mk = || -> Result<_, String> {
        let cq = e(dev.cq(16), "cq")?;
        let qp = e(dev.qp(cq, 8, None, 1), "qp")?;
        let a = QpAddr {
            qpn: qp.qpn(),
            lid: dev.lid,
            psn: 1,
            gid: dev.gid,
        };
        Ok((qp, a))
    };
    let ((qa, aa), (qb, ab)) = (mk()?, mk()?);
    let target = e(Region::alloc(4096, MemKind::Private), "alloc")?;
    let early = e(Region::alloc(4096, MemKind::Private), "alloc")?;
    // SAFETY: `early` outlives its registration (dropped at the end of this block).
    let emr = unsafe {
        e(
            dev.register(early.as_ptr(), 4096, 0, IBV_ACCESS_LOCAL_WRITE),
            "reg",
        )?
    };
    // Queue-pair states: nothing is posted before the pair is ready to send, and it cannot
    // go back to INIT from RTS.
    // SAFETY: `early` is registered; a refused post starts nothing.
    let r = unsafe { qa.post(1, IBV_WR_RDMA_WRITE, early.as_ptr(), 4, emr.lkey(), 0, 0, 0) };
    ensure!(
        matches!(r, Err(Error::Io { .. })),
        "post on a queue pair in RESET: {r:?}"
    );
    drop(emr);
    e(qa.connect(&dev, &aa, &ab), "connect a")?;
    e(qb.connect(&dev, &ab, &aa), "connect b")?;
    let r = qa.connect(&dev, &aa, &ab);
    ensure!(r.is_err(), "RTS -> INIT accepted");
    e(target.store_u32(0, 0xabcd_0123), "store")?;
    let local = e(Region::alloc(4096, MemKind::Private), "alloc")?;
    // SAFETY: both regions outlive their registrations (dropped first, declared later).
    let (tmr, lmr) = unsafe {
        (
            e(
                dev.register(target.as_ptr(), 4096, 0, IBV_ACCESS_REMOTE_READ),
                "reg target",
            )?,
            e(
                dev.register(local.as_ptr(), 4096, 0, IBV_ACCESS_LOCAL_WRITE),
                "reg local",
            )?,
        )
    };
    let op = |id: u64, opcode: u32, lkey: u32| -> Result<u32, String> {
        e(
            // SAFETY: `local` is registered and outlives the operation, waited for below.
            unsafe { qa.post(id, opcode, local.as_ptr(), 4, lkey, 0, tmr.rkey(), 0) },
            "post",
        )?;
        let mut wc = [ibv_wc::default(); 1];
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if e(qa.poll(&mut wc), "poll")? == 1 {
                return if wc[0].wr_id == id {
                    Ok(wc[0].status)
                } else {
                    Err(format!("completion of {} for {id}", wc[0].wr_id))
                };
            }
            if Instant::now() > deadline {
                return Err("no completion".into());
            }
            std::thread::yield_now();
        }
    };
    let s = op(1, IBV_WR_RDMA_READ, lmr.lkey())?;
    ensure!(s == IBV_WC_SUCCESS, "read: {}", status_str(s));
    ensure!(
        e(local.load_u32(0), "load")? == 0xabcd_0123,
        "the read fetched the word"
    );
    e(local.store_u32(0, 0x5555_5555), "store")?;
    let s = op(2, IBV_WR_RDMA_WRITE, lmr.lkey() ^ 0x100)?;
    ensure!(
        s == IBV_WC_LOC_PROT_ERR,
        "write from a bad lkey: {}",
        status_str(s)
    );
    // The queue pair is in error now: reconnect a fresh pair for the remote check.
    drop((qa, qb));
    let ((qa, aa), (qb, ab)) = (mk()?, mk()?);
    e(qa.connect(&dev, &aa, &ab), "connect a")?;
    e(qb.connect(&dev, &ab, &aa), "connect b")?;
    e(
        // SAFETY: `local` is registered and outlives the operation, waited for below.
        unsafe {
            qa.post(
                3,
                IBV_WR_RDMA_WRITE,
                local.as_ptr(),
                4,
                lmr.lkey(),
                0,
                tmr.rkey(),
                0,
            )
        },
        "post",
    )?;
    let mut wc = [ibv_wc::default(); 2];
    let deadline = Instant::now() + Duration::from_secs(10);
    while e(qa.poll(&mut wc), "poll")? == 0 {
        ensure!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
    ensure!(
        wc[0].status == IBV_WC_REM_ACCESS_ERR,
        "write to read-only memory: {}",
        status_str(wc[0].status)
    );
    ensure!(
        e(target.load_u32(0), "load")? == 0xabcd_0123,
        "the refused write wrote nothing"
    );
    // Later work requests are flushed.
    e(
        // SAFETY: `local` is registered and outlives the operation, waited for below.
        unsafe {
            qa.post(
                4,
                IBV_WR_RDMA_READ,
                local.as_ptr(),
                4,
                lmr.lkey(),
                0,
                tmr.rkey(),
                0,
            )
        },
        "post in error",
    )?;
    while e(qa.poll(&mut wc), "poll")? == 0 {
        ensure!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
    ensure!(
        wc[0].status == IBV_WC_WR_FLUSH_ERR,
        "after the error: {}",
        status_str(wc[0].status)
    );
    // A full send queue is back-pressure: 8 operations under way on a queue pair of depth 8,
    // the 9th is WouldBlock until completions are polled.
    drop((qa, qb));
    let ((qa, aa), (qb, ab)) = (mk()?, mk()?);
    e(qa.connect(&dev, &aa, &ab), "connect a")?;
    e(qb.connect(&dev, &ab, &aa), "connect b")?;
    let read = |id: u64| {
        // SAFETY: `local` is registered and outlives the operations, polled below.
        unsafe {
            qa.post(
                id,
                IBV_WR_RDMA_READ,
                local.as_ptr(),
                4,
                lmr.lkey(),
                0,
                tmr.rkey(),
                0,
            )
        }
    };
    for id in 10..18 {
        e(read(id), "post within the queue's depth")?;
    }
    let r = read(18);
    ensure!(
        matches!(r, Err(Error::WouldBlock)),
        "9th on a full queue: {r:?}"
    );
    let mut done = 0;
    let mut wc8 = [ibv_wc::default(); 8];
    while done < 8 {
        ensure!(Instant::now() < deadline, "completions missing");
        done += e(qa.poll(&mut wc8), "poll")?;
    }
    e(read(18), "post once the queue has room")?;
    drop((tmr, lmr));
    Ok(())
}
