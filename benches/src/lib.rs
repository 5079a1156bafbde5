//! Measuring helpers shared by the benchmark programs: statistics, the cache-line ping-pong
//! (the physical limit for a small message between two cores), and the report (table, JSON,
//! SVG plot).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod cacheline;
pub mod report;
pub mod stats;
