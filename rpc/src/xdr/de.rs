//! The XDR deserializer.

use super::{padding, Error, FIXED_OPAQUE_TOKEN};
use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

/// Default limit on the nesting of optional data, variable-length arrays and maps (the only
/// ways an XDR type can contain itself). Each level consumes at least four bytes of input, so
/// the depth is bounded by the input's size anyway; the recursion runs on a stack grown on the
/// heap as needed (the `stacker` crate), so a long linked list (an NFS READDIR chain, a mount
/// export list) decodes like libtirpc decodes it. This limit caps the memory that hostile input
/// can make the decoder use for its stack (about 1.6 KB per level in debug builds, 250 bytes in
/// release builds). Lower or raise it with [`Deserializer::with_max_depth`].
pub const DEFAULT_MAX_DEPTH: usize = 1 << 18;

/// Stack that must be left before the decoder or encoder recurses one more level; below it,
/// a new segment of [`STACK_SEGMENT`] bytes is allocated and the recursion continues there.
pub(crate) const RED_ZONE: usize = 128 * 1024;
/// Size of each stack segment allocated when recursing deeply.
pub(crate) const STACK_SEGMENT: usize = 4 * 1024 * 1024;

/// A serde deserializer that reads XDR from a byte slice, borrowing from it where it can.
///
/// See the [module documentation](super) for the type mapping.
pub struct Deserializer<'de> {
    input: &'de [u8],
    depth: usize,
    max_depth: usize,
}

impl<'de> Deserializer<'de> {
    /// A deserializer over `input`.
    pub fn new(input: &'de [u8]) -> Self {
        Deserializer {
            input,
            depth: 0,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }

    /// Sets the nesting limit (default [`DEFAULT_MAX_DEPTH`]).
    pub fn with_max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// The bytes not consumed yet.
    pub fn remaining(&self) -> &'de [u8] {
        self.input
    }

    fn take(&mut self, n: usize) -> Result<&'de [u8], Error> {
        if n > self.input.len() {
            return Err(Error::UnexpectedEof {
                needed: n,
                remaining: self.input.len(),
            });
        }
        let (head, tail) = self.input.split_at(n);
        self.input = tail;
        Ok(head)
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn read_u32(&mut self) -> Result<u32, Error> {
        Ok(u32::from_be_bytes(self.take_array()?))
    }

    fn read_i32(&mut self) -> Result<i32, Error> {
        Ok(i32::from_be_bytes(self.take_array()?))
    }

    fn read_u64(&mut self) -> Result<u64, Error> {
        Ok(u64::from_be_bytes(self.take_array()?))
    }

    fn read_bool(&mut self) -> Result<bool, Error> {
        match self.read_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::InvalidBool(v)),
        }
    }

    /// A length prefix that announces `len` items of at least one byte each.
    fn read_len(&mut self) -> Result<u32, Error> {
        let len = self.read_u32()?;
        if len as usize > self.input.len() {
            return Err(Error::LengthExceedsInput {
                len,
                remaining: self.input.len(),
            });
        }
        Ok(len)
    }

    /// `n` bytes of opaque data and their padding, which must be zero.
    fn read_fixed_opaque(&mut self, n: usize) -> Result<&'de [u8], Error> {
        let data = self.take(n)?;
        if self.take(padding(n))?.iter().any(|&b| b != 0) {
            return Err(Error::NonZeroPadding);
        }
        Ok(data)
    }

    fn read_var_opaque(&mut self) -> Result<&'de [u8], Error> {
        let len = self.read_len()?;
        self.read_fixed_opaque(len as usize)
    }

    fn nest<R>(&mut self, f: impl FnOnce(&mut Self) -> Result<R, Error>) -> Result<R, Error> {
        if self.depth >= self.max_depth {
            return Err(Error::Message(format!(
                "XDR nesting deeper than {} levels",
                self.max_depth
            )));
        }
        self.depth += 1;
        let result = stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, || f(&mut *self));
        self.depth -= 1;
        result
    }
}

fn narrow<T: TryFrom<i64>>(value: i64, ty: &'static str) -> Result<T, Error> {
    T::try_from(value).map_err(|_| Error::OutOfRange { value, ty })
}

impl<'de> de::Deserializer<'de> for &mut Deserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported(
            "deserialize_any (XDR is not self-describing)",
        ))
    }
    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_bool(self.read_bool()?)
    }
    fn deserialize_i8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_i8(narrow(i64::from(self.read_i32()?), "i8")?)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_i16(narrow(i64::from(self.read_i32()?), "i16")?)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_i32(self.read_i32()?)
    }
    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_i64(self.read_u64()? as i64)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_u8(narrow(i64::from(self.read_u32()?), "u8")?)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_u16(narrow(i64::from(self.read_u32()?), "u16")?)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_u32(self.read_u32()?)
    }
    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_u64(self.read_u64()?)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_f32(f32::from_bits(self.read_u32()?))
    }
    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_f64(f64::from_bits(self.read_u64()?))
    }
    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let v = self.read_u32()?;
        let c = char::from_u32(v).ok_or(Error::OutOfRange {
            value: i64::from(v),
            ty: "char",
        })?;
        visitor.visit_char(c)
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let bytes = self.read_var_opaque()?;
        visitor.visit_borrowed_str(std::str::from_utf8(bytes).map_err(|_| Error::InvalidUtf8)?)
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }
    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_borrowed_bytes(self.read_var_opaque()?)
    }
    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        if self.read_bool()? {
            self.nest(|de| visitor.visit_some(de))
        } else {
            visitor.visit_none()
        }
    }
    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }
    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let len = self.read_len()?;
        self.nest(|de| {
            visitor.visit_seq(Elements {
                de,
                left: len as usize,
            })
        })
    }
    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_seq(Elements {
            de: self,
            left: len,
        })
    }
    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        if name == FIXED_OPAQUE_TOKEN {
            return visitor.visit_borrowed_bytes(self.read_fixed_opaque(len)?);
        }
        self.deserialize_tuple(len, visitor)
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        let len = self.read_len()?;
        self.nest(|de| {
            visitor.visit_map(Elements {
                de,
                left: len as usize,
            })
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_tuple(fields.len(), visitor)
    }
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(self)
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported("identifiers (XDR has no field names)"))
    }
    fn deserialize_ignored_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Error> {
        Err(Error::Unsupported(
            "skipping a value (XDR is not self-describing)",
        ))
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

/// Sequence, tuple, struct and map access: yields elements on demand, so a visitor may stop
/// early (a union reads its discriminant, then zero or one more element).
struct Elements<'a, 'de> {
    de: &'a mut Deserializer<'de>,
    left: usize,
}

impl<'de> de::SeqAccess<'de> for Elements<'_, 'de> {
    type Error = Error;
    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::MapAccess<'de> for Elements<'_, 'de> {
    type Error = Error;
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        if self.left == 0 {
            return Ok(None);
        }
        self.left -= 1;
        seed.deserialize(&mut *self.de).map(Some)
    }
    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        seed.deserialize(&mut *self.de)
    }
    fn size_hint(&self) -> Option<usize> {
        Some(self.left)
    }
}

impl<'de> de::EnumAccess<'de> for &mut Deserializer<'de> {
    type Error = Error;
    type Variant = Self;
    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Error> {
        let index = self.read_u32()?;
        let value = seed.deserialize(IntoDeserializer::<Error>::into_deserializer(index))?;
        Ok((value, self))
    }
}

impl<'de> de::VariantAccess<'de> for &mut Deserializer<'de> {
    type Error = Error;
    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }
    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }
    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_tuple(self, len, visitor)
    }
    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_tuple(self, fields.len(), visitor)
    }
}
