//! Errors of the stub generators: every diagnostic names a position in the original source.

use std::fmt;
use std::path::PathBuf;

/// A position in an original source file (after following the preprocessor's line markers).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    /// The file, as named by the preprocessor's line markers (or the input path).
    pub file: String,
    /// 1-based line number in `file`.
    pub line: u32,
    /// 1-based column (in characters) in that line.
    pub column: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A diagnostic tied to a source position: the message and the offending source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the problem is.
    pub location: Location,
    /// What is wrong.
    pub message: String,
    /// The text of the offending line (without its newline), when known.
    pub source_line: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error: {}", self.location, self.message)?;
        if let Some(text) = &self.source_line {
            let col = self.location.column.max(1) as usize;
            // Keep tabs so that the caret lines up under the offending character.
            let pad: String = text
                .chars()
                .take(col - 1)
                .map(|c| if c == '\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "\n    {text}\n    {pad}^")?;
        }
        Ok(())
    }
}

/// The error type of the `stubgen` crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input could not be read or the output could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The C preprocessor could not be run or reported an error.
    #[error("C preprocessor failed on {path}: {message}")]
    Preprocessor {
        /// The input file.
        path: PathBuf,
        /// What the preprocessor said (its standard error) or why it could not start.
        message: String,
    },
    /// The input is not valid (lexical, syntax or semantic error).
    #[error("{0}")]
    Source(Box<Diagnostic>),
    /// Internal: the generated tokens were not valid Rust (a bug in the generator).
    #[error("internal error: generated code does not parse: {0}")]
    Internal(String),
}

impl Error {
    /// Builds a source error at `location`, leaving the source line to be filled in later.
    pub(crate) fn at(location: Location, message: impl Into<String>) -> Self {
        Error::Source(Box::new(Diagnostic {
            location,
            message: message.into(),
            source_line: None,
        }))
    }

    /// The diagnostic, for source errors.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            Error::Source(d) => Some(d),
            _ => None,
        }
    }
}

/// A `Result` with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
