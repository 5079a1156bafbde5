//! Profiling aid: node 0 acquires and releases a lock whose token it holds, in a loop, while
//! node 1 waits in a barrier (inside the library). Prints ns per acquire+release pair.
use svm::{Config, Svm};
use vmmc::pace::now_ns;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    vmmc_run::run(|ep| {
        let mut s = Svm::new(ep, Config::from_env()?.space(8 << 20))?;
        if s.rank() == 0 {
            let mut best = f64::MAX;
            for _ in 0..10 {
                let t0 = now_ns();
                for _ in 0..n / 10 {
                    s.acquire(0)?;
                    s.release(0)?;
                }
                best = best.min((now_ns() - t0) as f64 / (n / 10) as f64);
            }
            println!("local acquire+release: {best:.1} ns (best of 10)");
        }
        s.barrier()?;
        s.finish()?;
        Ok(())
    })
    .expect("svm-local");
}
