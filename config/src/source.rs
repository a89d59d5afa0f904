//! Where a parameter's value came from.

use std::fmt;
use std::path::PathBuf;

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The registered default.
    Default,
    /// A TOML file.
    File(PathBuf),
    /// An environment variable.
    Env(String),
    /// Set by the embedding program or its command line.
    Program,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::File(p) => write!(f, "file {}", p.display()),
            Source::Env(v) => write!(f, "environment {v}"),
            Source::Program => f.write_str("program"),
        }
    }
}
