//! A checked configuration: typed lookups of every registered parameter, and the dump.

use crate::{Error, Kind, Registry, Result, Source, Value};
use std::collections::BTreeMap;
use std::fmt;

/// Checked values of every registered parameter.
#[derive(Clone, Debug)]
pub struct Config {
    pub(crate) registry: Registry,
    pub(crate) values: BTreeMap<String, (Value, Source)>,
}

/// One row of [`Config::dump`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpRow {
    /// Parameter name.
    pub name: String,
    /// Current value.
    pub value: Value,
    /// Where the value came from.
    pub source: Source,
    /// The parameter's description.
    pub description: String,
}

impl Config {
    /// A configuration holding only the defaults of `registry`.
    pub fn defaults(registry: &Registry) -> Config {
        registry
            .builder()
            .build()
            .expect("defaults always validate")
    }

    /// The value of `name` and where it came from.
    pub fn value(&self, name: &str) -> Result<(&Value, &Source)> {
        self.values
            .get(name)
            .map(|(v, s)| (v, s))
            .ok_or_else(|| Error::NotRegistered(name.to_string()))
    }

    /// The value of `name` as `pick` reads it, or [`Error::WrongKind`] (naming `asked`)
    /// when `pick` finds the value of another kind.
    fn typed<'a, T>(
        &'a self,
        name: &str,
        asked: Kind,
        pick: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<T> {
        let (v, _) = self.value(name)?;
        pick(v).ok_or_else(|| Error::WrongKind {
            name: name.to_string(),
            actual: v.kind(),
            asked,
        })
    }

    /// A boolean parameter.
    pub fn bool(&self, name: &str) -> Result<bool> {
        self.typed(name, Kind::Bool, |v| match v {
            Value::Bool(b) => Some(*b),
            _ => None,
        })
    }

    /// An integer parameter.
    pub fn int(&self, name: &str) -> Result<i64> {
        self.typed(name, Kind::Int, |v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        })
    }

    /// A size parameter.
    pub fn size(&self, name: &str) -> Result<usize> {
        self.typed(name, Kind::Size, |v| match v {
            Value::Size(s) => Some(*s),
            _ => None,
        })
    }

    /// A string parameter.
    pub fn str(&self, name: &str) -> Result<&str> {
        self.typed(name, Kind::Str, |v| match v {
            Value::Str(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// A list parameter.
    pub fn list(&self, name: &str) -> Result<&[String]> {
        self.typed(name, Kind::List, |v| match v {
            Value::List(l) => Some(l.as_slice()),
            _ => None,
        })
    }

    /// Every parameter with its value, source and description, sorted by name.
    pub fn dump(&self) -> Vec<DumpRow> {
        self.values
            .iter()
            .map(|(name, (value, source))| DumpRow {
                name: name.clone(),
                value: value.clone(),
                source: source.clone(),
                description: self.registry.params[name].description.clone(),
            })
            .collect()
    }

    /// The registry this configuration was checked against.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

impl fmt::Display for Config {
    /// The dump as text, one parameter per line (what `rbtl_info` prints).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for row in self.dump() {
            writeln!(
                f,
                "{} = \"{}\" ({})\n    {}",
                row.name, row.value, row.source, row.description
            )?;
        }
        Ok(())
    }
}
