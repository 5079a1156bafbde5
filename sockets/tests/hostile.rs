//! A peer that forges connection requests (issue 24): rank 1 writes requests straight into
//! rank 0's listen buffer (a ring capacity that is no power of two, a ring id outside the ring
//! range, a ring id it never exported), then connects properly. The listener rejects and
//! counts the forged ones without waiting on them, and the real connection works.

use sockets::{JobListener, VmmcStream, BACKLOG, LISTEN_BASE};
use std::io::{ErrorKind, Read, Write};
use vmmc_run::testing::Job;

const PORT: u16 = 17;
const SLOT: usize = 16;

fn forged(id: u32, cap: u32, seq: u32) -> [u8; SLOT] {
    let mut b = [0u8; SLOT];
    for (i, w) in [id, cap, 0, seq].into_iter().enumerate() {
        b[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
    b
}

fn body() {
    let ep = vmmc_run::init().unwrap();
    if ep.rank() == 0 {
        let l = JobListener::bind(&ep, PORT).expect("bind");
        let (mut s, from) = l.accept().expect("the real connection");
        assert_eq!(from, 1);
        let mut b = [0u8; 5];
        s.read_exact(&mut b).expect("read");
        assert_eq!(&b, b"hello");
        // The forged requests: taken, refused, counted; none holds up accept.
        l.set_nonblocking(true).unwrap();
        match l.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("a forged request was accepted: {:?}", other.map(|x| x.1)),
        }
        assert_eq!(l.rejected(), 3, "forged requests rejected");
        s.write_all(b"bye").expect("write");
    } else {
        let owner = ep.proc_of(0).unwrap();
        let listen = ep
            .import(owner, LISTEN_BASE + u32::from(PORT))
            .expect("import the listen buffer");
        let base = ep.rank() * BACKLOG;
        let reqs = [
            forged(0x3001_0000, 5000, 7),          // capacity not a power of two
            forged(0x0000_0042, 4096, 7),          // not a ring id
            forged(0x3001_0000 + 77_777, 4096, 7), // a ring id never exported
        ];
        for (k, r) in reqs.iter().enumerate() {
            listen
                .send((base + BACKLOG - 1 - k) * SLOT, r)
                .expect("forge a request");
        }
        let mut s = VmmcStream::connect_job(&ep, 0, PORT).expect("connect");
        s.write_all(b"hello").expect("write");
        let mut b = [0u8; 3];
        s.read_exact(&mut b).expect("read");
        assert_eq!(&b, b"bye");
    }
}

#[test]
fn forged_connection_requests_are_rejected_and_counted() {
    Job::new("forged_connection_requests_are_rejected_and_counted", 2).run_ok(body);
}
