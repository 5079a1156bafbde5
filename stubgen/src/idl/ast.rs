//! The syntax tree of an interface file. Positions are byte offsets into the file's text.

/// A parsed interface file.
#[derive(Clone, Debug, PartialEq)]
pub struct IdlFile {
    /// Its definitions, in order.
    pub items: Vec<Item>,
}

/// A top-level definition.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `const NAME = N;`
    Const {
        /// Its name.
        name: String,
        /// Its value.
        value: u64,
        /// Where it is.
        at: usize,
    },
    /// `struct NAME { type field; ... };`
    Struct {
        /// Its name.
        name: String,
        /// Its fields, in order.
        fields: Vec<Field>,
        /// Where it is.
        at: usize,
    },
    /// `typedef type NAME;`
    Typedef {
        /// The new name.
        name: String,
        /// What it names.
        ty: Type,
        /// Where it is.
        at: usize,
    },
    /// `interface NAME { N: proc(params); ... };`
    Interface {
        /// Its name.
        name: String,
        /// Its procedures.
        procs: Vec<Proc>,
        /// Where it is.
        at: usize,
    },
}

/// A struct field.
#[derive(Clone, Debug, PartialEq)]
pub struct Field {
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// Where it is.
    pub at: usize,
}

/// A primitive type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prim {
    /// `i8`
    I8,
    /// `i16`
    I16,
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `u8`
    U8,
    /// `u16`
    U16,
    /// `u32`
    U32,
    /// `u64`
    U64,
    /// `f32`
    F32,
    /// `f64`
    F64,
    /// `bool`
    Bool,
}

/// A bound or an array length: a number or a constant's name.
#[derive(Clone, Debug, PartialEq)]
pub enum Size {
    /// A number.
    Lit(u64),
    /// A constant, and where it is named.
    Const(String, usize),
}

/// A type.
#[derive(Clone, Debug, PartialEq)]
pub enum Type {
    /// A primitive.
    Prim(Prim),
    /// `string<N>`: at most N bytes of UTF-8.
    String(Size),
    /// `sequence<T, N>`: at most N elements.
    Sequence(Box<Type>, Size),
    /// `T name[N]`: exactly N elements.
    Array(Box<Type>, Size),
    /// A struct or typedef name, and where it is named.
    Named(String, usize),
}

/// A parameter's direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Client to server.
    In,
    /// Server to client.
    Out,
    /// Both ways.
    InOut,
}

/// A parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// Its direction.
    pub dir: Dir,
    /// Its name.
    pub name: String,
    /// Its type.
    pub ty: Type,
    /// Where it is.
    pub at: usize,
}

/// A procedure.
#[derive(Clone, Debug, PartialEq)]
pub struct Proc {
    /// Its number (1..=65535).
    pub number: u64,
    /// Its name.
    pub name: String,
    /// Its parameters, in order.
    pub params: Vec<Param>,
    /// Where it is.
    pub at: usize,
}
