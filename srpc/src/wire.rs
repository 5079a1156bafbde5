//! The fixed-layout encoding of SHRIMP RPC values: little-endian, natural alignment, `bool`
//! as a 4-byte word, a 4-byte length before the elements of a bounded string or sequence, so
//! that every type has a size known at compile time (the generator lays out every call with
//! the same rules, and checks that it agrees with [`Wire::SIZE`]).

use crate::Error;

/// A value with a fixed-size encoding.
pub trait Wire: Sized {
    /// Encoded size in bytes.
    const SIZE: usize;
    /// Alignment of the encoding.
    const ALIGN: usize;
    /// Encodes into `b` (exactly `SIZE` bytes).
    fn put(&self, b: &mut [u8]) -> Result<(), Error>;
    /// Decodes from `b` (exactly `SIZE` bytes).
    fn get(b: &[u8]) -> Result<Self, Error>;

    /// Decodes from `b` into `self` (in place: arrays of numbers are not built on the stack
    /// and then copied).
    fn get_into(&mut self, b: &[u8]) -> Result<(), Error> {
        *self = Self::get(b)?;
        Ok(())
    }

    /// Decodes `items.len()` values from `b` into `items`.
    fn get_all_into(items: &mut [Self], b: &[u8]) -> Result<(), Error> {
        short(b, items.len() * Self::SIZE)?;
        for (v, c) in items.iter_mut().zip(b.chunks_exact(Self::SIZE.max(1))) {
            v.get_into(c)?;
        }
        Ok(())
    }

    /// Encodes `items` one after the other into `b` (at least `items.len() * SIZE` bytes).
    /// Numbers override it with one pass that the compiler turns into a copy.
    fn put_all(items: &[Self], b: &mut [u8]) -> Result<(), Error> {
        short(b, items.len() * Self::SIZE)?;
        for (v, c) in items.iter().zip(b.chunks_exact_mut(Self::SIZE.max(1))) {
            v.put(c)?;
        }
        Ok(())
    }

    /// The encoding of `self` when it is `self`'s own memory (byte arrays), so that the
    /// runtime can move it between the caller and the transfer without encoding.
    fn wire_bytes(&self) -> Option<&[u8]> {
        None
    }

    /// The same, to decode into by copying bytes.
    fn wire_bytes_mut(&mut self) -> Option<&mut [u8]> {
        None
    }

    /// [`Wire::wire_bytes`] of a run of values.
    fn slice_wire_bytes(_items: &[Self]) -> Option<&[u8]> {
        None
    }

    /// [`Wire::wire_bytes_mut`] of a run of values.
    fn slice_wire_bytes_mut(_items: &mut [Self]) -> Option<&mut [u8]> {
        None
    }

    /// Decodes `n` values from `b` (at least `n * SIZE` bytes).
    fn get_vec(b: &[u8], n: usize) -> Result<Vec<Self>, Error> {
        short(b, n * Self::SIZE)?;
        (0..n)
            .map(|i| Self::get(&b[i * Self::SIZE..(i + 1) * Self::SIZE]))
            .collect()
    }

    /// Decodes an array of `N` values from `b` (at least `N * SIZE` bytes).
    fn get_array<const N: usize>(b: &[u8]) -> Result<[Self; N], Error> {
        short(b, N * Self::SIZE)?;
        let v: Vec<Self> = (0..N)
            .map(|i| Self::get(&b[i * Self::SIZE..(i + 1) * Self::SIZE]))
            .collect::<Result<_, _>>()?;
        v.try_into()
            .map_err(|_| Error::BadArguments("array length".into()))
    }
}

const fn round_up(x: usize, a: usize) -> usize {
    x.div_ceil(a) * a
}

const fn max(a: usize, b: usize) -> usize {
    if a > b {
        a
    } else {
        b
    }
}

fn short(b: &[u8], n: usize) -> Result<(), Error> {
    if b.len() < n {
        return Err(Error::BadArguments(format!(
            "{} bytes where {n} are needed",
            b.len()
        )));
    }
    Ok(())
}

macro_rules! number {
    ($($t:ty => { $($extra:item)* }),* $(,)?) => {$(
        impl Wire for $t {
            $($extra)*
            const SIZE: usize = std::mem::size_of::<$t>();
            const ALIGN: usize = std::mem::size_of::<$t>();
            fn put(&self, b: &mut [u8]) -> Result<(), Error> {
                short(b, Self::SIZE)?;
                b[..Self::SIZE].copy_from_slice(&self.to_le_bytes());
                Ok(())
            }
            fn get(b: &[u8]) -> Result<Self, Error> {
                short(b, Self::SIZE)?;
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                Ok(<$t>::from_le_bytes(a))
            }
            fn put_all(items: &[Self], b: &mut [u8]) -> Result<(), Error> {
                short(b, items.len() * Self::SIZE)?;
                for (v, c) in items.iter().zip(b.chunks_exact_mut(Self::SIZE)) {
                    c.copy_from_slice(&v.to_le_bytes());
                }
                Ok(())
            }
            fn get_all_into(items: &mut [Self], b: &[u8]) -> Result<(), Error> {
                short(b, items.len() * Self::SIZE)?;
                for (v, c) in items.iter_mut().zip(b.chunks_exact(Self::SIZE)) {
                    *v = <$t>::from_le_bytes(c.try_into().expect("chunks_exact"));
                }
                Ok(())
            }
            fn get_vec(b: &[u8], n: usize) -> Result<Vec<Self>, Error> {
                short(b, n * Self::SIZE)?;
                Ok(b[..n * Self::SIZE]
                    .chunks_exact(Self::SIZE)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks_exact")))
                    .collect())
            }
            fn get_array<const N: usize>(b: &[u8]) -> Result<[Self; N], Error> {
                short(b, N * Self::SIZE)?;
                let mut a = [<$t>::default(); N];
                for (v, c) in a.iter_mut().zip(b.chunks_exact(Self::SIZE)) {
                    *v = <$t>::from_le_bytes(c.try_into().expect("chunks_exact"));
                }
                Ok(a)
            }
        }
    )*};
}
number!(
    i8 => {},
    i16 => {},
    i32 => {},
    i64 => {},
    // Bytes are their own encoding.
    u8 => {
        fn slice_wire_bytes(items: &[u8]) -> Option<&[u8]> {
            Some(items)
        }
        fn slice_wire_bytes_mut(items: &mut [u8]) -> Option<&mut [u8]> {
            Some(items)
        }
    },
    u16 => {},
    u32 => {},
    u64 => {},
    f32 => {},
    f64 => {},
);

impl Wire for bool {
    const SIZE: usize = 4;
    const ALIGN: usize = 4;
    fn put(&self, b: &mut [u8]) -> Result<(), Error> {
        u32::from(*self).put(b)
    }
    fn get(b: &[u8]) -> Result<Self, Error> {
        match u32::get(b)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(Error::BadArguments(format!("{v} is not a bool"))),
        }
    }
}

impl<T: Wire, const N: usize> Wire for [T; N] {
    const SIZE: usize = T::SIZE * N;
    const ALIGN: usize = T::ALIGN;
    fn put(&self, b: &mut [u8]) -> Result<(), Error> {
        T::put_all(self, b)
    }
    fn get(b: &[u8]) -> Result<Self, Error> {
        T::get_array::<N>(b)
    }
    fn get_into(&mut self, b: &[u8]) -> Result<(), Error> {
        T::get_all_into(self, b)
    }
    fn wire_bytes(&self) -> Option<&[u8]> {
        T::slice_wire_bytes(self)
    }
    fn wire_bytes_mut(&mut self) -> Option<&mut [u8]> {
        T::slice_wire_bytes_mut(self)
    }
}

/// A string of at most `N` bytes (`string<N>`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BString<const N: usize>(pub String);

impl<const N: usize> BString<N> {
    /// `s`, if it is at most `N` bytes.
    pub fn new(s: impl Into<String>) -> Result<Self, Error> {
        let s = s.into();
        if s.len() > N {
            return Err(Error::TooLong {
                what: "string",
                len: s.len(),
                max: N,
            });
        }
        Ok(BString(s))
    }
}

impl<const N: usize> Wire for BString<N> {
    const SIZE: usize = 4 + round_up(N, 4);
    const ALIGN: usize = 4;
    fn put(&self, b: &mut [u8]) -> Result<(), Error> {
        short(b, Self::SIZE)?;
        let s = self.0.as_bytes();
        if s.len() > N {
            return Err(Error::TooLong {
                what: "string",
                len: s.len(),
                max: N,
            });
        }
        (s.len() as u32).put(b)?;
        b[4..4 + s.len()].copy_from_slice(s);
        Ok(())
    }
    fn get(b: &[u8]) -> Result<Self, Error> {
        short(b, Self::SIZE)?;
        let n = u32::get(b)? as usize;
        if n > N {
            return Err(Error::BadArguments(format!(
                "string of {n} bytes exceeds its bound of {N}"
            )));
        }
        let s = std::str::from_utf8(&b[4..4 + n])
            .map_err(|e| Error::BadArguments(format!("string is not UTF-8: {e}")))?;
        Ok(BString(s.to_string()))
    }
}

/// A sequence of at most `N` elements (`sequence<T, N>`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BSeq<T, const N: usize>(pub Vec<T>);

impl<T, const N: usize> BSeq<T, N> {
    /// `v`, if it has at most `N` elements.
    pub fn new(v: Vec<T>) -> Result<Self, Error> {
        if v.len() > N {
            return Err(Error::TooLong {
                what: "sequence",
                len: v.len(),
                max: N,
            });
        }
        Ok(BSeq(v))
    }
}

impl<T: Wire, const N: usize> BSeq<T, N> {
    const HEADER: usize = round_up(4, T::ALIGN);
}

impl<T: Wire, const N: usize> Wire for BSeq<T, N> {
    const SIZE: usize = round_up(round_up(4, T::ALIGN) + N * T::SIZE, max(4, T::ALIGN));
    const ALIGN: usize = max(4, T::ALIGN);
    fn put(&self, b: &mut [u8]) -> Result<(), Error> {
        short(b, Self::SIZE)?;
        if self.0.len() > N {
            return Err(Error::TooLong {
                what: "sequence",
                len: self.0.len(),
                max: N,
            });
        }
        (self.0.len() as u32).put(b)?;
        T::put_all(&self.0, &mut b[Self::HEADER..])
    }
    fn get(b: &[u8]) -> Result<Self, Error> {
        short(b, Self::SIZE)?;
        let n = u32::get(b)? as usize;
        if n > N {
            return Err(Error::BadArguments(format!(
                "sequence of {n} elements exceeds its bound of {N}"
            )));
        }
        Ok(BSeq(T::get_vec(&b[Self::HEADER..], n)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round<T: Wire + PartialEq + std::fmt::Debug>(v: T) {
        let mut b = vec![0u8; T::SIZE];
        v.put(&mut b).unwrap();
        assert_eq!(T::get(&b).unwrap(), v);
        // In place, over a value (all zeros decode for every type).
        let mut w = T::get(&vec![0u8; T::SIZE]).unwrap();
        w.get_into(&b).unwrap();
        assert_eq!(w, v);
    }

    #[test]
    fn sizes_follow_the_layout_rules() {
        assert_eq!(<BString<5> as Wire>::SIZE, 12);
        assert_eq!(<BSeq<u8, 3> as Wire>::SIZE, 8);
        assert_eq!(<BSeq<f64, 2> as Wire>::SIZE, 24);
        assert_eq!(<BSeq<f64, 2> as Wire>::ALIGN, 8);
        assert_eq!(<[u16; 3] as Wire>::SIZE, 6);
        assert_eq!(<bool as Wire>::SIZE, 4);
    }

    #[test]
    fn bounds_are_enforced_both_ways() {
        let s = BSeq::<u32, 2>(vec![1, 2, 3]);
        let mut b = vec![0u8; <BSeq<u32, 2> as Wire>::SIZE];
        assert!(matches!(
            s.put(&mut b),
            Err(Error::TooLong { len: 3, max: 2, .. })
        ));
        b[..4].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            BSeq::<u32, 2>::get(&b),
            Err(Error::BadArguments(_))
        ));
        assert!(BString::<3>::new("abcd").is_err());
        let mut b = vec![0u8; 8];
        b[..4].copy_from_slice(&2u32.to_le_bytes());
        b[4] = 0xff;
        b[5] = 0xfe;
        assert!(matches!(BString::<4>::get(&b), Err(Error::BadArguments(_))));
        assert!(matches!(
            bool::get(&7u32.to_le_bytes()),
            Err(Error::BadArguments(_))
        ));
    }

    proptest! {
        #[test]
        fn values_round_trip(a: i64, f: f64, s in "[a-z]{0,9}", v in proptest::collection::vec(any::<i16>(), 0..5)) {
            round(a);
            round(f.to_bits());
            round(BString::<9>(s));
            round(BSeq::<i16, 5>(v));
            round([a as i8, 1, 2]);
            round([[BString::<3>::new("ab").unwrap(), BString::default()], [BString::default(), BString::new("x").unwrap()]]);
            round(BSeq::<[u16; 2], 4>(vec![[1, 2], [a as u16, 4]]));
            round(BSeq::<bool, 3>(vec![true, false]));
        }

        #[test]
        fn decoding_garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = BSeq::<u64, 3>::get(&b);
            let _ = BString::<16>::get(&b);
            let _ = <[bool; 2]>::get(&b);
            let _ = f32::get(&b);
        }
    }
}
