//! The suites on a real RDMA device (an HCA, or soft-RoCE), through the system's
//! libibverbs: ignored by default, as these machines have none. On a machine with one:
//!
//! `VMMC_RDMA_DEVICE=<name> cargo test -p vmmc-rdma --test device -- --ignored`
//!
//! (`ibv_devices` lists the names; see the README for soft-RoCE.) Each job's ranks are this
//! binary re-executed, on one host, connected through the device's loopback.

mod common;

use common::cases::{CASE, CASES};
use common::{run_case_job, run_conformance_job, Verbs, CONFORMANCE_CASE};
use vmmc::conformance::scenarios;

const NEEDS: &str = "needs an RDMA device: run with VMMC_RDMA_DEVICE=<name> (ibv_devices \
                     lists them) and --ignored";

fn device() -> String {
    match std::env::var("VMMC_RDMA_DEVICE") {
        Ok(d) if !d.is_empty() => d,
        _ => panic!("{NEEDS}"),
    }
}

#[test]
#[ignore = "needs an RDMA device (HCA or soft-RoCE): VMMC_RDMA_DEVICE=<name> ... -- --ignored"]
fn conformance_on_device() {
    if let Ok(name) = std::env::var(CONFORMANCE_CASE) {
        common::conformance_child(&name);
    }
    let verbs = Verbs::Device(device());
    let args = [
        "--exact",
        "conformance_on_device",
        "--ignored",
        "--nocapture",
    ];
    let mut failed = Vec::new();
    for s in scenarios() {
        match run_conformance_job(s, &verbs, &args) {
            Ok(()) => println!("conformance::rdma::{} on the device ... ok", s.name),
            Err(e) => failed.push(format!("{}: {e}", s.name)),
        }
    }
    assert!(failed.is_empty(), "failed on the device: {failed:#?}");
}

#[test]
#[ignore = "needs an RDMA device (HCA or soft-RoCE): VMMC_RDMA_DEVICE=<name> ... -- --ignored"]
fn verbs_cases_on_device() {
    if let Ok(name) = std::env::var(CASE) {
        common::case_child(&name);
    }
    let verbs = Verbs::Device(device());
    let args = [
        "--exact",
        "verbs_cases_on_device",
        "--ignored",
        "--nocapture",
    ];
    let mut failed = Vec::new();
    for c in CASES {
        match run_case_job(c, &verbs, &args) {
            Ok(()) => println!("verbs::{} on the device ... ok", c.name),
            Err(e) => failed.push(format!("{}: {e}", c.name)),
        }
    }
    assert!(failed.is_empty(), "failed on the device: {failed:#?}");
}

/// Without a device, the transport says so at connect, naming the variable: no silent
/// fall-back to another transport.
#[test]
fn no_device_is_a_clear_error() {
    if std::env::var("VMMC_RDMA_DEVICE").is_ok_and(|d| !d.is_empty()) {
        return; // a device is there: nothing to show
    }
    let env = vmmc::bootstrap::BootEnv::from_lookup(&|k| match k {
        "VMMC_TRANSPORT" => Some("rdma".into()),
        _ => None,
    })
    .expect("an environment of one");
    // The library or the device is missing: connect fails before it starts anything.
    match vmmc_rdma::RdmaTransport::connect(&env) {
        Err(vmmc::Error::Bootstrap(m)) => {
            assert!(
                m.contains("VMMC_RDMA_LIB") || m.contains("no RDMA device"),
                "unclear: {m}"
            )
        }
        Err(e) => panic!("expected a bootstrap error, got {e}"),
        Ok(_) => {} // a machine with libibverbs and a device
    }
}
