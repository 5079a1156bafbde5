//! The front end and the generator never panic: random mutations of the system's `.x` files
//! and arbitrary text all end in generated code or an error with a position.

use proptest::prelude::*;
use stubgen::codegen::Options;

/// The system's `.x` files as text (not preprocessed: directives and pass-through lines are
/// part of what the lexer must survive).
fn corpus() -> &'static [String] {
    static CORPUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut out = Vec::new();
        for dir in [
            "/usr/include/rpcsvc",
            "/usr/include/tirpc/rpcsvc",
            "/usr/include/tirpc/rpc",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"),
        ] {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                if e.path().extension().is_some_and(|x| x == "x") {
                    out.push(std::fs::read_to_string(e.path()).unwrap());
                }
            }
        }
        out.sort();
        assert!(
            !out.is_empty(),
            "the system's .x files are needed (rpcsvc-proto, libtirpc-dev)"
        );
        out
    })
}

/// Runs the whole pipeline: success yields Rust that parses; any error must carry a position
/// and a message.
fn check(text: &str, strict: bool) {
    match stubgen::rpcgen_source(text, "fuzz.x", &Options { strict }) {
        Ok(out) => {
            if let Err(e) = syn::parse_file(&out.code) {
                panic!("generated code does not parse: {e}\n{}", out.code);
            }
        }
        Err(e) => {
            let d = e
                .diagnostic()
                .unwrap_or_else(|| panic!("error without a position: {e}"));
            assert!(d.location.line >= 1 && d.location.column >= 1, "{e}");
            assert!(!d.message.is_empty());
        }
    }
}

/// Fragments that stress the lexer and parser.
const PIECES: &[&str] = &[
    "pragma ",
    "pragma exclude P;",
    "pragma pages A",
    "AUTH_SYS",
    "ELSEWHERE",
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "<",
    ">",
    ";",
    ",",
    "=",
    "*",
    ":",
    "\"",
    "/*",
    "*/",
    "//",
    "%",
    "#",
    "# 7 \"x.x\"",
    "\\",
    "\n",
    " ",
    "-",
    "-1",
    "0",
    "0x",
    "0xffffffffffffffff",
    "09",
    "99999999999999999999999999",
    "struct",
    "union",
    "switch",
    "case",
    "default",
    "enum",
    "typedef",
    "const",
    "program",
    "version",
    "void",
    "opaque",
    "string",
    "unsigned",
    "hyper",
    "bool",
    "int",
    "TRUE",
    "FALSE",
    "self",
    "type",
    "Self",
    "_",
    "é",
    "\u{0}",
    "\t",
];

#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, piece: usize },
    Duplicate { at: usize, len: usize, to: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 0..PIECES.len()).prop_map(|(at, piece)| Mutation::Insert { at, piece }),
        (any::<usize>(), 1usize..200, any::<usize>())
            .prop_map(|(at, len, to)| Mutation::Duplicate { at, len, to }),
    ]
}

fn apply(text: &str, muts: &[Mutation]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for m in muts {
        let n = chars.len().max(1);
        match *m {
            Mutation::Delete { at, len } => {
                let at = at % n;
                let end = (at + len).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            Mutation::Insert { at, piece } => {
                let at = at % (chars.len() + 1);
                let p: Vec<char> = PIECES[piece].chars().collect();
                chars.splice(at..at, p);
            }
            Mutation::Duplicate { at, len, to } => {
                let at = at % n;
                let end = (at + len).min(chars.len());
                let copy: Vec<char> = chars.get(at..end).unwrap_or(&[]).to_vec();
                let to = to % (chars.len() + 1);
                chars.splice(to..to, copy);
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_system_files_never_panic(
        file in any::<usize>(),
        muts in proptest::collection::vec(mutation(), 1..8),
        strict in any::<bool>(),
    ) {
        let corpus = corpus();
        let text = apply(&corpus[file % corpus.len()], &muts);
        check(&text, strict);
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        check(&text, false);
    }

    #[test]
    fn token_soup_never_panics(pieces in proptest::collection::vec(0..PIECES.len(), 0..120)) {
        let text: Vec<&str> = pieces.iter().map(|&i| PIECES[i]).collect();
        check(&text.join(" "), false);
    }
}

#[test]
fn every_truncation_of_a_real_file_is_handled() {
    let text = corpus().iter().max_by_key(|t| t.len()).unwrap();
    let chars: Vec<char> = text.chars().collect();
    for end in (0..chars.len()).step_by(97) {
        let prefix: String = chars[..end].iter().collect();
        check(&prefix, false);
    }
}

#[test]
fn line_markers_naming_special_files_are_not_read() {
    check("# 1 \"/dev/zero\"\n%pass\nstruct s { int @; };", false);
    check("# 1 \"/proc/self\"\n%pass\\\nstruct s { int x; };", false);
}

#[test]
fn deep_c_expressions_in_pass_through_defines_are_refused_not_overflowed() {
    let deep = format!(
        "%#define X {}1{}\nconst Y = 1;",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    check(&deep, false);
    let neg = format!("%#define X {}1\nconst Y = 1;", "-".repeat(100_000));
    check(&neg, false);
}
