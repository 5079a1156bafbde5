//! Copies a file from rank 0 to rank 1 over Hamlyn's stream protocol (seed 002 §3.3):
//!
//! ```sh
//! vmmc-run -n 2 [--transport shm|sim|tcp|...] -- hcp SOURCE DEST
//! ```
//!
//! Rank 1 makes a stream receiver and sends its seed to rank 0 on the bootstrap channel;
//! rank 0 grows the matching sender from the seed, reads SOURCE in chunks of 256 KiB and sends
//! them, then closes the stream. Rank 1 writes each record to DEST straight from its receive
//! buffer, where the sender placed it (no copy in between), and releases it, which gives the
//! sender its tickets back. Both ranks print the bytes and the rate (in virtual time on the
//! simulator: the modelled SHRIMP's). A file that cannot be
//! read or written ends the job with that error; the other rank then sees its peer gone.

use hamlyn::protocols::{Seed, StreamReceiver, StreamSender};
use hamlyn::{Config, Error, Hamlyn};
use std::fs::File;
use std::io::{Read, Write};

/// Bytes read from SOURCE per send.
const CHUNK: usize = 256 << 10;
/// The receiver's stream buffer and its metadata entries (records in flight at most).
const BUFFER: usize = 4 << 20;
const ENTRIES: u32 = 64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: vmmc-run -n 2 -- hcp SOURCE DEST");
        std::process::exit(2);
    }
    let (src, dst) = (args[1].clone(), args[2].clone());
    let r = vmmc_run::run(move |ep| {
        if ep.size() != 2 {
            return Err(vmmc::Error::InvalidArgument(
                "hcp runs on 2 ranks (vmmc-run -n 2)",
            ));
        }
        let rank = ep.rank();
        let mut h = Hamlyn::new(ep, Config::default()).map_err(to_vmmc)?;
        let t = hamlyn::wait::now_ns();
        let bytes = if rank == 0 {
            send(&mut h, &src)?
        } else {
            receive(&mut h, &dst)?
        };
        let secs = (hamlyn::wait::now_ns() - t) as f64 / 1e9;
        println!(
            "rank {rank}: {} {bytes} bytes in {secs:.3} s ({:.1} MB/s)",
            if rank == 0 { "sent" } else { "wrote" },
            bytes as f64 / secs.max(1e-9) / 1e6
        );
        Ok(())
    });
    if let Err(e) = r {
        // One write for the whole line: both ranks may be reporting at once.
        let _ = std::io::stderr().write_all(format!("hcp: {e}\n").as_bytes());
        std::process::exit(1);
    }
}

/// Rank 0: SOURCE into the stream.
fn send(h: &mut Hamlyn, src: &str) -> vmmc::Result<u64> {
    let mut f = File::open(src).map_err(|e| io_error("open", src, e))?;
    let seed = h
        .recv_boot(1)
        .and_then(|b| Seed::from_bytes(&b))
        .map_err(to_vmmc)?;
    let mut tx = StreamSender::from_seed(h, &seed).map_err(to_vmmc)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| io_error("read", src, e))?;
        if n == 0 {
            break;
        }
        tx.send(h, &buf[..n]).map_err(to_vmmc)?;
        total += n as u64;
    }
    tx.close(h).and_then(|()| h.flush()).map_err(to_vmmc)?;
    Ok(total)
}

/// Rank 1: the stream into DEST.
fn receive(h: &mut Hamlyn, dst: &str) -> vmmc::Result<u64> {
    let mut f = File::create(dst).map_err(|e| io_error("create", dst, e))?;
    let mut rx = StreamReceiver::new(h, BUFFER, ENTRIES).map_err(to_vmmc)?;
    let seed = rx.make_seed(h).map_err(to_vmmc)?;
    h.send_boot(0, &seed.to_bytes()).map_err(to_vmmc)?;
    let mut total = 0u64;
    loop {
        let r = match rx.receive_block(h, None) {
            Ok(r) => r,
            Err(Error::Closed) => break,
            Err(e) => return Err(to_vmmc(e)),
        };
        let data = rx.data(h, &r).map_err(to_vmmc)?;
        f.write_all(data).map_err(|e| io_error("write", dst, e))?;
        total += data.len() as u64;
        rx.release(h, &r).map_err(to_vmmc)?;
    }
    f.sync_all().map_err(|e| io_error("write", dst, e))?;
    Ok(total)
}

/// A file's error, with its path.
fn io_error(what: &'static str, path: &str, e: std::io::Error) -> vmmc::Error {
    let source = std::io::Error::new(e.kind(), format!("{path}: {e}"));
    vmmc::Error::Io { what, source }
}

/// Hamlyn's errors as the launcher's: a dead peer stays one.
fn to_vmmc(e: Error) -> vmmc::Error {
    match e {
        Error::Vmmc(e) => e,
        Error::PeerLost(p) => vmmc::Error::PeerLost(p),
        e => vmmc::Error::Protocol(format!("hamlyn: {e}")),
    }
}
