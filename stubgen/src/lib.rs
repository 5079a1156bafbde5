//! Stub generators: an rpcgen-compatible front end for .x files.
