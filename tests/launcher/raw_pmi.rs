//! Ranks that speak to the launcher's PMI server byte by byte, as a broken or hostile
//! client would: malformed, over-long and half-closed requests, and keys and values
//! beyond the announced maxima.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How long a rank waits for the server's reply or end of stream: the test fails
/// (the rank reports a timeout) if it has to wait this long.
const READ_LIMIT: Duration = Duration::from_secs(10);

fn connection() -> UnixStream {
    let fd = std::env::var("PMI_FD").unwrap().parse().unwrap();
    // SAFETY: the launcher opened PMI_FD for this process and nothing else in it uses
    // the descriptor: this stream becomes its only owner.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    stream.set_read_timeout(Some(READ_LIMIT)).unwrap();
    stream
}

fn report(name: &str, text: &str) {
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").unwrap());
    std::fs::write(dir.join(name), text).unwrap();
}

/// What the server sends until it closes the connection: `eof: <bytes>`, or
/// `timeout: <bytes>` if it keeps the connection open.
fn read_to_end(stream: &mut UnixStream) -> String {
    let mut got = Vec::new();
    let outcome = match stream.read_to_end(&mut got) {
        Ok(_) => "eof",
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            "timeout"
        }
        Err(_) => "eof",
    };
    format!("{outcome}: {}", String::from_utf8_lossy(&got))
}

/// Sends what `RBTL_TEST_CASE` names, reports in `outcome` how the server answered,
/// then exits with code 0.
pub fn bad_pmi() {
    let mut stream = connection();
    let case = std::env::var("RBTL_TEST_CASE").unwrap();
    match case.as_str() {
        "garbage" => stream.write_all(b"\x01\x02 hello there\n").unwrap(),
        "no_cmd" => stream.write_all(b"key=value cmd=init\n").unwrap(),
        "not_utf8" => stream
            .write_all(b"cmd=init pmi_version=\xff\xfe\n")
            .unwrap(),
        "half_close" => {}
        "oversized" => {
            // 100 KB without a newline; the server may close before taking it all.
            let _ = stream.write_all(&vec![b'x'; 100_000]);
        }
        "unknown" => {
            stream.write_all(b"cmd=spawn nprocs=4\n").unwrap();
            let mut line = String::new();
            BufReader::new(&stream).read_line(&mut line).unwrap();
            report("reply", &line);
        }
        other => panic!("unknown RBTL_TEST_CASE {other:?}"),
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    report("outcome", &read_to_end(&mut stream));
    std::process::exit(0);
}

/// One request and its reply line.
fn request(reader: &mut BufReader<UnixStream>, line: &str) -> String {
    let stream = reader.get_mut();
    stream.write_all(line.as_bytes()).unwrap();
    stream.write_all(b"\n").unwrap();
    let mut reply = String::new();
    reader.read_line(&mut reply).unwrap();
    reply
}

/// Puts keys and values beyond the announced maxima, then fills its share of the
/// store, reporting each reply; then finalizes.
pub fn kvs_bounds() {
    let mut reader = BufReader::new(connection());
    let mut out = String::new();
    out += &request(&mut reader, "cmd=init pmi_version=1 pmi_subversion=1");
    out += &request(&mut reader, "cmd=get_maxes");
    let kvsname = request(&mut reader, "cmd=get_my_kvsname");
    let kvsname = kvsname
        .trim()
        .rsplit_once("kvsname=")
        .unwrap()
        .1
        .to_string();
    let put = |key: &str, value: &str| format!("cmd=put kvsname={kvsname} key={key} value={value}");
    out += "long value: ";
    out += &request(&mut reader, &put("v", &"x".repeat(1025)));
    out += "long key: ";
    out += &request(&mut reader, &put(&"k".repeat(65), "x"));
    out += "at the maxima: ";
    out += &request(&mut reader, &put(&"k".repeat(64), &"x".repeat(1024)));
    // 1 MiB of 1000-byte values is about a thousand entries: stop at the first
    // refusal, or after four thousand.
    let mut stored = 0;
    let mut refusal = String::from("none");
    for i in 0..4000 {
        let reply = request(&mut reader, &put(&format!("fill{i}"), &"y".repeat(1000)));
        if !reply.contains("rc=0") {
            refusal = reply;
            break;
        }
        stored += 1;
    }
    out += &format!("filled: {stored}\nrefusal: {}\n", refusal.trim_end());
    out += "after: ";
    let got = request(&mut reader, &format!("cmd=get kvsname={kvsname} key=fill0"));
    out += &got.chars().take(60).collect::<String>();
    out += "\n";
    out += &request(&mut reader, "cmd=finalize");
    report("outcome", &out);
}
