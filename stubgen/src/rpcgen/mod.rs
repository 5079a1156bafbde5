//! The rpcgen-compatible front end: reads `.x` files the way rpcgen does.
//!
//! rpcgen runs the C preprocessor over its input first (`cpp -C -DRPC_HDR file.x` for the
//! header pass, which is the pass that sees every type); so do we, and the preprocessor's line
//! markers keep every diagnostic pointing into the original file, including files pulled in by
//! `#include`.

pub mod lexer;
pub mod parser;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ast::Spec;
use crate::error::{Error, Result};

/// How to run the rpcgen front end: the preprocessor and its flags.
#[derive(Clone, Debug)]
pub struct Rpcgen {
    cpp: OsString,
    defines: Vec<String>,
    include_dirs: Vec<PathBuf>,
    strict: bool,
}

impl Default for Rpcgen {
    fn default() -> Self {
        Rpcgen {
            cpp: std::env::var_os("STUBGEN_CPP").unwrap_or_else(|| "cpp".into()),
            // The header pass of rpcgen: the one that contains every type definition.
            defines: vec!["RPC_HDR".to_string()],
            include_dirs: Vec::new(),
            strict: false,
        }
    }
}

/// A parsed input with the preprocessed text of its lines (for diagnostics).
pub(crate) struct Parsed {
    pub(crate) spec: Spec,
    pub(crate) lines: HashMap<(String, u32), String>,
}

impl Rpcgen {
    /// The defaults: `cpp` (or `$STUBGEN_CPP`) with `-C -DRPC_HDR`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses another preprocessor command (rpcgen's `-Y`).
    pub fn cpp(mut self, cpp: impl Into<OsString>) -> Self {
        self.cpp = cpp.into();
        self
    }

    /// Adds `-D` definition (`NAME` or `NAME=VALUE`) for the preprocessor.
    pub fn define(mut self, def: impl Into<String>) -> Self {
        self.defines.push(def.into());
        self
    }

    /// Adds a `-I` directory for `#include`.
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// Refuses types that are neither defined in the input nor built in (see
    /// [`crate::codegen::Options::strict`]).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    pub(crate) fn codegen_options(&self) -> crate::codegen::Options {
        crate::codegen::Options {
            strict: self.strict,
        }
    }

    /// Runs the preprocessor on `path` and returns its output.
    pub fn preprocess(&self, path: &Path) -> Result<String> {
        // Fail with a clear I/O error before handing a missing file to cpp.
        std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut cmd = Command::new(&self.cpp);
        cmd.arg("-C");
        for d in &self.defines {
            cmd.arg(format!("-D{d}"));
        }
        for i in &self.include_dirs {
            cmd.arg("-I").arg(i);
        }
        cmd.arg(path);
        let out = cmd.output().map_err(|e| Error::Preprocessor {
            path: path.to_path_buf(),
            message: format!("cannot run {}: {e}", self.cpp.to_string_lossy()),
        })?;
        if !out.status.success() {
            return Err(Error::Preprocessor {
                path: path.to_path_buf(),
                message: String::from_utf8_lossy(&out.stderr).trim_end().to_string(),
            });
        }
        String::from_utf8(out.stdout).map_err(|_| Error::Preprocessor {
            path: path.to_path_buf(),
            message: "output is not UTF-8".to_string(),
        })
    }

    /// Preprocesses and parses `path`.
    pub fn parse_file(&self, path: &Path) -> Result<Spec> {
        let text = self.preprocess(path)?;
        parse_source(&text, &path.to_string_lossy())
    }

    pub(crate) fn parse_file_with_lines(&self, path: &Path) -> Result<Parsed> {
        let text = self.preprocess(path)?;
        parse_with_lines(&text, &path.to_string_lossy())
    }
}

pub(crate) fn parse_with_lines(text: &str, file: &str) -> Result<Parsed> {
    let lexed = lexer::lex(text, file)?;
    match parse_lexed(&lexed) {
        Ok(spec) => Ok(Parsed {
            spec,
            lines: lexed.lines,
        }),
        Err(e) => Err(attach_source_line(e, &lexed.lines)),
    }
}

fn parse_lexed(lexed: &lexer::Lexed) -> Result<Spec> {
    let (mut spec, spans) = parser::parse_with_spans(&lexed.tokens)?;
    drop_repeated_definitions(&mut spec, &spans, &lexed.tokens);
    spec.c_constants = lexed
        .c_defines
        .iter()
        .map(|(name, value, loc)| crate::ast::ConstDef {
            name: crate::ast::Ident {
                name: name.clone(),
                loc: loc.clone(),
            },
            value: crate::ast::ConstValue::Value(crate::ast::Value::Number(*value, loc.clone())),
        })
        .collect();
    Ok(spec)
}

/// Drops a definition that repeats an earlier one of the same name word for word, as rpcgen
/// accepts (a file included twice, a constant restated): only the first is generated. A
/// repetition that differs is left in place for the generator to refuse with both locations.
fn drop_repeated_definitions(
    spec: &mut Spec,
    spans: &[std::ops::Range<usize>],
    tokens: &[lexer::Token],
) {
    use crate::ast::Definition;
    fn name(d: &Definition) -> Option<&str> {
        Some(match d {
            Definition::Const(c) => &c.name.name,
            Definition::Enum(e) => &e.name.name,
            Definition::Struct(s) => &s.name.name,
            Definition::Union(u) => &u.name.name,
            Definition::Typedef(t) => &t.decl.name.as_ref()?.name,
            Definition::Program(p) => &p.name.name,
        })
    }
    let words = |i: usize| {
        let r = spans.get(i).cloned().unwrap_or(0..0);
        tokens
            .get(r)
            .unwrap_or(&[])
            .iter()
            .map(|t| &t.tok)
            .collect::<Vec<_>>()
    };
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut keep = vec![true; spec.definitions.len()];
    for (i, d) in spec.definitions.iter().enumerate() {
        let Some(n) = name(d) else { continue };
        match first.get(n) {
            Some(&j) if words(j) == words(i) => keep[i] = false,
            Some(_) => {}
            None => {
                first.insert(n, i);
            }
        }
    }
    let mut k = keep.into_iter();
    spec.definitions.retain(|_| k.next().unwrap_or(true));
}

/// Parses already-preprocessed text (line markers are honoured; `file` names the input until a
/// marker says otherwise). Errors carry the offending line when it can be found.
pub fn parse_source(text: &str, file: &str) -> Result<Spec> {
    match lexer::lex(text, file) {
        Ok(lexed) => parse_lexed(&lexed).map_err(|e| attach_source_line(e, &lexed.lines)),
        Err(e) => Err(attach_source_line(e, &HashMap::new())),
    }
}

/// Fills in the offending line of a source error: from the original file when it can be read,
/// else from the preprocessed text.
pub(crate) fn attach_source_line(err: Error, lines: &HashMap<(String, u32), String>) -> Error {
    let Error::Source(mut d) = err else {
        return err;
    };
    if d.source_line.is_none() {
        let loc = &d.location;
        let from_file = lexer::read_source(&loc.file).and_then(|t| {
            t.lines()
                .nth((loc.line as usize).saturating_sub(1))
                .map(str::to_string)
        });
        d.source_line = from_file.or_else(|| lines.get(&(loc.file.clone(), loc.line)).cloned());
    }
    Error::Source(d)
}
