//! The XDR serializer.

use super::de::{RED_ZONE, STACK_SEGMENT};
use super::{padding, Error, FIXED_OPAQUE_TOKEN};
use serde::ser::{self, Serialize};
use std::io;

const ZEROS: [u8; 4] = [0; 4];

/// A serde serializer that writes XDR to an [`io::Write`].
///
/// See the [module documentation](super) for the type mapping.
pub struct Serializer<W> {
    writer: W,
    /// Set by the fixed-opaque wrapper: the next `serialize_bytes` has no length prefix.
    fixed_opaque: bool,
}

impl<W: io::Write> Serializer<W> {
    /// A serializer that writes into `writer`.
    pub fn new(writer: W) -> Self {
        Serializer {
            writer,
            fixed_opaque: false,
        }
    }

    /// Returns the writer.
    pub fn into_inner(self) -> W {
        self.writer
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.writer.write_all(bytes).map_err(Error::Io)
    }

    fn put_u32(&mut self, v: u32) -> Result<(), Error> {
        self.put(&v.to_be_bytes())
    }

    fn put_len(&mut self, len: usize) -> Result<(), Error> {
        let len = u32::try_from(len).map_err(|_| Error::LengthOverflow(len))?;
        self.put_u32(len)
    }

    /// Opaque data: optional length, the bytes, zero padding to four.
    fn put_opaque(&mut self, bytes: &[u8], with_length: bool) -> Result<(), Error> {
        if with_length {
            self.put_len(bytes.len())?;
        }
        self.put(bytes)?;
        self.put(&ZEROS[..padding(bytes.len())])
    }
}

impl<W: io::Write> ser::Serializer for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    fn serialize_bool(self, v: bool) -> Result<(), Error> {
        self.put_u32(u32::from(v))
    }
    fn serialize_i8(self, v: i8) -> Result<(), Error> {
        self.serialize_i32(i32::from(v))
    }
    fn serialize_i16(self, v: i16) -> Result<(), Error> {
        self.serialize_i32(i32::from(v))
    }
    fn serialize_i32(self, v: i32) -> Result<(), Error> {
        self.put(&v.to_be_bytes())
    }
    fn serialize_i64(self, v: i64) -> Result<(), Error> {
        self.put(&v.to_be_bytes())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Error> {
        self.put_u32(u32::from(v))
    }
    fn serialize_u16(self, v: u16) -> Result<(), Error> {
        self.put_u32(u32::from(v))
    }
    fn serialize_u32(self, v: u32) -> Result<(), Error> {
        self.put_u32(v)
    }
    fn serialize_u64(self, v: u64) -> Result<(), Error> {
        self.put(&v.to_be_bytes())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Error> {
        self.put_u32(v.to_bits())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Error> {
        self.put(&v.to_bits().to_be_bytes())
    }
    fn serialize_char(self, v: char) -> Result<(), Error> {
        self.put_u32(u32::from(v))
    }
    fn serialize_str(self, v: &str) -> Result<(), Error> {
        self.put_opaque(v.as_bytes(), true)
    }
    fn serialize_bytes(self, v: &[u8]) -> Result<(), Error> {
        let fixed = std::mem::take(&mut self.fixed_opaque);
        self.put_opaque(v, !fixed)
    }
    fn serialize_none(self) -> Result<(), Error> {
        self.put_u32(0)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Error> {
        self.put_u32(1)?;
        // Optional data is how XDR links lists: grow the stack rather than overflow it.
        stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, || value.serialize(self))
    }
    fn serialize_unit(self) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<(), Error> {
        Ok(())
    }
    fn serialize_unit_variant(
        self,
        _name: &'static str,
        variant_index: u32,
        _variant: &'static str,
    ) -> Result<(), Error> {
        self.put_u32(variant_index)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        if name == FIXED_OPAQUE_TOKEN {
            self.fixed_opaque = true;
            let result = value.serialize(&mut *self);
            self.fixed_opaque = false;
            return result;
        }
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _name: &'static str,
        variant_index: u32,
        _variant: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        self.put_u32(variant_index)?;
        value.serialize(self)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Self, Error> {
        let len = len.ok_or(Error::Unsupported("a sequence whose length is not known"))?;
        self.put_len(len)?;
        Ok(self)
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        variant_index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, Error> {
        self.put_u32(variant_index)?;
        Ok(self)
    }
    fn serialize_map(self, len: Option<usize>) -> Result<Self, Error> {
        let len = len.ok_or(Error::Unsupported("a map whose length is not known"))?;
        self.put_len(len)?;
        Ok(self)
    }
    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, Error> {
        Ok(self)
    }
    fn serialize_struct_variant(
        self,
        _name: &'static str,
        variant_index: u32,
        _variant: &'static str,
        _len: usize,
    ) -> Result<Self, Error> {
        self.put_u32(variant_index)?;
        Ok(self)
    }
    fn is_human_readable(&self) -> bool {
        false
    }
}

impl<W: io::Write> ser::SerializeSeq for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, || value.serialize(&mut **self))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeTuple for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeTupleStruct for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeTupleVariant for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeMap for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), Error> {
        key.serialize(&mut **self)
    }
    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), Error> {
        stacker::maybe_grow(RED_ZONE, STACK_SEGMENT, || value.serialize(&mut **self))
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeStruct for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}

impl<W: io::Write> ser::SerializeStructVariant for &mut Serializer<W> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        _key: &'static str,
        value: &T,
    ) -> Result<(), Error> {
        value.serialize(&mut **self)
    }
    fn end(self) -> Result<(), Error> {
        Ok(())
    }
}
