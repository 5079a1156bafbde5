//! One-way bulk transfer and ping-pong inside a job, through the endpoint (the job path):
//! `vmmc-run -n 2 [--transport sim] -- job_bulk [MiB] [message size]` (variant from
//! `VMMC_SOCK_VARIANT`). On the simulator the times are virtual: the modelled SHRIMP's.

use std::io::{Read, Write};

fn main() -> Result<(), vmmc::Error> {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|v| v.parse().ok()).unwrap_or(d);
    let (mib, size) = (num(1, 64), num(2, 65536));
    vmmc_run::run(|ep| {
        let talk = || -> std::io::Result<()> {
            // Whole messages only: both sides count the same bytes.
            let total = (mib << 20) / size * size;
            let mut buf = vec![7u8; size];
            if ep.rank() == 0 {
                let l = sockets::JobListener::bind(&ep, 9)?;
                let (mut s, _) = l.accept()?;
                for _ in 0..1000 {
                    s.read_exact(&mut buf[..64])?;
                    s.write_all(&buf[..64])?;
                }
                let mut got = 0;
                while got < total {
                    let n = s.read(&mut buf)?;
                    assert!(n > 0, "end of file after {got} bytes");
                    got += n;
                }
                s.write_all(&[1])?;
            } else if ep.rank() == 1 {
                let mut s = sockets::VmmcStream::connect_job(&ep, 0, 9)?;
                let t = vmmc::pace::now_ns();
                for _ in 0..1000 {
                    s.write_all(&buf[..64])?;
                    s.read_exact(&mut buf[..64])?;
                }
                let one_way = (vmmc::pace::now_ns() - t) as f64 / 2000.0 / 1e3;
                let t = vmmc::pace::now_ns();
                for _ in 0..total / size {
                    s.write_all(&buf)?;
                }
                s.read_exact(&mut buf[..1])?;
                let secs = (vmmc::pace::now_ns() - t) as f64 / 1e9;
                println!(
                    "transport {} variant {}: 64 B one-way {one_way:.2} us; {size} B messages {:.1} MB/s",
                    ep.transport_name(),
                    s.variant().name(),
                    total as f64 / secs / 1e6
                );
            }
            Ok(())
        };
        talk().map_err(|e| vmmc::Error::io("sockets", e))
    })
}
