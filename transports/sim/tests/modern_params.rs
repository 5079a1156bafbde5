//! The present-day parameter file, `params/modern.toml`: it parses and validates, selecting it
//! with `VMMC_SIM_PARAMS` gives the same parameters, and a ping-pong on it lands where the
//! file's sources put a real RDMA write.

use vmmc::pace::now_ns;
use vmmc::{ExportOptions, MemKind};
use vmmc_sim::params::{MODERN_PARAMS, PARAMS_VAR, SET_VAR};
use vmmc_sim::{Outcome, Params, Sim};

const BUF: u32 = 3;

/// One-way time of a DU ping-pong of `size`-byte messages between two nodes, in ns.
fn du_one_way(p: Params, size: usize) -> u64 {
    let sim = Sim::new(2, p).expect("sim");
    let out = sim.run(|ep| {
        let r = ep.alloc(size.max(4096), MemKind::Shared).expect("alloc");
        ep.export(BUF, &r, ExportOptions::new()).expect("export");
        let peer = ep
            .import(ep.proc_of(1 - ep.rank()).unwrap(), BUF)
            .expect("import");
        let mut msg = vec![0xA5u8; size];
        let wait = |i: u32| r.wait_u32(size - 4, |v| v == i, || Ok(())).expect("wait");
        let t0 = now_ns();
        for i in 1..=4u32 {
            msg[size - 4..].copy_from_slice(&i.to_ne_bytes());
            if ep.rank() == 0 {
                peer.send(0, &msg).expect("send");
                wait(i);
            } else {
                wait(i);
                peer.send(0, &msg).expect("send");
            }
        }
        (now_ns() - t0) / 8
    });
    match &out[0] {
        Outcome::Returned(t) => *t,
        other => panic!("node 0: {other:?}"),
    }
}

#[test]
fn modern_file_parses_validates_and_models_an_rdma_write() {
    let p = Params::parse(MODERN_PARAMS, &[]).expect("modern.toml parses and validates");
    let shrimp = Params::default();
    assert_ne!(p, shrimp);
    assert_eq!(
        p.cpu.compute_scale, 1.0,
        "the host core is the modelled CPU"
    );
    assert_eq!(
        p.switches, shrimp.switches,
        "the what-if switches keep their defaults"
    );

    // Selected as users select it: by path, through the environment. (The only test in this
    // binary, so nothing else reads the environment meanwhile.)
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/params/modern.toml");
    std::env::set_var(PARAMS_VAR, path);
    std::env::remove_var(SET_VAR);
    let from_env = Params::from_env();
    std::env::remove_var(PARAMS_VAR);
    assert_eq!(from_env.expect("VMMC_SIM_PARAMS=.../modern.toml"), p);

    // Without compute charges the times are the model's alone: a one-word RDMA write in
    // 1-2 us, and 1 MB messages at 12-25 GB/s (the 200 Gb/s link is 25 GB/s).
    let quiet = Params::parse(MODERN_PARAMS, &["cpu.compute_scale=0"]).unwrap();
    let word = du_one_way(quiet.clone(), 4);
    assert!((1000..=2000).contains(&word), "one-word DU {word} ns");
    let mb = 1 << 20;
    let bw = mb as f64 * 1000.0 / du_one_way(quiet, mb) as f64;
    assert!(
        (12_000.0..=25_000.0).contains(&bw),
        "1 MB DU at {bw:.0} MB/s"
    );
}
