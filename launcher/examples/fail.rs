//! A job where one rank fails, for the launcher's tests.
//!
//! `fail exit RANK CODE`: RANK exits with CODE after the others have imported its buffer;
//! `fail kill RANK`: RANK kills itself with SIGKILL. The other ranks check that their sends to
//! it fail with "peer lost" and exit 0. `fail hang RANK CODE`: RANK exits with CODE and the
//! others wait for ever for something it would have sent (the launcher must end them).

use vmmc::{Error, ExportOptions, MemKind};

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let (how, victim) = (args[1].as_str(), args[2].parse::<usize>().expect("rank"));
    let ep = vmmc_run::init()?;
    let r = ep.alloc(4096, MemKind::Shared)?;
    ep.export(1, &r, ExportOptions::new())?;
    if ep.rank() == victim {
        // Wait until every other rank has imported (each writes its flag here).
        let others = ep.size() - 1;
        while (0..ep.size())
            .filter(|&q| r.load_u32(4 * q).unwrap() == 1)
            .count()
            < others
        {
            std::thread::yield_now();
        }
        match how {
            "exit" | "hang" => std::process::exit(args[3].parse().expect("code")),
            _ => {
                // SAFETY: kill on our own pid.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                unreachable!()
            }
        }
    }
    let p = ep.import(ep.proc_of(victim)?, 1)?;
    p.send(4 * ep.rank(), &1u32.to_ne_bytes())?;
    if how == "hang" {
        // A word the victim never writes: nothing here looks at its death.
        while r.load_u32(2048)? == 0 {
            std::thread::park_timeout(std::time::Duration::from_millis(10));
        }
    }
    let start = std::time::Instant::now();
    loop {
        match p.send(2048, &[0u8; 64]) {
            Ok(()) => std::thread::yield_now(),
            Err(Error::PeerLost(_)) => break,
            Err(e) => return Err(e),
        }
        assert!(
            start.elapsed().as_secs() < 60,
            "the victim's death was never reported"
        );
    }
    println!("rank {} saw rank {victim} go", ep.rank());
    Ok(())
}
