//! The SHRIMP RPC front end (seed 003 §5): interface files, parsed with nom, generating a
//! client stub, a server trait and a dispatcher for the `srpc` runtime.
//!
//! # The interface language
//!
//! ```text
//! file      = item*
//! item      = "const" NAME "=" NUMBER ";"
//!           | "struct" NAME "{" (type NAME dim? ";")* "}" ";"?
//!           | "typedef" type NAME dim? ";"
//!           | "interface" NAME "{" proc* "}" ";"?
//! proc      = NUMBER ":" NAME "(" (param ("," param)*)? ")" ";"
//! param     = ("in" | "out" | "inout") type NAME dim?
//! type      = "i8" | "i16" | "i32" | "i64" | "u8" | "u16" | "u32" | "u64"
//!           | "f32" | "f64" | "bool"
//!           | "string" "<" size ">"            -- at most size bytes of UTF-8
//!           | "sequence" "<" type "," size ">" -- at most size elements
//!           | NAME                             -- a struct or a typedef
//! dim       = "[" size "]"                     -- a fixed array of exactly size elements
//! size      = NUMBER | NAME                    -- a constant
//! NUMBER    = decimal | "0x" hexadecimal
//! NAME      = [A-Za-z_][A-Za-z0-9_]*
//! ```
//!
//! Comments are `// ...` and `/* ... */`. Names may be used before their definition.
//! Procedures are numbered 1 to 65535 and return nothing: results are `out` and `inout`
//! parameters. Every type is bounded, so every procedure's arguments and results have a
//! fixed layout (natural alignment, `bool` as a 4-byte word, a 4-byte length before a string
//! or a sequence): the generator computes all offsets, and the binding's buffers are as large
//! as the largest procedure needs.
//!
//! Errors name `file:line:column`, show the line and put a caret under the column:
//!
//! ```text
//! calc.idl:2:18: error: expected `in`, `out` or `inout`
//!       1: f(in i32 a, bogus i32 b);
//!                      ^
//! ```
//!
//! # What is generated
//!
//! For `interface Calc { ... }`: `CALC_LAYOUT` (the binding's buffer sizes), `CalcClient`
//! (`bind(ep, server, mode)` and one method per procedure: `in` parameters by reference,
//! `out` and `inout` by mutable reference), the `CalcServer` trait (`in` parameters by value,
//! `out` as `srpc::Out` handles and `inout` as `InOut` handles that write straight into
//! the reply, so that over automatic update results travel while the procedure computes),
//! and `calc_dispatch(server, call)`. Structs become Rust structs with the runtime's `Wire`
//! encoding, typedefs type aliases, constants `u64` constants.
//!
//! From a build script: `stubgen::idl::to_out_dir("calc.idl")`; from the command line:
//! `stubgen srpc FILE [-o OUT.rs]`.

pub mod ast;
mod gen;
mod parse;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

pub use parse::parse;

/// Generates the Rust source for interface text `text` (named `file` in diagnostics).
pub fn generate(file: &str, text: &str) -> Result<String> {
    let idl = parse::parse(file, text)?;
    gen::generate(file, text, &idl)
}

/// Reads and generates `path`.
pub fn generate_file(path: &Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    generate(&path.display().to_string(), &text)
}

/// For build scripts: generates `path` into `$OUT_DIR/<stem>.rs` and returns that path.
pub fn to_out_dir(path: impl AsRef<Path>) -> Result<PathBuf> {
    let path = path.as_ref();
    println!("cargo:rerun-if-changed={}", path.display());
    let code = generate_file(path)?;
    let dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_else(|| ".".into()));
    let out = dir.join(format!(
        "{}.rs",
        path.file_stem().and_then(|s| s.to_str()).unwrap_or("idl")
    ));
    std::fs::write(&out, code).map_err(|source| Error::Io {
        path: out.clone(),
        source,
    })?;
    Ok(out)
}
