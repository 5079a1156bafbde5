//! VRPC: ONC RPC over VMMC (seed 003 §4.2).
//!
//! The wire format, the call and reply headers, the dispatch and the generated stubs are the
//! SunRPC ones of the rest of this crate; only the network layer changes. A client binds with
//! [`VrpcClient::bind`] instead of [`TcpClient::connect`](crate::client::TcpClient::connect)
//! and hands the result to the same generated client (`FooV1Client::new(vrpc_client)`): both
//! implement [`Call`](crate::client::Call). A server serves the same generated
//! [`Service`](crate::server::Service)s with [`VrpcServer`].
//!
//! # The queues (seed 003 §4.2, "Data Structures")
//!
//! A binding is a pair of mappings, one per direction: each side exports a receive buffer that
//! the other imports and writes with deliberate updates. Each buffer is a cyclic queue of
//! `cap` bytes (a power of two) followed by the control words:
//!
//! ```text
//! [0, cap)     the ring: fragments, each a record-marking word (RFC 5531 §11: length, and
//!              the top bit on a record's last fragment) and the data, padded to a word
//! cap + 0      CREDIT  bytes of the *other* direction's ring the writer has consumed
//! cap + 4      TOTAL   bytes the writer has put into this ring so far (wrapping): the flag
//! cap + 8      CLOSED  non-zero once the writer has closed the binding
//! cap + 12..24 ACCEPT  the server's answer to a bind (in the client's buffer only)
//! cap + 24     RESTART the total at which the writer went back to the ring's start (0: none)
//! ```
//!
//! The seed keeps two reserved words, a flag and the total length written. Here the total is
//! the flag: it changes with every fragment and is written last, so a receiver that sees a
//! new total (an acquire load) sees the fragment (VMMC: within one send the last word becomes
//! visible last, and sends are in order). A fragment costs two deliberate updates: the data
//! (two when it wraps around the ring), then `[CREDIT, TOTAL]` in one. The credit rides on
//! every control update, so in the strict alternation of calls and replies no transfer is
//! spent on flow control: a call carries the credit for the previous reply and a reply the
//! credit for its call. A record larger than 64 KB (`MAX_FRAGMENT`, or half the
//! ring if that is less) travels in several fragments, which the receiver copies out while
//! the sender writes the next; the receiver then returns credit after each fragment but the
//! last, and the sender, which may write up to half a ring ahead, seldom waits.
//!
//! A writer that finds the ring empty (the credit has caught up with what it sent) and the
//! next fragment would end more than 64 KB into the ring goes back to the ring's start: it
//! writes the total it was at into RESTART (before the total that covers the fragment), and
//! the reader, finding RESTART equal to its own position, skips the rest of the ring and
//! clears the word. The records of a call-and-reply exchange then stay within the first
//! 64 KB of each ring, in the caches, instead of walking through all of it.
//!
//! # Where the copies are (seed 003 §4.2, Figure 6)
//!
//! The stream layer is folded into XDR: the client serializes the call header and the
//! arguments straight into its outgoing record, a buffer whose first word is kept for the
//! record mark, and that buffer is the source of the deliberate update into the server's
//! queue; no stream buffer, no copy on the sending side. Several fragments are cut from the
//! same buffer, each fragment's mark written over the last word of the previous fragment,
//! which has already left. The server's reply is encoded the same way. The receiver copies
//! a record once, from its queue into a buffer of its own, and decodes from there: the
//! generated dispatchers take the arguments as a byte slice, and (as the seed notes) removing
//! this last copy would mean changing the stub generator. (A receive buffer is also memory
//! that the peer writes at any time: the VMMC API hands out copies and words of it, never a
//! slice.)
//!
//! The seed's fastest VRPC used automatic update. Here automatic update is done in software
//! (stores go through the library, which propagates them), so marshalling into an automatic
//! update region would cost what marshalling into the record and one deliberate update cost,
//! without the single transfer: the queues use deliberate update.
//!
//! # Binding
//!
//! A server exports a *listen buffer* with the well-known id [`LISTEN_BASE`]` + port`
//! ([`DEFAULT_PORT`] unless told otherwise), one 16-byte slot per rank of the job. To bind, a
//! client exports its reply queue, imports the listen buffer and writes `[queue id, queue
//! size, bind sequence]` into the slot of its own rank (the sequence word last: it is the
//! flag). The server exports a call queue for that client alone (only the client may import
//! it), imports the client's queue and writes `[call queue id, call queue size, sequence]`
//! into its ACCEPT words; the client imports the call queue. A binding is to a server
//! process, not to a program: as over a TCP connection, each call names its program and
//! version, and a server that lacks them answers `PROG_UNAVAIL` or `PROG_MISMATCH`. Binding
//! by slot per rank needs no atomic operation across processes; bindings from threads of one
//! process to one server take turns.
//!
//! # Failures
//!
//! Every wait polls the peer ([`vmmc::Endpoint::check_peer`]): a dead server or client gives
//! [`Error::PeerLost`](crate::Error::PeerLost), never a hang; a closed binding gives
//! [`Error::ConnectionClosed`](crate::Error::ConnectionClosed); a client also gives up after
//! its timeout. The server never waits for one client: the fragments of a call that came,
//! and the rest of a reply its client has no room for yet, wait in their binding while it
//! serves the others (a binding whose call or reply has not moved for the server's timeout
//! ends). Malformed records (a fragment longer than the queue, a total that runs ahead
//! of the queue) end the binding with [`Error::BadMessage`](crate::Error::BadMessage); a
//! record over the size limit with [`Error::RecordTooLarge`](crate::Error::RecordTooLarge).
//! Calls that do not decode are answered `GARBAGE_ARGS`, as over TCP. After a failure the
//! client binds afresh on its next call, as [`StreamClient`](crate::client::StreamClient)
//! reconnects.
//!
//! # Example
//!
//! ```no_run
//! use rpc::client::Call;
//! use rpc::vrpc::{VrpcClient, VrpcServer};
//! # struct Echo;
//! # impl rpc::server::Service for Echo {
//! #     fn program(&self) -> u32 { 0x2000_0001 }
//! #     fn version(&self) -> u32 { 1 }
//! #     fn dispatch(&self, _: u32, _: &[u8], _: &mut Vec<u8>)
//! #         -> Result<(), rpc::server::DispatchError> { Ok(()) }
//! # }
//!
//! let ep = vmmc_run::init()?;
//! if ep.rank() == 0 {
//!     // Serve on this thread until one client has bound and gone.
//!     VrpcServer::builder(&ep).service(Echo).serve(1)?;
//! } else {
//!     let mut client = VrpcClient::bind(&ep, ep.proc_of(0)?)?;
//!     let () = client.call(0x2000_0001, 1, 0, &())?;
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod client;
mod link;
mod server;

pub use client::{BindOptions, Pause, VrpcClient};
pub use server::{ServerStats, VrpcServer, VrpcServerBuilder};

use vmmc::BufId;

/// Receive-buffer id of a VRPC server's listen buffer on port 0; port `p` uses
/// `LISTEN_BASE + p`.
pub const LISTEN_BASE: BufId = 0x4000_0000;
/// The port a server listens on and a client binds to unless told otherwise.
pub const DEFAULT_PORT: u16 = 0x0b01;
/// Default size of each direction's queue: a 64 KiB echo and its headers fit in one fragment.
pub const DEFAULT_QUEUE: usize = 256 << 10;
/// Smallest queue size accepted.
pub const MIN_QUEUE: usize = 256;
/// Largest queue size accepted.
pub const MAX_QUEUE: usize = 1 << 30;
