//! Tokens of the rpcgen language, read from the C preprocessor's output.
//!
//! The preprocessor's line markers (`# 12 "file.x" 1`, `#line 12 "file.x"`) give each token the
//! position it has in the original file. Lines starting with `%` are rpcgen pass-through text
//! for C output and are skipped here. Comments (kept by `cpp -C`) are skipped as well.

use std::collections::HashMap;

use crate::error::{Diagnostic, Error, Location, Result};

/// A lexical error with the offending line attached (it is at hand here).
fn fail(location: Location, message: impl Into<String>, line: &str) -> Error {
    Error::Source(Box::new(Diagnostic {
        location,
        message: message.into(),
        source_line: Some(line.to_string()),
    }))
}

/// A token kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tok {
    /// An identifier or keyword.
    Ident(String),
    /// A number literal, already evaluated.
    Number(i128),
    /// A string literal's contents (escapes resolved).
    Str(String),
    /// One punctuation character: `{ } ( ) [ ] < > ; , = * :`.
    Punct(char),
    /// End of input.
    Eof,
}

/// A token and where it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    /// What was read.
    pub tok: Tok,
    /// Its position in the original source.
    pub loc: Location,
}

/// The tokens of one preprocessed input and the text of the lines they came from.
#[derive(Debug, Default)]
pub struct Lexed {
    /// The tokens, ending with [`Tok::Eof`].
    pub tokens: Vec<Token>,
    /// Preprocessed text of each original (file, line), for diagnostics when the file itself
    /// cannot be read.
    pub lines: HashMap<(String, u32), String>,
    /// Numeric constants defined by pass-through lines (`%#define NAME 1024`).
    pub c_defines: Vec<(String, i128, Location)>,
}

/// Splits preprocessed text into tokens. `file` names the input until a line marker says
/// otherwise.
pub fn lex(text: &str, file: &str) -> Result<Lexed> {
    let mut out = Lexed::default();
    let mut cur_file = file.to_string();
    let mut line_no: u32 = 1;
    let mut in_comment = false;
    let mut continued = false;
    let mut originals = Originals::default();
    for raw in text.split('\n') {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        let this_line = line_no;
        line_no = line_no.saturating_add(1);
        if !in_comment {
            if let Some(rest) = line.strip_prefix('#') {
                if let Some((n, f)) = parse_line_marker(rest) {
                    // Lines count from 1; a marker saying 0 is nonsense, not a position.
                    line_no = n.max(1);
                    if let Some(f) = f {
                        cur_file = f;
                    }
                }
                // Any other directive (#pragma, #ident) is ignored, as rpcgen does.
                continue;
            }
            if line.starts_with('%') || continued {
                // A pass-through line may continue onto the next with a backslash. cpp splices
                // such lines and leaves bare continuation lines behind, so look at the
                // original file to see whether this line ended with one.
                let orig = originals
                    .line(&cur_file, this_line)
                    .unwrap_or_else(|| line.to_string());
                if !continued {
                    if let Some((name, value)) = c_define(line, &out.c_defines) {
                        let loc = Location {
                            file: cur_file.clone(),
                            line: this_line,
                            column: 1,
                        };
                        out.c_defines.push((name, value, loc));
                    }
                }
                continued = orig.trim_end().ends_with('\\');
                continue;
            }
        }
        out.lines
            .entry((cur_file.clone(), this_line))
            .or_insert_with(|| line.to_string());
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        let loc_at = |i: usize| Location {
            file: cur_file.clone(),
            line: this_line,
            column: u32::try_from(i + 1).unwrap_or(u32::MAX),
        };
        while i < chars.len() {
            if in_comment {
                if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    in_comment = false;
                    i += 2;
                } else {
                    i += 1;
                }
                continue;
            }
            let c = chars[i];
            if c.is_whitespace() {
                i += 1;
            } else if c == '/' && chars.get(i + 1) == Some(&'*') {
                in_comment = true;
                i += 2;
            } else if c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            } else if c.is_ascii_alphabetic() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.tokens.push(Token {
                    tok: Tok::Ident(chars[start..i].iter().collect()),
                    loc: loc_at(start),
                });
            } else if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
            {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                let value = parse_number(&text)
                    .ok_or_else(|| fail(loc_at(start), format!("invalid number `{text}`"), line))?;
                out.tokens.push(Token {
                    tok: Tok::Number(value),
                    loc: loc_at(start),
                });
            } else if c == '"' {
                let start = i;
                i += 1;
                let mut s = String::new();
                loop {
                    match chars.get(i) {
                        None => {
                            return Err(fail(loc_at(start), "unterminated string constant", line))
                        }
                        Some('"') => {
                            i += 1;
                            break;
                        }
                        Some('\\') => {
                            let e = chars.get(i + 1).copied().ok_or_else(|| {
                                fail(loc_at(start), "unterminated string constant", line)
                            })?;
                            s.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                '0' => '\0',
                                other => other,
                            });
                            i += 2;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                out.tokens.push(Token {
                    tok: Tok::Str(s),
                    loc: loc_at(start),
                });
            } else if "{}()[]<>;,=*:".contains(c) {
                out.tokens.push(Token {
                    tok: Tok::Punct(c),
                    loc: loc_at(i),
                });
                i += 1;
            } else {
                return Err(fail(
                    loc_at(i),
                    format!("unexpected character `{}`", c.escape_debug()),
                    line,
                ));
            }
        }
    }
    if in_comment {
        let loc = Location {
            file: cur_file,
            line: line_no.saturating_sub(1).max(1),
            column: 1,
        };
        return Err(Error::at(loc, "unterminated comment"));
    }
    let loc = out
        .tokens
        .last()
        .map(|t| t.loc.clone())
        .unwrap_or(Location {
            file: cur_file,
            line: 1,
            column: 1,
        });
    out.tokens.push(Token { tok: Tok::Eof, loc });
    Ok(out)
}

/// `%#define NAME EXPR` (with an optional trailing comment) where EXPR is an integer
/// expression over numbers and earlier such names: the name and the value.
fn c_define(line: &str, known: &[(String, i128, Location)]) -> Option<(String, i128)> {
    let rest = line
        .strip_prefix('%')?
        .trim_start()
        .strip_prefix('#')?
        .trim_start();
    let rest = rest.strip_prefix("define")?;
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let rest = rest.split("/*").next().unwrap_or("").trim();
    let name_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (name, expr) = rest.split_at(name_len);
    // `#define F(x) ...` is a macro, not a constant.
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || expr.starts_with('(') {
        return None;
    }
    let tokens = c_expr_tokens(expr)?;
    let mut pos = 0;
    let value = c_expr(&tokens, &mut pos, 0, known, 0)?;
    (pos == tokens.len()).then(|| (name.to_string(), value))
}

/// Tokens of a C integer expression: numbers, names and operators.
fn c_expr_tokens(expr: &str) -> Option<Vec<String>> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if (c == '<' || c == '>') && chars.get(i + 1) == Some(&c) {
            out.push(format!("{c}{c}"));
            i += 2;
        } else if "+-*/|&()~".contains(c) {
            out.push(c.to_string());
            i += 1;
        } else {
            return None;
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Binary operators by precedence level (loosest first).
const C_LEVELS: &[&[&str]] = &[&["|"], &["&"], &["<<", ">>"], &["+", "-"], &["*", "/"]];

/// Evaluates tokens[pos..] at precedence `level`; `None` for anything it does not understand.
/// Parentheses and unary operators nest at most 32 deep: no stack exhaustion on odd input.
fn c_expr(
    t: &[String],
    pos: &mut usize,
    level: usize,
    known: &[(String, i128, Location)],
    depth: usize,
) -> Option<i128> {
    if level >= C_LEVELS.len() {
        return c_unary(t, pos, known, depth);
    }
    let mut lhs = c_expr(t, pos, level + 1, known, depth)?;
    while let Some(op) = t
        .get(*pos)
        .filter(|op| C_LEVELS[level].contains(&op.as_str()))
    {
        *pos += 1;
        let rhs = c_expr(t, pos, level + 1, known, depth)?;
        lhs = match op.as_str() {
            "|" => lhs | rhs,
            "&" => lhs & rhs,
            "<<" => lhs.checked_shl(u32::try_from(rhs).ok().filter(|s| *s < 64)?)?,
            ">>" => lhs.checked_shr(u32::try_from(rhs).ok().filter(|s| *s < 64)?)?,
            "+" => lhs.checked_add(rhs)?,
            "-" => lhs.checked_sub(rhs)?,
            "*" => lhs.checked_mul(rhs)?,
            _ => lhs.checked_div(rhs)?,
        };
        if lhs.unsigned_abs() > u128::from(u64::MAX) {
            return None;
        }
    }
    Some(lhs)
}

fn c_unary(
    t: &[String],
    pos: &mut usize,
    known: &[(String, i128, Location)],
    depth: usize,
) -> Option<i128> {
    if depth > 32 {
        return None;
    }
    let tok = t.get(*pos)?;
    *pos += 1;
    match tok.as_str() {
        "-" => c_unary(t, pos, known, depth + 1).map(|v: i128| -v),
        "~" => c_unary(t, pos, known, depth + 1).map(|v| !v),
        "(" => {
            let v = c_expr(t, pos, 0, known, depth + 1)?;
            (t.get(*pos)? == ")").then(|| *pos += 1)?;
            Some(v)
        }
        w if w.starts_with(|c: char| c.is_ascii_digit()) => parse_number(w),
        w => known
            .iter()
            .rev()
            .find(|(n, _, _)| n == w)
            .map(|(_, v, _)| *v),
    }
}

/// Lines of the original files named by line markers, read when needed.
#[derive(Default)]
struct Originals {
    files: HashMap<String, Option<Vec<String>>>,
}

impl Originals {
    fn line(&mut self, file: &str, line: u32) -> Option<String> {
        let lines = self
            .files
            .entry(file.to_string())
            .or_insert_with(|| read_source(file).map(|t| t.lines().map(str::to_string).collect()));
        lines
            .as_ref()?
            .get((line as usize).checked_sub(1)?)
            .cloned()
    }
}

/// The text of a source file named by a line marker: only regular files of sensible size
/// (markers in odd input may name `/dev/zero`).
pub(crate) fn read_source(file: &str) -> Option<String> {
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() || meta.len() > 64 << 20 {
        return None;
    }
    std::fs::read_to_string(file).ok()
}

/// Reads `# N "file" flags` or `#line N "file"` (the text after `#`). Returns the number of the
/// next line and the file name if one is given.
fn parse_line_marker(rest: &str) -> Option<(u32, Option<String>)> {
    let rest = rest.trim_start();
    let rest = rest.strip_prefix("line").unwrap_or(rest).trim_start();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    if digits.is_empty() {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    let after = rest[digits.len()..].trim_start();
    let file = after.strip_prefix('"').and_then(|f| {
        // The name ends at the first unescaped quote; cpp escapes `"` and `\` inside it.
        let mut name = String::new();
        let mut chars = f.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Some(name),
                '\\' => name.push(chars.next()?),
                c => name.push(c),
            }
        }
        None
    });
    Some((n, file))
}

/// Evaluates a C integer literal: decimal, `0x` hexadecimal, leading-zero octal, an optional
/// leading `-`, and optional `u`/`l` suffixes.
pub fn parse_number(text: &str) -> Option<i128> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, text),
    };
    let body = body.trim_end_matches(['u', 'U', 'l', 'L']);
    let (digits, radix) = if let Some(h) = body.strip_prefix("0x").or(body.strip_prefix("0X")) {
        (h, 16)
    } else if body.len() > 1 && body.starts_with('0') {
        (&body[1..], 8)
    } else {
        (body, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let v = u64::from_str_radix(digits, radix).ok()?;
    let v = i128::from(v);
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_follow_c() {
        assert_eq!(parse_number("0170000"), Some(0o170000));
        assert_eq!(parse_number("0x40000000"), Some(0x4000_0000));
        assert_eq!(parse_number("-1"), Some(-1));
        assert_eq!(parse_number("0"), Some(0));
        assert_eq!(parse_number("100U"), Some(100));
        assert_eq!(parse_number("09"), None);
        assert_eq!(parse_number("0x"), None);
        assert_eq!(parse_number("99999999999999999999999"), None);
    }

    #[test]
    fn line_markers_and_passthrough() {
        let text = "# 1 \"a.x\"\nconst A = 1;\n%#include <x.h>\n# 10 \"b.x\" 1\n  /* c\n */ B\n";
        let lexed = lex(text, "in.x").unwrap();
        let toks: Vec<_> = lexed
            .tokens
            .iter()
            .map(|t| (t.tok.clone(), t.loc.to_string()))
            .collect();
        assert_eq!(toks[0], (Tok::Ident("const".into()), "a.x:1:1".into()));
        assert_eq!(toks[3], (Tok::Number(1), "a.x:1:11".into()));
        assert_eq!(toks[5], (Tok::Ident("B".into()), "b.x:11:5".into()));
        assert_eq!(toks[6].0, Tok::Eof);
    }

    #[test]
    fn numeric_c_defines_are_recorded() {
        let text = "%#define\tLM_MAXSTRLEN\t1024 /* x */\n%#define F(x) 1\n%#define Y A+1\n\
                    %#define MAXNAMELEN LM_MAXSTRLEN+1\n%#define Z ((1 << 4) | 2) * -3\n";
        let lexed = lex(text, "n.x").unwrap();
        let got: Vec<_> = lexed
            .c_defines
            .iter()
            .map(|(n, v, _)| (n.as_str(), *v))
            .collect();
        assert_eq!(
            got,
            [("LM_MAXSTRLEN", 1024), ("MAXNAMELEN", 1025), ("Z", -54)]
        );
    }

    #[test]
    fn passthrough_lines_continue_after_backslash() {
        let lexed = lex("%#define X (1 +\\\n   2)\nconst A = 1;\n", "nofile.x").unwrap();
        assert_eq!(lexed.tokens[0].tok, Tok::Ident("const".into()));
        assert_eq!(lexed.tokens[0].loc.line, 3);
    }

    #[test]
    fn string_constants_and_bad_characters() {
        let lexed = lex("const S = \"a\\\"b\";", "s.x").unwrap();
        assert_eq!(lexed.tokens[3].tok, Tok::Str("a\"b".into()));
        let err = lex("struct x { int a; };\n  int $;", "s.x").unwrap_err();
        assert_eq!(err.diagnostic().unwrap().location.to_string(), "s.x:2:7");
        assert!(lex("/* open", "s.x").is_err());
        assert!(lex("\"open", "s.x").is_err());
    }
}
