//! The nom parser of SHRIMP RPC interface files (grammar in [`super`]).

use super::ast::*;
use crate::error::{Diagnostic, Error, Location};
use nom::branch::alt;
use nom::bytes::complete::{tag, take_until, take_while, take_while1};
use nom::character::complete::{digit1, hex_digit1, multispace1};
use nom::combinator::{all_consuming, cut, map, map_res, opt, recognize, value};
use nom::error::{ErrorKind, FromExternalError, ParseError};
use nom::multi::many0;
use nom::sequence::{delimited, pair, preceded, terminated, tuple};
use nom::IResult;

/// A parse error: where (the rest of the input) and what was expected.
#[derive(Debug)]
pub struct PErr<'a> {
    at: &'a str,
    what: String,
}

impl<'a> ParseError<&'a str> for PErr<'a> {
    fn from_error_kind(input: &'a str, kind: ErrorKind) -> Self {
        PErr {
            at: input,
            what: format!("syntax error ({kind:?})"),
        }
    }
    fn append(_: &'a str, _: ErrorKind, other: Self) -> Self {
        other
    }
    fn or(self, other: Self) -> Self {
        // Keep the error that got furthest.
        if other.at.len() < self.at.len() {
            other
        } else {
            self
        }
    }
}

impl<'a, E> FromExternalError<&'a str, E> for PErr<'a> {
    fn from_external_error(input: &'a str, _: ErrorKind, _: E) -> Self {
        PErr {
            at: input,
            what: "number too large".into(),
        }
    }
}

type R<'a, O> = IResult<&'a str, O, PErr<'a>>;

/// Replaces the error of `p` with "expected `what`" at the position it failed.
fn expect<'a, O>(
    what: &'static str,
    mut p: impl FnMut(&'a str) -> R<'a, O>,
) -> impl FnMut(&'a str) -> R<'a, O> {
    move |i: &'a str| {
        p(i).map_err(|e| {
            e.map(|err| {
                // An inner error further on, or about a keyword used as a name, says more
                // than "expected X" at the start.
                let further = err.at.len() < i.trim_start().len();
                let specific = !err.what.starts_with("syntax error")
                    && (further || err.what.contains("keyword"));
                PErr {
                    at: if further { err.at } else { i },
                    what: if specific {
                        err.what
                    } else {
                        format!("expected {what}")
                    },
                }
            })
        })
    }
}

/// Whitespace and comments (`// ...` and `/* ... */`).
fn sp(i: &str) -> R<'_, ()> {
    value(
        (),
        many0(alt((
            value((), multispace1),
            value((), pair(tag("//"), take_while(|c| c != '\n'))),
            value((), tuple((tag("/*"), take_until("*/"), tag("*/")))),
        ))),
    )(i)
}

fn ws<'a, O>(p: impl FnMut(&'a str) -> R<'a, O>) -> impl FnMut(&'a str) -> R<'a, O> {
    delimited(sp, p, sp)
}

fn sym<'a>(s: &'static str) -> impl FnMut(&'a str) -> R<'a, &'a str> {
    ws(tag(s))
}

fn ident(i: &str) -> R<'_, &str> {
    ws(recognize(pair(
        take_while1(|c: char| c.is_ascii_alphabetic() || c == '_'),
        take_while(|c: char| c.is_ascii_alphanumeric() || c == '_'),
    )))(i)
}

/// An identifier that is not one of `words`.
fn name<'a>(input: &'a str) -> R<'a, &'a str> {
    let (rest, id) = ident(input)?;
    if KEYWORDS.contains(&id) {
        return Err(nom::Err::Error(PErr {
            at: input.trim_start(),
            what: format!("`{id}` is a keyword, not a name"),
        }));
    }
    Ok((rest, id))
}

const KEYWORDS: &[&str] = &[
    "const",
    "struct",
    "typedef",
    "interface",
    "in",
    "out",
    "inout",
    "string",
    "sequence",
    "i8",
    "i16",
    "i32",
    "i64",
    "u8",
    "u16",
    "u32",
    "u64",
    "f32",
    "f64",
    "bool",
    "void",
];

fn keyword<'a>(k: &'static str) -> impl FnMut(&'a str) -> R<'a, &'a str> {
    move |i: &'a str| {
        let (rest, id) = ident(i)?;
        if id == k {
            Ok((rest, id))
        } else {
            Err(nom::Err::Error(PErr {
                at: i.trim_start(),
                what: format!("expected `{k}`"),
            }))
        }
    }
}

fn number(i: &str) -> R<'_, u64> {
    ws(alt((
        map_res(preceded(alt((tag("0x"), tag("0X"))), hex_digit1), |h| {
            u64::from_str_radix(h, 16)
        }),
        map_res(digit1, |d: &str| d.parse::<u64>()),
    )))(i)
}

/// Where `rest` starts in `full`, as a byte offset.
fn pos(full: &str, rest: &str) -> usize {
    full.len() - rest.len()
}

/// How many `sequence<...>` a type may be nested in: deeper input is refused with an error
/// rather than recursing until the stack overflows.
pub const MAX_TYPE_NESTING: usize = 64;

struct P<'f> {
    full: &'f str,
}

impl<'f> P<'f> {
    fn size<'a>(&self, i: &'a str) -> R<'a, Size>
    where
        'f: 'a,
    {
        let full = self.full;
        alt((
            map(number, Size::Lit),
            map(
                |i| {
                    let (r, n) = name(i)?;
                    Ok((r, (n, i)))
                },
                move |(n, at): (&str, &str)| Size::Const(n.to_string(), pos(full, at.trim_start())),
            ),
        ))(i)
    }

    fn ty<'a>(&self, i: &'a str) -> R<'a, Type>
    where
        'f: 'a,
    {
        self.ty_nested(i, 0)
    }

    /// A type inside `depth` enclosing `sequence<...>`s.
    fn ty_nested<'a>(&self, i: &'a str, depth: usize) -> R<'a, Type>
    where
        'f: 'a,
    {
        let start = i;
        let (rest, id) = expect("a type", ident)(i)?;
        let prim = |p| Ok((rest, Type::Prim(p)));
        match id {
            "i8" => prim(Prim::I8),
            "i16" => prim(Prim::I16),
            "i32" => prim(Prim::I32),
            "i64" => prim(Prim::I64),
            "u8" => prim(Prim::U8),
            "u16" => prim(Prim::U16),
            "u32" => prim(Prim::U32),
            "u64" => prim(Prim::U64),
            "f32" => prim(Prim::F32),
            "f64" => prim(Prim::F64),
            "bool" => prim(Prim::Bool),
            "string" => {
                let (rest, n) = cut(delimited(
                    expect("`<` after `string`", sym("<")),
                    expect("a bound", |i| self.size(i)),
                    expect("`>`", sym(">")),
                ))(rest)?;
                Ok((rest, Type::String(n)))
            }
            "sequence" => {
                if depth >= MAX_TYPE_NESTING {
                    return Err(nom::Err::Failure(PErr {
                        at: start.trim_start(),
                        what: format!("types nested more than {MAX_TYPE_NESTING} levels deep"),
                    }));
                }
                let (rest, _) = cut(expect("`<` after `sequence`", sym("<")))(rest)?;
                let (rest, t) = cut(|i| self.ty_nested(i, depth + 1))(rest)?;
                let (rest, n) = cut(preceded(
                    expect("`,` and a bound", sym(",")),
                    expect("a bound", |i| self.size(i)),
                ))(rest)?;
                let (rest, _) = cut(expect("`>`", sym(">")))(rest)?;
                Ok((rest, Type::Sequence(Box::new(t), n)))
            }
            _ if KEYWORDS.contains(&id) => Err(nom::Err::Failure(PErr {
                at: start.trim_start(),
                what: format!("expected a type, found `{id}`"),
            })),
            _ => Ok((
                rest,
                Type::Named(id.to_string(), pos(self.full, start.trim_start())),
            )),
        }
    }

    /// `type name [N]?`
    fn typed_name<'a>(&self, i: &'a str) -> R<'a, (Type, String, usize)>
    where
        'f: 'a,
    {
        let (rest, t) = self.ty(i)?;
        let at = rest.trim_start();
        let (rest, n) = cut(expect("a name", name))(rest)?;
        let (rest, dim) = opt(delimited(
            sym("["),
            cut(expect("an array length", |i| self.size(i))),
            cut(expect("`]`", sym("]"))),
        ))(rest)?;
        let t = match dim {
            Some(d) => Type::Array(Box::new(t), d),
            None => t,
        };
        Ok((rest, (t, n.to_string(), pos(self.full, at))))
    }

    fn item<'a>(&self, i: &'a str) -> R<'a, Item>
    where
        'f: 'a,
    {
        let at = pos(self.full, i.trim_start());
        let (rest, kw) = expect("`const`, `struct`, `typedef` or `interface`", ident)(i)?;
        match kw {
            "const" => {
                let (rest, (n, _, v, _)) = cut(tuple((
                    expect("a name", name),
                    expect("`=`", sym("=")),
                    expect("a number", number),
                    expect("`;`", sym(";")),
                )))(rest)?;
                Ok((
                    rest,
                    Item::Const {
                        name: n.into(),
                        value: v,
                        at,
                    },
                ))
            }
            "typedef" => {
                let (rest, (t, n, _)) = cut(|i| self.typed_name(i))(rest)?;
                let (rest, _) = cut(expect("`;`", sym(";")))(rest)?;
                Ok((rest, Item::Typedef { name: n, ty: t, at }))
            }
            "struct" => {
                let (rest, n) = cut(expect("a name", name))(rest)?;
                let (rest, _) = cut(expect("`{`", sym("{")))(rest)?;
                let (rest, fields) = many0(terminated(
                    |i| self.typed_name(i),
                    cut(expect("`;`", sym(";"))),
                ))(rest)?;
                let (rest, _) = cut(expect("a field or `}`", sym("}")))(rest)?;
                let (rest, _) = opt(sym(";"))(rest)?;
                let fields = fields
                    .into_iter()
                    .map(|(ty, name, at)| Field { name, ty, at })
                    .collect();
                Ok((
                    rest,
                    Item::Struct {
                        name: n.into(),
                        fields,
                        at,
                    },
                ))
            }
            "interface" => {
                let (rest, n) = cut(expect("a name", name))(rest)?;
                let (rest, _) = cut(expect("`{`", sym("{")))(rest)?;
                let (rest, procs) = many0(|i| self.procedure(i))(rest)?;
                let (rest, _) =
                    cut(expect("a procedure (`N: name(...);`) or `}`", sym("}")))(rest)?;
                let (rest, _) = opt(sym(";"))(rest)?;
                Ok((
                    rest,
                    Item::Interface {
                        name: n.into(),
                        procs,
                        at,
                    },
                ))
            }
            other => Err(nom::Err::Failure(PErr {
                at: i.trim_start(),
                what: format!(
                    "expected `const`, `struct`, `typedef` or `interface`, found `{other}`"
                ),
            })),
        }
    }

    fn param<'a>(&self, i: &'a str) -> R<'a, Param>
    where
        'f: 'a,
    {
        let at = pos(self.full, i.trim_start());
        let (rest, dir) = expect(
            "`in`, `out` or `inout`",
            alt((
                value(Dir::InOut, keyword("inout")),
                value(Dir::In, keyword("in")),
                value(Dir::Out, keyword("out")),
            )),
        )(i)?;
        let (rest, (ty, name, _)) = cut(|i| self.typed_name(i))(rest)?;
        Ok((rest, Param { dir, name, ty, at }))
    }

    fn procedure<'a>(&self, i: &'a str) -> R<'a, Proc>
    where
        'f: 'a,
    {
        let at = pos(self.full, i.trim_start());
        let (rest, num) = number(i)?;
        let (rest, _) = cut(expect("`:` after the procedure number", sym(":")))(rest)?;
        let (rest, n) = cut(expect("a procedure name", name))(rest)?;
        let (rest, _) = cut(expect("`(`", sym("(")))(rest)?;
        let (rest, first) = opt(|i| self.param(i))(rest)?;
        let (rest, more) = if first.is_some() {
            many0(preceded(sym(","), cut(|i| self.param(i))))(rest)?
        } else {
            (rest, Vec::new())
        };
        let params: Vec<Param> = first.into_iter().chain(more).collect();
        let (rest, _) = cut(expect("a parameter or `)`", sym(")")))(rest)?;
        let (rest, _) = cut(expect("`;`", sym(";")))(rest)?;
        Ok((
            rest,
            Proc {
                number: num,
                name: n.into(),
                params,
                at,
            },
        ))
    }
}

/// 1-based line and column (in characters) of byte offset `at` in `text`, and that line.
pub fn line_col(text: &str, at: usize) -> (u32, u32, String) {
    let at = at.min(text.len());
    let at = (0..=at)
        .rev()
        .find(|&k| text.is_char_boundary(k))
        .unwrap_or(0);
    let line_start = text[..at].rfind('\n').map_or(0, |k| k + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |k| at + k);
    let line = text[..at].matches('\n').count() as u32 + 1;
    let col = text[line_start..at].chars().count() as u32 + 1;
    (
        line,
        col,
        text[line_start..line_end]
            .trim_end_matches('\r')
            .to_string(),
    )
}

/// A diagnostic at byte offset `at` of `text`.
pub fn error_at(file: &str, text: &str, at: usize, message: impl Into<String>) -> Error {
    let (line, column, src) = line_col(text, at);
    Error::Source(Box::new(Diagnostic {
        location: Location {
            file: file.to_string(),
            line,
            column,
        },
        message: message.into(),
        source_line: Some(src),
    }))
}

/// Parses an interface file.
pub fn parse(file: &str, text: &str) -> Result<IdlFile, Error> {
    let p = P { full: text };
    let r = all_consuming(terminated(many0(|i| p.item(i)), |i| {
        let (rest, _) = sp(i)?;
        if rest.is_empty() {
            Ok((rest, ()))
        } else {
            // Something that starts no item: let the item parser say what it expected.
            match p.item(rest) {
                Err(e) => Err(e),
                Ok(_) => Err(nom::Err::Failure(PErr {
                    at: rest,
                    what: "unexpected input".into(),
                })),
            }
        }
    }))(text);
    match r {
        Ok((_, items)) => Ok(IdlFile { items }),
        Err(nom::Err::Error(e)) | Err(nom::Err::Failure(e)) => {
            let at = pos(text, e.at.trim_start());
            Err(error_at(file, text, at, e.what))
        }
        Err(nom::Err::Incomplete(_)) => {
            Err(error_at(file, text, text.len(), "unexpected end of input"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_construct() {
        let f = parse(
            "t.idl",
            "/* c */ const N = 4; const H = 0x10;\n\
             struct P { i32 x; f64 y[N]; } ;\n\
             typedef sequence<P, 8> Ps;\n\
             interface I { 1: null(); 2: f(in u8 a, out string<H> s, inout Ps p); } // end\n",
        )
        .unwrap();
        assert_eq!(f.items.len(), 5);
        match &f.items[4] {
            Item::Interface { procs, .. } => {
                assert_eq!(procs.len(), 2);
                assert_eq!(procs[1].params.len(), 3);
                assert_eq!(procs[1].params[2].dir, Dir::InOut);
            }
            _ => panic!("not an interface"),
        }
    }

    #[test]
    fn errors_point_at_the_line_and_column() {
        let e = parse(
            "t.idl",
            "interface I {\n  1: f(in i32 a, bogus i32 b);\n}\n",
        )
        .unwrap_err();
        let d = e.diagnostic().expect("a diagnostic");
        assert_eq!((d.location.line, d.location.column), (2, 18), "{e}");
        assert!(d.message.contains("`in`, `out` or `inout`"), "{e}");
        let shown = e.to_string();
        assert!(shown.contains("1: f(in i32 a, bogus i32 b);\n"), "{shown}");
        assert!(shown.ends_with("                 ^"), "{shown:?}");

        let e = parse("t.idl", "struct S { i32 x }").unwrap_err();
        assert!(e.to_string().contains("expected `;`"), "{e}");
        let e = parse("t.idl", "interface I { 1 f(); }").unwrap_err();
        assert!(e.to_string().contains("expected `:`"), "{e}");
        let e = parse("t.idl", "typedef string<> S;").unwrap_err();
        assert!(e.to_string().contains("a bound"), "{e}");
        let e = parse("t.idl", "const in = 3;").unwrap_err();
        assert!(e.to_string().contains("keyword"), "{e}");
        let e = parse("t.idl", "widget W;").unwrap_err();
        assert!(e.to_string().contains("found `widget`"), "{e}");
    }
}
