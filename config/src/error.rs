//! Errors of the configuration system.

use crate::{Kind, Source};
use std::path::PathBuf;

/// Errors of the configuration system.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A value names a parameter that nothing registered.
    #[error("unknown parameter `{name}` (from {origin}); valid parameters: {}", valid.join(", "))]
    UnknownParameter {
        /// The unknown name.
        name: String,
        /// Where it was found.
        origin: Source,
        /// Every registered name.
        valid: Vec<String>,
    },
    /// A value does not parse as the parameter's kind.
    #[error("parameter `{name}` (from {origin}): cannot read `{text}` as {kind}")]
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
