//! Ocean-SVM at test size, both versions (AURC and HLRC) and HLRC-AU: 1, 2 and 4 processes
//! over shm, 4 and 16 nodes on the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn ocean_svm_on_shm() {
    common::each_version(
        "ocean-svm",
        "shm",
        &common::SHM_NODES,
        common::svm_ok,
        |_, _| {},
    );
}

#[test]
fn ocean_svm_on_sim() {
    common::each_version(
        "ocean-svm",
        "sim",
        &common::SIM_NODES,
        common::svm_ok,
        |_, r| {
            // The neighbours' boundary rows come from their homes.
            assert!(r["svm"]["total"]["page_fetches"].as_u64() > Some(0), "{r}");
        },
    );
}

#[test]
fn ocean_svm_hlrc_au() {
    let o = common::shrimp("ocean-svm", 4, "sim", "au", &["--protocol", "hlrc-au"]);
    assert!(o.status.success(), "{}", o.report());
    assert!(
        o.stdout.contains("\"protocol\":\"hlrc-au\""),
        "{}",
        o.report()
    );
}

#[test]
fn ocean_svm_corruption_is_caught() {
    common::caught("ocean-svm", 2, "shm");
}
