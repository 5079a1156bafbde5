//! Ocean-NX at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn ocean_nx_on_shm() {
    common::each_version("ocean-nx", "shm", &common::SHM_NODES, common::ok, |_, _| {});
}

#[test]
fn ocean_nx_on_sim() {
    common::each_version(
        "ocean-nx",
        "sim",
        &common::SIM_NODES,
        common::ok,
        common::au_traffic_only_in_au,
    );
}

#[test]
fn ocean_nx_corruption_is_caught() {
    common::caught("ocean-nx", 2, "shm");
}
