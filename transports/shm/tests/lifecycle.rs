//! Imports are freed when they end: unimport, or dropping the last handle, releases the
//! DestSpace span and the transport's descriptors and mappings. Thousands of cycles must not
//! run the process out of descriptors or DestSpace.

use std::sync::Arc;
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, ExportOptions, MemKind, WriteOpts};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn import_cycles_release_everything() {
    let env = BootEnv::from_lookup(&|_| None).unwrap();
    let ep = Endpoint::new(Arc::new(vmmc_shm::ShmTransport::connect(&env).unwrap())).unwrap();
    let r = ep.alloc(4096, MemKind::Shared).unwrap();
    ep.export(1, &r, ExportOptions::new()).unwrap();
    // Warm up (the owner's notification ring is mapped once and kept).
    drop(ep.import(ep.me(), 1).unwrap());
    let before = open_fds();
    let mut last_addr = 0;
    for i in 0..3000u32 {
        let p = ep.import(ep.me(), 1).unwrap();
        p.send(0, &i.to_ne_bytes()).unwrap();
        last_addr = p.dest_addr();
        if i % 2 == 0 {
            ep.unimport(p).unwrap();
        } else {
            let q = p.clone();
            drop(p);
            q.send(4, &i.to_ne_bytes()).unwrap(); // a clone keeps the import alive
            drop(q); // the last handle unimports
        }
    }
    assert_eq!(
        open_fds(),
        before,
        "descriptors leaked by import/unimport cycles"
    );
    assert_eq!(r.load_u32(0).unwrap(), 2999);
    assert!(
        ep.send_at(last_addr, &[0; 4], WriteOpts::default())
            .is_err(),
        "the address of a dropped proxy no longer translates"
    );
}
