//! Recursive-descent parser for the rpcgen language (RFC 4506 section 6, RFC 5531 section 12,
//! plus the rpcgen extensions: string constants, `char`/`short`/`long`, bare `unsigned`,
//! `struct X` as a type, and multi-argument procedures).
//!
//! The grammar has no nesting beyond a fixed depth, so the parser cannot overflow its stack, and
//! every token access is bounds-checked: any input yields definitions or an error, never a panic.

use super::lexer::{Tok, Token};
use crate::ast::*;
use crate::error::{Error, Location, Result};

/// Parses a token stream (ending with [`Tok::Eof`]) into definitions.
pub fn parse(tokens: &[Token]) -> Result<Spec> {
    parse_with_spans(tokens).map(|(spec, _)| spec)
}

/// Parses a token stream and also returns, for each definition, the range of tokens it was
/// read from (to recognise a definition repeated word for word).
pub fn parse_with_spans(tokens: &[Token]) -> Result<(Spec, Vec<std::ops::Range<usize>>)> {
    let mut p = Parser { tokens, pos: 0 };
    let mut spec = Spec::default();
    let mut spans = Vec::new();
    while !p.at_eof() {
        if p.is_keyword("pragma") {
            spec.pragmas.push(p.pragma()?);
            continue;
        }
        let start = p.pos;
        spec.definitions.push(p.definition()?);
        spans.push(start..p.pos);
    }
    Ok((spec, spans))
}

/// xdrgen's directives and how many names each takes.
const PRAGMAS: &[(&str, usize)] = &[
    ("header", 1),
    ("big_endian", 1),
    ("exclude", 1),
    ("public", 1),
    ("pages", 2),
    ("skip", 1),
];

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
}

const KEYWORDS: &[&str] = &[
    "bool",
    "case",
    "char",
    "const",
    "default",
    "double",
    "enum",
    "float",
    "hyper",
    "int",
    "long",
    "opaque",
    "program",
    "quadruple",
    "short",
    "string",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "version",
    "void",
];

impl<'a> Parser<'a> {
    fn peek(&self) -> &'a Token {
        // The last token is always Eof; stay on it.
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[self.pos.min(last)]
    }

    fn peek_at(&self, n: usize) -> &'a Tok {
        let last = self.tokens.len().saturating_sub(1);
        &self.tokens[(self.pos + n).min(last)].tok
    }

    fn at_eof(&self) -> bool {
        matches!(self.peek().tok, Tok::Eof)
    }

    fn bump(&mut self) -> &'a Token {
        let t = self.peek();
        if !matches!(t.tok, Tok::Eof) {
            self.pos += 1;
        }
        t
    }

    fn error<T>(&self, expected: &str) -> Result<T> {
        let t = self.peek();
        let found = match &t.tok {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Number(n) => format!("number `{n}`"),
            Tok::Str(_) => "a string constant".to_string(),
            Tok::Punct(c) => format!("`{c}`"),
            Tok::Eof => "end of file".to_string(),
        };
        Err(Error::at(
            t.loc.clone(),
            format!("expected {expected}, found {found}"),
        ))
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek().tok == Tok::Punct(c)
    }

    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_punct(&mut self, c: char) -> Result<Location> {
        if self.is_punct(c) {
            Ok(self.bump().loc.clone())
        } else {
            self.error(&format!("`{c}`"))
        }
    }

    fn is_keyword(&self, kw: &str) -> bool {
        matches!(&self.peek().tok, Tok::Ident(s) if s == kw)
    }

    fn eat_keyword(&mut self, kw: &str) -> bool {
        if self.is_keyword(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_keyword(&mut self, kw: &str) -> Result<()> {
        if self.eat_keyword(kw) {
            Ok(())
        } else {
            self.error(&format!("`{kw}`"))
        }
    }

    /// An identifier that is not a keyword.
    fn ident(&mut self, what: &str) -> Result<Ident> {
        match &self.peek().tok {
            Tok::Ident(s) if !KEYWORDS.contains(&s.as_str()) => {
                let t = self.bump();
                Ok(Ident {
                    name: s.clone(),
                    loc: t.loc.clone(),
                })
            }
            _ => self.error(what),
        }
    }

    fn value(&mut self) -> Result<Value> {
        match &self.peek().tok {
            Tok::Number(n) => {
                let t = self.bump();
                Ok(Value::Number(*n, t.loc.clone()))
            }
            Tok::Ident(s) if !KEYWORDS.contains(&s.as_str()) => {
                Ok(Value::Name(self.ident("a constant")?))
            }
            _ => self.error("a number or a constant name"),
        }
    }

    /// `pragma DIRECTIVE NAME [NAME];` (the Linux kernel's xdrgen dialect). `pragma` is not
    /// a word of the rpcgen language, so it cannot start a definition: no ambiguity.
    fn pragma(&mut self) -> Result<Pragma> {
        self.bump();
        let directive = match &self.peek().tok {
            Tok::Ident(s) if PRAGMAS.iter().any(|(d, _)| d == s) => {
                let t = self.bump();
                Ident {
                    name: s.clone(),
                    loc: t.loc.clone(),
                }
            }
            _ => {
                return self.error(
                    "a pragma directive (`header`, `big_endian`, `exclude`, `public`, `pages` or `skip`)",
                )
            }
        };
        let arity = PRAGMAS
            .iter()
            .find(|(d, _)| *d == directive.name)
            .map_or(1, |(_, n)| *n);
        let mut args = vec![self.ident("a name")?];
        if arity == 2 {
            args.push(self.ident("a second name")?);
        }
        self.expect_punct(';')?;
        Ok(Pragma { directive, args })
    }

    fn definition(&mut self) -> Result<Definition> {
        let def = if self.eat_keyword("const") {
            let name = self.ident("a constant name")?;
            self.expect_punct('=')?;
            let value = if let Tok::Str(s) = &self.peek().tok {
                self.bump();
                ConstValue::Str(s.clone())
            } else {
                ConstValue::Value(self.value()?)
            };
            Definition::Const(ConstDef { name, value })
        } else if self.eat_keyword("typedef") {
            let decl = self.declaration()?;
            if decl.name.is_none() {
                return self.error("a type name after `typedef void`");
            }
            Definition::Typedef(TypedefDef { decl })
        } else if self.eat_keyword("enum") {
            let name = self.ident("an enum name")?;
            Definition::Enum(EnumDef {
                name,
                values: self.enum_body()?,
            })
        } else if self.eat_keyword("struct") {
            let name = self.ident("a struct name")?;
            self.expect_punct('{')?;
            let mut fields = Vec::new();
            loop {
                let decl = self.declaration()?;
                if decl.name.is_none() {
                    return self.error("a field (a struct field cannot be `void`)");
                }
                fields.push(decl);
                self.expect_punct(';')?;
                if self.eat_punct('}') {
                    break;
                }
            }
            Definition::Struct(StructDef { name, fields })
        } else if self.eat_keyword("union") {
            let name = self.ident("a union name")?;
            Definition::Union(self.union_body(name)?)
        } else if self.eat_keyword("program") {
            Definition::Program(self.program()?)
        } else {
            return self.error(
                "a definition (`const`, `typedef`, `enum`, `struct`, `union` or `program`)",
            );
        };
        self.expect_punct(';')?;
        Ok(def)
    }

    fn enum_body(&mut self) -> Result<Vec<(Ident, Option<Value>)>> {
        self.expect_punct('{')?;
        let mut values = Vec::new();
        loop {
            let name = self.ident("an enum value name")?;
            let value = if self.eat_punct('=') {
                Some(self.value()?)
            } else {
                None
            };
            values.push((name, value));
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct('}')?;
            break;
        }
        Ok(values)
    }

    fn union_body(&mut self, name: Ident) -> Result<UnionDef> {
        self.expect_keyword("switch")?;
        self.expect_punct('(')?;
        let discriminant = self.declaration()?;
        if discriminant.name.is_none() {
            return self.error("a discriminant declaration");
        }
        self.expect_punct(')')?;
        self.expect_punct('{')?;
        let mut arms = Vec::new();
        let mut default = None;
        loop {
            if self.eat_keyword("case") {
                let mut cases = vec![self.value()?];
                self.expect_punct(':')?;
                while self.eat_keyword("case") {
                    cases.push(self.value()?);
                    self.expect_punct(':')?;
                }
                let decl = self.declaration()?;
                self.expect_punct(';')?;
                arms.push(UnionArm { cases, decl });
            } else if self.is_keyword("default") && default.is_none() && !arms.is_empty() {
                self.bump();
                self.expect_punct(':')?;
                default = Some(self.declaration()?);
                self.expect_punct(';')?;
            } else if !arms.is_empty() && self.eat_punct('}') {
                break;
            } else if arms.is_empty() {
                return self.error("`case`");
            } else {
                return self.error("`case`, `default` or `}`");
            }
        }
        Ok(UnionDef {
            name,
            discriminant,
            arms,
            default,
        })
    }

    fn program(&mut self) -> Result<ProgramDef> {
        let name = self.ident("a program name")?;
        self.expect_punct('{')?;
        let mut versions = Vec::new();
        loop {
            self.expect_keyword("version")?;
            let vname = self.ident("a version name")?;
            self.expect_punct('{')?;
            let mut procs = Vec::new();
            loop {
                procs.push(self.procedure()?);
                if self.eat_punct('}') {
                    break;
                }
            }
            self.expect_punct('=')?;
            let number = self.value()?;
            self.expect_punct(';')?;
            versions.push(VersionDef {
                name: vname,
                procs,
                number,
            });
            if self.eat_punct('}') {
                break;
            }
        }
        self.expect_punct('=')?;
        let number = self.value()?;
        Ok(ProgramDef {
            name,
            versions,
            number,
        })
    }

    fn procedure(&mut self) -> Result<ProcDef> {
        let result = self.proc_type()?;
        let name = self.ident("a procedure name")?;
        self.expect_punct('(')?;
        let mut args = Vec::new();
        loop {
            let ty = self.proc_type()?;
            let arg_name = match &self.peek().tok {
                Tok::Ident(s) if !KEYWORDS.contains(&s.as_str()) => Some(self.ident("")?),
                _ => None,
            };
            if ty == Ty::Void {
                if arg_name.is_some() || !args.is_empty() || self.is_punct(',') {
                    return self.error("`)` (`void` must be the only argument)");
                }
            } else {
                args.push(Arg { name: arg_name, ty });
            }
            if self.eat_punct(',') {
                continue;
            }
            self.expect_punct(')')?;
            break;
        }
        self.expect_punct('=')?;
        let number = self.value()?;
        self.expect_punct(';')?;
        Ok(ProcDef {
            name,
            args,
            result,
            number,
        })
    }

    /// The type of a procedure argument or result: a type specifier, `string` (unbounded),
    /// `opaque<>`, and optionally `*` or a `<>`/`[]` suffix.
    fn proc_type(&mut self) -> Result<Ty> {
        if self.eat_keyword("string") {
            let bound = self.opt_var_bound()?;
            return Ok(Ty::String(bound.flatten()));
        }
        if self.eat_keyword("opaque") {
            return if self.eat_punct('[') {
                let n = self.value()?;
                self.expect_punct(']')?;
                Ok(Ty::FixedOpaque(n))
            } else if let Some(bound) = self.opt_var_bound()? {
                Ok(Ty::VarOpaque(bound))
            } else {
                self.error("`<` or `[` after `opaque`")
            };
        }
        let base = self.type_spec()?;
        if base == Ty::Void {
            return Ok(base);
        }
        if self.eat_punct('*') {
            return Ok(Ty::Optional(Box::new(base)));
        }
        if let Some(bound) = self.opt_var_bound()? {
            return Ok(Ty::VarArray(Box::new(base), bound));
        }
        Ok(base)
    }

    /// `<>` or `<N>` if present: `Some(None)` or `Some(Some(N))`.
    fn opt_var_bound(&mut self) -> Result<Option<Option<Value>>> {
        if !self.eat_punct('<') {
            return Ok(None);
        }
        if self.eat_punct('>') {
            return Ok(Some(None));
        }
        let v = self.value()?;
        self.expect_punct('>')?;
        Ok(Some(Some(v)))
    }

    /// A type specifier (no declarator).
    fn type_spec(&mut self) -> Result<Ty> {
        let t = self.peek();
        let Tok::Ident(word) = &t.tok else {
            return self.error("a type");
        };
        let ty = match word.as_str() {
            "void" => Ty::Void,
            "int" | "char" | "short" | "long" => Ty::Int,
            "hyper" => Ty::Hyper,
            "float" => Ty::Float,
            "double" => Ty::Double,
            "quadruple" => Ty::Quadruple,
            "bool" => Ty::Bool,
            "unsigned" => {
                self.bump();
                return Ok(match self.peek_at(0) {
                    Tok::Ident(w) if matches!(w.as_str(), "int" | "char" | "short" | "long") => {
                        self.bump();
                        Ty::UInt
                    }
                    Tok::Ident(w) if w == "hyper" => {
                        self.bump();
                        Ty::UHyper
                    }
                    _ => Ty::UInt,
                });
            }
            "struct" | "enum" | "union" => {
                self.bump();
                return Ok(Ty::Named(self.ident("a type name")?));
            }
            _ => return Ok(Ty::Named(self.ident("a type")?)),
        };
        self.bump();
        Ok(ty)
    }

    /// A declaration: `void`, `opaque x[N]`/`<N>`, `string x<N>`, `T *x`, `T x`, `T x[N]`,
    /// `T x<N>`.
    fn declaration(&mut self) -> Result<Decl> {
        if self.eat_keyword("opaque") {
            let name = self.ident("a name")?;
            let ty = if self.eat_punct('[') {
                let n = self.value()?;
                self.expect_punct(']')?;
                Ty::FixedOpaque(n)
            } else if let Some(b) = self.opt_var_bound()? {
                Ty::VarOpaque(b)
            } else {
                return self.error("`[` or `<` (opaque data needs a size)");
            };
            return Ok(Decl {
                name: Some(name),
                ty,
            });
        }
        if self.eat_keyword("string") {
            let name = self.ident("a name")?;
            let Some(b) = self.opt_var_bound()? else {
                return self.error("`<` (a string needs a maximum size, or `<>`)");
            };
            return Ok(Decl {
                name: Some(name),
                ty: Ty::String(b),
            });
        }
        let base = self.type_spec()?;
        if base == Ty::Void {
            return Ok(Decl {
                name: None,
                ty: Ty::Void,
            });
        }
        if self.eat_punct('*') {
            let name = self.ident("a name")?;
            return Ok(Decl {
                name: Some(name),
                ty: Ty::Optional(Box::new(base)),
            });
        }
        let name = self.ident("a name")?;
        let ty = if self.eat_punct('[') {
            let n = self.value()?;
            self.expect_punct(']')?;
            Ty::FixedArray(Box::new(base), n)
        } else if let Some(b) = self.opt_var_bound()? {
            Ty::VarArray(Box::new(base), b)
        } else {
            base
        };
        Ok(Decl {
            name: Some(name),
            ty,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpcgen::lexer::lex;

    fn parse_str(s: &str) -> Result<Spec> {
        parse(&lex(s, "t.x")?.tokens)
    }

    #[test]
    fn parses_every_kind_of_definition() {
        let spec = parse_str(
            "const A = B; const S = \"x\";
             typedef struct node *list;
             enum color { RED = 1, GREEN, BLUE = A };
             struct node { unsigned u; unsigned hyper h; string s<>; opaque o[4]; list next; int v<3>; };
             union u switch (bool b) { case TRUE: int x; case FALSE: void; };
             program P { version V { void NULLPROC(void) = 0; int ADD(int a, int, string) = 1; } = 1; } = 0x20000001;",
        )
        .unwrap();
        assert_eq!(spec.definitions.len(), 7);
        let Definition::Program(p) = &spec.definitions[6] else {
            panic!()
        };
        let add = &p.versions[0].procs[1];
        assert_eq!(add.args.len(), 3);
        assert_eq!(add.args[0].name.as_ref().unwrap().name, "a");
        assert_eq!(add.args[2].ty, Ty::String(None));
        assert!(p.versions[0].procs[0].args.is_empty());
        let Definition::Struct(s) = &spec.definitions[4] else {
            panic!()
        };
        assert_eq!(s.fields[0].ty, Ty::UInt);
        assert_eq!(s.fields[1].ty, Ty::UHyper);
    }

    #[test]
    fn errors_point_at_the_token() {
        let e = parse_str("struct x {\n  int a;\n  int ;\n};").unwrap_err();
        let d = e.diagnostic().unwrap();
        assert_eq!(d.location.to_string(), "t.x:3:7");
        assert!(d.message.contains("expected a name"), "{}", d.message);
        assert!(parse_str("union u switch (int d) { };").is_err());
        assert!(parse_str("int x;").is_err());
        assert!(parse_str("program P { version V { void F(void, int) = 1; } = 1; } = 1;").is_err());
    }
}
