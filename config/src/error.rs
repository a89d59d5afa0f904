//! Errors of the configuration system.

use crate::{Kind, Source};
use std::path::PathBuf;

/// Errors of the configuration system.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value names a parameter that nothing registered.
    #[error(
        "unknown parameter `{}` (from {origin}); valid parameters: {}",
        shorten(name),
        valid.join(", ")
    )]
    UnknownParameter {
        /// The unknown name.
        name: String,
        /// Where it was found.
        origin: Source,
        /// Every registered name.
        valid: Vec<String>,
    },
    /// A value does not parse as the parameter's kind.
    #[error(
        "parameter `{name}` (from {origin}): cannot read `{}` as {kind}",
        shorten(text)
    )]
    BadValue {
        /// Parameter name.
        name: String,
        /// Where the value came from.
        origin: Source,
        /// The offending text.
        text: String,
        /// The expected kind.
        kind: Kind,
    },
    /// A parameter was registered twice with different definitions.
    #[error("parameter `{0}` registered twice with different definitions")]
    Conflict(String),
    /// A lookup used a name that was never registered (a bug in the caller).
    #[error("parameter `{0}` was never registered")]
    NotRegistered(String),
    /// A lookup asked for the wrong kind (a bug in the caller).
    #[error("parameter `{name}` is {actual}, not {asked}")]
    WrongKind {
        /// Parameter name.
        name: String,
        /// Its registered kind.
        actual: Kind,
        /// The kind asked for.
        asked: Kind,
    },
    /// The configuration file could not be read or parsed.
    #[error("configuration file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `text` for a message: control characters other than line breaks escaped, and
/// each line cut short past 200 characters (an input can be a whole file on one
/// line, and the TOML parser quotes the line it stopped on).
pub(crate) fn shorten(text: &str) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        for (i, c) in line.chars().enumerate() {
            if i == MAX {
                out.push_str(&format!("... ({} bytes)", line.len()));
                break;
            }
            if c.is_control() {
                out.extend(c.escape_debug());
            } else {
                out.push(c);
            }
        }
    }
    out
}
