//! Per program version: constants, the client, the server trait and its dispatcher.

use std::collections::{HashMap, HashSet};

use proc_macro2::{Ident as RIdent, TokenStream};
use quote::{format_ident, quote};

use super::names::*;
use super::{Context, Num};
use crate::ast::*;
use crate::error::{Error, Result};

impl Context<'_> {
    // ----- programs -----

    pub(super) fn gen_program(&self, p: &ProgramDef) -> Result<TokenStream> {
        let prog_num = self.number_u32(&p.number)?;
        let mut out = TokenStream::new();
        let pname = rust_ident(&p.name.name);
        let attrs = allow_upper(&p.name.name);
        let n = u32_expr(&prog_num);
        out.extend(quote! { #attrs pub const #pname: u32 = #n; });
        let mut emitted: HashSet<&str> = HashSet::new();
        for v in &p.versions {
            let vers_num = self.number_u32(&v.number)?;
            let vname = rust_ident(&v.name.name);
            let attrs = allow_upper(&v.name.name);
            let n = u32_expr(&vers_num);
            out.extend(quote! { #attrs pub const #vname: u32 = #n; });
            for pr in &v.procs {
                // Procedure names repeat across versions; the first definition wins, as the
                // constants table does.
                if self.consts.get(pr.name.name.as_str()).map(|(_, l)| *l) == Some(&pr.name.loc)
                    && emitted.insert(&pr.name.name)
                {
                    let id = rust_ident(&pr.name.name);
                    let n = u32_expr(&self.number_u32(&pr.number)?);
                    let attrs = allow_upper(&pr.name.name);
                    out.extend(quote! { #attrs pub const #id: u32 = #n; });
                }
            }
            out.extend(self.gen_version(p, &prog_num, v, &vers_num)?);
        }
        out.extend(serve_fn(p));
        Ok(out)
    }

    pub(super) fn gen_version(
        &self,
        p: &ProgramDef,
        prog: &Num,
        v: &VersionDef,
        vers: &Num,
    ) -> Result<TokenStream> {
        let base = camel_case(&v.name.name);
        let (prog_l, vers_l) = (u32_expr(prog), u32_expr(vers));
        let client = format_ident!("{}Client", base);
        let server = format_ident!("{}Server", base);
        let service = format_ident!("{}Service", base);
        let mut client_methods = Vec::new();
        let mut server_methods = Vec::new();
        let mut dispatch_arms = Vec::new();
        let mut numbers: HashMap<Num, &Ident> = HashMap::new();
        let mut method_names: HashSet<String> = HashSet::new();
        for pr in &v.procs {
            let num = self.number_u32(&pr.number)?;
            if let Some(prev) = numbers.insert(num.clone(), &pr.name) {
                return Err(Error::at(
                    pr.number.loc().clone(),
                    format!(
                        "procedure number {num} of `{}` is already used by `{}` in version `{}`",
                        pr.name.name, prev.name, v.name.name
                    ),
                ));
            }
            let mname = super::sample::method_name(&pr.name.name);
            if !method_names.insert(pr.name.name.to_lowercase()) {
                return Err(Error::at(
                    pr.name.loc.clone(),
                    format!(
                        "procedure `{}` repeats in version `{}`",
                        pr.name.name, v.name.name
                    ),
                ));
            }
            if self.excluded.contains(pr.name.name.as_str()) {
                // xdrgen's `pragma exclude`: the procedure is written by hand.
                continue;
            }
            let method = rust_ident(&mname);
            let result = self.rust_ty(&pr.result)?;
            let ret = if pr.result == Ty::Void {
                quote!()
            } else {
                quote!(-> #result)
            };
            let arg_names = arg_names(&pr.args);
            let arg_ids: Vec<RIdent> = arg_names.iter().map(|n| rust_ident(n)).collect();
            let arg_tys = pr
                .args
                .iter()
                .map(|a| self.rust_ty(&a.ty))
                .collect::<Result<Vec<_>>>()?;
            let num_lit = u32_expr(&num);
            let num_pat = match &num {
                Num::Known(_) => num_lit.clone(),
                ext => {
                    let e = ext.tokens(quote!(u32));
                    quote!(__p if __p == #e)
                }
            };
            let doc = format!(" Procedure `{}` ({num}).", pr.name.name);
            let call_args = match arg_ids.len() {
                0 => quote!(&()),
                1 => {
                    let a = &arg_ids[0];
                    quote!(#a)
                }
                _ => quote!(&(#(#arg_ids,)*)),
            };
            client_methods.push(quote! {
                #[doc = #doc]
                pub fn #method(&mut self, #(#arg_ids: &#arg_tys),*) -> ::core::result::Result<#result, ::rpc::Error> {
                    ::rpc::client::Call::call(&mut self.inner, #prog_l, #vers_l, #num_lit, #call_args)
                }
            });
            server_methods.push(quote! {
                #[doc = #doc]
                fn #method(&self, #(#arg_ids: #arg_tys),*) #ret;
            });
            // Bytes after the arguments are ignored, as libtirpc's svc_getargs ignores them.
            let decode = match arg_ids.len() {
                0 => quote!(),
                1 => {
                    let a = &arg_ids[0];
                    let t = &arg_tys[0];
                    quote! {
                        let (#a, _): (#t, _) = ::rpc::xdr::take_from_bytes(__args).map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                    }
                }
                _ => quote! {
                    let ((#(#arg_ids,)*), _): ((#(#arg_tys,)*), _) = ::rpc::xdr::take_from_bytes(__args).map_err(|_| ::rpc::server::DispatchError::GarbageArgs)?;
                },
            };
            let encode = if pr.result == Ty::Void {
                quote! { self.0.#method(#(#arg_ids),*); }
            } else {
                quote! {
                    let __result: #result = self.0.#method(#(#arg_ids),*);
                    let __start = __reply.len();
                    ::rpc::xdr::to_writer(&mut *__reply, &__result).map_err(|_| ::rpc::server::DispatchError::SystemErr)?;
                    ::rpc::xdr::drop_with_stack_for(__result, __reply.len() - __start);
                }
            };
            dispatch_arms.push(quote! {
                #num_pat => {
                    #decode
                    #encode
                    ::core::result::Result::Ok(())
                }
            });
        }
        if !numbers.contains_key(&Num::Known(0)) {
            dispatch_arms.push(quote! {
                0 => ::core::result::Result::Ok(())
            });
        }
        let client_doc = format!(
            " Client of program `{}` ({prog}) version `{}` ({vers}).",
            p.name.name, v.name.name
        );
        let server_doc = format!(
            " Server side of program `{}` ({prog}) version `{}` ({vers}): one method per procedure.",
            p.name.name, v.name.name
        );
        let service_doc = format!(
            " Dispatches calls of program `{}` version `{}` to a [`{server}`].",
            p.name.name, v.name.name
        );
        let attrs = quote!(#[allow(non_snake_case, clippy::too_many_arguments)]);
        let (prog, vers) = (u32_expr(prog), u32_expr(vers));
        Ok(quote! {
            #[doc = #client_doc]
            pub struct #client<__C: ::rpc::client::Call> {
                /// The underlying RPC client.
                pub inner: __C,
            }
            #attrs
            impl<__C: ::rpc::client::Call> #client<__C> {
                /// The program number.
                pub const PROGRAM: u32 = #prog;
                /// The version number.
                pub const VERSION: u32 = #vers;
                /// Wraps an RPC client.
                pub fn new(inner: __C) -> Self {
                    Self { inner }
                }
                /// Returns the underlying RPC client.
                pub fn into_inner(self) -> __C {
                    self.inner
                }
                #(#client_methods)*
            }
            #[doc = #server_doc]
            #attrs
            pub trait #server: ::core::marker::Send + ::core::marker::Sync + 'static {
                #(#server_methods)*
            }
            #[doc = #service_doc]
            pub struct #service<__S>(pub __S);
            #attrs
            impl<__S: #server> ::rpc::server::Service for #service<__S> {
                fn program(&self) -> u32 {
                    #prog
                }
                fn version(&self) -> u32 {
                    #vers
                }
                fn dispatch(&self, __procedure: u32, __args: &[u8], __reply: &mut ::std::vec::Vec<u8>) -> ::core::result::Result<(), ::rpc::server::DispatchError> {
                    let _ = (&__args, &__reply);
                    match __procedure {
                        #(#dispatch_arms,)*
                        _ => ::core::result::Result::Err(::rpc::server::DispatchError::ProcUnavail),
                    }
                }
            }
        })
    }
}

/// `serve_<program>(one server per version)`: what rpcgen's generated `main` does (a
/// transport handle per protocol, `svc_register` with the portmapper), in one call.
fn serve_fn(p: &ProgramDef) -> TokenStream {
    let f = format_ident!("serve_{}", p.name.name.to_lowercase());
    let mut params = Vec::new();
    let mut services = Vec::new();
    for v in &p.versions {
        // Prefixed: a name of the input (`version calc_v1` is also a constant) would make the
        // parameter a constant pattern.
        let arg = format_ident!("__{}", v.name.name.to_lowercase());
        let server = format_ident!("{}Server", camel_case(&v.name.name));
        let service = format_ident!("{}Service", camel_case(&v.name.name));
        params.push(quote!(#arg: impl #server));
        services.push(quote!(.service(#service(#arg))));
    }
    let doc = format!(
        " Serves every version of program `{}` on TCP and UDP (ephemeral ports on all \
         addresses) and registers each version on both with the local rpcbind, as rpcgen's \
         generated server does: whatever rpcbind had for these versions (say, from a server \
         that was killed) is removed first (`pmap_unset`), then each is registered. Shutting \
         the server down (or dropping it) unregisters them.",
        p.name.name
    );
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub fn #f(#(#params),*) -> ::core::result::Result<::rpc::server::Server, ::rpc::Error> {
            ::rpc::server::Server::builder()
                #(#services)*
                .listen_tcp(::std::net::SocketAddr::from(([0, 0, 0, 0], 0)))
                .listen_udp(::std::net::SocketAddr::from(([0, 0, 0, 0], 0)))
                .register(true)
                .replace_registrations(true)
                .start()
        }
    }
}

/// A `u32` expression: a literal, or a cast of a constant expected in scope.
fn u32_expr(n: &Num) -> TokenStream {
    match n {
        Num::Known(k) => {
            let l = lit(u64::try_from(*k).unwrap_or(0));
            quote!(#l)
        }
        ext => ext.tokens(quote!(u32)),
    }
}

/// Argument names: as written when given and distinct, else `arg` (one argument) or
/// `arg1`, `arg2`, ... (rpcgen's convention).
fn arg_names(args: &[Arg]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut used: HashSet<String> = HashSet::new();
    for (i, a) in args.iter().enumerate() {
        let fallback = if args.len() == 1 {
            "arg".to_string()
        } else {
            format!("arg{}", i + 1)
        };
        let mut n = a.name.as_ref().map_or(fallback, |id| id.name.clone());
        // `self`/`result`/`reply`/`procedure`/`args` are taken in the generated bodies.
        while matches!(
            n.as_str(),
            "self" | "Self" | "result" | "reply" | "procedure" | "args" | "bytes"
        ) || used.contains(&n)
        {
            n.push('_');
        }
        used.insert(n.clone());
        names.push(n);
    }
    names
}
