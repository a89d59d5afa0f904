//! The launcher's PMI-1 server against arbitrary and almost-right requests: every
//! request gets a well-formed reply, or the connection is closed; the server never
//! panics, never keeps a connection the client has closed, and its store keeps to
//! its bounds. `PROPTEST_CASES` (default 512) sets the number of cases, e.g.
//! `PROPTEST_CASES=100000 cargo test -p rbtl --lib launcher::server_fuzz`.

use super::event::Event;
use super::kvs::{KEYLEN_MAX, REQUEST_MAX, VALLEN_MAX};
use super::server::{serve, Shared};
use crate::pmi::fuzz::{config, field_value, fields};
use crate::pmi::wire::Message;
use proptest::prelude::*;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::time::Duration;

const KVSNAME: &str = "kvs_fuzz";

/// One request line: a known command with any fields, an unknown one, noise, an
/// over-long line, or bytes that are not UTF-8.
fn request() -> impl Strategy<Value = Vec<u8>> {
    let cmd = prop_oneof![
        Just("init"),
        Just("get_maxes"),
        Just("get_appnum"),
        Just("get_my_kvsname"),
        Just("get_universe_size"),
        Just("put"),
        Just("get"),
        Just("barrier_in"),
        Just("finalize"),
        Just("abort"),
        Just("spawn"),
        Just(""),
    ];
    prop_oneof![
        6 => (cmd, fields()).prop_map(|(c, f)| format!("cmd={c}{f}\n").into_bytes()),
        2 => (field_value(), field_value()).prop_map(|(k, v)| {
            format!("cmd=put kvsname={KVSNAME} key={k} value={v}\n").into_bytes()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|mut b| {
            b.push(b'\n');
            b
        }),
        1 => Just(format!("cmd=put key=k value={}\n", "v".repeat(REQUEST_MAX)).into_bytes()),
        1 => Just(b"cmd=get key=\xff\xfe\n".to_vec()),
    ]
}

/// What the client saw: the reply lines, and whether the connection ended.
struct Seen {
    replies: Vec<String>,
    ended: bool,
}

/// Serves rank 0 of a one-rank job (a barrier completes at once) on a socketpair;
/// sends `requests` (and, unless `cut`, a newline-terminated last one), closes the
/// client's sending side, and reads replies until the end of the connection.
fn serve_requests(requests: &[Vec<u8>]) -> (Seen, Shared) {
    let shared = Shared::new(1, KVSNAME.into());
    let (client, server_end) = UnixStream::pair().expect("socketpair");
    // The launcher keeps a second handle on each connection, as here.
    let launcher_handle = server_end.try_clone().expect("clone");
    let (events, _aborts) = mpsc::channel::<Event>();
    let server_shared = shared.clone();
    let server = std::thread::spawn(move || serve(0, server_end, server_shared, events));
    let writer = client.try_clone().expect("clone");
    let bytes: Vec<u8> = requests.concat();
    let sender = std::thread::spawn(move || {
        let mut writer = writer;
        // The server may close first (a bad request): that is its right.
        let _ = writer.write_all(&bytes);
        let _ = writer.shutdown(std::net::Shutdown::Write);
    });
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut reader = BufReader::new(&client);
    let mut seen = Seen {
        replies: Vec::new(),
        ended: false,
    };
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => {
                seen.ended = true;
                break;
            }
            Ok(_) => seen.replies.push(line),
            // A reset is an end too; a timeout is not.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                seen.ended = true;
                break;
            }
            Err(_) => break,
        }
    }
    sender.join().expect("the sender does not panic");
    server.join().expect("the server does not panic");
    drop(launcher_handle);
    let shared = std::sync::Arc::try_unwrap(shared)
        .unwrap_or_else(|_| panic!("the server thread has ended"));
    (seen, shared)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn every_request_is_answered_or_the_connection_closed(
        requests in proptest::collection::vec(request(), 0..12),
    ) {
        let (seen, shared) = serve_requests(&requests);
        prop_assert!(seen.ended, "the server kept the connection open");
        prop_assert!(seen.replies.len() <= requests.len());
        for reply in &seen.replies {
            prop_assert!(reply.ends_with('\n'), "{:?}", reply);
            let m = Message::parse(reply);
            prop_assert!(m.is_ok(), "an unparsable reply {:?}", reply);
        }
        prop_assert!(shared.rank_pmi(0).closed);
    }

    #[test]
    fn the_store_keeps_what_it_accepted_within_its_bounds(
        ops in proptest::collection::vec(("[a-c]{1,2}|k{60,70}", "[a-z]{0,8}|v{1020,1030}", any::<bool>()), 1..24),
    ) {
        let mut requests = Vec::new();
        for (key, value, put) in &ops {
            let line = if *put {
                format!("cmd=put kvsname={KVSNAME} key={key} value={value}\n")
            } else {
                format!("cmd=get kvsname={KVSNAME} key={key}\n")
            };
            requests.push(line.into_bytes());
        }
        let (seen, _) = serve_requests(&requests);
        prop_assert!(seen.ended);
        prop_assert_eq!(seen.replies.len(), ops.len());
        let mut model: HashMap<&str, &str> = HashMap::new();
        for ((key, value, put), reply) in ops.iter().zip(&seen.replies) {
            let m = Message::parse(reply).expect("a reply parses");
            let fits = key.len() <= KEYLEN_MAX && value.len() <= VALLEN_MAX;
            if *put {
                prop_assert_eq!(m.get_int("rc") == Some(0), fits, "{}", reply);
                if fits {
                    model.insert(key, value);
                }
            } else {
                let expected = model.get(key.as_str()).copied();
                prop_assert_eq!(m.get_int("rc") == Some(0), expected.is_some(), "{}", reply);
                if let Some(v) = expected {
                    prop_assert_eq!(m.get("value"), Some(v));
                }
            }
        }
    }
}
