//! Checks an interface file, lays out every procedure's argument and result blocks, and
//! generates the Rust code (types, client stub, server trait, dispatcher) for the `srpc`
//! runtime.

use super::ast::*;
use super::parse::error_at;
use crate::error::{Error, Result};
use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use std::collections::BTreeMap;

/// Largest request or reply area of an interface (the binding's buffers are one of each).
const MAX_AREA: u64 = 16 << 20;

struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    consts: BTreeMap<String, u64>,
    types: BTreeMap<String, (Type, bool)>,
    /// (size, align) of named types, computed once.
    layouts: BTreeMap<String, (u64, u64)>,
    /// Current recursion depth of [`Ctx::layout`] (named types within named types).
    depth: usize,
}

/// How deep types may be nested, named types (a typedef of a typedef, a struct in a struct)
/// and `sequence<...>` together: deeper input is refused rather than overflowing the stack.
const MAX_LAYOUT_DEPTH: usize = 256;

fn round_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl<'a> Ctx<'a> {
    fn err(&self, at: usize, msg: impl Into<String>) -> Error {
        error_at(self.file, self.text, at, msg)
    }

    fn size(&self, s: &Size) -> Result<u64> {
        match s {
            Size::Lit(n) => Ok(*n),
            Size::Const(n, at) => self
                .consts
                .get(n)
                .copied()
                .ok_or_else(|| self.err(*at, format!("unknown constant `{n}`"))),
        }
    }

    /// (size, alignment) of `t`; `stack` detects recursive definitions.
    fn layout(&mut self, t: &Type, stack: &mut Vec<String>) -> Result<(u64, u64)> {
        if self.depth >= MAX_LAYOUT_DEPTH {
            return Err(self.err(
                type_at(t),
                format!("types nested more than {MAX_LAYOUT_DEPTH} levels deep"),
            ));
        }
        self.depth += 1;
        let r = self.layout_inner(t, stack);
        self.depth -= 1;
        r
    }

    fn layout_inner(&mut self, t: &Type, stack: &mut Vec<String>) -> Result<(u64, u64)> {
        let too_big = |s: u64| s > MAX_AREA;
        let r = match t {
            Type::Prim(p) => match p {
                Prim::I8 | Prim::U8 => (1, 1),
                Prim::I16 | Prim::U16 => (2, 2),
                Prim::I32 | Prim::U32 | Prim::F32 | Prim::Bool => (4, 4),
                Prim::I64 | Prim::U64 | Prim::F64 => (8, 8),
            },
            Type::String(n) => {
                let n = self.size(n)?;
                (4 + round_up(n.min(MAX_AREA + 1), 4), 4)
            }
            Type::Sequence(e, n) => {
                let n = self.size(n)?;
                let (es, ea) = self.layout(e, stack)?;
                let a = ea.max(4);
                let body = es.saturating_mul(n);
                (
                    round_up(round_up(4, ea).saturating_add(body).min(MAX_AREA + 1), a),
                    a,
                )
            }
            Type::Array(e, n) => {
                let n = self.size(n)?;
                let (es, ea) = self.layout(e, stack)?;
                (es.saturating_mul(n).min(MAX_AREA + 1), ea)
            }
            Type::Named(name, at) => {
                if let Some(l) = self.layouts.get(name) {
                    return Ok(*l);
                }
                if stack.contains(name) {
                    return Err(self.err(*at, format!("`{name}` contains itself")));
                }
                let Some((ty, is_struct)) = self.types.get(name).cloned() else {
                    return Err(self.err(*at, format!("unknown type `{name}`")));
                };
                stack.push(name.clone());
                let l = if is_struct {
                    self.struct_layout(name, stack)?.0
                } else {
                    self.layout(&ty, stack)?
                };
                stack.pop();
                self.layouts.insert(name.clone(), l);
                l
            }
        };
        if too_big(r.0) {
            return Err(self.err(
                type_at(t),
                format!("type larger than the {MAX_AREA}-byte limit of a binding"),
            ));
        }
        Ok(r)
    }

    /// ((size, align), field offsets) of struct `name`.
    fn struct_layout(
        &mut self,
        name: &str,
        stack: &mut Vec<String>,
    ) -> Result<((u64, u64), Vec<u64>)> {
        let fields = self.struct_fields(name);
        let mut off = 0u64;
        let mut align = 1u64;
        let mut offs = Vec::new();
        for f in &fields {
            let (s, a) = self.layout(&f.ty, stack)?;
            off = round_up(off, a);
            offs.push(off);
            off = off.saturating_add(s);
            align = align.max(a);
        }
        Ok(((round_up(off, align), align), offs))
    }

    fn struct_fields(&self, name: &str) -> Vec<Field> {
        STRUCTS.with(|s| s.borrow().get(name).cloned().unwrap_or_default())
    }

    fn rust_type(&self, t: &Type) -> Result<TokenStream> {
        Ok(match t {
            Type::Prim(p) => match p {
                Prim::I8 => quote!(i8),
                Prim::I16 => quote!(i16),
                Prim::I32 => quote!(i32),
                Prim::I64 => quote!(i64),
                Prim::U8 => quote!(u8),
                Prim::U16 => quote!(u16),
                Prim::U32 => quote!(u32),
                Prim::U64 => quote!(u64),
                Prim::F32 => quote!(f32),
                Prim::F64 => quote!(f64),
                Prim::Bool => quote!(bool),
            },
            Type::String(n) => {
                let n = Literal::usize_unsuffixed(self.size(n)? as usize);
                quote!(::srpc::BString<#n>)
            }
            Type::Sequence(e, n) => {
                let n = Literal::usize_unsuffixed(self.size(n)? as usize);
                let e = self.rust_type(e)?;
                quote!(::srpc::BSeq<#e, #n>)
            }
            Type::Array(e, n) => {
                let n = Literal::usize_unsuffixed(self.size(n)? as usize);
                let e = self.rust_type(e)?;
                quote!([#e; #n])
            }
            Type::Named(n, _) => {
                let i = format_ident!("{}", n);
                quote!(#i)
            }
        })
    }
}

thread_local! {
    static STRUCTS: std::cell::RefCell<BTreeMap<String, Vec<Field>>> = const { std::cell::RefCell::new(BTreeMap::new()) };
}

fn type_at(t: &Type) -> usize {
    match t {
        Type::Named(_, at) => *at,
        Type::String(Size::Const(_, at)) => *at,
        Type::Sequence(e, _) | Type::Array(e, _) => type_at(e),
        _ => 0,
    }
}

fn lit(n: u64) -> Literal {
    Literal::usize_unsuffixed(n as usize)
}

/// 16-bit FNV-1a of the interface's name: tells bindings of different interfaces apart.
fn interface_id(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    (h ^ (h >> 16)) & 0xffff
}

fn snake(name: &str) -> String {
    let mut s = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                s.push('_');
            }
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

const RESERVED: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// Generates the Rust source for `file` (already parsed).
pub fn generate(file_name: &str, text: &str, idl: &IdlFile) -> Result<String> {
    let mut cx = Ctx {
        file: file_name,
        text,
        consts: BTreeMap::new(),
        types: BTreeMap::new(),
        layouts: BTreeMap::new(),
        depth: 0,
    };
    STRUCTS.with(|s| s.borrow_mut().clear());
    // Names first: everything may refer to anything defined in the file.
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for item in &idl.items {
        let (name, at) = match item {
            Item::Const { name, at, .. }
            | Item::Struct { name, at, .. }
            | Item::Typedef { name, at, .. }
            | Item::Interface { name, at, .. } => (name, *at),
        };
        if RESERVED.contains(&name.as_str()) {
            return Err(cx.err(at, format!("`{name}` is a Rust keyword")));
        }
        if seen.insert(name.clone(), at).is_some() {
            return Err(cx.err(at, format!("`{name}` is defined twice")));
        }
        match item {
            Item::Const { name, value, .. } => {
                cx.consts.insert(name.clone(), *value);
            }
            Item::Struct { name, fields, at } => {
                let mut fseen = Vec::new();
                for f in fields {
                    if fseen.contains(&f.name) {
                        return Err(cx.err(f.at, format!("field `{}` is defined twice", f.name)));
                    }
                    if RESERVED.contains(&f.name.as_str()) {
                        return Err(cx.err(f.at, format!("`{}` is a Rust keyword", f.name)));
                    }
                    fseen.push(f.name.clone());
                }
                cx.types
                    .insert(name.clone(), (Type::Named(name.clone(), *at), true));
                STRUCTS.with(|s| s.borrow_mut().insert(name.clone(), fields.clone()));
            }
            Item::Typedef { name, ty, .. } => {
                cx.types.insert(name.clone(), (ty.clone(), false));
            }
            Item::Interface { .. } => {}
        }
    }
    let mut out = TokenStream::new();
    for item in &idl.items {
        match item {
            Item::Const { name, value, .. } => {
                let n = format_ident!("{}", name);
                let v = Literal::u64_unsuffixed(*value);
                out.extend(quote!(pub const #n: u64 = #v;));
            }
            Item::Typedef { name, ty, at } => {
                cx.layout(&Type::Named(name.clone(), *at), &mut Vec::new())?;
                let n = format_ident!("{}", name);
                let t = cx.rust_type(ty)?;
                out.extend(quote!(pub type #n = #t;));
            }
            Item::Struct { name, fields, at } => {
                let (size, align) = cx.layout(&Type::Named(name.clone(), *at), &mut Vec::new())?;
                let (_, offs) = cx.struct_layout(name, &mut Vec::new())?;
                let n = format_ident!("{}", name);
                let mut decl = Vec::new();
                let mut puts = Vec::new();
                let mut gets = Vec::new();
                let mut checks = Vec::new();
                for (f, off) in fields.iter().zip(offs) {
                    let fname = format_ident!("{}", f.name);
                    let t = cx.rust_type(&f.ty)?;
                    let (fs, _) = cx.layout(&f.ty, &mut Vec::new())?;
                    let (a, b) = (lit(off), lit(off + fs));
                    let fsl = lit(fs);
                    decl.push(quote!(pub #fname: #t));
                    puts.push(quote!(::srpc::Wire::put(&self.#fname, &mut __b[#a..#b])?;));
                    gets.push(quote!(#fname: ::srpc::Wire::get(&__b[#a..#b])?));
                    checks.push(quote!(
                        const _: () = assert!(<#t as ::srpc::Wire>::SIZE == #fsl);
                    ));
                }
                let (s, a) = (lit(size), lit(align));
                out.extend(quote! {
                    #[derive(Clone, Debug, PartialEq)]
                    pub struct #n { #(#decl,)* }
                    impl ::srpc::Wire for #n {
                        const SIZE: usize = #s;
                        const ALIGN: usize = #a;
                        fn put(&self, __b: &mut [u8]) -> ::core::result::Result<(), ::srpc::Error> {
                            #(#puts)*
                            let _ = __b;
                            ::core::result::Result::Ok(())
                        }
                        fn get(__b: &[u8]) -> ::core::result::Result<Self, ::srpc::Error> {
                            let _ = __b;
                            ::core::result::Result::Ok(#n { #(#gets,)* })
                        }
                    }
                    #(#checks)*
                });
            }
            Item::Interface { name, procs, at } => {
                out.extend(interface(&mut cx, name, procs, *at)?);
            }
        }
    }
    let file: syn::File = syn::parse2(out).map_err(|e| Error::Internal(e.to_string()))?;
    let header = format!(
        "// Generated by `stubgen srpc {file_name}`: SHRIMP RPC stubs for the srpc runtime. Do not edit.\n\n"
    );
    Ok(header + &prettyplease::unparse(&file))
}

/// A block's layout: offsets of its parameters (in order) and its size (a multiple of 8).
fn block(cx: &mut Ctx<'_>, params: &[&Param]) -> Result<(Vec<(u64, u64)>, u64)> {
    let mut off = 0u64;
    let mut v = Vec::new();
    for p in params {
        let (s, a) = cx.layout(&p.ty, &mut Vec::new())?;
        off = round_up(off, a);
        v.push((off, s));
        off = off.saturating_add(s);
    }
    let size = round_up(off, 8);
    if size > MAX_AREA {
        let at = params.first().map_or(0, |p| p.at);
        return Err(cx.err(
            at,
            format!("parameters larger than the {MAX_AREA}-byte limit"),
        ));
    }
    Ok((v, size))
}

/// Methods every client stub has besides one per procedure.
const CLIENT_METHODS: &[&str] = &["bind", "binding"];

fn interface(cx: &mut Ctx<'_>, name: &str, procs: &[Proc], at: usize) -> Result<TokenStream> {
    if procs.is_empty() {
        return Err(cx.err(at, format!("interface `{name}` has no procedures")));
    }
    let mut numbers = Vec::new();
    let mut names = Vec::new();
    struct P<'p> {
        proc_: &'p Proc,
        req: (Vec<(u64, u64)>, u64),
        rep: (Vec<(u64, u64)>, u64),
        ins: Vec<&'p Param>,
        outs: Vec<&'p Param>,
    }
    let mut ps = Vec::new();
    for p in procs {
        if p.number == 0 || p.number > 0xffff {
            return Err(cx.err(p.at, "procedure numbers are 1 to 65535"));
        }
        if numbers.contains(&p.number) {
            return Err(cx.err(p.at, format!("procedure number {} is used twice", p.number)));
        }
        if names.contains(&p.name) {
            return Err(cx.err(p.at, format!("procedure `{}` is defined twice", p.name)));
        }
        if RESERVED.contains(&p.name.as_str()) {
            return Err(cx.err(p.at, format!("`{}` is a Rust keyword", p.name)));
        }
        let mut pn = Vec::new();
        for q in &p.params {
            if pn.contains(&q.name) || q.name == "self" {
                return Err(cx.err(q.at, format!("parameter `{}` is named twice", q.name)));
            }
            if RESERVED.contains(&q.name.as_str()) {
                return Err(cx.err(q.at, format!("`{}` is a Rust keyword", q.name)));
            }
            pn.push(q.name.clone());
        }
        numbers.push(p.number);
        names.push(p.name.clone());
        let ins: Vec<&Param> = p.params.iter().filter(|q| q.dir != Dir::Out).collect();
        let outs: Vec<&Param> = p.params.iter().filter(|q| q.dir != Dir::In).collect();
        let req = block(cx, &ins)?;
        let rep = block(cx, &outs)?;
        ps.push(P {
            proc_: p,
            req,
            rep,
            ins,
            outs,
        });
    }
    let req_area = ps.iter().map(|p| p.req.1).max().unwrap_or(0);
    let rep_area = ps.iter().map(|p| p.rep.1).max().unwrap_or(0);
    let iface = format_ident!("{}", name);
    let client = format_ident!("{}Client", name);
    let server = format_ident!("{}Server", name);
    let layout = format_ident!("{}_LAYOUT", snake(name).to_uppercase());
    let dispatch = format_ident!("{}_dispatch", snake(name));
    let id = lit(interface_id(name) as u64);
    let (ra, pa) = (lit(req_area), lit(rep_area));
    let mut client_fns = Vec::new();
    let mut trait_fns = Vec::new();
    let mut arms = Vec::new();
    let mut table = Vec::new();
    for p in &ps {
        let pr = p.proc_;
        let f = format_ident!("{}", pr.name);
        // The stub's own methods keep their names: a procedure named like one is called
        // through the same name with `_` appended (as rpcgen renames clashing arguments).
        let mut method = pr.name.clone();
        while CLIENT_METHODS.contains(&method.as_str())
            || (method != pr.name && names.contains(&method))
        {
            method.push('_');
        }
        let method = format_ident!("{}", method);
        let num = Literal::u32_unsuffixed(pr.number as u32);
        let (rqs, rps) = (lit(p.req.1), lit(p.rep.1));
        let pname = pr.name.as_str();
        table.push(quote!((#num, #pname, #rqs, #rps)));
        // Client stub.
        let mut args = Vec::new();
        let mut puts = Vec::new();
        let mut gets = Vec::new();
        for q in &pr.params {
            let n = format_ident!("{}", q.name);
            let t = cx.rust_type(&q.ty)?;
            args.push(match q.dir {
                Dir::In => quote!(#n: &#t),
                _ => quote!(#n: &mut #t),
            });
        }
        for (q, (off, size)) in p.ins.iter().zip(&p.req.0) {
            let n = format_ident!("{}", q.name);
            let (a, b) = (lit(*off), lit(off + size));
            puts.push(quote!(::srpc::Wire::put(&*#n, &mut __req[#a..#b])?;));
        }
        for (q, (off, size)) in p.outs.iter().zip(&p.rep.0) {
            let n = format_ident!("{}", q.name);
            let (a, b) = (lit(*off), lit(off + size));
            gets.push(quote!(self.binding.result_into(#rps, #a..#b, #n)?;));
        }
        let doc = format!(" Calls procedure {} (`{}`).", pr.number, pr.name);
        // One argument per parameter, as the interface has them.
        let many = if pr.params.len() > 6 {
            quote!(#[allow(clippy::too_many_arguments)])
        } else {
            quote!()
        };
        // A single argument that is the whole request block is handed over as it is (a byte
        // array then leaves from the caller's memory).
        let send = match (p.ins.as_slice(), p.req.0.as_slice()) {
            ([q], [(0, size)]) if *size == p.req.1 => {
                let n = format_ident!("{}", q.name);
                quote!(self.binding.call_whole(#num, &*#n, #rqs, #rps)?;)
            }
            _ => quote! {
                {
                    let __req = self.binding.request(#rqs);
                    #(#puts)*
                    let _ = __req;
                }
                self.binding.call_raw(#num, #rqs, #rps)?;
            },
        };
        client_fns.push(quote! {
            #[doc = #doc]
            #many
            pub fn #method(&mut self, #(#args),*) -> ::core::result::Result<(), ::srpc::Error> {
                #send
                #(#gets)*
                ::core::result::Result::Ok(())
            }
        });
        // Server trait and dispatcher.
        let mut targs = Vec::new();
        let mut decode = Vec::new();
        let mut make = Vec::new();
        let mut call_args = Vec::new();
        let in_pos: Vec<(&Param, (u64, u64))> =
            p.ins.iter().copied().zip(p.req.0.iter().copied()).collect();
        let out_pos: Vec<(&Param, (u64, u64))> = p
            .outs
            .iter()
            .copied()
            .zip(p.rep.0.iter().copied())
            .collect();
        for q in &pr.params {
            let n = format_ident!("{}", q.name);
            let t = cx.rust_type(&q.ty)?;
            match q.dir {
                Dir::In => {
                    targs.push(quote!(#n: #t));
                    call_args.push(quote!(#n));
                }
                Dir::Out => {
                    targs.push(quote!(#n: &mut ::srpc::Out<'_, #t>));
                    call_args.push(quote!(&mut #n));
                }
                Dir::InOut => {
                    targs.push(quote!(#n: &mut ::srpc::InOut<'_, #t>));
                    call_args.push(quote!(&mut #n));
                }
            }
            let (in_a, in_b) = {
                let (off, size) = in_pos
                    .iter()
                    .find(|(x, _)| x.name == q.name)
                    .map(|(_, l)| *l)
                    .unwrap_or((0, 0));
                (lit(off), lit(off + size))
            };
            if q.dir == Dir::In {
                decode.push(quote!(let #n: #t = ::srpc::Wire::get(&__req[#in_a..#in_b])?;));
            }
            if q.dir != Dir::In {
                let (off, _) = out_pos
                    .iter()
                    .find(|(x, _)| x.name == q.name)
                    .map(|(_, l)| *l)
                    .unwrap_or((0, 0));
                let o = lit(off);
                make.push(match q.dir {
                    Dir::Out => quote!(let mut #n = __call.out::<#t>(#rps, #o);),
                    _ => quote!(let mut #n = __call.inout_from::<#t>(#rps, #o, &__req[#in_a..#in_b])?;),
                });
            }
        }
        let tdoc = format!(" Procedure {} (`{}`).", pr.number, pr.name);
        trait_fns.push(quote! {
            #[doc = #tdoc]
            #many
            fn #f(&mut self, #(#targs),*);
        });
        // Each procedure runs in a function of its own, so that the dispatcher's frame is
        // small: a null call must not pay for probing the stack pages another procedure's
        // large arguments need. Large ones are never inlined.
        let inline = if p.req.1 + p.rep.1 > 512 {
            quote!(#[inline(never)])
        } else {
            quote!()
        };
        arms.push(quote! {
            #num => {
                #inline
                fn __run<__S: #server + ?Sized>(__svc: &mut __S, __call: &::srpc::Incoming<'_>) -> ::core::result::Result<(), ::srpc::Error> {
                    {
                        let __req = __call.request(#rqs);
                        #(#decode)*
                        let _ = __req;
                        #(#make)*
                        __svc.#f(#(#call_args),*);
                    }
                    ::core::result::Result::Ok(())
                }
                __run(__svc, __call)
            }
        });
    }
    let cdoc = format!(" The client stub of interface `{name}`.");
    let sdoc = format!(" The procedures of interface `{name}`, implemented by a server.");
    let ddoc = format!(
        " Runs the procedure of `__call` on `__svc` (interface `{name}`): arguments are read from the binding's receive buffer, results written into the reply as the procedure sets them."
    );
    let ldoc = format!(" The binding layout of interface `{name}`.");
    let pdoc =
        format!(" The procedures of `{name}`: (number, name, argument bytes, result bytes).");
    let procs_const = format_ident!("{}_PROCEDURES", snake(name).to_uppercase());
    let _ = iface;
    Ok(quote! {
        #[doc = #ldoc]
        pub const #layout: ::srpc::Layout = ::srpc::Layout { request: #ra, reply: #pa, interface: #id };
        #[doc = #pdoc]
        pub const #procs_const: &[(u32, &str, usize, usize)] = &[#(#table),*];
        #[doc = #cdoc]
        pub struct #client { binding: ::srpc::ClientBinding }
        impl #client {
            /// Binds to the server process of rank `__server` (which accepts with the same layout) over `__mode`.
            pub fn bind(__ep: &::srpc::Endpoint, __server: usize, __mode: ::srpc::Mode) -> ::core::result::Result<Self, ::srpc::Error> {
                ::core::result::Result::Ok(#client { binding: ::srpc::ClientBinding::bind(__ep, __server, #layout, __mode)? })
            }
            /// The binding (to make raw calls, or to look at its mode).
            pub fn binding(&mut self) -> &mut ::srpc::ClientBinding { &mut self.binding }
            #(#client_fns)*
        }
        #[doc = #sdoc]
        pub trait #server { #(#trait_fns)* }
        #[doc = #ddoc]
        pub fn #dispatch<__S: #server + ?Sized>(__svc: &mut __S, __call: &::srpc::Incoming<'_>) -> ::core::result::Result<(), ::srpc::Error> {
            match __call.procedure() {
                #(#arms)*
                __n => ::core::result::Result::Err(::srpc::Error::NoSuchProcedure(__n)),
            }
        }
    })
}
