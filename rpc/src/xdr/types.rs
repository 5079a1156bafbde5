//! Wrapper types for the XDR types that have no native Rust counterpart.
//!
//! Their serde implementations check the declared bound on encode and on decode; the error
//! names the bound and the length met (e.g. `opaque<16> bound exceeded: length 20`).
//!
//! Rust does not use a const parameter's default for inference, so an unbounded value built
//! in expression position needs its type spelled out: `let o: Opaque = Opaque(bytes);`.

use super::FIXED_OPAQUE_TOKEN;
use serde::de::{self, Deserialize, Deserializer, SeqAccess, Visitor};
use serde::ser::{self, Serialize, SerializeSeq, SerializeTuple, Serializer};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Never preallocate more than this many bytes of elements on the word of a length prefix.
const MAX_PREALLOC_BYTES: usize = 1 << 20;

fn cautious_capacity<T>(hint: usize) -> usize {
    hint.min(MAX_PREALLOC_BYTES / std::mem::size_of::<T>().max(1))
}

fn bound_message(kind: &str, max: u32, len: usize) -> String {
    if max == u32::MAX {
        format!("{kind}<> bound exceeded: length {len}")
    } else {
        format!("{kind}<{max}> bound exceeded: length {len}")
    }
}

fn check_bound_ser<E: ser::Error>(kind: &str, max: u32, len: usize) -> Result<(), E> {
    if len as u64 > u64::from(max) {
        Err(E::custom(bound_message(kind, max, len)))
    } else {
        Ok(())
    }
}

fn check_bound_de<E: de::Error>(kind: &str, max: u32, len: usize) -> Result<(), E> {
    if len as u64 > u64::from(max) {
        Err(E::custom(bound_message(kind, max, len)))
    } else {
        Ok(())
    }
}

/// Serializes raw bytes with `serialize_bytes` (the fixed-opaque token supplies the mode).
struct RawBytes<'a>(&'a [u8]);

impl Serialize for RawBytes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Variable-length bytes with a bound check, for [`Opaque`] and [`XdrString`].
struct BoundedBytesVisitor {
    kind: &'static str,
    max: u32,
}

impl<'de> Visitor<'de> for BoundedBytesVisitor {
    type Value = Vec<u8>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "XDR {} of at most {} bytes", self.kind, self.max)
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        check_bound_de(self.kind, self.max, v.len())?;
        Ok(v.to_vec())
    }
    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        check_bound_de(self.kind, self.max, v.len())?;
        Ok(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        self.visit_bytes(v.as_bytes())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(cautious_capacity::<u8>(seq.size_hint().unwrap_or(0)));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
            check_bound_de(self.kind, self.max, out.len())?;
        }
        Ok(out)
    }
}

/// Fixed-length bytes, for [`FixedOpaque`] and [`Quadruple`].
struct FixedBytesVisitor<const N: usize>;

impl<'de, const N: usize> Visitor<'de> for FixedBytesVisitor<N> {
    type Value = [u8; N];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "XDR fixed opaque of {N} bytes")
    }
    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<[u8; N], E> {
        <[u8; N]>::try_from(v).map_err(|_| E::invalid_length(v.len(), &self))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[u8; N], A::Error> {
        let mut out = [0u8; N];
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = seq
                .next_element()?
                .ok_or_else(|| de::Error::invalid_length(i, &self))?;
        }
        Ok(out)
    }
}

fn serialize_fixed_opaque<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_newtype_struct(FIXED_OPAQUE_TOKEN, &RawBytes(bytes))
}

fn deserialize_fixed_opaque<'de, D: Deserializer<'de>, const N: usize>(
    deserializer: D,
) -> Result<[u8; N], D::Error> {
    deserializer.deserialize_tuple_struct(FIXED_OPAQUE_TOKEN, N, FixedBytesVisitor::<N>)
}

macro_rules! deref_to {
    ([$($gen:tt)*] $ty:ty, $target:ty) => {
        impl<$($gen)*> Deref for $ty {
            type Target = $target;
            fn deref(&self) -> &$target {
                &self.0
            }
        }
        impl<$($gen)*> DerefMut for $ty {
            fn deref_mut(&mut self) -> &mut $target {
                &mut self.0
            }
        }
    };
}

/// `opaque<MAX>`: a length, the bytes, and zero padding to a multiple of four.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Opaque<const MAX: u32 = { u32::MAX }>(pub Vec<u8>);

deref_to!([const MAX: u32] Opaque<MAX>, Vec<u8>);

impl<const MAX: u32> From<Vec<u8>> for Opaque<MAX> {
    fn from(v: Vec<u8>) -> Self {
        Opaque(v)
    }
}

impl<const MAX: u32> From<&[u8]> for Opaque<MAX> {
    fn from(v: &[u8]) -> Self {
        Opaque(v.to_vec())
    }
}

impl<const MAX: u32> Serialize for Opaque<MAX> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        check_bound_ser("opaque", MAX, self.0.len())?;
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de, const MAX: u32> Deserialize<'de> for Opaque<MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_bytes(BoundedBytesVisitor {
                kind: "opaque",
                max: MAX,
            })
            .map(Opaque)
    }
}

/// `opaque[N]`: exactly `N` bytes and zero padding to a multiple of four, no length prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FixedOpaque<const N: usize>(pub [u8; N]);

deref_to!([const N: usize] FixedOpaque<N>, [u8; N]);

impl<const N: usize> Default for FixedOpaque<N> {
    fn default() -> Self {
        FixedOpaque([0; N])
    }
}

impl<const N: usize> From<[u8; N]> for FixedOpaque<N> {
    fn from(v: [u8; N]) -> Self {
        FixedOpaque(v)
    }
}

impl<const N: usize> Serialize for FixedOpaque<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_fixed_opaque(&self.0, serializer)
    }
}

impl<'de, const N: usize> Deserialize<'de> for FixedOpaque<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_fixed_opaque(deserializer).map(FixedOpaque)
    }
}

/// `string<MAX>`: encoded like `opaque<MAX>`. XDR strings are ASCII by convention but may hold
/// any bytes, so the content is kept as bytes; [`XdrString::as_str`] checks UTF-8.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct XdrString<const MAX: u32 = { u32::MAX }>(pub Vec<u8>);

impl<const MAX: u32> XdrString<MAX> {
    /// The content as UTF-8.
    pub fn as_str(&self) -> Result<&str, std::str::Utf8Error> {
        std::str::from_utf8(&self.0)
    }

    /// The content as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl<const MAX: u32> From<&str> for XdrString<MAX> {
    fn from(v: &str) -> Self {
        XdrString(v.as_bytes().to_vec())
    }
}

impl<const MAX: u32> From<String> for XdrString<MAX> {
    fn from(v: String) -> Self {
        XdrString(v.into_bytes())
    }
}

impl<const MAX: u32> From<Vec<u8>> for XdrString<MAX> {
    fn from(v: Vec<u8>) -> Self {
        XdrString(v)
    }
}

impl<const MAX: u32> fmt::Display for XdrString<MAX> {
    /// Shows the content, replacing bytes that are not UTF-8.
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl<const MAX: u32> Serialize for XdrString<MAX> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        check_bound_ser("string", MAX, self.0.len())?;
        serializer.serialize_bytes(&self.0)
    }
}

impl<'de, const MAX: u32> Deserialize<'de> for XdrString<MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_bytes(BoundedBytesVisitor {
                kind: "string",
                max: MAX,
            })
            .map(XdrString)
    }
}

/// `T<MAX>`: a count, then that many elements.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarArray<T, const MAX: u32 = { u32::MAX }>(pub Vec<T>);

deref_to!([T, const MAX: u32] VarArray<T, MAX>, Vec<T>);

impl<T, const MAX: u32> Default for VarArray<T, MAX> {
    fn default() -> Self {
        VarArray(Vec::new())
    }
}

impl<T, const MAX: u32> From<Vec<T>> for VarArray<T, MAX> {
    fn from(v: Vec<T>) -> Self {
        VarArray(v)
    }
}

impl<T: Serialize, const MAX: u32> Serialize for VarArray<T, MAX> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        check_bound_ser("array", MAX, self.0.len())?;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for element in &self.0 {
            seq.serialize_element(element)?;
        }
        seq.end()
    }
}

struct VarArrayVisitor<T, const MAX: u32>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const MAX: u32> Visitor<'de> for VarArrayVisitor<T, MAX> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "XDR array of at most {MAX} elements")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let hint = seq.size_hint().unwrap_or(0);
        // Check the announced count before reading any element.
        check_bound_de("array", MAX, hint)?;
        let mut out = Vec::with_capacity(cautious_capacity::<T>(hint));
        while let Some(element) = seq.next_element()? {
            out.push(element);
            check_bound_de("array", MAX, out.len())?;
        }
        Ok(out)
    }
}

impl<'de, T: Deserialize<'de>, const MAX: u32> Deserialize<'de> for VarArray<T, MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_seq(VarArrayVisitor::<T, MAX>(PhantomData))
            .map(VarArray)
    }
}

/// `T[N]`: exactly `N` elements, no count. Any `N` is allowed.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FixedArray<T, const N: usize>(pub [T; N]);

deref_to!([T, const N: usize] FixedArray<T, N>, [T; N]);

impl<T: Default, const N: usize> Default for FixedArray<T, N> {
    fn default() -> Self {
        FixedArray(std::array::from_fn(|_| T::default()))
    }
}

impl<T, const N: usize> From<[T; N]> for FixedArray<T, N> {
    fn from(v: [T; N]) -> Self {
        FixedArray(v)
    }
}

impl<T: Serialize, const N: usize> Serialize for FixedArray<T, N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut tuple = serializer.serialize_tuple(N)?;
        for element in &self.0 {
            tuple.serialize_element(element)?;
        }
        tuple.end()
    }
}

struct FixedArrayVisitor<T, const N: usize>(PhantomData<T>);

impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for FixedArrayVisitor<T, N> {
    type Value = [T; N];
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "XDR fixed array of {N} elements")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<[T; N], A::Error> {
        let mut out = Vec::with_capacity(cautious_capacity::<T>(N));
        for i in 0..N {
            match seq.next_element()? {
                Some(element) => out.push(element),
                None => return Err(de::Error::invalid_length(i, &self)),
            }
        }
        out.try_into()
            .map_err(|_| de::Error::custom("fixed array length mismatch"))
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for FixedArray<T, N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer
            .deserialize_tuple(N, FixedArrayVisitor::<T, N>(PhantomData))
            .map(FixedArray)
    }
}

/// `quadruple`: a 128-bit IEEE float, kept as its 16 big-endian bytes (Rust has no `f128` on
/// stable; the bytes round-trip exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Quadruple(pub [u8; 16]);

impl Serialize for Quadruple {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_fixed_opaque(&self.0, serializer)
    }
}

impl<'de> Deserialize<'de> for Quadruple {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserialize_fixed_opaque(deserializer).map(Quadruple)
    }
}
