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

#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Prefix of the environment variables that set parameters.
pub const ENV_PREFIX: &str = "RBTL_";
/// Environment variable naming a TOML file of parameters (not itself a parameter).
pub const ENV_CONFIG_FILE: &str = "RBTL_CONFIG_FILE";

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

/// The type of a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`).
    Bool,
    /// A signed integer.
    Int,
    /// A byte count; accepts the suffixes `k`, `m`, `g` (powers of 1024).
    Size,
    /// Free text.
    Str,
    /// A comma-separated list of names.
    List,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Bool => "a boolean",
            Kind::Int => "an integer",
            Kind::Size => "a size in bytes",
            Kind::Str => "a string",
            Kind::List => "a comma-separated list",
        })
    }
}

/// A parameter value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// See [`Kind::Bool`].
    Bool(bool),
    /// See [`Kind::Int`].
    Int(i64),
    /// See [`Kind::Size`].
    Size(usize),
    /// See [`Kind::Str`].
    Str(String),
    /// See [`Kind::List`].
    List(Vec<String>),
}

impl Value {
    /// The kind of this value.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Bool(_) => Kind::Bool,
            Value::Int(_) => Kind::Int,
            Value::Size(_) => Kind::Size,
            Value::Str(_) => Kind::Str,
            Value::List(_) => Kind::List,
        }
    }

    /// Parse `text` as a value of `kind`; `None` if it does not parse.
    pub fn parse(kind: Kind, text: &str) -> Option<Value> {
        let t = text.trim();
        Some(match kind {
            Kind::Bool => Value::Bool(match t.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => return None,
            }),
            Kind::Int => Value::Int(t.parse().ok()?),
            Kind::Size => Value::Size(parse_size(t)?),
            Kind::Str => Value::Str(t.to_string()),
            Kind::List => Value::List(
                t.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            ),
        })
    }
}

fn parse_size(t: &str) -> Option<usize> {
    let lower = t.to_ascii_lowercase();
    let (digits, shift) = match lower.strip_suffix(['k', 'm', 'g']) {
        Some(d) => (d, 10 * (1 + "kmg".find(lower.chars().last()?)?)),
        None => (lower.as_str(), 0),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(1 << shift)
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Size(s) => write!(f, "{s}"),
            Value::Str(s) => f.write_str(s),
            Value::List(l) => f.write_str(&l.join(",")),
        }
    }
}

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
    params: BTreeMap<String, Param>,
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

    fn unknown(&self, name: &str, source: Source) -> Error {
        Error::UnknownParameter {
            name: name.to_string(),
            origin: source,
            valid: self.names(),
        }
    }
}

/// Collects values from a file, the environment and the program, then checks them.
pub struct Builder<'r> {
    registry: &'r Registry,
    file: Option<PathBuf>,
    env: Vec<(String, String)>,
    program: Vec<(String, String)>,
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

/// Flatten a TOML file into `(name, text)` pairs.
fn read_file(path: &Path) -> Result<Vec<(String, String)>> {
    let err = |message: String| Error::File {
        path: path.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
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

/// Checked values of every registered parameter.
#[derive(Clone, Debug)]
pub struct Config {
    registry: Registry,
    values: BTreeMap<String, (Value, Source)>,
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

    fn typed<T>(&self, name: &str, asked: Kind, pick: impl Fn(&Value) -> Option<T>) -> Result<T> {
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
        let (v, _) = self.value(name)?;
        match v {
            Value::Str(s) => Ok(s),
            other => Err(Error::WrongKind {
                name: name.to_string(),
                actual: other.kind(),
                asked: Kind::Str,
            }),
        }
    }

    /// A list parameter.
    pub fn list(&self, name: &str) -> Result<&[String]> {
        let (v, _) = self.value(name)?;
        match v {
            Value::List(l) => Ok(l),
            other => Err(Error::WrongKind {
                name: name.to_string(),
                actual: other.kind(),
                asked: Kind::List,
            }),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        let mut r = Registry::new();
        r.register("btl", Value::List(vec![]), "transports to use")
            .unwrap()
            .register("btl_self_eager_limit", Value::Size(1024), "eager limit")
            .unwrap()
            .register("rcache_leave_pinned", Value::Bool(true), "keep pinned")
            .unwrap()
            .register("btl_self_latency", Value::Int(0), "latency")
            .unwrap()
            .register("name", Value::Str("x".into()), "a name")
            .unwrap();
        r
    }

    #[test]
    fn precedence_default_file_env_program() {
        let r = registry();
        let dir = std::env::temp_dir().join(format!("rbtl-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        std::fs::write(
            &file,
            "btl = [\"self\", \"sm\"]\nname = \"f\"\nbtl_self_eager_limit = \"4k\"\nbtl_self_latency = 3\n[rcache]\nleave_pinned = false\n",
        )
        .unwrap();
        let env = vec![
            ("RBTL_BTL_SELF_EAGER_LIMIT".to_string(), "8k".to_string()),
            ("RBTL_NAME".to_string(), "e".to_string()),
            ("HOME".to_string(), "/root".to_string()),
        ];
        let c = r
            .builder()
            .file(&file)
            .env_from(env)
            .set("name", "p")
            .build()
            .unwrap();
        assert_eq!(c.list("btl").unwrap(), ["self", "sm"]);
        assert_eq!(c.size("btl_self_eager_limit").unwrap(), 8192);
        assert_eq!(c.int("btl_self_latency").unwrap(), 3);
        assert!(!c.bool("rcache_leave_pinned").unwrap());
        assert_eq!(c.str("name").unwrap(), "p");
        let rows = c.dump();
        let src = |n: &str| rows.iter().find(|r| r.name == n).unwrap().source.clone();
        assert_eq!(src("btl"), Source::File(file.clone()));
        assert_eq!(
            src("btl_self_eager_limit"),
            Source::Env("RBTL_BTL_SELF_EAGER_LIMIT".into())
        );
        assert_eq!(src("name"), Source::Program);
        let text = c.to_string();
        assert!(text
            .contains("btl_self_eager_limit = \"8192\" (environment RBTL_BTL_SELF_EAGER_LIMIT)"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn defaults_when_nothing_set() {
        let c = Config::defaults(&registry());
        assert_eq!(c.size("btl_self_eager_limit").unwrap(), 1024);
        assert_eq!(c.value("btl").unwrap().1, &Source::Default);
    }

    #[test]
    fn unknown_names_list_the_valid_ones() {
        let r = registry();
        for build in [
            r.builder().set("btl_self_eagr_limit", "1"),
            r.builder()
                .env_from([("RBTL_BTL_TYPO".to_string(), "1".to_string())]),
        ] {
            let err = build.build().unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, Error::UnknownParameter { .. }), "{msg}");
            assert!(msg.contains("btl_self_eager_limit"), "{msg}");
            assert!(msg.contains("rcache_leave_pinned"), "{msg}");
        }
    }

    #[test]
    fn unknown_names_in_files_are_errors_too() {
        let r = registry();
        let path =
            std::env::temp_dir().join(format!("rbtl-config-bad-{}.toml", std::process::id()));
        std::fs::write(&path, "[btl.selff]\neager_limit = 1\n").unwrap();
        let err = r.builder().file(&path).build().unwrap_err();
        assert!(err.to_string().contains("btl_selff_eager_limit"), "{err}");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn bad_values_and_kinds() {
        let r = registry();
        let err = r
            .builder()
            .set("btl_self_eager_limit", "lots")
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::BadValue {
                    kind: Kind::Size,
                    ..
                }
            ),
            "{err}"
        );
        let err = r
            .builder()
            .set("rcache_leave_pinned", "maybe")
            .build()
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::BadValue {
                    kind: Kind::Bool,
                    ..
                }
            ),
            "{err}"
        );
        let c = Config::defaults(&r);
        assert!(matches!(c.bool("btl"), Err(Error::WrongKind { .. })));
        assert!(matches!(c.size("nope"), Err(Error::NotRegistered(_))));
        let missing = r
            .builder()
            .file("/nonexistent/rbtl.toml")
            .build()
            .unwrap_err();
        assert!(matches!(missing, Error::File { .. }));
    }

    #[test]
    fn sizes_and_lists_parse() {
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("k"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(
            Value::parse(Kind::List, " ^tcp , sm,,"),
            Some(Value::List(vec!["^tcp".into(), "sm".into()]))
        );
    }

    #[test]
    fn conflicting_registration_is_refused() {
        let mut r = registry();
        assert!(r
            .register("btl_self_latency", Value::Int(0), "latency")
            .is_ok());
        assert!(matches!(
            r.register("btl_self_latency", Value::Int(5), "latency"),
            Err(Error::Conflict(_))
        ));
    }
}
