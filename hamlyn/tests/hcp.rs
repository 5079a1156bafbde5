//! The `hcp` example (a file copied from rank 0 to rank 1 over the stream protocol) as a user
//! runs it, under `vmmc-run`: the copy is byte for byte the file, on shm and on the simulator,
//! for a file of several stream buffers with an odd tail and for an empty one; a file that
//! cannot be read or written ends the job with that error, promptly, on both ranks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use vmmc_run::testing::{example, launcher, output_within, pattern, Output};

/// The example's binary, built once.
fn hcp() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| example("hamlyn", "hcp")).clone()
}

fn copy(transport: &str, src: &Path, dst: &Path) -> Output {
    let mut cmd = Command::new(launcher());
    cmd.args(["-n", "2", "--transport", transport, "--"])
        .arg(hcp())
        .arg(src)
        .arg(dst)
        .env_remove("VMMC_TRANSPORT");
    output_within(&mut cmd, Duration::from_secs(120))
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hamlyn-hcp-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

#[test]
fn copies_a_file_on_shm_and_sim() {
    let d = scratch("copy");
    // 11 MiB and an odd tail: several turns of the receiver's 4 MiB buffer.
    let data = pattern(1, (11 << 20) + 12_345);
    let src = d.join("src");
    std::fs::write(&src, &data).expect("write the source");
    for transport in ["shm", "sim"] {
        let dst = d.join(format!("dst-{transport}"));
        let out = copy(transport, &src, &dst);
        assert!(out.status.success(), "{transport}: {}", out.report());
        let got = std::fs::read(&dst).expect("read the copy");
        assert_eq!(got.len(), data.len(), "{transport}: length");
        assert!(got == data, "{transport}: the copy differs from the file");
        let line = format!("wrote {} bytes", data.len());
        assert!(out.stdout.contains(&line), "{transport}: {}", out.report());
    }
    let empty = d.join("empty");
    std::fs::write(&empty, b"").expect("write the empty file");
    let dst = d.join("dst-empty");
    let out = copy("shm", &empty, &dst);
    assert!(out.status.success(), "{}", out.report());
    assert_eq!(std::fs::read(&dst).expect("read the copy").len(), 0);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn file_errors_end_the_job() {
    let d = scratch("errors");
    let missing = d.join("no-such-file");
    let out = copy("shm", &missing, &d.join("dst"));
    assert!(!out.status.success(), "{}", out.report());
    let want = format!("hcp: open: {}: No such file", missing.display());
    assert!(out.stderr.contains(&want), "{}", out.report());
    // The receiver saw its peer go and said so.
    assert!(out.stderr.contains("is gone"), "{}", out.report());

    let src = d.join("src");
    std::fs::write(&src, pattern(2, 1000)).expect("write the source");
    let bad = d.join("no-such-dir").join("dst");
    let out = copy("shm", &src, &bad);
    assert!(!out.status.success(), "{}", out.report());
    let want = format!("hcp: create: {}: No such file", bad.display());
    assert!(out.stderr.contains(&want), "{}", out.report());
    let _ = std::fs::remove_dir_all(&d);
}
