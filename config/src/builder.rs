//! Building a configuration: values from a TOML file, the environment and the
//! program, checked against the registry.

use crate::{Config, Error, Registry, Result, Source, Value};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Prefix of the environment variables that set parameters.
pub const ENV_PREFIX: &str = "RBTL_";
/// Environment variable naming a TOML file of parameters (not itself a parameter).
pub const ENV_CONFIG_FILE: &str = "RBTL_CONFIG_FILE";

/// Collects values from a file, the environment and the program, then checks them.
pub struct Builder<'r> {
    pub(crate) registry: &'r Registry,
    pub(crate) file: Option<PathBuf>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) program: Vec<(String, String)>,
}

impl Builder<'_> {
    /// Read parameters from this TOML file.
    pub fn file(mut self, path: impl AsRef<Path>) -> Self {
        self.file = Some(path.as_ref().to_path_buf());
        self
    }

    /// Take `RBTL_*` variables (and `RBTL_CONFIG_FILE`, unless a file was given) from
    /// this process's environment.
    pub fn env(self) -> Self {
        self.env_from(std::env::vars())
    }

    /// Take `RBTL_*` variables from the given pairs instead of the process environment.
    pub fn env_from(mut self, vars: impl IntoIterator<Item = (String, String)>) -> Self {
        for (k, v) in vars {
            if k == ENV_CONFIG_FILE {
                self.file.get_or_insert_with(|| PathBuf::from(&v));
            } else if k.starts_with(ENV_PREFIX) {
                self.env.push((k, v));
            }
        }
        self
    }

    /// Set a value from the embedding program or its command line (highest precedence).
    pub fn set(mut self, name: &str, value: impl Into<String>) -> Self {
        self.program.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    /// Check every value against the registry and produce the configuration.
    pub fn build(self) -> Result<Config> {
        let reg = self.registry;
        let mut values: BTreeMap<String, (Value, Source)> = reg
            .params
            .iter()
            .map(|(n, p)| (n.clone(), (p.default.clone(), Source::Default)))
            .collect();
        let mut apply = |name: &str, text: &str, source: Source| -> Result<()> {
            let param = reg
                .get(name)
                .ok_or_else(|| reg.unknown(name, source.clone()))?;
            let kind = param.default.kind();
            let value = Value::parse(kind, text).ok_or_else(|| Error::BadValue {
                name: name.to_string(),
                origin: source.clone(),
                text: text.to_string(),
                kind,
            })?;
            values.insert(name.to_string(), (value, source));
            Ok(())
        };
        if let Some(path) = &self.file {
            for (name, text) in read_file(path)? {
                apply(&name, &text, Source::File(path.clone()))?;
            }
        }
        for (var, text) in &self.env {
            let name = var[ENV_PREFIX.len()..].to_ascii_lowercase();
            apply(&name, text, Source::Env(var.clone()))?;
        }
        for (name, text) in &self.program {
            apply(name, text, Source::Program)?;
        }
        Ok(Config {
            registry: reg.clone(),
            values,
        })
    }
}

/// The largest configuration file read: a file of parameters is a few KiB; this
/// bound keeps a wrong path (`/dev/zero`, a log) from being read without end.
pub const MAX_FILE_LEN: u64 = 4 << 20;

/// Flatten a TOML file into `(name, text)` pairs.
fn read_file(path: &Path) -> Result<Vec<(String, String)>> {
    let err = |message: String| Error::File {
        path: path.to_path_buf(),
        message: crate::error::shorten(&message),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_LEN + 1).read_to_end(&mut bytes))
        .map_err(|e| err(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE_LEN {
        return Err(err(format!(
            "larger than {MAX_FILE_LEN} bytes: not a configuration file? \
             (RBTL_CONFIG_FILE names a TOML file of parameters)"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        err(format!(
            "not UTF-8 text (byte {}): TOML files are UTF-8",
            e.utf8_error().valid_up_to()
        ))
    })?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| err(e.to_string()))?;
    let mut out = Vec::new();
    flatten("", &table, &mut out).map_err(err)?;
    Ok(out)
}

fn flatten(
    prefix: &str,
    table: &toml::Table,
    out: &mut Vec<(String, String)>,
) -> std::result::Result<(), String> {
    for (key, value) in table {
        let name = if prefix.is_empty() {
            key.to_ascii_lowercase()
        } else {
            format!("{prefix}_{}", key.to_ascii_lowercase())
        };
        let text = match value {
            toml::Value::Table(t) => {
                flatten(&name, t, out)?;
                continue;
            }
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Array(items) => items
                .iter()
                .map(|i| match i {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Err(format!("`{name}`: list items must be strings, not {other}")),
                })
                .collect::<std::result::Result<Vec<_>, _>>()?
                .join(","),
            other => return Err(format!("`{name}`: unsupported value {other}")),
        };
        out.push((name, text));
    }
    Ok(())
}
