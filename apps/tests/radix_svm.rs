//! Radix-SVM at test size, both versions (AURC and HLRC) and HLRC-AU: 1, 2 and 4 processes
//! over shm, 4 and 16 nodes on the simulated SHRIMP; and a corrupted result is caught.

mod common;

#[test]
fn radix_svm_on_shm() {
    common::each_version(
        "radix-svm",
        "shm",
        &common::SHM_NODES,
        common::svm_ok,
        |_, _| {},
    );
}

#[test]
fn radix_svm_on_sim() {
    common::each_version(
        "radix-svm",
        "sim",
        &common::SIM_NODES,
        common::svm_ok,
        |v, r| {
            // The scattered writes share pages: HLRC diffs them, AURC stores through.
            let t = &r["svm"]["total"];
            if v == "du" {
                assert!(t["diffs_created"].as_u64() > Some(0), "{r}");
            }
        },
    );
}

#[test]
fn radix_svm_hlrc_au() {
    let o = common::shrimp("radix-svm", 4, "shm", "au", &["--protocol", "hlrc-au"]);
    assert!(o.status.success(), "{}", o.report());
    assert!(
        o.stdout.contains("\"protocol\":\"hlrc-au\""),
        "{}",
        o.report()
    );
    let o = common::shrimp("radix-svm", 3, "shm", "du", &["--keys", "1001"]);
    assert!(o.status.success(), "{}", o.report());
}

#[test]
fn radix_svm_corruption_is_caught() {
    common::caught("radix-svm", 2, "shm");
}

/// Asynchronous protocol sends (`SVM_ASYNC=1`, the DU-queue experiment's setting) keep the
/// result right on both transports.
#[test]
fn radix_svm_async_sends() {
    for (nodes, transport) in [(2, "shm"), (4, "sim")] {
        let o = common::shrimp_env(
            "radix-svm",
            nodes,
            transport,
            "du",
            &[],
            &[("SVM_ASYNC", "1")],
        );
        assert!(o.status.success(), "{transport}\n{}", o.report());
    }
}
