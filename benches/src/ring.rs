//! A token ring, the oversubscription benchmark's workload (issue 19): rank 0 sends a word to
//! rank 1, every rank passes it on to its right, and rank 0 takes it back; one lap is `n`
//! hops. The same code runs over NX (`nx-pingpong --ring`) and MPI (`mpi-pingpong --ring`).

use std::time::Instant;

/// The token that ends the ring.
const STOP: u32 = u32::MAX;

/// Passes the token around for about `secs` seconds (rank 0 decides, so every rank stops on
/// the same lap) and returns the time per hop in microseconds (on rank 0; 0 elsewhere).
/// `send(to, token)` and `recv(from) -> token` are the library's blocking calls.
pub fn ring(
    rank: usize,
    n: usize,
    secs: f64,
    mut send: impl FnMut(usize, u32),
    mut recv: impl FnMut(usize) -> u32,
) -> f64 {
    let (left, right) = ((rank + n - 1) % n, (rank + 1) % n);
    if rank != 0 {
        loop {
            let t = recv(left);
            send(right, t);
            if t == STOP {
                return 0.0;
            }
        }
    }
    let start = Instant::now();
    let mut laps = 0u32;
    loop {
        send(right, laps);
        let back = recv(left);
        assert_eq!(back, laps, "the token came back changed");
        laps += 1;
        if start.elapsed().as_secs_f64() >= secs {
            break;
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / (laps as f64 * n as f64);
    send(right, STOP);
    assert_eq!(recv(left), STOP);
    us
}
