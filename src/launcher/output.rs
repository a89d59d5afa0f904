//! Copying the ranks' stdout and stderr to the launcher's, byte for byte, a whole
//! line at a time where lines are short.

use std::io::{self, BufRead, BufReader, Read, Write};

/// Lines longer than this are forwarded in pieces of this size.
const MAX_PIECE: u64 = 64 * 1024;

/// Which of the launcher's streams to copy to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    /// Its usual name.
    pub(super) fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Copies `source` to the launcher's `stream` until end of file, exactly as the rank
/// wrote it: each line written whole under the stream's lock (prefixed by `[rank] `
/// when `tag`), so that lines of different ranks never mix; a line longer than
/// [`MAX_PIECE`], or a last one without a newline, goes in pieces as it comes, with
/// nothing added. When a write fails (a closed pipe, a full disk) `lost` is told,
/// once, and the rest is read and dropped, so that the rank never blocks on a full
/// pipe while the job ends.
pub(super) fn forward(
    source: impl Read,
    rank: u32,
    tag: bool,
    stream: Stream,
    lost: impl FnOnce(io::Error),
) {
    let mut reader = BufReader::new(source);
    let prefix = if tag {
        format!("[{rank}] ").into_bytes()
    } else {
        Vec::new()
    };
    let mut lost = Some(lost);
    let mut at_line_start = true;
    let mut piece = Vec::new();
    loop {
        piece.clear();
        if at_line_start {
            piece.extend_from_slice(&prefix);
        }
        match reader
            .by_ref()
            .take(MAX_PIECE)
            .read_until(b'\n', &mut piece)
        {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        at_line_start = piece.last() == Some(&b'\n');
        if lost.is_none() {
            continue;
        }
        let written = match stream {
            Stream::Stdout => write_locked(&mut io::stdout().lock(), &piece),
            Stream::Stderr => write_locked(&mut io::stderr().lock(), &piece),
        };
        if let Err(e) = written {
            if let Some(tell) = lost.take() {
                tell(e);
            }
        }
    }
}

fn write_locked(out: &mut impl Write, piece: &[u8]) -> io::Result<()> {
    out.write_all(piece)?;
    out.flush()
}
