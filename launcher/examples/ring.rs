//! Each rank exports a buffer, imports its right neighbour's, sends a token with a
//! notification around the ring, and checks what arrives.
//!
//! `vmmc-run -n 4 -- target/debug/examples/ring`

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use vmmc::{ExportOptions, MemKind};

fn main() -> Result<(), vmmc::Error> {
    let ep = vmmc_run::init()?;
    let (rank, size) = (ep.rank(), ep.size());
    let buf = ep.alloc(4096, MemKind::Shared)?;
    let got = Arc::new(AtomicU32::new(0));
    let g = got.clone();
    ep.export(
        1,
        &buf,
        ExportOptions::new().handler(move |n| g.store(n.value, Ordering::SeqCst)),
    )?;
    let right = ep.import(ep.proc_of((rank + 1) % size)?, 1)?;
    let left = ep.proc_of((rank + size - 1) % size)?;
    let token = 1000 + rank as u32;
    right.send_notify(
        0,
        &[7u8; 60]
            .iter()
            .copied()
            .chain(token.to_ne_bytes())
            .collect::<Vec<_>>(),
    )?;
    let want = 1000 + ((rank + size - 1) % size) as u32;
    // The token is in memory once it arrived (the last word of the message, read with
    // acquire); a left neighbour that is gone by then has still delivered it.
    buf.wait_u32(60, |v| v == want, || ep.check_peer(left))?;
    // Our own notification thread then runs the handler.
    while got.load(Ordering::SeqCst) != want {
        std::thread::yield_now();
    }
    println!(
        "rank {rank}/{size} ({}) got token {want} from {left}",
        ep.me()
    );
    Ok(())
}
