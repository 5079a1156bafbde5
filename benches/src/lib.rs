//! Measuring helpers shared by the benchmark programs of shrimp-rs:
//!
//! - [`stats`]: the median, the message sizes of the sweep ([`sizes`]), and the measured
//!   points ([`stats::Sample`]) and named lines ([`stats::Series`]);
//! - [`cacheline`]: the two-thread cache-line ping-pong, the physical limit for a small message
//!   between two cores;
//! - [`report`]: the report of a run (series, baselines, ratios) as a table, JSON and an SVG
//!   plot.
//!
//! The programs: `pingpong` (VMMC strategies, under `vmmc-run -n 2`), `mpi-pingpong` (the MPI
//! baseline, feature `mpi`, under `mpirun -n 2`) and `bench-pingpong` (runs them all and writes
//! the report).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cacheline;
pub mod cli;
pub mod report;
pub mod ring;
pub mod stats;
pub mod tirpc;

pub use stats::{median, sizes};
