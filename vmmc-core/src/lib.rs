//! # vmmc: virtual memory-mapped communication
//!
//! The VMMC model of the SHRIMP project (seeds 000 and 004) as a safe Rust API over pluggable
//! transports. A receiver [exports](Endpoint::export) a region as a receive buffer; a sender
//! [imports](Endpoint::import) it and gets a [`Proxy`], its range of DestSpace; then it moves
//! data by deliberate update ([`Proxy::send`]) or automatic update
//! ([`AutoUpdateBinding::store_u32`]), with optional notifications, remote read
//! ([`Proxy::get_data`]) and transfer redirection ([`Endpoint::post_redir`]). There is no
//! receive operation: data lands in memory; a receiver checks a flag or takes a notification.
//!
//! Transports implement [`Transport`]; the core keeps the export table, permissions,
//! notification dispatch and automatic update. Programs get an [`Endpoint`] from the
//! launcher's environment through the bootstrap of the `vmmc-run` crate, and run unchanged
//! under every transport.
#![deny(missing_docs)]

pub mod au;
pub mod bootstrap;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod destspace;
pub mod emulate;
mod endpoint;
mod engine;
pub mod error;
pub mod notify;
pub mod pace;
pub mod redirect;
pub mod region;
pub mod registry;
pub mod transport;
pub mod types;
pub mod wait;

pub use au::{AuBatch, AuOptions, AutoUpdateBinding};
pub use endpoint::{Endpoint, ExportOptions, ImportRequest, Proxy, WeakEndpoint};
pub use engine::{AsyncGet, AsyncSend, AsyncStatus};
pub use error::{error_str, Error, Result};
pub use notify::Handler;
pub use redirect::Redirected;
pub use region::{MemKind, Region};
pub use transport::{
    Caps, ExportSpec, ImportPoll, RemoteBuffer, SpawnSpec, Transport, Window, WriteOpts,
};
pub use types::{
    page_size, BufId, Importers, JobInfo, NodeId, Notification, ProcId, Squid, VERSION, WORD_SIZE,
};
