//! The PMI-1 lines on the client's side against arbitrary and almost-right input:
//! the line reader and parser with any bytes, and a [`Client`] against a server that
//! answers anything (right replies, mutated ones, noise, over-long and cut-short
//! lines, silence). Every outcome is a value or a typed [`Error`]; never a panic or a
//! hang. `PROPTEST_CASES` (default 512) sets the number of cases, e.g.
//! `PROPTEST_CASES=100000 cargo test -p rbtl --lib pmi::fuzz` for a long run.

use super::wire::{self, Message};
use super::{Client, Error};
use proptest::prelude::*;
use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

pub(crate) fn config() -> ProptestConfig {
    rbtl_testkit::fuzz::config_unpersisted(512)
}

/// A field value: numbers in and out of range, empty, escaped, odd and long text.
pub(crate) fn field_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("1".to_string()),
        Just("2".to_string()),
        Just(i64::MAX.to_string()),
        Just(i64::MIN.to_string()),
        Just("99999999999999999999999".to_string()),
        Just(String::new()),
        Just("a\\ b\\\\c".to_string()),
        Just("x".repeat(2000)),
        any::<i64>().prop_map(|n| n.to_string()),
        "[a-z0-9_]{1,16}",
        "[^ \n]{0,24}",
    ]
}

/// Fields with the names PMI-1 replies and requests use, and others.
pub(crate) fn fields() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("rc"),
        Just("msg"),
        Just("pmi_version"),
        Just("pmi_subversion"),
        Just("kvsname_max"),
        Just("keylen_max"),
        Just("vallen_max"),
        Just("kvsname"),
        Just("key"),
        Just("value"),
        Just("appnum"),
        Just("size"),
        Just("rank"),
        Just("exitcode"),
        Just("message"),
        Just("x"),
    ];
    proptest::collection::vec((name, field_value()), 0..6).prop_map(|fields| {
        fields
            .into_iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect()
    })
}

/// The replies of a well-behaved server, in the order a client that starts and then
/// puts, gets, appnums, barriers and finalizes asks for them.
const SCRIPT: [&str; 8] = [
    "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0",
    "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024",
    "cmd=my_kvsname kvsname=kvs_1",
    "cmd=put_result rc=0 msg=success",
    "cmd=get_result rc=0 msg=success value=v",
    "cmd=appnum appnum=0",
    "cmd=barrier_out",
    "cmd=finalize_ack",
];

/// One reply: the script's, the script's command with other fields, another command,
/// noise, an over-long line, or a line cut short by the end of the connection.
fn reply(step: usize) -> impl Strategy<Value = Vec<u8>> {
    let right = SCRIPT[step % SCRIPT.len()];
    let cmd = right.split(' ').next().unwrap_or("cmd=").to_string();
    prop_oneof![
        4 => Just(format!("{right}\n").into_bytes()),
        2 => fields().prop_map(move |f| format!("{cmd}{f}\n").into_bytes()),
        1 => ("[a-z_]{0,12}", fields()).prop_map(|(c, f)| format!("cmd={c}{f}\n").into_bytes()),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|mut b| {
            b.push(b'\n');
            b
        }),
        1 => Just(format!("cmd=get_result rc=0 value={}\n", "x".repeat(wire::MAX_LINE)).into_bytes()),
        1 => Just(right.as_bytes()[..right.len() / 2].to_vec()),
    ]
}

fn replies() -> impl Strategy<Value = Vec<Vec<u8>>> {
    (0..=SCRIPT.len()).prop_flat_map(|n| (0..n).map(reply).collect::<Vec<_>>())
}

/// Runs a client against a server that answers each request with the next of
/// `replies` and closes the connection after the last (or when one is cut short).
fn client_against(replies: Vec<Vec<u8>>) -> Result<(), Error> {
    let (client_end, server_end) = UnixStream::pair().expect("socketpair");
    let server = std::thread::spawn(move || {
        let mut reader = BufReader::new(&server_end);
        let mut writer = &server_end;
        for reply in replies {
            let mut request = String::new();
            if reader.read_line(&mut request).unwrap_or(0) == 0 {
                return;
            }
            let cut_short = reply.last() != Some(&b'\n');
            if writer.write_all(&reply).is_err() || cut_short {
                return;
            }
        }
    });
    let result = (|| {
        let mut client = Client::connect(File::from(OwnedFd::from(client_end)), 0, 1)?;
        // Nothing the server says may make the client wait long.
        client.set_timeouts(Some(Duration::from_secs(10)), Some(Duration::from_secs(10)));
        client.put("k", "v")?;
        client.get("k")?;
        client.appnum()?;
        client.barrier()?;
        client.finalize()
    })();
    server.join().expect("the fake server does not panic");
    result
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn any_line_parses_or_is_refused(line in "\\PC{0,200}") {
        if let Ok(m) = Message::parse(&line) {
            prop_assert!(!m.cmd.is_empty());
        }
    }

    #[test]
    fn any_bytes_read_as_lines_within_the_limit(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        max in 1usize..256,
    ) {
        let mut reader = Cursor::new(bytes);
        for _ in 0..600 {
            match wire::read_line(&mut reader, max) {
                Ok(Some(line)) => {
                    prop_assert!(line.len() < max && !line.contains('\n'));
                    let _ = Message::parse(&line);
                }
                Ok(None) | Err(_) => break,
            }
        }
    }

    #[test]
    fn escaped_text_comes_back(text in "\\PC{0,64}|[ \\\\=\n\t\r\u{1}-\u{1f}a-z]{0,64}") {
        let line = format!("cmd=abort exitcode=1 message={}", wire::escape(&text));
        let expected: String = text
            .chars()
            .filter_map(|c| match c {
                '\n' | '\r' | '\t' => Some(' '),
                c if c.is_control() => None,
                c => Some(c),
            })
            .collect();
        let m = Message::parse(&line).expect("an escaped line parses");
        prop_assert_eq!(m.get("message"), Some(expected.as_str()));
    }

    #[test]
    fn a_client_takes_any_replies_without_panicking_or_hanging(replies in replies()) {
        match client_against(replies) {
            Ok(())
            | Err(
                Error::Closed { .. }
                | Error::Protocol { .. }
                | Error::Refused { .. }
                | Error::Io { .. }
                | Error::InvalidToken { .. },
            ) => {}
            Err(other) => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}

#[test]
fn the_script_is_what_a_client_needs() {
    let replies = SCRIPT
        .iter()
        .map(|r| format!("{r}\n").into_bytes())
        .collect();
    client_against(replies).unwrap();
}
