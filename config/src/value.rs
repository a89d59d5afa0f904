//! Parameter values: their kinds, how text parses as one, and how they print.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
