//! Running a command with a deadline: in a process group of its own, its output
//! captured, the whole group killed when it runs too long (a launcher's ranks
//! included), so that no test waits on another process without a way out.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the output is read after the command ended: a process it left behind
/// could hold the pipes open.
const PIPES_LIMIT: Duration = Duration::from_secs(10);

/// Runs `cmd` in a process group of its own with its output captured; kills the
/// group when it has not ended within `limit` (an error with what it printed). Its
/// output is read until the pipes close, for at most 10 s after it ended.
pub fn run_limited(cmd: &mut Command, limit: Duration) -> Result<Output, String> {
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let reader = |mut pipe: Box<dyn Read + Send>| {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(bytes);
        });
        rx
    };
    let out = reader(Box::new(child.stdout.take().expect("piped")));
    let err = reader(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            kill_group(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |rx: mpsc::Receiver<Vec<u8>>| {
        rx.recv_timeout(PIPES_LIMIT)
            .unwrap_or_else(|_| b"(still open after it ended: not read)".to_vec())
    };
    let (stdout, stderr) = (read(out), read(err));
    match status {
        Some(status) => Ok(Output {
            status,
            stdout,
            stderr,
        }),
        None => Err(format!(
            "{cmd:?} did not end within {limit:?}; killed\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        )),
    }
}

/// Sends SIGKILL to the process group `group` (through the shell's `kill`, to which
/// a negative pid names a group).
fn kill_group(group: u32) {
    let _ = Command::new("sh")
        .args(["-c", &format!("kill -KILL -{group}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
