//! stubgen's generators as function-like proc macros, for crates that would rather not have
//! a build script:
//!
//! ```ignore
//! mod calc {
//!     stubgen_macros::srpc!("idl/calc.idl");      // SHRIMP RPC: CalcClient, CalcServer, ...
//! }
//! mod nfs {
//!     stubgen_macros::rpcgen!("proto/nfs_prot.x"); // SunRPC: types, clients, server traits
//! }
//! ```
//!
//! The path is relative to the crate's root (`CARGO_MANIFEST_DIR`). The expansion is what
//! `stubgen srpc FILE` / `stubgen rpcgen FILE` print, plus an `include_bytes!` of the file so
//! that Cargo rebuilds when it changes. A file that does not generate is a compile error
//! carrying the generator's diagnostic (`file:line:column`, the line and a caret).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::Span;
use quote::quote;
use std::path::{Path, PathBuf};
use syn::LitStr;

/// Expands to the SHRIMP RPC stubs of an interface file (see `stubgen::idl`).
#[proc_macro]
pub fn srpc(input: TokenStream) -> TokenStream {
    expand(input, Front::Srpc)
}

/// Expands to the Rust of an rpcgen `.x` file (through the C preprocessor, as `stubgen
/// rpcgen` runs it).
#[proc_macro]
pub fn rpcgen(input: TokenStream) -> TokenStream {
    expand(input, Front::Rpcgen)
}

#[derive(Clone, Copy)]
enum Front {
    Srpc,
    Rpcgen,
}

fn expand(input: TokenStream, front: Front) -> TokenStream {
    let lit = match syn::parse::<LitStr>(input) {
        Ok(l) => l,
        Err(e) => return e.to_compile_error().into(),
    };
    let root = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(PathBuf::new, PathBuf::from);
    match generate(&root, &lit.value(), front) {
        Ok(tokens) => tokens.into(),
        Err(message) => syn::Error::new(lit.span(), message)
            .to_compile_error()
            .into(),
    }
}

/// The expansion for the file `rel` (relative to `root`), or the error to report.
fn generate(root: &Path, rel: &str, front: Front) -> Result<proc_macro2::TokenStream, String> {
    let path = root.join(rel);
    let code = match front {
        Front::Srpc => stubgen::idl::generate_file(&path),
        Front::Rpcgen => stubgen::rpcgen_file(&path),
    }
    .map_err(|e| e.to_string())?;
    let tokens: proc_macro2::TokenStream = code
        .parse()
        .map_err(|e| format!("stubgen produced code that does not lex: {e}"))?;
    let file = LitStr::new(&path.display().to_string(), Span::call_site());
    Ok(quote! {
        const _: &[u8] = include_bytes!(#file);
        #tokens
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_file_is_an_error_with_its_position() {
        let dir = std::env::temp_dir().join(format!("stubgen-macros-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("bad.idl"),
            "interface X {\n  1: f(bogus i32 a);\n}\n",
        )
        .unwrap();
        let e = generate(&dir, "bad.idl", Front::Srpc).unwrap_err();
        assert!(e.contains("bad.idl:2:8"), "{e}");
        assert!(e.contains('^'), "{e}");
        let e = generate(&dir, "missing.idl", Front::Srpc).unwrap_err();
        assert!(e.contains("missing.idl"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
