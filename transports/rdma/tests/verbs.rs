//! What an HCA enforces, through the transport over the stand-in provider, each case a job of
//! real processes: a revoked key (unexport, then a write with the old key, also after the
//! registration's slot is reused), a write beyond a registration, a write to memory
//! registered without remote write access and from a wrong local key, a peer that dies, and
//! proof that data moves by RDMA (not by the control connection). The cases are in
//! `common/cases.rs`; `tests/device.rs` runs them on a real device.
//!
//! `cargo test -p vmmc-rdma --test verbs [NAME-FILTER]`

mod common;

use common::cases::{CASE, CASES};
use common::{run_case_job, standin, Fabric, Verbs};
use std::time::Instant;

fn main() {
    if let Ok(name) = std::env::var(CASE) {
        common::case_child(&name);
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for c in CASES {
        let name = format!("verbs::{}", c.name);
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        let r = standin()
            .and_then(|lib| Ok(Verbs::Standin(lib, Fabric::new(c.name)?)))
            .and_then(|v| run_case_job(c, &v, &[]));
        match r {
            Ok(()) => {
                passed += 1;
                println!(
                    "test {name} ({} processes) ... ok ({:.2?})",
                    c.procs,
                    t.elapsed()
                );
            }
            Err(e) => {
                failed += 1;
                println!("test {name} ({} processes) ... FAILED: {e}", c.procs);
            }
        }
    }
    println!();
    println!("verbs: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
