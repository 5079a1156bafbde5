//! Barnes-NX at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn barnes_nx_on_shm() {
    for nodes in [1, 2, 4] {
        for v in ["au", "du"] {
            common::ok("barnes-nx", nodes, "shm", v);
        }
    }
}

#[test]
fn barnes_nx_on_sim() {
    for nodes in [4, 16] {
        for v in ["au", "du"] {
            let r = common::ok("barnes-nx", nodes, "sim", v);
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
fn barnes_nx_corruption_is_caught() {
    common::caught("barnes-nx", 2, "shm");
}
