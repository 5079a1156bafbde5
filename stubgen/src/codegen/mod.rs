//! Rust code generation from the interface description ([`crate::ast`]).
//!
//! The generated code uses only the `rpc` crate's public contract:
//! - types derive `rpc::serde::{Serialize, Deserialize}` (fields in order, as XDR wants);
//! - enums are `#[repr(i32)]` Rust enums with hand-written serde impls (an `i32` on the wire);
//! - unions are Rust enums with one variant per case value (cases that share an arm get one
//!   variant each, holding the same type), plus a `Default` variant holding the discriminant
//!   (and the default arm's data) when the union has a `default` arm; their serde impls write a
//!   tuple (discriminant, arm) or (discriminant) for a void arm;
//! - per program version, a client `<Version>Client<C: rpc::client::Call>`, a server trait
//!   `<Version>Server` and a wrapper `<Version>Service<S>` implementing `rpc::server::Service`.
//!
//! Details:
//! - `char`, `short` and `long` are XDR ints (`i32`, unsigned: `u32`), as rpcgen's C encodes them;
//! - an enum name repeating an earlier value becomes an associated constant (`Self::FIRST`);
//! - union variants are named after their case labels (`NFS_OK`, `TRUE`); literal labels give
//!   `Case7` and `CaseNeg1`; the default variant is `Default` (`Default_` if a label took it);
//! - client methods are the procedure names in lower case, take each argument by reference
//!   (several arguments travel as a tuple, none as `()`) and return `Result<R, rpc::Error>`;
//!   server trait methods take the arguments by value and return the result; the dispatcher
//!   answers procedure 0 with void when the interface does not declare it, and refuses unknown
//!   procedures (`PROC_UNAVAIL`) and undecodable arguments (`GARBAGE_ARGS`).
//!
//! Names are kept as written in the interface (so `nfsstat::NFS_OK`, `attrstat`), except Rust
//! keywords (raw identifiers, or a trailing `_` for `self`, `Self`, `super`, `crate`) and type
//! names that would shadow a primitive or a crate the generated code names (`u32`, `rpc`, ...:
//! a trailing `_`). Constants get the smallest fitting of `u32`, `i32`, `u64`, `i64` (non-negative
//! values below 2^32 are `u32`); string constants are `&str`. Version names become CamelCase
//! prefixes: `NFS_VERSION` gives `NfsVersionClient`.
//!
//! The modules: `names` (Rust identifiers), `builtins` (system types and constants the
//! `.x` files use without defining), `types` (constants, types) and `program` (clients,
//! servers).

mod builtins;
mod names;
mod program;
mod sample;
mod types;

use std::collections::{HashMap, HashSet};

use proc_macro2::TokenStream;
use quote::quote;

use crate::ast::*;
use crate::error::{Diagnostic, Error, Location, Result};
use builtins::{builtin_const, builtin_struct};
use names::*;

/// Code generation settings.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Refuse type names that are neither defined in the input nor built in. By default they
    /// are assumed to be defined elsewhere (another `.x` file whose generated code the user
    /// brings into scope), as rpcgen assumes, and reported as warnings.
    pub strict: bool,
}

/// Generated code and the warnings met on the way.
#[derive(Clone, Debug)]
pub struct Output {
    /// The formatted Rust source.
    pub code: String,
    /// Non-fatal findings (types assumed to be defined elsewhere).
    pub warnings: Vec<Diagnostic>,
}

/// Generates formatted Rust source for `spec`.
pub fn generate(spec: &Spec, options: &Options) -> Result<Output> {
    let (tokens, warnings) = generate_tokens(spec, options)?;
    let file: syn::File = syn::parse2(tokens).map_err(|e| Error::Internal(format!("{e}")))?;
    Ok(Output {
        code: prettyplease::unparse(&file),
        warnings,
    })
}

/// Generates the Rust items for `spec` as tokens, with the warnings.
pub fn generate_tokens(spec: &Spec, options: &Options) -> Result<(TokenStream, Vec<Diagnostic>)> {
    let cx = Context::new(spec, options)?;
    let mut out = TokenStream::new();
    for def in &spec.definitions {
        out.extend(match def {
            Definition::Const(c) => cx.gen_const(c)?,
            Definition::Enum(e) => cx.gen_enum(e)?,
            Definition::Struct(s) => cx.gen_struct(s)?,
            Definition::Union(u) => cx.gen_union(u)?,
            Definition::Typedef(t) => cx.gen_typedef(t)?,
            Definition::Program(p) => cx.gen_program(p)?,
        });
    }
    let support = cx.support.borrow().clone();
    for name in support {
        if let Some(def) = builtin_struct(&name) {
            out.extend(cx.gen_struct(&def)?);
        }
    }
    let mut warnings = cx.warnings.into_inner();
    warnings.sort_by(|a, b| {
        (&a.location.file, a.location.line, a.location.column).cmp(&(
            &b.location.file,
            b.location.line,
            b.location.column,
        ))
    });
    warnings.dedup();
    Ok((out, warnings))
}

/// A sample client and server (rpcgen's `-a`), each a `main` that includes the generated
/// module from `<stem>.rs` beside it.
#[derive(Clone, Debug)]
pub struct Samples {
    /// The sample client's source.
    pub client: String,
    /// The sample server's source.
    pub server: String,
}

/// Generates the sample client and server for `spec`, whose generated code is `<stem>.rs`.
pub fn generate_samples(spec: &Spec, options: &Options, stem: &str) -> Result<Samples> {
    let cx = Context::new(spec, options)?;
    let (client, server) = cx.gen_samples(spec, stem)?;
    let fmt = |t: TokenStream| -> Result<String> {
        let file: syn::File = syn::parse2(t).map_err(|e| Error::Internal(format!("{e}")))?;
        Ok(prettyplease::unparse(&file))
    };
    Ok(Samples {
        client: fmt(client)?,
        server: fmt(server)?,
    })
}

/// The largest bound: `<>` in XDR.
const UNBOUNDED: u64 = u32::MAX as u64;

/// How deep constant definitions may refer to each other.
const MAX_CONST_DEPTH: usize = 200;

/// A constant's value: known to the generator, or a constant `name` (plus `offset`, for enum
/// members counted on from it) that the generated code expects in scope.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Num {
    Known(i128),
    External(String, i128),
}

impl Num {
    fn plus(self, k: i128) -> Num {
        match self {
            Num::Known(n) => Num::Known(n + k),
            Num::External(name, off) => Num::External(name, off + k),
        }
    }

    /// A Rust expression of type `ty` for the value.
    fn tokens(&self, ty: TokenStream) -> TokenStream {
        match self {
            Num::Known(n) => {
                let l = proc_macro2::Literal::i128_suffixed(*n);
                quote!(#l as #ty)
            }
            Num::External(name, off) => {
                let id = rust_ident(name);
                if *off == 0 {
                    quote!(#id as #ty)
                } else {
                    let l = proc_macro2::Literal::i128_unsuffixed(*off);
                    quote!(#id as #ty + #l)
                }
            }
        }
    }
}

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Num::Known(n) => write!(f, "{n}"),
            Num::External(name, 0) => f.write_str(name),
            Num::External(name, off) => write!(f, "{name} + {off}"),
        }
    }
}

/// What a type name stands for.
#[derive(Clone, Copy)]
enum TypeKind<'a> {
    Enum(&'a EnumDef),
    Struct,
    Union,
    Typedef(&'a Ty),
}

/// What a constant name stands for.
#[derive(Clone, Copy)]
enum ConstKind<'a> {
    Value(&'a Value),
    Str,
    /// Member `index` of an enum.
    EnumMember(&'a EnumDef, usize),
}

/// The type of a union's discriminant.
enum Disc<'a> {
    Int,
    UInt,
    Bool,
    Enum(&'a EnumDef),
}

struct Context<'a> {
    strict: bool,
    warnings: std::cell::RefCell<Vec<Diagnostic>>,
    /// Built-in structures used by the input, emitted at the end.
    support: std::cell::RefCell<std::collections::BTreeSet<String>>,
    types: HashMap<&'a str, (TypeKind<'a>, &'a Location)>,
    consts: HashMap<&'a str, (ConstKind<'a>, &'a Location)>,
    /// Names taken in the type namespace by generated client/server items.
    rpc_names: HashSet<String>,
    /// Procedures left out by xdrgen's `pragma exclude`.
    excluded: HashSet<&'a str>,
    /// Struct and union definitions by name (for sample values).
    defs: HashMap<&'a str, &'a Definition>,
}

impl<'a> Context<'a> {
    fn new(spec: &'a Spec, options: &Options) -> Result<Self> {
        let mut cx = Context {
            strict: options.strict,
            warnings: Default::default(),
            support: Default::default(),
            types: HashMap::new(),
            consts: HashMap::new(),
            rpc_names: HashSet::new(),
            excluded: HashSet::new(),
            defs: HashMap::new(),
        };
        for def in &spec.definitions {
            match def {
                Definition::Const(c) => {
                    let kind = match &c.value {
                        ConstValue::Value(v) => ConstKind::Value(v),
                        ConstValue::Str(_) => ConstKind::Str,
                    };
                    cx.add_const(&c.name, kind, false)?;
                }
                Definition::Enum(e) => {
                    cx.add_type(&e.name, TypeKind::Enum(e))?;
                    for (i, (name, _)) in e.values.iter().enumerate() {
                        cx.add_const(name, ConstKind::EnumMember(e, i), false)?;
                    }
                }
                Definition::Struct(s) => {
                    cx.add_type(&s.name, TypeKind::Struct)?;
                    cx.defs.insert(&s.name.name, def);
                }
                Definition::Union(u) => {
                    cx.add_type(&u.name, TypeKind::Union)?;
                    cx.defs.insert(&u.name.name, def);
                }
                Definition::Typedef(t) => {
                    if let Some(name) = &t.decl.name {
                        // `typedef struct foo foo;` restates a type: nothing new.
                        if matches!(&t.decl.ty, Ty::Named(n) if n.name == name.name) {
                            continue;
                        }
                        cx.add_type(name, TypeKind::Typedef(&t.decl.ty))?;
                    }
                }
                Definition::Program(p) => {
                    cx.add_const(&p.name, ConstKind::Value(&p.number), false)?;
                    for v in &p.versions {
                        cx.add_const(&v.name, ConstKind::Value(&v.number), false)?;
                        for pr in &v.procs {
                            // rpcgen `#define`s procedure names; versions often repeat them.
                            cx.add_const(&pr.name, ConstKind::Value(&pr.number), true)?;
                        }
                    }
                }
            }
        }
        cx.check_finite_types(spec)?;
        cx.read_pragmas(spec);
        for c in &spec.c_constants {
            if let ConstValue::Value(v) = &c.value {
                // Pass-through C definitions only fill gaps; they are never emitted.
                cx.add_const(&c.name, ConstKind::Value(v), true)?;
            }
        }
        for def in &spec.definitions {
            if let Definition::Program(p) = def {
                for v in &p.versions {
                    let base = camel_case(&v.name.name);
                    for suffix in ["Client", "Server", "Service"] {
                        let n = format!("{base}{suffix}");
                        if cx.types.contains_key(n.as_str()) || !cx.rpc_names.insert(n.clone()) {
                            return Err(Error::at(
                                v.name.loc.clone(),
                                format!(
                                    "the generated name `{n}` for version `{}` is already taken",
                                    v.name.name
                                ),
                            ));
                        }
                    }
                }
            }
        }
        Ok(cx)
    }

    /// Takes in xdrgen's `pragma` lines: `exclude` leaves a procedure out; `big_endian` must
    /// name an enum (it changes nothing on the wire); the others concern C only. A pragma
    /// naming nothing known is reported as a warning, never fatal (xdrgen does not check).
    fn read_pragmas(&mut self, spec: &'a Spec) {
        let procs: HashSet<&str> = spec
            .definitions
            .iter()
            .filter_map(|d| match d {
                Definition::Program(p) => Some(p),
                _ => None,
            })
            .flat_map(|p| p.versions.iter())
            .flat_map(|v| v.procs.iter().map(|pr| pr.name.name.as_str()))
            .collect();
        for p in &spec.pragmas {
            let Some(arg) = p.args.first() else { continue };
            let problem = match p.directive.name.as_str() {
                "exclude" => {
                    self.excluded.insert(&arg.name);
                    (!procs.contains(arg.name.as_str())).then_some("no procedure is named")
                }
                "big_endian" => (!matches!(
                    self.types.get(arg.name.as_str()),
                    Some((TypeKind::Enum(_), _))
                ))
                .then_some("no enum is named"),
                _ => None,
            };
            if let Some(problem) = problem {
                self.warnings.borrow_mut().push(Diagnostic {
                    location: arg.loc.clone(),
                    message: format!(
                        "pragma {}: {problem} `{}` in the input",
                        p.directive.name, arg.name
                    ),
                    source_line: None,
                });
            }
        }
    }

    /// Refuses types that contain themselves without indirection (`*` or `<>`): they would
    /// have infinite size, in C as in Rust.
    fn check_finite_types(&self, spec: &'a Spec) -> Result<()> {
        // Named types that a type holds inline.
        fn inline<'t>(ty: &'t Ty, out: &mut Vec<&'t Ident>) {
            match ty {
                Ty::Named(id) => out.push(id),
                Ty::FixedArray(t, _) => inline(t, out),
                _ => {}
            }
        }
        let mut edges: HashMap<&str, Vec<&Ident>> = HashMap::new();
        for def in &spec.definitions {
            let (name, decls): (&str, Vec<&Decl>) = match def {
                Definition::Struct(s) => (&s.name.name, s.fields.iter().collect()),
                Definition::Union(u) => (
                    &u.name.name,
                    u.arms
                        .iter()
                        .map(|a| &a.decl)
                        .chain(u.default.as_ref())
                        .collect(),
                ),
                Definition::Typedef(t) => match &t.decl.name {
                    // `typedef struct foo foo;` restates a type: no edge.
                    Some(n) if matches!(&t.decl.ty, Ty::Named(m) if m.name == n.name) => continue,
                    Some(n) => (&n.name, vec![&t.decl]),
                    None => continue,
                },
                _ => continue,
            };
            let e = edges.entry(name).or_default();
            for d in decls {
                inline(&d.ty, e);
            }
        }
        // Iterative depth-first search (no recursion: inputs may be large).
        let mut state: HashMap<&str, u8> = HashMap::new(); // 1: on the stack, 2: done
        let mut roots: Vec<&str> = edges.keys().copied().collect();
        roots.sort_unstable();
        for root in roots {
            if state.contains_key(root) {
                continue;
            }
            let mut stack: Vec<(&str, usize)> = vec![(root, 0)];
            state.insert(root, 1);
            while let Some(&mut (node, ref mut next)) = stack.last_mut() {
                let succ = edges.get(node).and_then(|v| v.get(*next)).copied();
                *next += 1;
                match succ {
                    None => {
                        state.insert(node, 2);
                        stack.pop();
                    }
                    Some(id) => match state.get(id.name.as_str()) {
                        Some(1) => {
                            return Err(Error::at(
                                id.loc.clone(),
                                format!(
                                "type `{}` contains itself without indirection (use `*` or `<>`)",
                                id.name
                            ),
                            ))
                        }
                        Some(_) => {}
                        None if edges.contains_key(id.name.as_str()) => {
                            state.insert(&id.name, 1);
                            stack.push((&id.name, 0));
                        }
                        None => {}
                    },
                }
            }
        }
        Ok(())
    }

    fn add_type(&mut self, name: &'a Ident, kind: TypeKind<'a>) -> Result<()> {
        if let Some((_, prev)) = self.types.get(name.name.as_str()) {
            return Err(Error::at(
                name.loc.clone(),
                format!(
                    "type `{}` is already defined differently at {prev}",
                    name.name
                ),
            ));
        }
        self.types.insert(&name.name, (kind, &name.loc));
        Ok(())
    }

    fn add_const(&mut self, name: &'a Ident, kind: ConstKind<'a>, repeatable: bool) -> Result<()> {
        if let Some((_, prev)) = self.consts.get(name.name.as_str()) {
            if repeatable {
                return Ok(());
            }
            return Err(Error::at(
                name.loc.clone(),
                format!("`{}` is already defined differently at {prev}", name.name),
            ));
        }
        self.consts.insert(&name.name, (kind, &name.loc));
        Ok(())
    }

    // ----- constants -----

    /// The value of a constant expression: a number, or a constant expected in scope.
    fn resolve(&self, v: &Value) -> Result<Num> {
        self.eval_depth(v, 0)
    }

    fn eval_depth(&self, v: &Value, depth: usize) -> Result<Num> {
        match v {
            Value::Number(n, _) => Ok(Num::Known(*n)),
            Value::Name(id) => {
                if depth > MAX_CONST_DEPTH {
                    return Err(Error::at(
                        id.loc.clone(),
                        format!("constant `{}` is defined in terms of itself", id.name),
                    ));
                }
                match self.consts.get(id.name.as_str()) {
                    Some((ConstKind::Value(v), _)) => self.eval_depth(v, depth + 1),
                    Some((ConstKind::EnumMember(e, i), _)) => self.enum_value(e, *i, depth + 1),
                    Some((ConstKind::Str, _)) => Err(Error::at(
                        id.loc.clone(),
                        format!(
                            "`{}` is a string constant, a number is needed here",
                            id.name
                        ),
                    )),
                    None => match builtin_const(&id.name) {
                        Some(n) => Ok(Num::Known(n)),
                        None if self.strict || self.types.contains_key(id.name.as_str()) => Err(
                            Error::at(id.loc.clone(), format!("unknown constant `{}`", id.name)),
                        ),
                        None => {
                            // rpcgen passes the name to C, where a header the file includes
                            // defines it: expect it in scope, as undefined types are.
                            self.warnings.borrow_mut().push(Diagnostic {
                                location: id.loc.clone(),
                                message: format!(
                                    "constant `{}` is not defined here; the generated code expects it in scope",
                                    id.name
                                ),
                                source_line: None,
                            });
                            Ok(Num::External(id.name.clone(), 0))
                        }
                    },
                }
            }
        }
    }

    /// The value of member `index` of `e`: its own value, or the nearest earlier explicit value
    /// plus the distance (C's rule).
    fn enum_value(&self, e: &EnumDef, index: usize, depth: usize) -> Result<Num> {
        let mut j = index;
        loop {
            if let Some((_, Some(v))) = e.values.get(j) {
                return Ok(self.eval_depth(v, depth)?.plus((index - j) as i128));
            }
            if j == 0 {
                return Ok(Num::Known(index as i128));
            }
            j -= 1;
        }
    }

    /// A size or bound (0 ..= 2^32-1) as a const generic argument of type `ty` (`usize` or
    /// `u32`): a literal, or a cast of a constant expected in scope.
    fn size(&self, v: &Value, ty: TokenStream) -> Result<TokenStream> {
        match self.resolve(v)? {
            Num::Known(n) => u32::try_from(n)
                .map(|n| {
                    let l = lit(u64::from(n));
                    quote!(#l)
                })
                .map_err(|_| {
                    Error::at(
                        v.loc().clone(),
                        format!("size {n} is out of range (0 ..= 4294967295)"),
                    )
                }),
            ext => {
                let e = ext.tokens(ty);
                Ok(quote!({ #e }))
            }
        }
    }

    fn bound(&self, v: &Option<Value>, ty: TokenStream) -> Result<TokenStream> {
        match v {
            Some(v) => self.size(v, ty),
            None => {
                let l = lit(UNBOUNDED);
                Ok(quote!(#l))
            }
        }
    }

    /// A program, version or procedure number.
    fn number_u32(&self, v: &Value) -> Result<Num> {
        match self.resolve(v)? {
            Num::Known(n) => u32::try_from(n).map(|_| Num::Known(n)).map_err(|_| {
                Error::at(
                    v.loc().clone(),
                    format!("number {n} is out of range (0 ..= 4294967295)"),
                )
            }),
            ext => Ok(ext),
        }
    }
}
