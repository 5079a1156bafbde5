//! Stub generators: an rpcgen-compatible front end for `.x` files generating code for the
//! `rpc` crate ([`rpcgen`], [`ast`], [`codegen`]), and the SHRIMP RPC front end for interface
//! files generating code for the `srpc` runtime ([`idl`]). Both report errors the same way
//! ([`Diagnostic`]: `file:line:column`, the line, a caret) and emit Rust through
//! proc-macro2, quote and prettyplease.
//!
//! The pipeline: the C preprocessor (as rpcgen runs it: `cpp -C -DRPC_HDR`) → [`rpcgen`]'s
//! lexer and parser, which follow cpp's line markers so that every diagnostic names the
//! original `file:line:column` and shows the offending line → [`ast::Spec`] → [`codegen`],
//! which resolves constants, checks names and emits Rust tokens formatted by prettyplease.
//! See [`codegen`] for what is generated (types, clients, server traits) and how names map.
//!
//! From a build script:
//!
//! ```no_run
//! // build.rs
//! stubgen::rpcgen_to_out_dir("proto/nfs_prot.x").unwrap();
//! // lib.rs: mod nfs { include!(concat!(env!("OUT_DIR"), "/nfs_prot.rs")); }
//! ```
//!
//! From the command line: `stubgen rpcgen FILE.x [-o OUT.rs] [-D NAME[=VALUE]] [-I DIR]
//! [--cpp CPP] [--strict] [-a]`; `-a` (as rpcgen's) also writes a sample client and server,
//! `OUT_client.rs` and `OUT_server.rs`, beside `OUT.rs` ([`codegen::generate_samples`]).
//!
//! Types named but not defined in the input (rpcgen passes them to C unchanged) are either
//! system types the generator knows (`u_int`, `uint32_t`, `rpcprog_t`, `netobj`, `des_block`,
//! `netbuf`, ...) or assumed to come from another `.x` file: the generated code then expects
//! them in scope, and a warning says so ([`Rpcgen::strict`] makes it an error). Constants
//! resolve, in order, to `const` definitions, enum values, program/version/procedure names,
//! numeric `%#define NAME value` pass-through lines (rpcsvc's nlm_prot.x needs it), and the
//! standard ONC RPC names (`AUTH_NONE`, `AUTH_SYS`, `RPCSEC_GSS`, the portmapper and rpcbind
//! numbers, ...). Any other name is a constant expected in scope, as C would take it from a
//! header the file `%#include`s: the generated code casts it where it is used (`{ MAXPATHLEN
//! as u32 }` as a bound, a match guard as a case label or procedure number) and a warning says
//! so; `strict` refuses it.
//!
//! A definition repeated word for word (a file included twice) is accepted and generated
//! once, as rpcgen accepts it; a repetition that differs is refused with both locations.
//! Beyond rpcgen, the Linux kernel's xdrgen `pragma` lines are understood ([`ast::Pragma`]):
//! `exclude` leaves a procedure out of the client, server trait and dispatcher; `header`,
//! `big_endian`, `public`, `pages` and `skip` concern its C output and change nothing here.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod ast;
pub mod codegen;
pub mod error;
pub mod idl;
pub mod rpcgen;

use std::path::{Path, PathBuf};

pub use error::{Diagnostic, Error, Location, Result};
pub use rpcgen::Rpcgen;

impl Rpcgen {
    /// Reads `path` (through the preprocessor) and returns the generated Rust source and the
    /// warnings (with their source lines).
    pub fn generate_file(&self, path: &Path) -> Result<codegen::Output> {
        let parsed = self.parse_file_with_lines(path)?;
        finish(parsed, &self.codegen_options())
    }
}

impl Rpcgen {
    /// Reads `path` and returns rpcgen `-a`'s sample client and server, which include the
    /// generated code from `<stem>.rs` beside them.
    pub fn generate_samples_file(&self, path: &Path, stem: &str) -> Result<codegen::Samples> {
        let parsed = self.parse_file_with_lines(path)?;
        codegen::generate_samples(&parsed.spec, &self.codegen_options(), stem)
            .map_err(|e| rpcgen::attach_source_line(e, &parsed.lines))
    }
}

fn finish(parsed: rpcgen::Parsed, options: &codegen::Options) -> Result<codegen::Output> {
    let mut out = codegen::generate(&parsed.spec, options)
        .map_err(|e| rpcgen::attach_source_line(e, &parsed.lines))?;
    for w in &mut out.warnings {
        let e = rpcgen::attach_source_line(Error::Source(Box::new(w.clone())), &parsed.lines);
        if let Error::Source(d) = e {
            *w = *d;
        }
    }
    Ok(out)
}

/// Generates Rust source from the `.x` file at `path` with the default settings.
pub fn rpcgen_file(path: impl AsRef<Path>) -> Result<String> {
    Ok(Rpcgen::new().generate_file(path.as_ref())?.code)
}

/// Generates Rust from already-preprocessed `.x` text (`file` names it in diagnostics).
pub fn rpcgen_source(
    text: &str,
    file: &str,
    options: &codegen::Options,
) -> Result<codegen::Output> {
    finish(rpcgen::parse_with_lines(text, file)?, options)
}

/// For build scripts: generates `$OUT_DIR/<stem>.rs` from the `.x` file at `path`, tells Cargo
/// to rerun when the file changes, passes warnings on as Cargo warnings, and returns the written
/// path.
pub fn rpcgen_to_out_dir(path: impl AsRef<Path>) -> Result<PathBuf> {
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| Error::Io {
        path: PathBuf::from("$OUT_DIR"),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "OUT_DIR is not set"),
    })?;
    let path = path.as_ref();
    let (out, warnings) = rpcgen_to_dir(path, Path::new(&out_dir))?;
    println!("cargo:rerun-if-changed={}", path.display());
    for w in &warnings {
        println!("cargo:warning={}", w.to_string().replace('\n', " "));
    }
    Ok(out)
}

/// Generates `<dir>/<stem>.rs` from the `.x` file at `path` with the default settings; returns
/// the written path and the warnings.
pub fn rpcgen_to_dir(path: &Path, dir: &Path) -> Result<(PathBuf, Vec<Diagnostic>)> {
    let stem = path.file_stem().unwrap_or(path.as_os_str());
    let out = dir.join(stem).with_extension("rs");
    let generated = Rpcgen::new().generate_file(path)?;
    std::fs::write(&out, generated.code).map_err(|source| Error::Io {
        path: out.clone(),
        source,
    })?;
    Ok((out, generated.warnings))
}
