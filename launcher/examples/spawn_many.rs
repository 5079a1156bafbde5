//! Concurrent spawns: every rank spawns `SPAWNS` processes (default 3) at once on this host.
//! Each spawned process writes its rank into every initial rank's buffer (word `rank - size`)
//! and waits for its parent's word in its own buffer; every rank waits for all of them.
//!
//! `vmmc-run -n 2 --spawn-slots 6 -- target/debug/examples/spawn_many`

use vmmc::{Error, ExportOptions, MemKind};

const LEN: usize = 4096;

fn main() {
    if let Err(e) = run() {
        eprintln!("spawn_many: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Error> {
    let ep = vmmc_run::init()?;
    let args: Vec<String> = std::env::args().collect();
    let buf = ep.alloc(LEN, MemKind::Shared)?;
    ep.export(1, &buf, ExportOptions::new())?;
    if let Some(n) = args.get(2).filter(|_| args[1] == "--child") {
        let ranks: usize = n.parse().map_err(|_| Error::InvalidArgument("ranks"))?;
        let me = ep.rank() as u32;
        for r in 0..ranks {
            let p = ep.import(ep.proc_of(r)?, 1)?;
            p.send(4 * (ep.rank() - ranks), &me.to_ne_bytes())?;
        }
        let parent = ep.parent().ok_or(Error::InvalidArgument("no parent"))?;
        buf.wait_u32(0, |v| v == 0xAB, || ep.check_peer(parent))?;
        return Ok(());
    }
    let k: usize = std::env::var("SPAWNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let (size, host) = (ep.size(), ep.session_hosts()[0].clone());
    let me = std::env::current_exe().map_err(|e| Error::io("current_exe", e))?;
    let me = me.to_string_lossy().into_owned();
    let mut kids = Vec::new();
    for _ in 0..k {
        kids.push(ep.spawn(&host, &me, &["--child".into(), size.to_string()])?);
    }
    for c in &kids {
        ep.import(*c, 1)?.send(0, &0xABu32.to_ne_bytes())?;
    }
    // Every spawned process of every rank writes its rank here: size * k words.
    for i in 0..size * k {
        let mut v = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while v == 0 {
            v = buf.load_u32(4 * i)?;
            if std::time::Instant::now() > deadline {
                return Err(Error::Protocol(format!(
                    "no word {i} from a spawned process"
                )));
            }
            std::thread::yield_now();
        }
        if v as usize != size + i {
            return Err(Error::Protocol(format!("word {i} is {v}")));
        }
    }
    println!(
        "rank {} spawned {} and heard from all {} spawned processes",
        ep.rank(),
        kids.iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        size * k
    );
    Ok(())
}
