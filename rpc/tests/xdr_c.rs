//! The bytes rpc::xdr produces equal those of libtirpc's `xdr_*` routines for the same values.
//! Needs a C compiler and libtirpc-dev (scripts/setup.sh installs them).

use rpc::xdr::{self, FixedArray, FixedOpaque, Opaque, VarArray, XdrString};
use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Serialize};
use std::process::Command;

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Node {
    value: i32,
    next: Option<Box<Node>>,
}

/// The union of tests/c/xdr_values.c, written the way the generator writes unions.
#[derive(Debug, PartialEq)]
enum Shape {
    Num(u32),
    Msg(XdrString<8>),
    Nothing,
    Other(i32, i64),
}

impl Serialize for Shape {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut t = s.serialize_tuple(if *self == Shape::Nothing { 1 } else { 2 })?;
        match self {
            Shape::Num(v) => {
                t.serialize_element(&0i32)?;
                t.serialize_element(v)?;
            }
            Shape::Msg(v) => {
                t.serialize_element(&1i32)?;
                t.serialize_element(v)?;
            }
            Shape::Nothing => t.serialize_element(&2i32)?,
            Shape::Other(d, v) => {
                t.serialize_element(d)?;
                t.serialize_element(v)?;
            }
        }
        t.end()
    }
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("union shape")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                let missing = || de::Error::custom("union arm missing");
                Ok(match seq.next_element::<i32>()?.ok_or_else(missing)? {
                    0 => Shape::Num(seq.next_element()?.ok_or_else(missing)?),
                    1 => Shape::Msg(seq.next_element()?.ok_or_else(missing)?),
                    2 => Shape::Nothing,
                    other => Shape::Other(other, seq.next_element()?.ok_or_else(missing)?),
                })
            }
        }
        d.deserialize_tuple(2, V)
    }
}

type Values = (
    (i32, u32, i64, u64, f32, f64),
    (bool, bool, i32, i16, u16, i8, u8),
    (
        FixedOpaque<5>,
        Opaque<16>,
        XdrString<16>,
        XdrString<16>,
        VarArray<i32, 8>,
    ),
    (FixedArray<i32, 4>, Option<Box<Node>>, Option<Box<Node>>),
    (Shape, Shape, Shape, Shape, ()),
);

fn values() -> Values {
    (
        (
            -5,
            0xdead_beef,
            -1_234_567_890_123,
            0xfedc_ba98_7654_3210,
            3.25,
            -0.125,
        ),
        (true, false, 7, -3, 65000, -1, 200),
        (
            FixedOpaque([1, 2, 3, 4, 5]),
            Opaque(vec![9, 8, 7]),
            "hello".into(),
            "".into(),
            VarArray(vec![1, -2, 3]),
        ),
        (
            FixedArray([4, 5, 6, 7]),
            Some(Box::new(Node {
                value: 1,
                next: Some(Box::new(Node {
                    value: 2,
                    next: None,
                })),
            })),
            None,
        ),
        (
            Shape::Num(5),
            Shape::Msg("hi".into()),
            Shape::Nothing,
            Shape::Other(-9, 3),
            (),
        ),
    )
}

fn c_encoding() -> String {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join("xdr_values");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/c/xdr_values.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-I/usr/include/tirpc", source, "-o"])
        .arg(&exe)
        .arg("-ltirpc")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} (run scripts/setup.sh): {e}"));
    assert!(
        out.status.success(),
        "compiling the C side failed (needs libtirpc-dev; run scripts/setup.sh):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().expect("run the C encoder");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn rust_encoding_equals_libtirpc_encoding() {
    let rust = xdr::to_bytes(&values()).unwrap();
    let rust_hex: String = rust.iter().map(|b| format!("{b:02x}")).collect();
    let c_hex = c_encoding();
    assert_eq!(
        rust_hex, c_hex,
        "rpc::xdr (left) and libtirpc (right) differ"
    );
    // And the C bytes decode back to the values.
    let c_bytes: Vec<u8> = (0..c_hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&c_hex[i..i + 2], 16).unwrap())
        .collect();
    assert_eq!(xdr::from_bytes::<Values>(&c_bytes).unwrap(), values());
}
