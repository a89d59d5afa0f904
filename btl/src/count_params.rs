//! A transport's count parameters (descriptors, registrations, slots, milliseconds)
//! read with one rule: a negative value is refused, and a limit or a timeout of 0,
//! which would leave nothing to work with (no descriptor, no registration, no time
//! to answer), is refused too rather than taken to mean "none" or "never".

use crate::{Error, Result};
use rbtl_config::Config;

/// Parameter `name` as a count of 0 or more.
pub fn count(config: &Config, name: &str) -> Result<usize> {
    let value = config.int(name)?;
    usize::try_from(value).map_err(|_| Error::ParamOutOfRange {
        name: name.to_string(),
        value,
        allowed: "give 0 or more".into(),
    })
}

/// Parameter `name` as a count of at least 1; `what` says what it counts, for the
/// refusal of 0.
pub fn at_least_one(config: &Config, name: &str, what: &str) -> Result<usize> {
    match count(config, name)? {
        0 => Err(Error::ParamOutOfRange {
            name: name.to_string(),
            value: 0,
            allowed: format!("give {what} (at least 1)"),
        }),
        n => Ok(n),
    }
}
