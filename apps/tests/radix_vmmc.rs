//! Radix-VMMC at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn radix_vmmc_on_shm() {
    common::each_version(
        "radix-vmmc",
        "shm",
        &common::SHM_NODES,
        common::ok,
        |_, _| {},
    );
}

#[test]
fn radix_vmmc_on_sim() {
    common::each_version(
        "radix-vmmc",
        "sim",
        &common::SIM_NODES,
        common::ok,
        common::au_traffic_only_in_au,
    );
}

#[test]
fn radix_vmmc_uneven_blocks() {
    let o = common::shrimp("radix-vmmc", 3, "shm", "du", &["--keys", "1001"]);
    assert!(o.status.success(), "{}", o.report());
    let o = common::shrimp("radix-vmmc", 3, "shm", "au", &["--keys", "1001"]);
    assert!(o.status.success(), "{}", o.report());
}

#[test]
fn radix_vmmc_corruption_is_caught() {
    common::caught("radix-vmmc", 2, "shm");
}

/// 64 nodes of the simulated SHRIMP in one process (each endpoint's DestSpace fits).
#[test]
fn radix_vmmc_on_64_simulated_nodes() {
    let r = common::ok("radix-vmmc", 64, "sim", "du");
    assert_eq!(r["nodes"], 64, "{r}");
}
