//! Radix-VMMC at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn radix_vmmc_on_shm() {
    for nodes in [1, 2, 4] {
        for v in ["au", "du"] {
            common::ok("radix-vmmc", nodes, "shm", v);
        }
    }
}

#[test]
fn radix_vmmc_on_sim() {
    for nodes in [4, 16] {
        for v in ["au", "du"] {
            let r = common::ok("radix-vmmc", nodes, "sim", v);
            let total = &r["sim"]["total"];
            if v == "au" {
                assert!(total["au_packets"].as_u64() > Some(0), "{r}");
            } else {
                assert_eq!(total["au_packets"].as_u64(), Some(0), "{r}");
            }
        }
    }
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
