//! The SHRIMP RPC front end: generation from the srpc test interface, semantic errors with
//! their positions, and fuzzing (the parser and checker never panic, errors point inside the
//! input).

use proptest::prelude::*;

const EVERY: &str = include_str!("../../srpc/tests/every.idl");

fn err(text: &str) -> String {
    stubgen::idl::generate("t.idl", text)
        .expect_err("should be refused")
        .to_string()
}

#[test]
fn generates_the_test_interface() {
    let code = stubgen::idl::generate("every.idl", EVERY).expect("generate");
    for item in [
        "pub struct EveryClient",
        "pub trait EveryServer",
        "pub fn every_dispatch",
        "pub const EVERY_LAYOUT",
        "pub struct Record",
        "pub type Ints = ::srpc::BSeq<i32, 1000>;",
    ] {
        assert!(code.contains(item), "{item} missing");
    }
}

#[test]
fn semantic_errors_name_the_place() {
    let e = err("interface I {\n  1: f(in Missing m);\n}");
    assert!(
        e.starts_with("t.idl:2:11: error: unknown type `Missing`"),
        "{e}"
    );
    let e = err("interface I { 1: f(); 1: g(); }");
    assert!(e.contains("procedure number 1 is used twice"), "{e}");
    let e = err("interface I { 0: f(); }");
    assert!(e.contains("1 to 65535"), "{e}");
    let e = err("struct A { B b; };\nstruct B { A a; };\ninterface I { 1: f(in A a); }");
    assert!(e.contains("contains itself"), "{e}");
    let e = err("interface I { 1: f(in string<N> s); }");
    assert!(e.contains("unknown constant `N`"), "{e}");
    let e = err("interface I { 1: f(in i32 a, out i32 a); }");
    assert!(e.contains("named twice"), "{e}");
    let e = err("interface I { 1: f(in sequence<u64, 100000000> big); }");
    assert!(e.contains("limit"), "{e}");
    let e = err("struct S { i32 x; };\nstruct S { i32 y; };");
    assert!(e.contains("defined twice"), "{e}");
    let e = err("interface I { 1: match(); }");
    assert!(e.contains("Rust keyword"), "{e}");
}

/// `typedef sequence<...sequence<u8, 1>..., 1> T;` with `depth` sequences.
fn nested_sequences(depth: usize) -> String {
    format!(
        "typedef {}u8{} T;\ninterface I {{ 1: f(in T t); }}\n",
        "sequence<".repeat(depth),
        ", 1>".repeat(depth)
    )
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    // As deep as allowed generates; deeper is refused with a clear error, however deep.
    assert!(stubgen::idl::parse("t.idl", &nested_sequences(64)).is_ok());
    for depth in [65, 200, 100_000] {
        let text = nested_sequences(depth);
        let e = stubgen::idl::parse("t.idl", &text).unwrap_err().to_string();
        assert!(e.contains("nested more than 64 levels"), "{e}");
        check_error(&text);
    }
    // Named types within named types: a typedef chain whose links each refer to the next
    // one, defined later (in the other order each link is laid out once, from the first).
    let mut chain = String::from("interface I { 1: f(in T0 t); }\n");
    for i in 0..10_000 {
        chain.push_str(&format!("typedef T{} T{i};\n", i + 1));
    }
    chain.push_str("typedef u8 T10000;\n");
    let e = stubgen::idl::generate("t.idl", &chain)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(e.contains("nested more than 256 levels"), "{e}");
    let mut short = String::from("interface I { 1: f(in T0 t); }\n");
    for i in 0..200 {
        short.push_str(&format!("typedef T{} T{i};\n", i + 1));
    }
    short.push_str("typedef u8 T200;\n");
    assert!(stubgen::idl::generate("t.idl", &short).is_ok());
}

fn check_error(text: &str) {
    if let Err(e) = stubgen::idl::generate("f.idl", text) {
        if let Some(d) = e.diagnostic() {
            let lines = text.split('\n').count() as u32;
            assert!(
                d.location.line >= 1 && d.location.line <= lines.max(1),
                "{e}"
            );
            assert!(d.location.column >= 1, "{e}");
            assert!(d.source_line.is_some(), "{e}");
            assert!(e.to_string().contains('^'), "{e}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_text_never_panics(text in "\\PC{0,200}") {
        check_error(&text);
    }

    #[test]
    fn token_soup_never_panics(tokens in proptest::collection::vec(prop_oneof![
        Just("interface"), Just("struct"), Just("typedef"), Just("const"), Just("in"),
        Just("out"), Just("inout"), Just("string"), Just("sequence"), Just("i32"), Just("u8"),
        Just("{"), Just("}"), Just("("), Just(")"), Just("<"), Just(">"), Just("["), Just("]"),
        Just(";"), Just(":"), Just(","), Just("="), Just("1"), Just("0x10"), Just("A"),
        Just("b"), Just("/*"), Just("*/"), Just("//"), Just("\n"), Just("99999999999999999999"),
    ], 0..40)) {
        check_error(&tokens.join(" "));
    }

    #[test]
    fn mutated_interfaces_never_panic(cut in 0..EVERY.len(), len in 0usize..20, with in "\\PC{0,6}") {
        let mut t = EVERY.to_string();
        let a = (0..=cut).rev().find(|&k| t.is_char_boundary(k)).unwrap_or(0);
        let b = (a + len).min(t.len());
        let b = (b..=t.len()).find(|&k| t.is_char_boundary(k)).unwrap_or(t.len());
        t.replace_range(a..b, &with);
        check_error(&t);
    }
}
