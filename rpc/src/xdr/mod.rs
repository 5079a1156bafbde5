//! XDR (RFC 4506) as a serde data format.
//!
//! Every XDR item is a multiple of four bytes, big-endian. The mapping from XDR types to Rust
//! types, which the `stubgen` generator relies on, is:
//!
//! | XDR                         | Rust                                              |
//! |-----------------------------|---------------------------------------------------|
//! | `int`, `unsigned`           | `i32`, `u32`                                      |
//! | `hyper`, `unsigned hyper`   | `i64`, `u64`                                      |
//! | `float`, `double`           | `f32`, `f64`                                      |
//! | `quadruple`                 | [`Quadruple`] (16 raw bytes, no arithmetic)       |
//! | `bool`                      | `bool` (decoding rejects anything but 0 and 1)    |
//! | `enum`                      | a type serialized with `serialize_i32`            |
//! | `opaque x[N]`, `opaque x<M>`| [`FixedOpaque<N>`], [`Opaque<M>`]                 |
//! | `string x<M>`               | [`XdrString<M>`] (or `String`, unbounded, UTF-8)   |
//! | `T x[N]`, `T x<M>`          | [`FixedArray<T, N>`], [`VarArray<T, M>`]          |
//! | `struct`                    | a serde-derived struct: fields in order, no names |
//! | `union`                     | a tuple: discriminant, then the arm (if not void) |
//! | `T *x` (optional data)      | `Option<Box<T>>`: a bool, then the value if true  |
//! | `void`                      | `()` (zero bytes)                                 |
//!
//! Rust types without an XDR counterpart are encoded as their nearest XDR relative, as rpcgen
//! does: `i8`/`i16` as `int`, `u8`/`u16` as `unsigned` (so `Vec<u8>` is an array of four-byte
//! words, like rpcgen's `unsigned char x<>`; use [`Opaque`] for packed bytes), `char` as
//! `unsigned`, `()`-like unit structs as void, tuples as consecutive values, maps as a count of
//! key/value pairs, and serde's own enums as a union whose discriminant is the variant index.
//!
//! # Unions and tuple access
//!
//! A union is serialized with `serialize_tuple(2)` (discriminant, arm) or `serialize_tuple(1)`
//! (a void arm). The [`Deserializer`] yields tuple elements on demand, so a union visitor may
//! call `deserialize_tuple(2, ..)`, read the discriminant and then read zero or one more element.
//!
//! # Hostile input
//!
//! Decoding never panics, checks every bound ([`Opaque`], [`XdrString`], [`VarArray`]) before
//! copying, rejects non-zero padding, and never preallocates more than the remaining input
//! could fill.
//!
//! # Entry points
//!
//! [`to_bytes`], [`to_writer`] (any `io::Write`, including appending to a `Vec<u8>`),
//! [`from_bytes`] (the whole input must be consumed) and [`take_from_bytes`] (returns the
//! unconsumed rest).

mod de;
mod ser;
mod types;

pub use de::{Deserializer, DEFAULT_MAX_DEPTH};
pub use ser::Serializer;
pub use types::{FixedArray, FixedOpaque, Opaque, Quadruple, VarArray, XdrString};

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;

/// Errors of XDR encoding and decoding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input ended before the value did.
    #[error("unexpected end of XDR input: needed {needed} bytes, {remaining} remaining")]
    UnexpectedEof {
        /// Bytes the next item needs.
        needed: usize,
        /// Bytes that were left.
        remaining: usize,
    },
    /// [`from_bytes`] decoded a value but input was left over.
    #[error("{0} trailing bytes after the XDR value")]
    TrailingBytes(usize),
    /// A `bool` was neither 0 nor 1.
    #[error("invalid XDR bool {0} (must be 0 or 1)")]
    InvalidBool(u32),
    /// Padding bytes after opaque data or a string were not zero.
    #[error("non-zero XDR padding")]
    NonZeroPadding,
    /// A variable-length item exceeded its declared maximum.
    #[error("{kind}<{max}> bound exceeded: length {len}")]
    BoundExceeded {
        /// `opaque`, `string` or `array`.
        kind: &'static str,
        /// The declared maximum.
        max: u32,
        /// The length met.
        len: u64,
    },
    /// A length prefix announced more items than the remaining input could hold.
    #[error("XDR length {len} exceeds the {remaining} remaining input bytes")]
    LengthExceedsInput {
        /// The decoded length.
        len: u32,
        /// Bytes that were left.
        remaining: usize,
    },
    /// A fixed-length item had the wrong length (encoding).
    #[error("fixed-length XDR item: expected {expected} elements, got {len}")]
    FixedLength {
        /// The declared length.
        expected: usize,
        /// The length met.
        len: usize,
    },
    /// A length does not fit in XDR's 32-bit length field (encoding).
    #[error("length {0} does not fit in an XDR length")]
    LengthOverflow(usize),
    /// A `String` or `&str` target met bytes that are not UTF-8.
    #[error("XDR string is not valid UTF-8")]
    InvalidUtf8,
    /// A decoded integer does not fit the Rust type asked for.
    #[error("XDR value {value} out of range for {ty}")]
    OutOfRange {
        /// The decoded value.
        value: i64,
        /// The Rust type.
        ty: &'static str,
    },
    /// A serde feature XDR cannot express (self-description, unsized sequences, ...).
    #[error("not supported by XDR: {0}")]
    Unsupported(&'static str),
    /// A message from a `Serialize` or `Deserialize` implementation (e.g. an unknown enum value).
    #[error("{0}")]
    Message(String),
    /// The writer failed.
    #[error("I/O error while writing XDR")]
    Io(#[from] io::Error),
}

impl serde::ser::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::Message(msg.to_string())
    }
}

impl serde::de::Error for Error {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Error::Message(msg.to_string())
    }
}

/// Encodes `value` into a new buffer.
pub fn to_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    to_writer(&mut out, value)?;
    Ok(out)
}

/// Encodes `value` into `writer`. Passing a `&mut Vec<u8>` appends to the vector.
pub fn to_writer<W: io::Write, T: Serialize + ?Sized>(writer: W, value: &T) -> Result<(), Error> {
    value.serialize(&mut Serializer::new(writer))
}

/// Decodes a `T` that must span the whole of `input`.
pub fn from_bytes<'de, T: Deserialize<'de>>(input: &'de [u8]) -> Result<T, Error> {
    let (value, rest) = take_from_bytes(input)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(Error::TrailingBytes(rest.len()))
    }
}

/// Decodes a `T` from the front of `input` and returns it with the bytes that follow it.
pub fn take_from_bytes<'de, T: Deserialize<'de>>(
    input: &'de [u8],
) -> Result<(T, &'de [u8]), Error> {
    let mut de = Deserializer::new(input);
    let value = T::deserialize(&mut de)?;
    Ok((value, de.remaining()))
}

/// Stack a value of this many XDR levels may need to be dropped or walked recursively
/// (a generous bound on what dropping one `Option<Box<T>>` link takes).
const STACK_PER_LEVEL: usize = 256;

/// Stack of the server's serving threads: deep enough for [`with_stack_for`] to find room for
/// the largest value decoding allows, so that a call never has a stack allocated for it (a
/// thread's stack is reserved address space, touched only as deep as it is used; growing one
/// on the heap for a call, as `stacker` does, cost 36 us per call of 1 MiB here).
pub(crate) const SERVER_STACK: usize =
    DEFAULT_MAX_DEPTH * STACK_PER_LEVEL + 2 * de::RED_ZONE + (2 << 20);

/// Runs `f` on a stack deep enough to decode, encode and drop a value of `encoded_len` XDR
/// bytes, growing it on the heap (the `stacker` crate) only when what is left of the current
/// one might not do. Rust drops a linked list (`Option<Box<T>>`) recursively, one frame per
/// link, so a server that decodes a long list must also drop it somewhere deep enough: the RPC
/// server runs each dispatch inside this. Each XDR nesting level takes at least four bytes, and
/// decoding allows at most [`DEFAULT_MAX_DEPTH`] levels, which bounds the stack asked for.
pub fn with_stack_for<R>(encoded_len: usize, f: impl FnOnce() -> R) -> R {
    let levels = (encoded_len / 4).min(DEFAULT_MAX_DEPTH);
    let needed = levels.saturating_mul(STACK_PER_LEVEL) + de::RED_ZONE;
    stacker::maybe_grow(needed, needed, f)
}

/// Drops `value`, which was encoded into `encoded_len` bytes, inside [`with_stack_for`]:
/// generated servers drop their results this way, so that returning a long list cannot
/// overflow the server thread's stack.
pub fn drop_with_stack_for<T>(value: T, encoded_len: usize) {
    with_stack_for(encoded_len, move || drop(value));
}

/// Number of zero bytes that pad `len` bytes to a multiple of four.
pub(crate) fn padding(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// Names by which the wrapper types signal the serializer and deserializer that bytes are
/// fixed-length opaque data (no length prefix). Other serde formats just see a newtype or tuple.
pub(crate) const FIXED_OPAQUE_TOKEN: &str = "$rpc::xdr::FixedOpaque";

#[cfg(test)]
mod tests;
