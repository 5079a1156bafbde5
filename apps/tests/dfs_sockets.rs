//! DFS-sockets at test size, both versions: 1, 2 and 4 processes over shm, 4 and 16 nodes on
//! the simulated SHRIMP; copies in a large cache serve the repeated reads; and a corrupted
//! block is caught.

mod common;

/// The reads the report counts: (local, from copies, remote).
fn reads(r: &serde_json::Value) -> (u64, u64, u64) {
    let t = &r["problem"]["timed_reads"];
    let n = |k: &str| t[k].as_u64().unwrap_or_else(|| panic!("no {k} reads: {r}"));
    (n("local"), n("copies"), n("remote"))
}

/// What every run must show: all the reads, a request and a response per remote read.
fn check(r: &serde_json::Value, nodes: usize) {
    let (local, copies, remote) = reads(r);
    let p = &r["problem"];
    let want = p["clients"].as_u64().unwrap()
        * p["reads"].as_u64().unwrap()
        * p["files"].as_u64().unwrap()
        * p["blocks_per_file"].as_u64().unwrap();
    assert_eq!(local + copies + remote, want, "{r}");
    assert_eq!(r["messages"].as_u64(), Some(2 * remote), "{r}");
    if nodes == 1 {
        assert_eq!((copies, remote), (0, 0), "{r}");
    } else {
        // The working sets are striped over every node: at the test size a client's node is
        // home to one block in `nodes` of its working set, the others are fetched (the small
        // cache keeps no copy long enough to be read again).
        assert_eq!(local * (nodes as u64 - 1), remote, "{r}");
    }
}

#[test]
fn dfs_sockets_on_shm() {
    for nodes in [1, 2, 4] {
        for v in ["au", "du"] {
            let r = common::ok("dfs-sockets", nodes, "shm", v);
            check(&r, nodes);
            let au = r["au_words"].as_u64();
            if v == "au" && nodes > 1 {
                assert!(au > Some(0), "{r}");
            } else {
                assert_eq!(au, Some(0), "{r}");
            }
        }
    }
}

#[test]
fn dfs_sockets_on_sim() {
    for nodes in [4, 16] {
        for v in ["au", "du"] {
            let r = common::ok("dfs-sockets", nodes, "sim", v);
            check(&r, nodes);
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
fn copies_serve_the_timed_reads_when_the_cache_holds_the_working_set() {
    let o = common::shrimp("dfs-sockets", 4, "sim", "du", &["--cache-size", "1m"]);
    assert!(o.status.success(), "{}", o.report());
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a report");
    let r: serde_json::Value = serde_json::from_str(line).expect("JSON");
    let (local, copies, remote) = reads(&r);
    assert_eq!(remote, 0, "{r}");
    assert!(copies > local, "{r}");
}

#[test]
fn dfs_sockets_corruption_is_caught() {
    common::caught("dfs-sockets", 2, "shm");
}
