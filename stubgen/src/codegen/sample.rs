//! rpcgen's `-a`: a sample client and a sample server for an interface, to start from.
//!
//! The server implements every procedure of every version with a placeholder result (zeros,
//! empty sequences, the first enum member or union arm, no optional data) and serves them
//! with the generated `serve_<program>` (TCP and UDP, registered with rpcbind). The client
//! finds the server through rpcbind on the host given as its first argument (default
//! 127.0.0.1), calls every procedure with placeholder arguments and prints the results.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use super::builtins::{builtin_struct, builtin_type};
use super::names::*;
use super::{Context, TypeKind};
use crate::ast::*;
use crate::error::{Error, Result};

/// How deep placeholder values may nest (types are finite, see `check_finite_types`).
const MAX_DEPTH: usize = 64;

impl Context<'_> {
    /// A placeholder value of `ty`.
    fn sample(&self, ty: &Ty, depth: usize) -> Result<TokenStream> {
        if depth > MAX_DEPTH {
            return Err(Error::Internal("sample values nest too deep".into()));
        }
        Ok(match ty {
            Ty::Void => quote!(()),
            Ty::Int | Ty::UInt | Ty::Hyper | Ty::UHyper => quote!(0),
            Ty::Float | Ty::Double => quote!(0.0),
            Ty::Bool => quote!(false),
            Ty::Quadruple | Ty::FixedOpaque(_) => quote!(::core::default::Default::default()),
            Ty::VarOpaque(_) | Ty::String(_) | Ty::VarArray(..) => {
                quote!(::std::vec::Vec::new().into())
            }
            Ty::Optional(_) => quote!(::core::option::Option::None),
            Ty::FixedArray(t, _) => {
                let v = self.sample(t, depth + 1)?;
                quote!(::rpc::xdr::FixedArray::from(::core::array::from_fn(|_| #v)))
            }
            Ty::Named(id) => match self.types.get(id.name.as_str()) {
                Some((TypeKind::Typedef(t), _)) => self.sample(t, depth + 1)?,
                Some((TypeKind::Enum(e), _)) => {
                    let t = type_ident(&e.name.name);
                    let m = e.values.first().map(|(m, _)| rust_ident(&m.name));
                    quote!(#t::#m)
                }
                Some((TypeKind::Struct, _)) | Some((TypeKind::Union, _)) => {
                    let def = self.defs.get(id.name.as_str()).copied();
                    match def {
                        Some(Definition::Struct(s)) => self.sample_struct(s, depth)?,
                        Some(Definition::Union(u)) => self.sample_union(u, depth)?,
                        _ => quote!(::core::default::Default::default()),
                    }
                }
                None => match (builtin_type(&id.name), builtin_struct(&id.name)) {
                    (Some(t), _) => self.sample(&t, depth + 1)?,
                    (None, Some(s)) => self.sample_struct(&s, depth)?,
                    // Defined elsewhere: whatever its default is.
                    (None, None) => quote!(::core::default::Default::default()),
                },
            },
        })
    }

    fn sample_struct(&self, s: &StructDef, depth: usize) -> Result<TokenStream> {
        let t = type_ident(&s.name.name);
        let mut fields = Vec::new();
        for f in &s.fields {
            let Some(n) = &f.name else { continue };
            let n = rust_ident(&n.name);
            let v = self.sample(&f.ty, depth + 1)?;
            fields.push(quote!(#n: #v));
        }
        Ok(quote!(#t { #(#fields),* }))
    }

    fn sample_union(&self, u: &UnionDef, depth: usize) -> Result<TokenStream> {
        let t = type_ident(&u.name.name);
        let Some(arm) = u.arms.first() else {
            return Ok(quote!(::core::default::Default::default()));
        };
        let Some(label) = arm.cases.first() else {
            return Ok(quote!(::core::default::Default::default()));
        };
        // The variant naming of `gen_union`.
        let vname = match label {
            Value::Name(id) => id.name.clone(),
            Value::Number(n, _) if *n < 0 => format!("CaseNeg{}", n.unsigned_abs()),
            Value::Number(n, _) => format!("Case{n}"),
        };
        let v = rust_ident(&vname);
        Ok(match arm.decl.ty {
            Ty::Void => quote!(#t::#v),
            _ => {
                let d = self.sample(&arm.decl.ty, depth + 1)?;
                quote!(#t::#v(#d))
            }
        })
    }

    /// The sample client and server (`main` functions that include the generated module
    /// `stem` from `<stem>.rs` beside them).
    pub(super) fn gen_samples(
        &self,
        spec: &Spec,
        stem: &str,
    ) -> Result<(TokenStream, TokenStream)> {
        let module = module_ident(stem);
        let path = format!("{stem}.rs");
        let mut impls = Vec::new();
        let mut calls = Vec::new();
        let mut serves = Vec::new();
        for def in &spec.definitions {
            let Definition::Program(p) = def else {
                continue;
            };
            let serve = format_ident!("serve_{}", p.name.name.to_lowercase());
            let prog = rust_ident(&p.name.name);
            let mut impl_args = Vec::new();
            for v in &p.versions {
                let base = camel_case(&v.name.name);
                let server = format_ident!("{}Server", base);
                let client = format_ident!("{}Client", base);
                let vers = rust_ident(&v.name.name);
                let mut methods = Vec::new();
                let mut client_calls = Vec::new();
                for pr in &v.procs {
                    if self.excluded.contains(pr.name.name.as_str()) {
                        continue;
                    }
                    let method = rust_ident(&method_name(&pr.name.name));
                    let mut params = Vec::new();
                    let mut args = Vec::new();
                    for (i, a) in pr.args.iter().enumerate() {
                        let n = format_ident!("arg{}", i + 1);
                        let t = self.rust_ty(&a.ty)?;
                        params.push(quote!(#n: #t));
                        let s = self.sample(&a.ty, 0)?;
                        args.push(quote!(&#s));
                    }
                    let names: Vec<_> = (1..=pr.args.len())
                        .map(|i| format_ident!("arg{}", i))
                        .collect();
                    let (ret, body) = if pr.result == Ty::Void {
                        (quote!(), quote!())
                    } else {
                        let r = self.rust_ty(&pr.result)?;
                        let s = self.sample(&pr.result, 0)?;
                        (quote!(-> #r), s)
                    };
                    methods.push(quote! {
                        fn #method(&self, #(#params),*) #ret {
                            let _ = (#(#names,)*);
                            // Compute the result here.
                            #body
                        }
                    });
                    let label = format!("{}: {{result:?}}", pr.name.name);
                    client_calls.push(quote! {
                        let result = client.#method(#(#args),*)?;
                        println!(#label);
                    });
                }
                let imp = format_ident!("{}Impl", base);
                impls.push(quote! {
                    /// The procedures of this version: replace the placeholder results.
                    struct #imp;
                    #[allow(non_snake_case, clippy::unused_unit)]
                    impl #server for #imp { #(#methods)* }
                });
                impl_args.push(quote!(#imp));
                calls.push(quote! {
                    {
                        let tcp = ::rpc::client::TcpClient::connect_rpcbind(host, #prog, #vers)?;
                        let mut client = #client::new(tcp);
                        #(#client_calls)*
                    }
                });
            }
            let msg = format!(
                "serving {} on TCP port {{:?}} and UDP port {{:?}} (registered with rpcbind)",
                p.name.name
            );
            serves.push(quote! {
                let server = #serve(#(#impl_args),*)?;
                let tcp = server.tcp_addr().map(|a| a.port());
                let udp = server.udp_addr().map(|a| a.port());
                println!(#msg, tcp, udp);
                servers.push(server);
            });
        }
        let head = quote! {
            #[allow(dead_code, unused_imports, non_camel_case_types, clippy::all)]
            #[path = #path]
            mod #module;
            #[allow(unused_imports)]
            use #module::*;
        };
        let server = quote! {
            //! Sample server generated by `stubgen rpcgen -a`: fill in the procedures.
            #head
            #(#impls)*
            fn main() -> ::core::result::Result<(), ::std::boxed::Box<dyn ::std::error::Error>> {
                let mut servers = ::std::vec::Vec::new();
                #(#serves)*
                // Serve until killed (rpcbind forgets the registrations when the server
                // shuts down; a killed process leaves them, as with rpcgen's servers).
                loop {
                    ::std::thread::park();
                }
            }
        };
        let client = quote! {
            //! Sample client generated by `stubgen rpcgen -a`: `<client> [HOST]` calls every
            //! procedure once with placeholder arguments.
            #head
            fn main() -> ::core::result::Result<(), ::std::boxed::Box<dyn ::std::error::Error>> {
                let host: ::std::net::IpAddr = ::std::env::args()
                    .nth(1)
                    .unwrap_or_else(|| "127.0.0.1".to_string())
                    .parse()?;
                #(#calls)*
                Ok(())
            }
        };
        Ok((client, server))
    }
}

/// The client method (and server trait method) of procedure `name`, as `gen_version`
/// names it.
pub(super) fn method_name(name: &str) -> String {
    let mut m = name.to_lowercase();
    if matches!(m.as_str(), "new" | "into_inner") {
        m.push('_');
    }
    m
}

/// The module name under which a sample includes `<stem>.rs`: the stem with every character
/// that cannot be in an identifier replaced by `_`, and `_` put before a leading digit
/// (`my-proto` → `my_proto`, `9p` → `_9p`); the `#[path]` attribute keeps the file name.
fn module_ident(stem: &str) -> proc_macro2::Ident {
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || name == "_" {
        name.insert(0, '_');
    }
    rust_ident(&name)
}
