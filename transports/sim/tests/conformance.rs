//! Runs the VMMC conformance suite over the simulator: each scenario as a machine of as many
//! nodes as it has processes, every node a thread in virtual time. The rank a scenario kills
//! ends through the simulator's pacer and must be reported dead to the others.
//!
//! `cargo test -p vmmc-sim --test conformance [NAME-FILTER]`

use std::time::Instant;
use vmmc::conformance::{scenarios, Scenario};
use vmmc_sim::{Outcome, Params, Sim};

fn run(s: &Scenario) -> Result<(), String> {
    // Without compute charges: the suite checks semantics, and some of its rules (one packet
    // per combining batch) would otherwise depend on how fast this build runs between stores.
    let mut p = Params::default();
    p.cpu.compute_scale = 0.0;
    let sim = Sim::new(s.procs, p).map_err(|e| e.to_string())?;
    let outcomes = sim.run(|ep| (s.run)(&ep));
    let mut errors = Vec::new();
    for (rank, o) in outcomes.into_iter().enumerate() {
        match (o, s.dies == Some(rank)) {
            (Outcome::Died, true) | (Outcome::Returned(Ok(())), false) => {}
            (Outcome::Returned(Err(e)), _) => errors.push(format!("rank {rank}: {e}")),
            (Outcome::Returned(Ok(())), true) => errors.push(format!("rank {rank} did not die")),
            (Outcome::Died, false) => errors.push(format!("rank {rank} died")),
            (Outcome::Panicked(m), _) => errors.push(format!("rank {rank} panicked: {m}")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

fn main() {
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let (mut passed, mut failed) = (0, 0);
    for s in scenarios().iter().filter(|s| s.name.contains(&filter)) {
        let t = Instant::now();
        match run(s) {
            Ok(()) => {
                passed += 1;
                println!("sim {} ... ok ({:.2?})", s.name, t.elapsed());
            }
            Err(e) => {
                failed += 1;
                println!("sim {} ... FAILED ({:.2?}): {e}", s.name, t.elapsed());
            }
        }
    }
    println!("conformance: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
