//! The algorithms, sequential and free of any communication library, shared by every library
//! version of an application (and by the plain sequential runs that measure the libraries'
//! overhead).

pub mod barnes;
pub mod dfs;
pub mod ocean;
pub mod radix;
pub mod render;
