//! NX on the simulated SHRIMP (every node a thread of one process, in virtual time): the
//! library's waits go through the VMMC layer's pacing, so the protocols run unchanged there.

use std::process::Command;

const CHILD: &str = "NX_TEST_SIM_CHILD";

fn ring(nx: &nx::Nx) -> nx::Result<()> {
    let (me, n) = (nx.mynode(), nx.numnodes());
    let right = (me + 1) % n;
    for len in [4usize, 100, 9000, 100_000] {
        let msg: Vec<u8> = (0..len).map(|i| (i as i64 * 7 + me) as u8).collect();
        let mut got = vec![0u8; len];
        if me == 0 {
            nx.csend(1, &msg, right, 0)?;
            nx.crecv(1, &mut got)?;
        } else {
            nx.crecv(1, &mut got)?;
            nx.csend(1, &msg, right, 0)?;
        }
        let left = (me + n - 1) % n;
        let want: Vec<u8> = (0..len).map(|i| (i as i64 * 7 + left) as u8).collect();
        assert!(got == want, "node {me}: {len} bytes from {left} corrupted");
    }
    let mut x = [me as f64 + 1.0];
    nx.gdsum(&mut x)?;
    assert_eq!(x[0], (n * (n + 1) / 2) as f64);
    nx.gsync()
}

#[test]
fn ring_and_global_sum_on_the_simulator() {
    if std::env::var_os(CHILD).is_some() {
        vmmc_run::run(|ep| {
            let nx = nx::Nx::new(ep).map_err(|e| vmmc::Error::Protocol(e.to_string()))?;
            ring(&nx).map_err(|e| vmmc::Error::Protocol(e.to_string()))?;
            println!("sim node {}: ok", nx.mynode());
            Ok(())
        })
        .expect("the simulated job");
        return;
    }
    for small in ["du", "au"] {
        let o = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "ring_and_global_sum_on_the_simulator",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .env("VMMC_TRANSPORT", "sim")
            .env("VMMC_RANK", "0")
            .env("VMMC_SIZE", "3")
            .env("NX_SMALL", small)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "NX_SMALL={small}\n--- stdout\n{out}\n--- stderr\n{err}"
        );
        for r in 0..3 {
            assert!(
                out.contains(&format!("sim node {r}: ok")),
                "NX_SMALL={small}: node {r}\n{out}\n{err}"
            );
        }
    }
}
