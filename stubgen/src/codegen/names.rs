//! How interface names become Rust identifiers, and the lint allowances they need.

use proc_macro2::{Ident as RIdent, Literal, Span, TokenStream};
use quote::{format_ident, quote};

/// Rust keywords (strict, reserved and edition-2024) that cannot be plain identifiers.
pub const RUST_KEYWORDS: &[&str] = &[
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern",
    "false", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub",
    "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true", "type",
    "unsafe", "use", "where", "while", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen", "_",
];

/// Type names the generated code relies on (primitives, crates): user types are renamed.
pub const RESERVED_TYPE_NAMES: &[&str] = &[
    "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize", "f32",
    "f64", "bool", "char", "str", "rpc", "std", "core", "alloc", "serde",
];

/// An identifier safe to use in Rust for `name`.
pub fn rust_ident(name: &str) -> RIdent {
    match name {
        "self" | "Self" | "super" | "crate" | "_" => format_ident!("{}_", name),
        n if RUST_KEYWORDS.contains(&n) => RIdent::new_raw(n, Span::call_site()),
        n => RIdent::new(n, Span::call_site()),
    }
}

/// A type identifier safe to use in Rust for `name`.
pub fn type_ident(name: &str) -> RIdent {
    if RESERVED_TYPE_NAMES.contains(&name) {
        format_ident!("{}_", name)
    } else {
        rust_ident(name)
    }
}

/// `NFS_VERSION` → `NfsVersion`.
pub fn camel_case(name: &str) -> String {
    let mut out = String::new();
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.extend(first.to_uppercase());
            out.extend(chars.flat_map(char::to_lowercase));
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'V');
    }
    out
}

/// An unsuffixed integer literal.
pub fn lit(n: u64) -> Literal {
    Literal::u64_unsuffixed(n)
}

/// Whether `name` follows Rust's type naming (UpperCamelCase).
pub fn is_camel(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase()) && !name.contains('_')
}

/// `#[allow(non_camel_case_types)]` for a type named as rpcgen users write them (`nfsstat`),
/// and for its variants.
pub fn allow_type_name(name: &str, variants: &[&str]) -> TokenStream {
    if is_camel(name) && variants.iter().all(|v| is_camel(v)) {
        quote!()
    } else {
        quote!(#[allow(non_camel_case_types)])
    }
}

/// `#[allow(non_snake_case)]` when one of `names` has capitals.
pub fn allow_snake(names: &[&str]) -> TokenStream {
    if names
        .iter()
        .any(|n| n.chars().any(|c| c.is_ascii_uppercase()))
    {
        quote!(#[allow(non_snake_case)])
    } else {
        quote!()
    }
}

/// `#[allow(non_upper_case_globals)]` for a constant with lower-case letters.
pub fn allow_upper(name: &str) -> TokenStream {
    if name.chars().any(|c| c.is_ascii_lowercase()) {
        quote!(#[allow(non_upper_case_globals)])
    } else {
        quote!()
    }
}
