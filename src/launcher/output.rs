//! Copying the ranks' stdout and stderr to the launcher's, a whole line at a time.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Lines longer than this are forwarded in pieces of this size.
const MAX_PIECE: u64 = 64 * 1024;

/// Which of the launcher's streams to copy to.
#[derive(Clone, Copy)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

/// Copies `source` line by line to the launcher's `stream` until end of file, each
/// line written whole under the stream's lock (prefixed by `[rank] ` when `tag`), so
/// lines of different ranks never mix. A last line without a newline gets one.
/// Failures to write (a closed launcher stdout) do not stop the copy, so that the
/// rank never blocks on a full pipe.
pub(super) fn forward(source: impl Read, rank: u32, tag: bool, stream: Stream) {
    let mut reader = BufReader::new(source);
    let prefix = if tag {
        format!("[{rank}] ").into_bytes()
    } else {
        Vec::new()
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        line.extend_from_slice(&prefix);
        match reader.by_ref().take(MAX_PIECE).read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let _ = match stream {
            Stream::Stdout => write_locked(&mut io::stdout().lock(), &line),
            Stream::Stderr => write_locked(&mut io::stderr().lock(), &line),
        };
    }
}

fn write_locked(out: &mut impl Write, line: &[u8]) -> io::Result<()> {
    out.write_all(line)?;
    out.flush()
}
