fn main() -> Result<(), vmmc::Error> {
    let ep = vmmc_run::init()?;
    let n = ep.size();
    let me = ep.rank();
    let r = ep.alloc(8 * n, vmmc::MemKind::Shared)?;
    ep.export(7, &r, vmmc::ExportOptions::new())?;
    let mut ps = vec![];
    for q in 0..n {
        if q != me {
            ps.push(ep.import(ep.proc_of(q)?, 7)?);
        }
    }
    for p in &ps {
        p.send(4 * (n + me), &(100 + me as u32).to_ne_bytes())?;
        p.send(4 * me, &1u32.to_ne_bytes())?;
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let v: Vec<u32> = (0..2 * n).map(|o| r.load_u32(4 * o).unwrap()).collect();
    println!(
        "{me}: {v:?} {:?}",
        ps.iter().map(|p| p.owner()).collect::<Vec<_>>()
    );
    Ok(())
}
