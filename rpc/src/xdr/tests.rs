//! Unit tests of the XDR format: exact bytes, bounds, unions, hostile input.

use super::*;
use proptest::prelude::*;
use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserializer as _, Serializer as _};

/// An enum written the way the generator writes one: values by declaration, via i32.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Color {
    Red = 1,
    Blue = 7,
}

impl Serialize for Color {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i32(*self as i32)
    }
}

impl<'de> Deserialize<'de> for Color {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match i32::deserialize(d)? {
            1 => Ok(Color::Red),
            7 => Ok(Color::Blue),
            v => Err(de::Error::custom(format!("unknown Color value {v}"))),
        }
    }
}

/// `union switch (int kind) { case 0: unsigned num; case 1: string msg<8>; case 2: void;
/// default: hyper other; }`, written the way the generator writes one.
#[derive(Clone, Debug, PartialEq)]
enum Shape {
    Num(u32),
    Msg(XdrString<8>),
    Nothing,
    Other(i32, i64),
}

impl Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Shape::Nothing => {
                let mut t = s.serialize_tuple(1)?;
                t.serialize_element(&2i32)?;
                t.end()
            }
            Shape::Num(v) => {
                let mut t = s.serialize_tuple(2)?;
                t.serialize_element(&0i32)?;
                t.serialize_element(v)?;
                t.end()
            }
            Shape::Msg(v) => {
                let mut t = s.serialize_tuple(2)?;
                t.serialize_element(&1i32)?;
                t.serialize_element(v)?;
                t.end()
            }
            Shape::Other(d, v) => {
                let mut t = s.serialize_tuple(2)?;
                t.serialize_element(d)?;
                t.serialize_element(v)?;
                t.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("union Shape")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                let missing = || de::Error::custom("union arm missing");
                let disc: i32 = seq.next_element()?.ok_or_else(missing)?;
                Ok(match disc {
                    0 => Shape::Num(seq.next_element()?.ok_or_else(missing)?),
                    1 => Shape::Msg(seq.next_element()?.ok_or_else(missing)?),
                    2 => Shape::Nothing,
                    d => Shape::Other(d, seq.next_element()?.ok_or_else(missing)?),
                })
            }
        }
        d.deserialize_tuple(2, V)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Node {
    value: i32,
    next: Option<Box<Node>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Everything {
    i: i32,
    u: u32,
    h: i64,
    uh: u64,
    f: f32,
    d: f64,
    q: Quadruple,
    b: bool,
    c: Color,
    fo: FixedOpaque<5>,
    vo: Opaque<10>,
    s: XdrString<12>,
    fa: FixedArray<u32, 3>,
    va: VarArray<i32, 4>,
    un: Shape,
    opt: Option<Box<Node>>,
    void: (),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn primitives_have_rfc4506_encodings() {
    assert_eq!(hex(&to_bytes(&-2i32).unwrap()), "fffffffe");
    assert_eq!(hex(&to_bytes(&0xdead_beefu32).unwrap()), "deadbeef");
    assert_eq!(hex(&to_bytes(&-2i64).unwrap()), "fffffffffffffffe");
    assert_eq!(hex(&to_bytes(&(1u64 << 40)).unwrap()), "0000010000000000");
    assert_eq!(hex(&to_bytes(&1.5f32).unwrap()), "3fc00000");
    assert_eq!(hex(&to_bytes(&-2.0f64).unwrap()), "c000000000000000");
    assert_eq!(hex(&to_bytes(&true).unwrap()), "00000001");
    assert_eq!(hex(&to_bytes(&()).unwrap()), "");
    assert_eq!(hex(&to_bytes(&Color::Blue).unwrap()), "00000007");
    assert_eq!(hex(&to_bytes(&(1u32, -1i32)).unwrap()), "00000001ffffffff");
}

#[test]
fn opaque_and_string_are_length_prefixed_and_padded() {
    let o: Opaque = Opaque(vec![1, 2, 3, 4, 5]);
    assert_eq!(hex(&to_bytes(&o).unwrap()), "000000050102030405000000");
    let s = XdrString::<16>::from("hey");
    assert_eq!(hex(&to_bytes(&s).unwrap()), "0000000368657900");
    assert_eq!(hex(&to_bytes("hey").unwrap()), "0000000368657900");
    let f = FixedOpaque([9u8, 8, 7, 6, 5]);
    assert_eq!(hex(&to_bytes(&f).unwrap()), "0908070605000000");
    assert_eq!(
        from_bytes::<FixedOpaque<5>>(&to_bytes(&f).unwrap()).unwrap(),
        f
    );
    assert_eq!(hex(&to_bytes(&FixedOpaque([1u8; 4])).unwrap()), "01010101");
    assert_eq!(hex(&to_bytes(&Opaque::<0>::default()).unwrap()), "00000000");
}

#[test]
fn arrays_fixed_and_variable() {
    let v: VarArray<u32, 4> = VarArray(vec![1, 2]);
    assert_eq!(hex(&to_bytes(&v).unwrap()), "000000020000000100000002");
    let f = FixedArray([7u16, 8, 9]);
    assert_eq!(hex(&to_bytes(&f).unwrap()), "000000070000000800000009");
    // Any N, not just up to 32.
    let big = FixedArray::<u32, 100>(std::array::from_fn(|i| i as u32));
    let bytes = to_bytes(&big).unwrap();
    assert_eq!(bytes.len(), 400);
    assert_eq!(from_bytes::<FixedArray<u32, 100>>(&bytes).unwrap(), big);
    assert_eq!(FixedArray::<u8, 40>::default().0, [0u8; 40]);
}

#[test]
fn bool_rejects_values_other_than_zero_and_one() {
    assert!(from_bytes::<bool>(&[0, 0, 0, 1]).unwrap());
    assert!(!from_bytes::<bool>(&[0, 0, 0, 0]).unwrap());
    let err = from_bytes::<bool>(&[0, 0, 0, 2]).unwrap_err();
    assert!(matches!(err, Error::InvalidBool(2)), "{err}");
    assert!(matches!(
        from_bytes::<Option<u32>>(&[0, 0, 0, 3, 0, 0, 0, 0]),
        Err(Error::InvalidBool(3))
    ));
}

#[test]
fn bounds_are_checked_on_encode_and_decode() {
    let err = to_bytes(&Opaque::<4>(vec![0; 5])).unwrap_err().to_string();
    assert!(
        err.contains("opaque<4>") && err.contains("length 5"),
        "{err}"
    );
    let err = to_bytes(&XdrString::<2>::from("abc"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("string<2>") && err.contains("length 3"),
        "{err}"
    );
    let err = to_bytes(&VarArray::<u32, 1>(vec![1, 2]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("array<1>") && err.contains("length 2"),
        "{err}"
    );

    let five = to_bytes(&Opaque::<8>(vec![1; 5])).unwrap();
    let err = from_bytes::<Opaque<4>>(&five).unwrap_err().to_string();
    assert!(
        err.contains("opaque<4>") && err.contains("length 5"),
        "{err}"
    );
    let err = from_bytes::<XdrString<4>>(&five).unwrap_err().to_string();
    assert!(
        err.contains("string<4>") && err.contains("length 5"),
        "{err}"
    );
    let three = to_bytes(&VarArray::<u32>(vec![1, 2, 3])).unwrap();
    let err = from_bytes::<VarArray<u32, 2>>(&three)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("array<2>") && err.contains("length 3"),
        "{err}"
    );
    assert_eq!(
        from_bytes::<VarArray<u32, 3>>(&three).unwrap().0,
        vec![1, 2, 3]
    );
}

#[test]
fn nonzero_padding_and_bad_utf8_are_rejected() {
    let bad = [0, 0, 0, 1, b'a', 0, 1, 0];
    assert!(matches!(
        from_bytes::<Opaque>(&bad),
        Err(Error::NonZeroPadding)
    ));
    assert!(matches!(
        from_bytes::<FixedOpaque<1>>(&[1, 0, 0, 9]),
        Err(Error::NonZeroPadding)
    ));
    let s = from_bytes::<XdrString>(&[0, 0, 0, 2, 0xff, b'a', 0, 0]).unwrap();
    assert!(s.as_str().is_err());
    assert_eq!(s.to_string(), "\u{fffd}a");
    assert!(matches!(
        from_bytes::<String>(&[0, 0, 0, 2, 0xff, b'a', 0, 0]),
        Err(Error::InvalidUtf8)
    ));
}

#[test]
fn unions_encode_discriminant_then_arm() {
    let cases = [
        (Shape::Num(5), "0000000000000005"),
        (Shape::Msg("hi".into()), "000000010000000268690000"),
        (Shape::Nothing, "00000002"),
        (Shape::Other(-9, 3), "fffffff70000000000000003"),
    ];
    for (value, expected) in cases {
        let bytes = to_bytes(&value).unwrap();
        assert_eq!(hex(&bytes), expected);
        assert_eq!(from_bytes::<Shape>(&bytes).unwrap(), value);
    }
    // A void arm followed by more data: the union reads only its discriminant.
    let (shape, rest): (Shape, _) = take_from_bytes(&[0, 0, 0, 2, 0xaa, 0xbb, 0xcc, 0xdd]).unwrap();
    assert_eq!(shape, Shape::Nothing);
    assert_eq!(rest, &[0xaa, 0xbb, 0xcc, 0xdd]);
}

#[test]
fn enums_reject_unknown_values() {
    assert_eq!(from_bytes::<Color>(&[0, 0, 0, 1]).unwrap(), Color::Red);
    let err = from_bytes::<Color>(&[0, 0, 0, 2]).unwrap_err().to_string();
    assert!(err.contains("unknown Color value 2"), "{err}");
}

#[test]
fn serde_enums_use_the_variant_index() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum E {
        A,
        B(u32),
        C { x: i32, y: bool },
    }
    assert_eq!(hex(&to_bytes(&E::A).unwrap()), "00000000");
    for e in [E::A, E::B(3), E::C { x: -1, y: true }] {
        assert_eq!(from_bytes::<E>(&to_bytes(&e).unwrap()).unwrap(), e);
    }
    assert!(from_bytes::<E>(&[0, 0, 0, 3]).is_err());
}

fn sample() -> Everything {
    Everything {
        i: -5,
        u: 5,
        h: i64::MIN,
        uh: u64::MAX,
        f: 3.25,
        d: -0.125,
        q: Quadruple([0x3f; 16]),
        b: true,
        c: Color::Blue,
        fo: FixedOpaque(*b"abcde"),
        vo: Opaque(vec![1, 2, 3]),
        s: "hello".into(),
        fa: FixedArray([1, 2, 3]),
        va: VarArray(vec![-1, -2]),
        un: Shape::Msg("x".into()),
        opt: Some(Box::new(Node {
            value: 1,
            next: Some(Box::new(Node {
                value: 2,
                next: None,
            })),
        })),
        void: (),
    }
}

#[test]
fn structs_roundtrip_and_trailing_bytes_are_errors() {
    let value = sample();
    let bytes = to_bytes(&value).unwrap();
    assert_eq!(from_bytes::<Everything>(&bytes).unwrap(), value);
    // Appending to an existing buffer.
    let mut buf = vec![0xee; 3];
    to_writer(&mut buf, &value).unwrap();
    assert_eq!(&buf[3..], &bytes[..]);

    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0, 0, 0, 0]);
    assert!(matches!(
        from_bytes::<Everything>(&longer),
        Err(Error::TrailingBytes(4))
    ));
    let (again, rest) = take_from_bytes::<Everything>(&longer).unwrap();
    assert_eq!(again, value);
    assert_eq!(rest, &[0, 0, 0, 0]);
    // Every truncation is an error, never a panic.
    for n in 0..bytes.len() {
        assert!(from_bytes::<Everything>(&bytes[..n]).is_err(), "prefix {n}");
    }
}

#[test]
fn hostile_lengths_fail_without_allocating() {
    let huge = [0xff, 0xff, 0xff, 0xf0];
    assert!(matches!(
        from_bytes::<Vec<u64>>(&huge),
        Err(Error::LengthExceedsInput {
            len: 0xffff_fff0,
            remaining: 0
        })
    ));
    assert!(matches!(
        from_bytes::<Opaque>(&huge),
        Err(Error::LengthExceedsInput { .. })
    ));
    assert!(matches!(
        from_bytes::<VarArray<[u8; 0]>>(&huge),
        Err(Error::LengthExceedsInput { .. })
    ));
}

/// Unlinks a list iteratively: dropping a long `Box` chain would recurse once per node.
fn drop_list(mut list: Option<Box<Node>>) {
    while let Some(mut node) = list {
        list = node.next.take();
    }
}

/// `n` links of optional data, as XDR: (1, value) per node, then 0.
fn list_bytes(n: u32) -> Vec<u8> {
    let mut bytes = Vec::new();
    for i in 0..n {
        bytes.extend_from_slice(&1u32.to_be_bytes());
        bytes.extend_from_slice(&i.to_be_bytes());
    }
    bytes.extend_from_slice(&0u32.to_be_bytes());
    bytes
}

#[test]
fn long_linked_lists_roundtrip() {
    // Longer than any fixed nesting limit a thread's stack would allow (libtirpc decodes it).
    const N: u32 = 100_000;
    let mut list = None;
    for value in (0..N as i32).rev() {
        list = Some(Box::new(Node { value, next: list }));
    }
    let bytes = to_bytes(&list).unwrap();
    assert_eq!(bytes, list_bytes(N));
    drop_list(list);
    let back = from_bytes::<Option<Box<Node>>>(&bytes).unwrap();
    let mut count = 0;
    let mut at = &back;
    while let Some(node) = at {
        assert_eq!(node.value, count);
        count += 1;
        at = &node.next;
    }
    assert_eq!(count, N as i32);
    drop_list(back);
    // As a variable-length array nested in itself, too.
    let mut bytes = Vec::new();
    for _ in 0..N {
        bytes.extend_from_slice(&1u32.to_be_bytes());
    }
    bytes.extend_from_slice(&0u32.to_be_bytes());
    #[derive(Debug, Deserialize, Serialize)]
    struct Tree(Vec<Tree>);
    let tree = from_bytes::<Tree>(&bytes).unwrap();
    assert_eq!(to_bytes(&tree).unwrap(), bytes);
    let mut stack = vec![tree];
    while let Some(mut t) = stack.pop() {
        stack.append(&mut t.0);
    }
}

#[test]
fn long_lists_are_dropped_on_a_stack_deep_enough() {
    // What a generated server does with a long result, on a thread with a small stack:
    // Rust drops the list recursively, one frame per link.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let mut list = None;
            for value in 0..100_000 {
                list = Some(Box::new(Node { value, next: list }));
            }
            let len = to_bytes(&list).unwrap().len();
            drop_with_stack_for(list, len);
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn hostile_nesting_is_an_error_not_a_stack_overflow() {
    let bytes = list_bytes(100_000);
    // The depth limit still applies, and the error leaves nothing half-built behind.
    let mut de = Deserializer::new(&bytes).with_max_depth(600);
    let err = Option::<Box<Node>>::deserialize(&mut de)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nesting"), "{err}");
    let longer = &bytes[bytes.len() - 8 * 600 - 4..];
    let mut de = Deserializer::new(longer).with_max_depth(600);
    let list = Option::<Box<Node>>::deserialize(&mut de).unwrap();
    assert_eq!(list.as_ref().unwrap().value, 100_000 - 600);
    assert!(de.remaining().is_empty());
    drop_list(list);
    // A chain that never ends, truncated anywhere, is an error (not a crash).
    let endless = &bytes[..bytes.len() - 4];
    assert!(matches!(
        from_bytes::<Option<Box<Node>>>(endless),
        Err(Error::UnexpectedEof { .. })
    ));
    // The default limit stops a chain of more links than it allows.
    let mut de = Deserializer::new(&bytes).with_max_depth(DEFAULT_MAX_DEPTH.min(50_000));
    assert!(Option::<Box<Node>>::deserialize(&mut de).is_err());
}

#[test]
fn unsupported_shapes_are_errors() {
    assert!(to_bytes(&std::iter::empty::<u8>().collect::<Vec<_>>()).is_ok());
    let mut de = Deserializer::new(&[0, 0, 0, 0]);
    assert!(matches!(
        (&mut de).deserialize_any(de::IgnoredAny),
        Err(Error::Unsupported(_))
    ));
    let mut ser = Serializer::new(Vec::new());
    assert!(matches!(
        (&mut ser).serialize_seq(None),
        Err(Error::Unsupported(_))
    ));
    assert!(from_bytes::<u8>(&[0, 0, 1, 0]).is_err());
    assert_eq!(from_bytes::<u8>(&[0, 0, 0, 200]).unwrap(), 200);
    assert_eq!(from_bytes::<i16>(&[0xff, 0xff, 0x80, 0]).unwrap(), i16::MIN);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = from_bytes::<Everything>(&bytes);
        let _ = from_bytes::<Vec<Option<Box<Node>>>>(&bytes);
        let _ = from_bytes::<(Shape, VarArray<XdrString<3>, 2>, FixedArray<Opaque, 2>)>(&bytes);
        let _ = from_bytes::<std::collections::BTreeMap<u32, String>>(&bytes);
    }

    #[test]
    fn mutated_valid_encodings_never_panic(
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = to_bytes(&sample()).unwrap();
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(v) = from_bytes::<Everything>(&bytes) {
            // Whatever decodes re-encodes to the same bytes.
            prop_assert_eq!(to_bytes(&v).unwrap(), bytes);
        }
    }

    #[test]
    fn values_roundtrip(
        i in any::<i32>(), h in any::<i64>(), d in any::<f64>(), b in any::<bool>(),
        vo in proptest::collection::vec(any::<u8>(), 0..10),
        s in "[a-z]{0,12}",
        va in proptest::collection::vec(any::<i32>(), 0..5),
        opt in any::<Option<u32>>(),
    ) {
        let value = (i, h, d.to_bits(), b, Opaque::<10>(vo), XdrString::<12>::from(s),
            VarArray::<i32, 5>(va), opt);
        let bytes = to_bytes(&value).unwrap();
        prop_assert_eq!(bytes.len() % 4, 0);
        prop_assert_eq!(from_bytes::<(i32, i64, u64, bool, Opaque<10>, XdrString<12>,
            VarArray<i32, 5>, Option<u32>)>(&bytes).unwrap(), value);
    }
}
