//! What the generator emits and refuses, checked on the generated text and the diagnostics.

use stubgen::codegen::Options;

fn gen(src: &str) -> String {
    match stubgen::rpcgen_source(src, "t.x", &Options::default()) {
        Ok(out) => out.code,
        Err(e) => panic!("{e}"),
    }
}

fn gen_err(src: &str) -> String {
    match stubgen::rpcgen_source(src, "t.x", &Options { strict: true }) {
        Ok(out) => panic!("expected an error, got:\n{}", out.code),
        Err(e) => e.to_string(),
    }
}

/// The generated text with all whitespace removed, to match fragments regardless of layout.
fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

fn assert_has(code: &str, fragment: &str) {
    assert!(
        squash(code).contains(&squash(fragment)),
        "missing `{fragment}` in:\n{code}"
    );
}

#[test]
fn constants_resolve_through_other_constants_and_pick_a_type() {
    let code = gen(
        "const A = 0x10; const B = A; const NEG = -1; const OCT = 0170000;\n\
                    const BIG = 0x100000000; const S = \"d4a0\";\n\
                    typedef opaque buf[B]; typedef string name<>;",
    );
    assert_has(&code, "pub const A: u32 = 16;");
    assert_has(&code, "pub const B: u32 = 16;");
    assert_has(&code, "pub const NEG: i32 = -1;");
    assert_has(&code, "pub const OCT: u32 = 61440;");
    assert_has(&code, "pub const BIG: u64 = 4294967296;");
    assert_has(&code, "pub const S: &str = \"d4a0\";");
    assert_has(&code, "pub type buf = ::rpc::xdr::FixedOpaque<16>;");
    assert_has(&code, "pub type name = ::rpc::xdr::XdrString<4294967295>;");
}

#[test]
fn every_type_maps_as_the_contract_says() {
    let code = gen("struct s { int a; unsigned b; unsigned int c; hyper d; unsigned hyper e;\n\
                    float f; double g; bool h; quadruple q; opaque i[4]; opaque j<8>; opaque k<>;\n\
                    string l<9>; int m[2]; int n<3>; int o<>; s *p; struct s *r; char ch; long lo;\n\
                    unsigned char uc; };");
    for field in [
        "pub a: i32",
        "pub b: u32",
        "pub c: u32",
        "pub d: i64",
        "pub e: u64",
        "pub f: f32",
        "pub g: f64",
        "pub h: bool",
        "pub q: ::rpc::xdr::Quadruple",
        "pub i: ::rpc::xdr::FixedOpaque<4>",
        "pub j: ::rpc::xdr::Opaque<8>",
        "pub k: ::rpc::xdr::Opaque<4294967295>",
        "pub l: ::rpc::xdr::XdrString<9>",
        "pub m: ::rpc::xdr::FixedArray<i32, 2>",
        "pub n: ::rpc::xdr::VarArray<i32, 3>",
        "pub o: ::rpc::xdr::VarArray<i32, 4294967295>",
        "pub p: ::core::option::Option<::std::boxed::Box<s>>",
        "pub r: ::core::option::Option<::std::boxed::Box<s>>",
        "pub ch: i32",
        "pub lo: i32",
        "pub uc: u32",
    ] {
        assert_has(&code, field);
    }
    assert_has(&code, "#[serde(crate = \"rpc::serde\")]");
}

#[test]
fn enums_have_explicit_discriminants_and_aliases_for_repeated_values() {
    let code = gen("enum e { A = -2, B, C = 7, D = C, E };");
    assert_has(&code, "#[repr(i32)]");
    assert_has(&code, "A = -2, B = -1, C = 7, E = 8,");
    assert_has(&code, "pub const D: Self = Self::C;");
    assert_has(&code, "serializer.serialize_i32(*self as i32)");
    assert_has(&code, "-2i32 => ::core::result::Result::Ok(Self::A)");
}

#[test]
fn unions_get_a_variant_per_case_and_a_default_variant() {
    let code = gen("enum c { R = 1, G = 2, B = 3 };\n\
                    union u switch (c d) { case R: int x; case G: case B: string s<>; default: void; };\n\
                    union v switch (bool present) { case TRUE: int x; case FALSE: void; };\n\
                    union w switch (int k) { case -1: void; case 0x10: hyper h; default: opaque raw<>; };");
    assert_has(&code, "pub enum u { R(i32), G(::rpc::xdr::XdrString<4294967295>), B(::rpc::xdr::XdrString<4294967295>), Default(c), }");
    assert_has(&code, "pub enum v { TRUE(i32), FALSE, }");
    assert_has(
        &code,
        "pub enum w { CaseNeg1, Case16(i64), Default(i32, ::rpc::xdr::Opaque<4294967295>), }",
    );
    assert_has(&code, "__t.serialize_element(&c::G)?;");
    assert_has(&code, "true => {");
    assert_has(&code, "-1i32 => ::core::result::Result::Ok(w::CaseNeg1)");
    assert_has(&code, "__serializer.serialize_tuple(1)?");
    assert_has(&code, "__deserializer.deserialize_tuple(2, __Visitor)");
    // No default arm: an unknown discriminant is an error.
    let code = gen("union x switch (unsigned k) { case 1: int a; };");
    assert_has(
        &code,
        "::core::result::Result::Err(<__A::Error as ::rpc::serde::de::Error>::custom(",
    );
}

#[test]
fn programs_give_clients_server_traits_and_services() {
    let code = gen("struct pair { int a; int b; };\n\
                    program CALC { version CALC_V2 { int ADD(pair) = 1; hyper MUL3(int x, int, hyper) = 2;\n\
                    void RESET(void) = 3; string NAME(void) = 4; } = 2; } = 0x20000101;");
    assert_has(&code, "pub const CALC: u32 = 536871169;");
    assert_has(&code, "pub const CALC_V2: u32 = 2;");
    assert_has(&code, "pub const MUL3: u32 = 2;");
    assert_has(&code, "pub struct CalcV2Client<__C: ::rpc::client::Call>");
    assert_has(
        &code,
        "pub fn add(&mut self, arg: &pair) -> ::core::result::Result<i32, ::rpc::Error> {\n\
                       ::rpc::client::Call::call(&mut self.inner, 536871169, 2, 1, arg)",
    );
    assert_has(
        &code,
        "pub fn mul3(&mut self, x: &i32, arg2: &i32, arg3: &i64,)",
    );
    assert_has(
        &code,
        "::rpc::client::Call::call(&mut self.inner, 536871169, 2, 2, &(x, arg2, arg3))",
    );
    assert_has(
        &code,
        "::rpc::client::Call::call(&mut self.inner, 536871169, 2, 3, &())",
    );
    assert_has(
        &code,
        "pub trait CalcV2Server: ::core::marker::Send + ::core::marker::Sync + 'static",
    );
    assert_has(
        &code,
        "fn mul3(&self, x: i32, arg2: i32, arg3: i64) -> i64;",
    );
    // One call serves every version on TCP and UDP and registers them with rpcbind.
    assert_has(&code, "pub fn serve_calc(");
    assert_has(&code, "__calc_v2: impl CalcV2Server");
    assert_has(&code, ".replace_registrations(true)");
    assert_has(&code, ".register(true)");
    assert_has(&code, ".listen_udp(");
    assert_has(&code, "fn reset(&self);");
    assert_has(
        &code,
        "impl<__S: CalcV2Server> ::rpc::server::Service for CalcV2Service<__S>",
    );
    assert_has(
        &code,
        "let ((x, arg2, arg3), _): ((i32, i32, i64), _) = ::rpc::xdr::take_from_bytes(__args",
    );
    // Procedure 0 is not declared: answered with void.
    assert_has(&code, "0 => ::core::result::Result::Ok(())");
    assert_has(
        &code,
        "_ => ::core::result::Result::Err(::rpc::server::DispatchError::ProcUnavail)",
    );
}

#[test]
fn procedure_numbers_may_name_constants_and_repeat_across_versions() {
    let code = gen(
        "program P { version V1 { void A(void) = 1; void B(void) = 2; } = 1;\n\
                    version V2 { void A(void) = 1; void C(void) = B; } = 2; } = 0x20000001;",
    );
    assert_eq!(squash(&code).matches("pubconstA:u32=1;").count(), 1);
    assert_has(
        &code,
        "pub fn c(&mut self) -> ::core::result::Result<(), ::rpc::Error> {\n\
                       ::rpc::client::Call::call(&mut self.inner, 536870913, 2, 2, &())",
    );
}

#[test]
fn recursion_through_pointers_and_variable_arrays_is_fine() {
    let code = gen(
        "struct tree { int v; tree *left; tree kids<>; struct tree *right; };\n\
                    typedef struct tree tree;",
    );
    assert_has(&code, "pub kids: ::rpc::xdr::VarArray<tree, 4294967295>");
}

#[test]
fn rust_keywords_and_reserved_names_are_escaped() {
    let code = gen("struct u32 { int type; int self; }; typedef u32 rpc;\n\
                    program P { version V { int MATCH(int) = 1; } = 1; } = 0x20000001;");
    assert_has(
        &code,
        "pub struct u32_ { pub r#type: i32, pub self_: i32, }",
    );
    assert_has(&code, "pub type rpc_ = u32_;");
    assert_has(&code, "pub fn r#match(&mut self, arg: &i32)");
}

#[test]
fn pass_through_defines_resolve_names() {
    let code = gen(
        "%#define LM_MAXSTRLEN 1024\n%#define MAXNAMELEN LM_MAXSTRLEN+1\n\
                    struct s { string n<MAXNAMELEN>; };",
    );
    assert_has(&code, "pub n: ::rpc::xdr::XdrString<1025>");
    assert!(
        !code.contains("LM_MAXSTRLEN"),
        "pass-through constants are not emitted"
    );
}

#[test]
fn unknown_types_are_warnings_by_default_and_errors_when_strict() {
    let out = stubgen::rpcgen_source("struct s { other o; };", "t.x", &Options::default()).unwrap();
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(out.warnings[0].location.to_string(), "t.x:1:12");
    assert_has(&out.code, "pub o: other");
    let e = gen_err("struct s {\n  other o;\n};");
    assert!(e.starts_with("t.x:2:3: error: unknown type `other`"), "{e}");
}

#[test]
fn errors_name_the_position_and_show_the_line() {
    for (src, want) in [
        ("const A = B;", "t.x:1:11: error: unknown constant `B`"),
        (
            "const A = A;",
            "t.x:1:11: error: constant `A` is defined in terms of itself",
        ),
        (
            "struct s {\n\tint a;\n\tint a;\n};",
            "t.x:3:6: error: field `a` is already declared at t.x:2:6",
        ),
        (
            "typedef opaque o[-1];",
            "t.x:1:18: error: size -1 is out of range",
        ),
        (
            "enum e { A = 1 }; union u switch (e d) { case 2: int x; };",
            "t.x:1:47: error: case value 2 is not a valid value of enum `e`",
        ),
        (
            "union u switch (int d) { case 1: int x; case 1: void; };",
            "t.x:1:46: error: case value 1 is already used at t.x:1:31",
        ),
        (
            "union u switch (hyper d) { case 1: int x; };",
            "t.x:1:23: error: a union discriminant must be",
        ),
        (
            "program P { version V { int F(int) = 1; int G(int) = 1; } = 1; } = 1;",
            "t.x:1:54: error: procedure number 1 of `G` is already used by `F`",
        ),
        (
            "struct a { int x; }; struct a { int y; };",
            "t.x:1:29: error: type `a` is already defined differently at t.x:1:8",
        ),
        (
            "# 1 \"orig.x\"\n\nstruct s { int x }",
            "orig.x:2:18: error: expected `;`, found `}`",
        ),
        (
            "const X = 99999999999999999999999;",
            "t.x:1:11: error: invalid number",
        ),
        (
            "struct s { int @; };",
            "t.x:1:16: error: unexpected character `@`",
        ),
    ] {
        let e = gen_err(src);
        assert!(e.starts_with(want), "{src:?}:\n got: {e}\nwant: {want}");
        assert!(e.contains('^'), "the offending line is shown: {e}");
    }
}

#[test]
fn names_defined_elsewhere_are_standard_values_or_expected_in_scope() {
    let out = stubgen::rpcgen_source(
        "const F = AUTH_SYS; const G = RPCSEC_GSS; const P = RPCBPROG; const M = MAXPATHLEN;\n\
         typedef opaque path<MAXPATHLEN>;\n\
         union u switch (unsigned d) { case AUTH_NONE: void; case MY_FLAVOR: int x; };",
        "t.x",
        &Options::default(),
    )
    .unwrap();
    assert_has(&out.code, "pub const F: u32 = 1;");
    assert_has(&out.code, "pub const G: u32 = 6;");
    assert_has(&out.code, "pub const P: u32 = 100000;");
    assert_has(&out.code, "pub const M: i64 = MAXPATHLEN as i64;");
    assert_has(
        &out.code,
        "pub type path = ::rpc::xdr::Opaque<{ MAXPATHLEN as u32 }>;",
    );
    assert_has(&out.code, "d if d == MY_FLAVOR as u32 =>");
    let warned: Vec<String> = out.warnings.iter().map(|w| w.message.clone()).collect();
    assert_eq!(
        warned,
        [
            "constant `MAXPATHLEN` is not defined here; the generated code expects it in scope",
            "constant `MAXPATHLEN` is not defined here; the generated code expects it in scope",
            "constant `MY_FLAVOR` is not defined here; the generated code expects it in scope",
        ]
    );
    // --strict refuses them; standard names stay accepted.
    let e = gen_err("const M = MAXPATHLEN;");
    assert!(
        e.starts_with("t.x:1:11: error: unknown constant `MAXPATHLEN`"),
        "{e}"
    );
    gen("const F = AUTH_DH; typedef int x[AUTH_SHORT];");
    assert!(stubgen::rpcgen_source("const F = AUTH_DH;", "t.x", &Options { strict: true }).is_ok());
    // A definition in the input wins over the standard value.
    assert_has(
        &gen("const AUTH_SYS = 9; const F = AUTH_SYS;"),
        "pub const F: u32 = 9;",
    );
}

#[test]
fn a_name_in_scope_cannot_label_a_bool_or_enum_case() {
    for src in [
        "union u switch (bool b) { case ELSEWHERE: int x; };",
        "enum e { A = 1 }; union u switch (e d) { case ELSEWHERE: int x; };",
    ] {
        let e = stubgen::rpcgen_source(src, "t.x", &Options::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("case `ELSEWHERE` must be known here"),
            "{e}"
        );
    }
}

#[test]
fn identical_repetitions_are_accepted_and_conflicts_name_both_places() {
    let code = gen(
        "const A = 1; const A = 1; struct s { int x; }; struct s { int x; };\n\
                    enum e { E1, E2 }; enum e { E1, E2 };",
    );
    assert_eq!(squash(&code).matches("pubconstA:u32=1;").count(), 1);
    assert_eq!(squash(&code).matches("pubstructs{").count(), 1);
    assert_eq!(squash(&code).matches("pubenume{").count(), 1);
    for (src, want) in [
        (
            "const A = 1;\nconst A = 2;",
            "t.x:2:7: error: `A` is already defined differently at t.x:1:7",
        ),
        (
            "struct s { int x; };\nstruct s { unsigned x; };",
            "t.x:2:8: error: type `s` is already defined differently at t.x:1:8",
        ),
        (
            "enum e { E1 };\nenum f { E1 };",
            "t.x:2:10: error: `E1` is already defined differently at t.x:1:10",
        ),
    ] {
        let e = gen_err(src);
        assert!(e.starts_with(want), "{src:?}:\n got: {e}\nwant: {want}");
    }
}

#[test]
fn xdrgen_pragmas_are_understood() {
    let src = "pragma header nlm;\nenum st { OK = 0, NO = 1 };\npragma big_endian st;\n\
               struct r { st s; };\npragma public r;\npragma pages P2 arg;\n\
               program P { version V { r P1(int) = 1; r P2(int) = 2; } = 1; } = 9;\n\
               pragma exclude P2;";
    let out = stubgen::rpcgen_source(src, "t.x", &Options { strict: true }).unwrap();
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_has(&out.code, "fn p1(&self, arg: i32) -> r;");
    assert!(!out.code.contains("fn p2"), "P2 is excluded:\n{}", out.code);
    assert_has(&out.code, "pub const P2: u32 = 2;");
    // Pragmas naming nothing known are warnings; unknown directives are errors.
    let out = stubgen::rpcgen_source(
        "pragma exclude NOPE;\npragma big_endian nope;",
        "t.x",
        &Options::default(),
    )
    .unwrap();
    let warned: Vec<String> = out.warnings.iter().map(|w| w.message.clone()).collect();
    assert_eq!(
        warned,
        [
            "pragma exclude: no procedure is named `NOPE` in the input",
            "pragma big_endian: no enum is named `nope` in the input",
        ]
    );
    for (src, want) in [
        (
            "pragma frobnicate x;",
            "t.x:1:8: error: expected a pragma directive",
        ),
        (
            "pragma header;",
            "t.x:1:14: error: expected a name, found `;`",
        ),
        (
            "pragma header x",
            "t.x:1:15: error: expected `;`, found end of file",
        ),
    ] {
        let e = gen_err(src);
        assert!(e.starts_with(want), "{src:?}:\n got: {e}\nwant: {want}");
    }
}
