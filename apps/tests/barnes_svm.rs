//! Barnes-SVM at test size, both versions (AURC and HLRC) and HLRC-AU: 1, 2 and 4 processes
//! over shm, 4 and 16 nodes on the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn barnes_svm_on_shm() {
    common::each_version(
        "barnes-svm",
        "shm",
        &common::SHM_NODES,
        common::svm_ok,
        |_, _| {},
    );
}

#[test]
fn barnes_svm_on_sim() {
    common::each_version(
        "barnes-svm",
        "sim",
        &common::SIM_NODES,
        common::svm_ok,
        |_, r| {
            // Every node reads the others' bodies from their homes.
            assert!(r["svm"]["total"]["page_fetches"].as_u64() > Some(0), "{r}");
        },
    );
}

#[test]
fn barnes_svm_hlrc_au() {
    let o = common::shrimp("barnes-svm", 3, "shm", "au", &["--protocol", "hlrc-au"]);
    assert!(o.status.success(), "{}", o.report());
    assert!(
        o.stdout.contains("\"protocol\":\"hlrc-au\""),
        "{}",
        o.report()
    );
}

#[test]
fn barnes_svm_corruption_is_caught() {
    common::caught("barnes-svm", 2, "shm");
}
