//! Whether a peer's process still runs, without holding a descriptor for it: its
//! `/proc/<pid>/stat`, read when asked. A process that ended is a zombie (`Z`) or dead
//! (`X`) there until its parent reaps it, and gone after; its pid given to a new
//! process shows another start time. (A pidfd per peer tells the same but holds a
//! descriptor per rank of the node, which Open MPI's `vader` does not.) Where `/proc`
//! cannot be read, signal 0 stands in, which takes an unreaped process for alive.

use std::io::ErrorKind;

/// A process of this node, as it was when first seen.
pub(super) struct Process {
    pid: i32,
    /// Its start time (clock ticks after boot), if `/proc` told it.
    started: Option<u64>,
}

/// What `/proc/<pid>/stat` says of a process.
struct Stat {
    state: u8,
    started: u64,
}

impl Process {
    /// The process `pid`, running now.
    pub(super) fn new(pid: i32) -> Process {
        let started = match stat(pid) {
            Ok(Some(s)) => Some(s.started),
            _ => None,
        };
        Process { pid, started }
    }

    /// Whether it has ended (or its pid now names another process).
    pub(super) fn has_exited(&self) -> bool {
        match (self.started, stat(self.pid)) {
            (Some(_), Ok(None)) => true,
            (Some(started), Ok(Some(now))) => {
                matches!(now.state, b'Z' | b'X') || now.started != started
            }
            _ => {
                // SAFETY: signal 0 only checks for existence.
                let rc = unsafe { libc::kill(self.pid, 0) };
                rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
            }
        }
    }
}

/// The state and start time of process `pid`; `Ok(None)` if there is no such process,
/// `Err` if `/proc` cannot tell.
fn stat(pid: i32) -> std::io::Result<Option<Stat>> {
    let text = match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound) => return Ok(None),
        // A process that ends while its file is read.
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(parse(&text))
}

/// `pid (comm) state ppid ...`: the name may hold spaces and parentheses, so the
/// fields are counted from the last `)`; the state is the third field, the start time
/// the 22nd.
fn parse(text: &[u8]) -> Option<Stat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let mut fields = rest.split_ascii_whitespace();
    let state = *fields.next()?.as_bytes().first()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, started })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A child seen running, then ended but not reaped (what signal 0 misses), then
    /// reaped; and the fields of a name with spaces and parentheses.
    #[test]
    fn an_ended_process_is_seen_before_and_after_it_is_reaped() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let p = Process::new(child.id() as i32);
        assert!(p.started.is_some(), "/proc tells the start time");
        assert!(!p.has_exited());
        child.kill().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !p.has_exited() {
            assert!(
                std::time::Instant::now() < deadline,
                "the zombie was taken for alive"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(p.has_exited(), "reaped");
        let other = Process {
            pid: std::process::id() as i32,
            started: Some(1),
        };
        assert!(other.has_exited(), "another start time: the pid was reused");
        let line = b"42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456 19 20";
        let s = parse(line).unwrap();
        assert_eq!((s.state, s.started), (b'S', 123456));
        assert!(parse(b"42 (truncated").is_none());
    }
}
