//! Reading the PMI server's replies with a deadline, so that a client never waits
//! forever on a server that has gone silent.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The client's end of the PMI connection, read with an optional deadline: a read
/// that would block past it fails with [`io::ErrorKind::TimedOut`]. Works on any
/// descriptor `poll` takes (socket, pipe), whatever the launcher handed over.
#[derive(Debug)]
pub(super) struct ReplyReader {
    file: File,
    deadline: Option<Instant>,
}

impl ReplyReader {
    pub fn new(file: File) -> Self {
        Self {
            file,
            deadline: None,
        }
    }

    /// Reads from now on fail once `timeout` has passed (`None`: never).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    }

    /// Waits until the descriptor is readable or the deadline has passed.
    fn wait_readable(&self, deadline: Instant) -> io::Result<()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            // Round up, so that the deadline has passed when poll says it timed out.
            let ms = libc::c_int::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            let mut fd = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll reads and writes exactly the one pollfd passed, which lives
            // on this stack frame for the duration of the call.
            let rc = unsafe { libc::poll(&mut fd, 1, ms) };
            match rc {
                -1 if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                -1 => return Err(io::Error::last_os_error()),
                // Readable, or at end of stream / in error: the read says which.
                n if n > 0 => return Ok(()),
                _ => {}
            }
        }
    }
}

impl Read for ReplyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.deadline {
            self.wait_readable(deadline)?;
        }
        self.file.read(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    fn pair() -> (ReplyReader, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        (ReplyReader::new(File::from(OwnedFd::from(ours))), theirs)
    }

    #[test]
    fn a_silent_peer_times_out_and_a_speaking_one_does_not() {
        let (mut reader, mut peer) = pair();
        reader.set_timeout(Some(Duration::from_millis(50)));
        let mut buf = [0u8; 8];
        let err = reader.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        peer.write_all(b"abc").unwrap();
        reader.set_timeout(Some(Duration::from_secs(60)));
        assert_eq!(reader.read(&mut buf).unwrap(), 3);
        drop(peer);
        assert_eq!(
            reader.read(&mut buf).unwrap(),
            0,
            "end of stream, not a timeout"
        );
    }
}
