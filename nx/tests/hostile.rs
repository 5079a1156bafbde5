//! A peer that breaks the protocol (issue 24): rank 1 joins NX, then writes malformed
//! descriptors straight into rank 0's receive buffer for it (an unknown kind; a message longer
//! than its packet buffer). Rank 0's receives reject each with a protocol error that names
//! it: no panic, no hang, no message made up from the garbage.

mod common;

use common::as_job;
use nx::Nx;
use vmmc::{ExportOptions, MemKind};

/// NX's receive buffer for messages from rank 1 (`CONN_BASE + 1` in `nx::core`).
const CONN_FROM_1: u32 = 0x4e58_0001;
/// Bytes of a descriptor; its last word is the sequence number.
const HDR: usize = 48;
/// Packet buffers per connection (the default `NX_SLOTS`).
const SLOTS: usize = 16;

fn descriptor(kind: u32, len: u64, seq: u32) -> [u8; HDR] {
    let mut b = [0u8; HDR];
    b[0..4].copy_from_slice(&kind.to_ne_bytes());
    b[4..8].copy_from_slice(&(len as u32).to_ne_bytes());
    b[8..12].copy_from_slice(&((len >> 32) as u32).to_ne_bytes());
    b[HDR - 4..].copy_from_slice(&seq.to_ne_bytes());
    b
}

/// A word of rank 1's, outside NX's buffers: rank 0 sets it when it has checked both
/// descriptors, and rank 1 stays until then (a rank that leaves early is a lost peer to a
/// rank 0 still joining NX).
const DONE: u32 = 0x0d0e_0001;

fn body() {
    let ep = vmmc_run::init().expect("join the job");
    let done = ep.alloc(4096, MemKind::Shared).expect("alloc");
    if ep.rank() == 1 {
        ep.export(DONE, &done, ExportOptions::new())
            .expect("export");
    }
    let nx = Nx::new(ep.clone()).expect("join NX");
    // No NX traffic from rank 1 to rank 0 but the forged descriptors: they take the first
    // packet buffers and sequence numbers of the connection.
    if nx.mynode() == 1 {
        let ep = nx.endpoint();
        let raw = ep
            .import(ep.proc_of(0).unwrap(), CONN_FROM_1)
            .expect("import rank 0's buffer for rank 1");
        // total = SLOTS * slot + SLOTS * 8 (credits) + 8 (want, nudge)
        let slot = (raw.len() - 8 - SLOTS * 8) / SLOTS;
        // Packet buffer 0, sequence 1: a kind that does not exist.
        raw.send(slot - HDR, &descriptor(99, 4, 1)).unwrap();
        // Packet buffer 1, sequence 2: a one-copy message longer than a packet buffer.
        raw.send(2 * slot - HDR, &descriptor(1, 1 << 40, 2))
            .unwrap();
        let rank0 = ep.proc_of(0).unwrap();
        done.wait_u32(0, |v| v == 1, || ep.check_peer(rank0))
            .expect("rank 0 checks the descriptors");
        return;
    }
    let mut buf = [0u8; 64];
    let e = nx
        .crecv(-1, &mut buf)
        .expect_err("an unknown descriptor kind");
    assert!(e.to_string().contains("descriptor kind 99"), "{e}");
    let e = nx.crecv(-1, &mut buf).expect_err("an oversized packet");
    assert!(e.to_string().contains("packet"), "{e}");
    ep.import(ep.proc_of(1).unwrap(), DONE)
        .and_then(|p| p.send(0, &1u32.to_ne_bytes()))
        .expect("tell rank 1");
}

#[test]
fn malformed_descriptors_from_a_peer_are_rejected() {
    as_job(
        "malformed_descriptors_from_a_peer_are_rejected",
        2,
        &[],
        body,
    );
}
