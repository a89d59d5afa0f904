//! The registry of parameters: each one's name, default and description.

#[cfg(doc)]
use crate::Config;
use crate::{Builder, Error, Result, Source, Value};
use std::collections::BTreeMap;

/// The definition of one parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Full name, lower case, `framework_component_name` (e.g. `btl_self_eager_limit`).
    pub name: String,
    /// The default value; its kind is the parameter's kind.
    pub default: Value,
    /// One line saying what it does.
    pub description: String,
}

/// All registered parameters. Frameworks and components add theirs before a
/// [`Config`] is built, so that unknown names can be recognised.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    pub(crate) params: BTreeMap<String, Param>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a parameter. Registering the same definition twice is allowed.
    pub fn register(&mut self, name: &str, default: Value, description: &str) -> Result<&mut Self> {
        let param = Param {
            name: name.to_ascii_lowercase(),
            default,
            description: description.to_string(),
        };
        match self.params.get(&param.name) {
            Some(existing) if *existing != param => return Err(Error::Conflict(param.name)),
            _ => {
                self.params.insert(param.name.clone(), param);
            }
        }
        Ok(self)
    }

    /// The definition of `name`, if registered.
    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.get(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<String> {
        self.params.keys().cloned().collect()
    }

    /// Start building a configuration over these parameters.
    pub fn builder(&self) -> Builder<'_> {
        Builder {
            registry: self,
            file: None,
            env: Vec::new(),
            program: Vec::new(),
        }
    }

    pub(crate) fn unknown(&self, name: &str, source: Source) -> Error {
        Error::UnknownParameter {
            name: name.to_string(),
            origin: source,
            valid: self.names(),
        }
    }
}
