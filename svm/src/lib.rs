//! # svm: shared virtual memory over VMMC
//!
//! A shared address space for the processes (or, on the simulated SHRIMP, the nodes) of one
//! VMMC job, with release consistency and page-granularity coherence, under the three
//! protocols that seed 001 §4.2 compares, chosen at run time:
//!
//! - **HLRC** (home-based lazy release consistency; Zhou, Iftode and Li, OSDI '96): every
//!   page has a home node. The first write to a non-home page in an interval makes a *twin*;
//!   at the next release the word-granular *diff* against the twin goes to the home by
//!   deliberate update, and the home applies it. Write notices with vector timestamps travel
//!   with lock grants and barrier releases; an acquirer invalidates the pages they name. A
//!   fault on an invalid page fetches the whole page from its home once the home has applied
//!   every diff that the faulting node's notices require (per-page version vectors at the
//!   home). Applied diffs are discarded.
//! - **HLRC-AU**: the same, but each diff is written to the home page through an
//!   automatic-update binding as it is produced (seed 001 §4.2), followed by a small version
//!   record, instead of being buffered and sent as one deliberate-update message.
//! - **AURC** (automatic-update release consistency; Iftode, Dubnicki, Felten and Li, HPCA
//!   '96): every node's copy is bound to the home copies by automatic update, so every store
//!   to a non-home page propagates to its home as it is made: no twins and no diffs. A
//!   release flushes the bindings and then sends the homes the new per-page timestamps
//!   (ordered after the data on the same path), so a fetch that waits for a timestamp sees
//!   the stores.
//!
//! ```no_run
//! use svm::{Config, Placement, Protocol, Svm};
//! vmmc_run::run(|ep| -> vmmc::Result<()> {
//!     let mut s = Svm::new(ep, Config::from_env()?)?;       // SVM_PROTOCOL=hlrc|hlrc-au|aurc
//!     let a = s.alloc::<u64>(1 << 16, Placement::Blocked)?;  // collective, like G_MALLOC
//!     let (me, n) = (s.rank(), s.size());
//!     {
//!         let v = s.view(a);                                 // ends before the barrier
//!         for i in (me..a.len()).step_by(n) {
//!             v.set(i, i as u64)?;
//!         }
//!     }
//!     s.barrier()?;
//!     let sum: u64 = s.view(a).to_vec()?.iter().sum();
//!     assert_eq!(sum, (0..1u64 << 16).sum::<u64>());
//!     s.finish()?;
//!     Ok(())
//! })?;
//! # Ok::<(), vmmc::Error>(())
//! ```
//!
//! ## The API
//! [`Svm::new`] sets the space up (collective; [`Config`] or `SVM_PROTOCOL`, `SVM_SPACE`,
//! `SVM_PAGE`, `SVM_LOCKS`, `SVM_FLAGS`, `SVM_NOTICE_AREA`, `SVM_COMBINING`, `SVM_ASYNC`).
//! [`Svm::alloc`] is SPLASH-2's `G_MALLOC` with a [`Placement`] of the homes. Data is read
//! and written through a [`View`] of a [`Shared`] array; a view borrows the `Svm` and every
//! synchronisation call ([`Svm::acquire`], [`Svm::release`], [`Svm::barrier`],
//! [`Svm::flag_set`], [`Svm::flag_wait`]) takes it mutably, so the borrow checker ends every
//! view at a synchronisation point. [`Svm::stats`] and [`Svm::gather_stats`] report what
//! the protocol did ([`Stats`]).
//!
//! ## Access detection
//! Accesses go through checked accessors, not page protection: each access looks up its
//! page's state (invalid, read-only, writable) in this node's page table, and the first
//! read of an invalid page or the first write of an interval takes the protocol's *fault*
//! path. The same program therefore runs unchanged under the three protocols, on shm (one
//! process per node) and on the simulated SHRIMP, where all nodes are threads of one
//! process sharing one hardware page table and each node keeps its own copy of the space
//! and its own page states. AURC needs every store to a non-home page to pass through the
//! library anyway (stores propagate through [`vmmc::AutoUpdateBinding`], which on sim is the
//! modelled snooping, combining and outgoing FIFO). A fault charges the modelled cost
//! `costs.access_fault_ns` of the simulator's parameter file
//! ([`vmmc::pace::Cost::AccessFault`]), the SHRIMP SVM's protection trap. On shm the check
//! is a load and a branch per access (`benches`' `bench-svm` measures it).
//!
//! The accessors are built so that a program pays close to nothing for them where it
//! touches many elements: [`View::get`] and [`View::set`] inline the state check and a
//! plain load or store; [`View::for_each`] scans a range with one check per page; and
//! [`View::cursors`] gives write positions that advance element by element (a counting
//! sort's buckets) with one check per page each. Radix-SVM written this way runs on one node
//! within a few percent of the plain sequential sort (`shrimp overhead radix-svm`), where an
//! out-of-line check per key cost it 3x.
//!
//! ## Messages, notifications and polling
//! Each node exports its copy of the space, a version table (per page, the last interval of
//! each writer applied there) and a control buffer (see `wire`): an inbox ring per sender
//! for diffs, version records and flag sets (with their write notices); a request slot per
//! requester for page, lock and flag requests and a forward slot for lock requests passed
//! on; a reply slot and grant and barrier-release mailboxes. What
//! a node must *serve* while its program computes arrives with a notification, as in the
//! SHRIMP SVM (seed 001 Table 3): page requests, lock requests and their forwards, flag
//! waits, and the publication of diffs and version records. Replies (pages, grants, barrier
//! releases, ring credits) are polled by the node that waits for them, which serves its own
//! requests while it waits. On transports with remote read (shm), a fault reads the home's
//! version vector and the page directly (`get_data`) instead of sending a request; and each
//! node keeps an *awake* word in its control buffer, odd while its program is inside the
//! library and one more at every entry and exit: a sender reads it after its transfer and
//! notifies only a node that is not polling (the receiver marks the word, then looks at its
//! buffers once more, so nothing is missed). A node that is outside between two calls (a
//! program that acquires and releases in a loop) is not notified at once: the sender holds
//! the notification back for 5 us while it waits for its reply, and sends it only if the
//! word has not moved meanwhile (a node that came back in served the request itself);
//! what is held back when the call ends goes out then. A request whose reply the program
//! waits for (a page, a lock, a flag) does not even read the word as it goes out (the word
//! is a line its owner writes at every call): it reads it only when the reply is 2 us late,
//! and its notification is dropped when the reply comes. This took the contended lock
//! ping-pong on shm from 65,000 notifications per 135,000 hand-overs to a few hundred, and
//! its time per hand-over from 6-86 us to about 2 us on the 2-core machine. A wait follows
//! the core's one policy ([`vmmc::wait`]): it spins while that pays, yields where processes
//! outnumber cores, then sleeps on the process's doorbell, which every transfer into this
//! node's buffers (requests, replies, grants) rings, so that with more processes than cores
//! a waiter does not hold the core the process it waits for needs; it stays marked inside
//! the library meanwhile, since the doorbell wakes it to serve. On the simulated SHRIMP every
//! request is notified, as on SHRIMP, and waits are virtual.
//!
//! Locks are distributed queues without a fixed manager (Naimi and Tréhel's algorithm,
//! "A log(N) distributed mutual exclusion algorithm based on path reversal", JPDC 1996):
//! every node keeps, per lock, the node it last knew to request it; a request goes there
//! and moves on from node to node until it reaches the tail of the queue, and every node
//! it passes takes the requester as the new tail. The tail grants the lock when it
//! releases it, with the write notices the requester lacks. Node `l mod N` holds lock
//! `l`'s token at first. Two nodes that pass a lock back and forth so talk to each other
//! only: a fixed manager per lock (TreadMarks' scheme, which this crate followed first)
//! put a third node in every hand-over, which with more processes than cores is usually
//! asleep (the contended ping-pong of `bench-svm` on shm with 4 processes on 2 cores went
//! from 190-1140 us per hand-over to a few microseconds). A node that holds a lock's token re-acquires it
//! without messages. Flags (Radix's prefix tree) are kept by a manager, node `flag mod N`:
//! a set goes to it with the write notices it does not hold yet from the setter (which
//! the manager keeps apart from what its own program has acquired), the flag keeps the
//! largest value set, and the manager grants each wait, once the flag reaches its value,
//! with every notice it holds that the waiter lacks: a wait sees the writes made before
//! every set taken in before it was granted, whatever their order and values. Barriers
//! are centralised at node 0, which merges the arrivals' write notices and checks that
//! every node made the same collective call.
//!
//! ## Limits
//! Diffs and AURC's propagation are word-granular: two nodes that write different bytes of
//! one 4-byte word between synchronisations race (SPLASH-2 programs share words or larger).
//! A node's program is one thread. Write notices are never garbage-collected, and those a
//! grant or a barrier release carries must fit `SVM_NOTICE_AREA` (default 4 MiB; the Barnes
//! example passes it with some hundreds of thousands of bodies). On sim, the
//! notification handler runs on its own thread outside the schedule: runs that rely on it
//! are correct but their virtual times are not exactly repeatable.
#![deny(missing_docs)]

mod clock;
mod config;
mod error;
mod service;
mod space;
pub mod stats;
mod wire;

pub use bytemuck::{Pod, Zeroable};
pub use config::{Config, Protocol};
pub use error::{Error, Result};
pub use space::{Cursors, Placement, Shared, Svm, View};
pub use stats::{RunStats, Stats};
