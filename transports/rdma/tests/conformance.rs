//! Runs the VMMC conformance suite over the rdma transport, each scenario as a job of real
//! processes whose verbs library is the stand-in provider (`libvmmc_rdma_standin.so`): the
//! transport's code runs unchanged, the data moves between the processes' registered memory
//! as the stand-in's HCA moves it. `tests/device.rs` runs the same suite on a real device.
//!
//! `cargo test -p vmmc-rdma --test conformance [NAME-FILTER]`

mod common;

use common::{run_conformance_job, standin, Fabric, Verbs, CONFORMANCE_CASE};
use std::time::Instant;
use vmmc::conformance::scenarios;

fn main() {
    if let Ok(name) = std::env::var(CONFORMANCE_CASE) {
        common::conformance_child(&name);
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for s in scenarios() {
        let name = format!("rdma::{}", s.name);
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let t = Instant::now();
        let r = standin()
            .and_then(|lib| Ok(Verbs::Standin(lib, Fabric::new(s.name)?)))
            .and_then(|v| run_conformance_job(s, &v, &[]));
        match r {
            Ok(()) => {
                passed += 1;
                println!(
                    "test conformance::{name} ({} processes) ... ok ({:.2?})",
                    s.procs,
                    t.elapsed()
                );
            }
            Err(e) => {
                failed += 1;
                println!(
                    "test conformance::{name} ({} processes) ... FAILED: {e}",
                    s.procs
                );
            }
        }
    }
    println!();
    println!("conformance: {passed} passed, {failed} failed");
    std::process::exit(if failed == 0 { 0 } else { 1 });
}
