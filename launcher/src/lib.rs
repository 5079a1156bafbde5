//! # vmmc-run: launching VMMC jobs
//!
//! [`init`] is the one entry point that lets a program run unchanged under any transport: it
//! reads the launcher's environment ([`vmmc::bootstrap::BootEnv`]) and returns this process's
//! [`Endpoint`]. Protocol libraries never call it; they are handed the endpoint.
//!
//! ```no_run
//! let ep = vmmc_run::init()?;
//! println!("rank {} of {}", ep.rank(), ep.size());
//! # Ok::<(), vmmc::Error>(())
//! ```
//!
//! The `vmmc-run` binary starts the processes of a job (see its `--help`).
#![deny(missing_docs)]

use std::sync::Arc;
use vmmc::bootstrap::BootEnv;
use vmmc::{Endpoint, Error, Result};

/// The transports this build knows.
pub const TRANSPORTS: &[&str] = &["shm"];

/// Joins the job described by the environment and returns this process's endpoint.
pub fn init() -> Result<Endpoint> {
    init_with(&BootEnv::from_env()?)
}

/// Joins the job described by `env`.
pub fn init_with(env: &BootEnv) -> Result<Endpoint> {
    match env.transport.as_str() {
        "shm" => Endpoint::new(Arc::new(vmmc_shm::ShmTransport::connect(env)?)),
        other => Err(Error::Bootstrap(format!(
            "transport {other:?} is not built in (this build has: {})",
            TRANSPORTS.join(", ")
        ))),
    }
}
