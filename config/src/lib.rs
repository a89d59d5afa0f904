//! One parameter mechanism for every framework and component (Open MPI calls this the
//! MCA variable system; UCX its `UCX_*` configuration tables).
//!
//! Each parameter is registered once with a name, a [`Kind`], a default and a
//! description. Values come from four places, later ones winning:
//!
//! 1. the registered default;
//! 2. a TOML file (given to [`Builder::file`], or named by `RBTL_CONFIG_FILE`);
//! 3. environment variables `RBTL_<NAME>` (upper case, e.g. `RBTL_BTL_SELF_EAGER_LIMIT`);
//! 4. values set by the embedding program or taken from its command line ([`Builder::set`]).
//!
//! A name that no component registered is an error listing the valid names, wherever it
//! appears. [`Config::dump`] shows every parameter, its value and where it came from.
//!
//! In a TOML file, keys are parameter names, and tables nest with `_`:
//! `[btl.self] eager_limit = "4k"` sets `btl_self_eager_limit`. TOML cannot hold both
//! `btl = ...` and a `[btl.self]` table; write `btl_self_eager_limit = ...` flat then.
//! A file longer than [`MAX_FILE_LEN`] bytes, or one that is not UTF-8 TOML, is an
//! [`Error::File`].

#![warn(missing_docs)]

mod builder;
mod config;
mod error;
mod registry;
mod source;
mod value;

pub use builder::{Builder, ENV_CONFIG_FILE, ENV_PREFIX, MAX_FILE_LEN};
pub use config::{Config, DumpRow};
pub use error::{Error, Result};
pub use registry::{Param, Registry};
pub use source::Source;
pub use value::{Kind, Value};
