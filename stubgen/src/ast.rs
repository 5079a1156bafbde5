//! The interface description shared by the front ends and the Rust code generator.
//!
//! It follows the XDR language (RFC 4506) and the RPC language (RFC 5531) closely. Front ends
//! normalise their surface syntax into it: the rpcgen front end maps `char`/`short`/`long` to
//! [`Ty::Int`] (XDR encodes them as 4-byte integers) and `string` without a bound to an unbounded
//! [`Ty::String`].

use crate::error::Location;

/// An identifier and where it appears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ident {
    /// The name as written.
    pub name: String,
    /// Its position in the source.
    pub loc: Location,
}

/// A constant expression: a number or the name of a constant (a `const`, an enum value, a
/// program, version or procedure name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A literal number (C syntax: decimal, `0x` hexadecimal, leading-`0` octal, optional `-`).
    Number(i128, Location),
    /// A named constant.
    Name(Ident),
}

impl Value {
    /// Where the value is written.
    pub fn loc(&self) -> &Location {
        match self {
            Value::Number(_, loc) => loc,
            Value::Name(id) => &id.loc,
        }
    }
}

/// An XDR type as used in a declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ty {
    /// `void`: no data.
    Void,
    /// `int` (also `char`, `short`, `long`): 32-bit signed.
    Int,
    /// `unsigned int` (also bare `unsigned`, `unsigned char/short/long`): 32-bit unsigned.
    UInt,
    /// `hyper`: 64-bit signed.
    Hyper,
    /// `unsigned hyper`: 64-bit unsigned.
    UHyper,
    /// `float`.
    Float,
    /// `double`.
    Double,
    /// `quadruple`: 128-bit floating point.
    Quadruple,
    /// `bool`.
    Bool,
    /// A named type (`struct X`, `enum X`, `union X` or a plain name).
    Named(Ident),
    /// `T *name`: optional data.
    Optional(Box<Ty>),
    /// `T name[N]`.
    FixedArray(Box<Ty>, Value),
    /// `T name<N>` or `T name<>` (`None`: no bound).
    VarArray(Box<Ty>, Option<Value>),
    /// `opaque name[N]`.
    FixedOpaque(Value),
    /// `opaque name<N>` or `opaque name<>`.
    VarOpaque(Option<Value>),
    /// `string name<N>` or `string name<>`.
    String(Option<Value>),
}

/// A declaration: a name and its type (`void` declarations have no name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decl {
    /// The declared name; `None` for `void`.
    pub name: Option<Ident>,
    /// The type.
    pub ty: Ty,
}

/// The value of a `const` definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstValue {
    /// A number or another constant's name.
    Value(Value),
    /// A string constant (rpcgen accepts `const X = "text";`).
    Str(String),
}

/// `const NAME = value;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstDef {
    /// The constant's name.
    pub name: Ident,
    /// Its value.
    pub value: ConstValue,
}

/// `enum NAME { A = 1, B, ... };`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumDef {
    /// The type name.
    pub name: Ident,
    /// The values in order; `None` means previous + 1 (or 0 for the first), as in C.
    pub values: Vec<(Ident, Option<Value>)>,
}

/// `struct NAME { declarations };`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StructDef {
    /// The type name.
    pub name: Ident,
    /// The fields in order (never `void`).
    pub fields: Vec<Decl>,
}

/// One arm of a union: the case values that select it and its declaration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnionArm {
    /// The case labels (several labels may share an arm).
    pub cases: Vec<Value>,
    /// The arm's data (`void` for none).
    pub decl: Decl,
}

/// `union NAME switch (disc) { case ...: decl; ... default: decl; };`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnionDef {
    /// The type name.
    pub name: Ident,
    /// The discriminant declaration (`int`, `unsigned int`, `bool` or an enum type).
    pub discriminant: Decl,
    /// The case arms in order.
    pub arms: Vec<UnionArm>,
    /// The `default` arm, if any.
    pub default: Option<Decl>,
}

/// `typedef declaration;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypedefDef {
    /// The new name and the type it stands for.
    pub decl: Decl,
}

/// One procedure argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    /// An optional name given in the interface file.
    pub name: Option<Ident>,
    /// The argument's type.
    pub ty: Ty,
}

/// `RESULT NAME(ARGS) = number;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcDef {
    /// The procedure's name.
    pub name: Ident,
    /// The arguments (empty for `void`); several for multi-argument procedures (rpcgen -N).
    pub args: Vec<Arg>,
    /// The result type (`Ty::Void` for none).
    pub result: Ty,
    /// The procedure number.
    pub number: Value,
}

/// `version NAME { procedures } = number;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionDef {
    /// The version's name.
    pub name: Ident,
    /// The procedures.
    pub procs: Vec<ProcDef>,
    /// The version number.
    pub number: Value,
}

/// `program NAME { versions } = number;`
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramDef {
    /// The program's name.
    pub name: Ident,
    /// The versions.
    pub versions: Vec<VersionDef>,
    /// The program number.
    pub number: Value,
}

/// One top-level definition.
// Definitions are built once per input and walked a few times: boxing buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Definition {
    /// A constant.
    Const(ConstDef),
    /// An enumeration.
    Enum(EnumDef),
    /// A structure.
    Struct(StructDef),
    /// A discriminated union.
    Union(UnionDef),
    /// A type alias.
    Typedef(TypedefDef),
    /// An RPC program.
    Program(ProgramDef),
}

/// A directive of the Linux kernel's xdrgen dialect: `pragma DIRECTIVE NAME [NAME];`.
///
/// xdrgen knows `header` (names the generated C header), `big_endian` (an enum kept in
/// network byte order in C), `exclude` (no code for a procedure: it is written by hand),
/// `public` (a non-static C encoder/decoder), `pages` and `skip`. Only `exclude` changes
/// the Rust output (the procedure is left out of the client, the server trait and the
/// dispatcher); the others concern C and change nothing on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pragma {
    /// The directive (`header`, `big_endian`, `exclude`, `public`, `pages`, `skip`).
    pub directive: Ident,
    /// Its one or two operands.
    pub args: Vec<Ident>,
}

/// A whole interface description: definitions in source order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    /// The definitions.
    pub definitions: Vec<Definition>,
    /// xdrgen `pragma` directives, in source order.
    pub pragmas: Vec<Pragma>,
    /// Numeric constants defined only in pass-through C text (rpcgen's `%#define NAME 1024`):
    /// used to resolve names the definitions refer to, never emitted.
    pub c_constants: Vec<ConstDef>,
}
