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

/// Rank 1's small buffer that a forged reply names as a zero-copy message's destination.
const SMALL: u32 = 0x0d0e_0002;

/// A descriptor with a transfer id, a buffer id and a byte count (the zero-copy kinds).
fn zero_copy_descriptor(kind: u32, len: u64, id: u32, buf: u32, n: u32, seq: u32) -> [u8; HDR] {
    let mut b = descriptor(kind, len, seq);
    b[32..36].copy_from_slice(&id.to_ne_bytes());
    b[36..40].copy_from_slice(&buf.to_ne_bytes());
    b[40..44].copy_from_slice(&n.to_ne_bytes());
    b
}

/// Joins the job and NX, rank 1 exporting first its handshake words ([`DONE`]: word 0 says
/// that rank 0 is ready for the forged descriptors, word 1 that it has checked them) and, with
/// `small`, a 4 KiB buffer [`SMALL`] (returned, to stay exported while the test runs).
fn join(small: bool) -> (vmmc::Endpoint, vmmc::Region, Nx, Option<vmmc::Region>) {
    let ep = vmmc_run::init().expect("join the job");
    let done = ep.alloc(4096, MemKind::Shared).expect("alloc");
    let mut kept = None;
    if ep.rank() == 1 {
        ep.export(DONE, &done, ExportOptions::new())
            .expect("export");
        if small {
            let b = ep.alloc(4096, MemKind::Shared).expect("alloc");
            ep.export(SMALL, &b, ExportOptions::new()).expect("export");
            kept = Some(b);
        }
    }
    let nx = Nx::new(ep.clone()).expect("join NX");
    (ep, done, nx, kept)
}

/// Rank 1: waits for rank 0's word 0, then returns rank 0's receive buffer for rank 1 and
/// the size of its packet buffers.
fn rank0_buffer(ep: &vmmc::Endpoint, done: &vmmc::Region) -> (vmmc::Proxy, usize) {
    let rank0 = ep.proc_of(0).unwrap();
    done.wait_u32(0, |v| v == 1, || ep.check_peer(rank0))
        .expect("rank 0 is ready");
    let raw = ep
        .import(rank0, CONN_FROM_1)
        .expect("import rank 0's buffer for rank 1");
    let slot = (raw.len() - 8 - SLOTS * 8) / SLOTS;
    (raw, slot)
}

/// Rank 1: stays until rank 0's word 1 (a rank that leaves early is a lost peer).
fn until_checked(ep: &vmmc::Endpoint, done: &vmmc::Region) {
    let rank0 = ep.proc_of(0).unwrap();
    done.wait_u32(4, |v| v == 1, || ep.check_peer(rank0))
        .expect("rank 0 checks");
}

/// Rank 0: sets rank 1's handshake word `word`.
fn tell(ep: &vmmc::Endpoint, word: usize) {
    ep.import(ep.proc_of(1).unwrap(), DONE)
        .and_then(|p| p.send(word * 4, &1u32.to_ne_bytes()))
        .expect("tell rank 1");
}

/// Rank 0 posts a receive; rank 1 then sends it a zero-copy message's scout and, as a
/// sender whose write of the data failed, the done descriptor flagged "failed" (0x800) for
/// the buffer that rank 0's reply names (the first zero-copy buffer id, 0x5000_0000), then a
/// one-copy message of 8 bytes. Rank 0's receive of the zero-copy message fails with the
/// sender's failure instead of waiting for ever for data that will not come, and the next
/// message still arrives.
fn failed_body() {
    let (ep, done, nx, _) = join(false);
    const LEN: u64 = 64 << 10;
    if nx.mynode() == 1 {
        let (raw, slot) = rank0_buffer(&ep, &done);
        raw.send(slot - HDR, &zero_copy_descriptor(2, LEN, 7, 0, 0, 1))
            .unwrap();
        let failed = zero_copy_descriptor(4 | 0x800, 0, 7, 0x5000_0000, 0, 2);
        raw.send(2 * slot - HDR, &failed).unwrap();
        let mut msg = b"after!!!".to_vec();
        msg.extend_from_slice(&descriptor(1, 8, 3));
        raw.send(3 * slot - HDR - 8, &msg).unwrap();
        until_checked(&ep, &done);
        return;
    }
    // Posted first, so that the scout meets it and is answered before the done comes.
    let mid = nx.irecv(-1, vec![0u8; LEN as usize]).expect("irecv");
    tell(&ep, 0);
    let e = nx
        .msgwait(mid)
        .expect_err("a zero-copy message whose sender failed");
    assert!(matches!(e, nx::NxError::SendFailed { node: 1 }), "{e}");
    assert!(e.to_string().contains("node 1 failed to write"), "{e}");
    let mut buf = [0u8; 64];
    let n = nx.crecv(-1, &mut buf).expect("the next message");
    assert_eq!(&buf[..n], b"after!!!");
    tell(&ep, 1);
}

#[test]
fn a_zero_copy_receive_fails_when_its_sender_could_not_write() {
    as_job(
        "a_zero_copy_receive_fails_when_its_sender_could_not_write",
        2,
        &[],
        failed_body,
    );
}

/// Rank 1 answers rank 0's zero-copy send (an `isend` of 256 KiB) with a forged reply that
/// names a 4 KiB buffer for all of it. Rank 0's write into it fails; `msgwait` reports that
/// error (it neither hangs nor reports success), and the request is then released.
fn bad_reply_body() {
    let (ep, done, nx, _small) = join(true);
    const LEN: usize = 256 << 10;
    if nx.mynode() == 1 {
        let (raw, slot) = rank0_buffer(&ep, &done);
        // The first zero-copy send of rank 0 is transfer 1.
        let reply = zero_copy_descriptor(3, 0, 1, SMALL, LEN as u32, 1);
        raw.send(slot - HDR, &reply).unwrap();
        until_checked(&ep, &done);
        return;
    }
    let mid = nx.isend(5, vec![0x5a; LEN], 1, 0).expect("isend");
    tell(&ep, 0);
    let e = nx.msgwait(mid).expect_err("a write past the named buffer");
    assert!(
        e.to_string()
            .contains("outside the 4096-byte receive buffer"),
        "{e}"
    );
    assert!(
        nx.msgwait(mid)
            .is_err_and(|e| matches!(e, nx::NxError::InvalidMid(_))),
        "the failed request is released"
    );
    tell(&ep, 1);
}

#[test]
fn a_zero_copy_send_fails_cleanly_on_a_reply_it_cannot_write() {
    as_job(
        "a_zero_copy_send_fails_cleanly_on_a_reply_it_cannot_write",
        2,
        &[("NX_THRESHOLD", "8192")],
        bad_reply_body,
    );
}
