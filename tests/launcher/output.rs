//! The ranks' output through `rbtlrun`: byte for byte, and a job that ends when its
//! output can no longer be written (a closed pipe, a full disk).

use crate::harness::{output_within, rbtlrun, wait_within, JOB_TIMEOUT};
use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

/// Long enough for a job that is not hung.
const ONCE_HUNG: Duration = Duration::from_secs(30);

#[test]
fn output_arrives_byte_for_byte() {
    // A line longer than the launcher's pieces (64 KiB), a short one, and a last one
    // without a newline, on stdout and on stderr.
    let mut command = rbtlrun();
    command.args([
        "-n",
        "1",
        "sh",
        "-c",
        "head -c 200000 /dev/zero | tr '\\0' x; printf '\\nshort\\nend'; \
         printf 'no newline' >&2",
    ]);
    let out = output_within(command, ONCE_HUNG);
    assert!(out.status.success(), "{out:?}");
    let mut want = vec![b'x'; 200_000];
    want.extend_from_slice(b"\nshort\nend");
    assert!(
        out.stdout == want,
        "stdout differs: {} bytes ({} wanted), {} newlines (2 wanted), ends {:?}",
        out.stdout.len(),
        want.len(),
        out.stdout.iter().filter(|&&b| b == b'\n').count(),
        String::from_utf8_lossy(&out.stdout[out.stdout.len().saturating_sub(12)..])
    );
    assert_eq!(out.stderr, b"no newline");
}

/// Whether a process whose command line holds `marker` still runs (not a zombie).
fn runs_with(marker: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|p| {
        let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, r)| r.starts_with('Z'));
        !zombie
            && cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == marker.as_bytes())
    })
}

#[test]
fn a_closed_output_pipe_ends_the_job() {
    // The ranks write without end: the job ends only because the reader left, as
    // a job piped into `head` does.
    let marker = format!("rbtl-closed-pipe-{}", std::process::id());
    let mut child = rbtlrun()
        .args(["-n", "2", "yes", &marker])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = vec![0u8; 4096];
    stdout.read_exact(&mut first).unwrap();
    assert!(first.starts_with(marker.as_bytes()));
    drop(stdout);
    let out = wait_within(child, "a job whose output pipe was closed", JOB_TIMEOUT);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGPIPE), "{said}");
    assert!(
        said.contains("could not write the ranks' output to its stdout"),
        "{said}"
    );
    assert!(!runs_with(&marker), "a rank outlived the job");
}

#[test]
fn a_full_disk_fails_the_job_and_says_so() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full, the device that is always full");
    let child = rbtlrun()
        .args(["-n", "2", "echo", "a result"])
        .stdin(Stdio::null())
        .stdout(full)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_within(child, "a job writing to a full disk", ONCE_HUNG);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("could not write the ranks' output to its stdout")
            && said.contains("No space left on device"),
        "{said}"
    );
}

#[test]
fn a_closed_error_pipe_ends_the_job_too() {
    // The launcher's own messages go to the same closed stderr: it must still end
    // the job, and not die of the write.
    let mut child = rbtlrun()
        .args([
            "-n",
            "2",
            "sh",
            "-c",
            "sleep 0.2; echo complaint >&2; exec sleep 60",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stderr.take());
    let out = wait_within(child, "a job whose error pipe was closed", ONCE_HUNG);
    assert_eq!(out.status.code(), Some(128 + libc::SIGPIPE), "{out:?}");
}
