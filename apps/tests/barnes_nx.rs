//! Barnes-NX at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn barnes_nx_on_shm() {
    common::each_version(
        "barnes-nx",
        "shm",
        &common::SHM_NODES,
        common::ok,
        |_, _| {},
    );
}

#[test]
fn barnes_nx_on_sim() {
    common::each_version(
        "barnes-nx",
        "sim",
        &common::SIM_NODES,
        common::ok,
        common::au_traffic_only_in_au,
    );
}

#[test]
fn barnes_nx_corruption_is_caught() {
    common::caught("barnes-nx", 2, "shm");
}
