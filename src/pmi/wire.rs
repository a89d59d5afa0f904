//! The PMI-1 "simple" wire format, shared by the client and the launcher's server.
//!
//! A message is one `\n`-terminated line of space-separated `key=value` tokens, the
//! first being `cmd=<name>`. Values end at the next space; MPICH 4.1 and later escape a
//! space or backslash inside a value with a backslash, which [`Message::parse`] undoes
//! and [`escape`] produces. Values this crate sends itself never need escaping: they
//! are checked by [`check_token`] instead.

use std::io::{self, BufRead, Read};

/// The longest reply line the client accepts (the MPICH client's own buffer is 1024
/// bytes; hydra's replies to `get` can be longer than that, so be generous). The
/// launcher's server takes far shorter requests: see `launcher::kvs::REQUEST_MAX`.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// The line length the MPICH client keeps every request under, so that a
/// `cmd=put kvsname=.. key=.. value=..` line always fits a 1024-byte buffer.
pub(crate) const MPICH_LINE: usize = 1024;

/// One parsed PMI-1 line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    /// The value of the leading `cmd=` token.
    pub cmd: String,
    /// The other tokens in order; a token without `=` has an empty value.
    pub fields: Vec<(String, String)>,
}

impl Message {
    /// Parses one line (with or without its trailing newline).
    pub fn parse(line: &str) -> Result<Message, String> {
        let line = line.trim_end_matches(['\n', '\r']);
        let mut tokens = Vec::new();
        let mut key = String::new();
        let mut value = String::new();
        let mut in_value = false;
        let mut chars = line.chars();
        let mut flush = |key: &mut String, value: &mut String, in_value: &mut bool| {
            if !key.is_empty() || *in_value {
                tokens.push((std::mem::take(key), std::mem::take(value)));
            }
            *in_value = false;
        };
        while let Some(c) = chars.next() {
            match c {
                ' ' => flush(&mut key, &mut value, &mut in_value),
                '\\' => {
                    let escaped = chars.next().unwrap_or('\\');
                    if in_value {
                        value.push(escaped);
                    } else {
                        key.push(escaped);
                    }
                }
                '=' if !in_value => in_value = true,
                c if in_value => value.push(c),
                c => key.push(c),
            }
        }
        flush(&mut key, &mut value, &mut in_value);
        let mut tokens = tokens.into_iter();
        match tokens.next() {
            Some((k, cmd)) if k == "cmd" && !cmd.is_empty() => Ok(Message {
                cmd,
                fields: tokens.collect(),
            }),
            _ => Err(format!("a PMI-1 line starts with cmd=<name>, not {line:?}")),
        }
    }

    /// The value of the first token named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `key` as an integer, if present and numeric.
    pub fn get_int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(|v| v.trim().parse().ok())
    }
}

/// Why `s` cannot be sent unescaped as a PMI-1 key or value, if it cannot.
pub(crate) fn check_token(s: &str) -> Result<(), String> {
    match s
        .chars()
        .find(|&c| c == ' ' || c == '=' || c == '\\' || c.is_control())
    {
        Some(c) => Err(format!(
            "it contains {c:?}; PMI-1 tokens cannot hold spaces, '=', backslashes or \
             control characters (encode the data, e.g. as hex or base64 without padding)"
        )),
        None => Ok(()),
    }
}

/// `s` with spaces and backslashes escaped and line breaks turned into spaces (then
/// escaped), for free text such as an abort message.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            ' ' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' | '\t' => out.push_str("\\ "),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Reads one line of at most `max` bytes, its newline included. `Ok(None)` at end of
/// stream before any byte; an `InvalidData` error if the line is too long, not UTF-8,
/// or cut short by the end of the stream. No more than `max` bytes are read of a line
/// that is too long.
pub(crate) fn read_line(reader: &mut impl BufRead, max: usize) -> io::Result<Option<String>> {
    let mut buf = Vec::new();
    let n = reader
        .by_ref()
        .take(max as u64)
        .read_until(b'\n', &mut buf)?;
    if n == 0 {
        return Ok(None);
    }
    if buf.last() != Some(&b'\n') {
        let why = if buf.len() >= max {
            format!("a PMI line is longer than {max} bytes")
        } else {
            "the connection closed in the middle of a PMI line".to_string()
        };
        return Err(io::Error::new(io::ErrorKind::InvalidData, why));
    }
    buf.pop();
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "a PMI line is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_lines() {
        let m = Message::parse("cmd=get_result rc=0 msg=success value=abc=d\n").unwrap();
        assert_eq!(m.cmd, "get_result");
        assert_eq!(m.get("rc"), Some("0"));
        assert_eq!(m.get_int("rc"), Some(0));
        assert_eq!(m.get("value"), Some("abc=d"));
        assert_eq!(m.get("missing"), None);
    }

    #[test]
    fn parses_flags_empty_values_and_extra_spaces() {
        let m = Message::parse("cmd=put  kvsname=k key=x value= flag").unwrap();
        assert_eq!(m.get("value"), Some(""));
        assert_eq!(m.get("flag"), Some(""));
        assert_eq!(m.fields.len(), 4);
    }

    #[test]
    fn escape_round_trips() {
        let text = "rank 3 gave up: a\\b\nnext";
        let line = format!("cmd=abort exitcode=5 message={}", escape(text));
        let m = Message::parse(&line).unwrap();
        assert_eq!(m.get("message"), Some("rank 3 gave up: a\\b next"));
        assert_eq!(m.get_int("exitcode"), Some(5));
    }

    #[test]
    fn rejects_lines_without_cmd() {
        assert!(Message::parse("mcmd=spawn").is_err());
        assert!(Message::parse("").is_err());
        assert!(Message::parse("cmd=").is_err());
    }

    #[test]
    fn token_check() {
        assert!(check_token("abc-_.:/+09").is_ok());
        for bad in ["a b", "a=b", "a\nb", "a\\b", "a\0b"] {
            assert!(check_token(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn reads_lines_and_reports_truncation() {
        let mut r = io::Cursor::new(b"cmd=a\ncmd=b".to_vec());
        assert_eq!(
            read_line(&mut r, MAX_LINE).unwrap().as_deref(),
            Some("cmd=a")
        );
        assert!(read_line(&mut r, MAX_LINE).is_err());
        let mut empty = io::Cursor::new(Vec::new());
        assert_eq!(read_line(&mut empty, MAX_LINE).unwrap(), None);
        let mut long = io::Cursor::new(b"cmd=abcdefgh\n".to_vec());
        let err = read_line(&mut long, 8).unwrap_err();
        assert!(err.to_string().contains("longer than 8 bytes"), "{err}");
        assert_eq!(long.position(), 8, "reads no more than the limit");
    }
}
