//! `rbtlrun` with many ranks: a signal or the first failure while ranks are still
//! starting ends the job within seconds, and a job the open-file limit cannot hold is
//! refused before anything starts (or runs once the soft limit is raised to fit).
//! How start-up time grows with the ranks is measured by `benches/compare/launch.sh`.

use crate::harness::{output_within, rbtlrun, runs_with, wait_within};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Ranks of the signal test: many enough that starting them one by one after their
/// serving threads took tens of seconds.
const MANY: &str = "1500";
/// How long a job of [`MANY`] ranks may take to end after the signal, or after its
/// first rank fails: seconds, not the minute its start once took.
const ENDS_WITHIN: Duration = Duration::from_secs(15);

/// The `sleep` processes whose arguments are `arg`, still running (not zombies).
fn sleeps_with(arg: &str) -> Vec<String> {
    let cmdline = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| runs_with(pid, cmdline.as_bytes()))
        .collect()
}

#[test]
fn a_signal_while_ranks_start_ends_the_job_within_seconds() {
    // A duration no other test sleeps, to find this job's ranks by.
    let arg = "997.25";
    let child = rbtlrun()
        .args(["-n", MANY, "sleep", arg])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let signalled = Instant::now();
    // SAFETY: kill(2) on the pid of our child, not reaped (wait_within reaps it).
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let out = wait_within(child, "rbtlrun -n 1500 sleep", Duration::from_secs(120));
    let took = signalled.elapsed();
    let left = sleeps_with(arg);
    for pid in &left {
        // SAFETY: kill(2) on a `sleep` this test started.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    assert!(took < ENDS_WITHIN, "ended {took:?} after SIGTERM");
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("got signal 15: ending the job"), "{stderr}");
    assert!(left.is_empty(), "ranks still running: {left:?}");
}

#[test]
fn the_first_failure_while_ranks_start_stops_starting_them() {
    let start = Instant::now();
    let out = output_within(
        {
            let mut c = rbtlrun();
            c.args(["-n", "3000", "false"]);
            c
        },
        Duration::from_secs(120),
    );
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let started = stderr
        .split_once("while ranks were starting: no more are started (")
        .and_then(|(_, rest)| rest.split_once(" of 3000)"))
        .and_then(|(n, _)| n.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("the start was not stopped: {stderr}"));
    assert!(started < 3000, "{stderr}");
    assert!(took < ENDS_WITHIN, "reported after {took:?}");
}

/// `rbtlrun` in a shell that set the open-file limit first (`ulimit` arguments).
fn under_limit(ulimit: &str, ranks: &str) -> std::process::Output {
    let mut c = Command::new("sh");
    c.args([
        "-c",
        &format!("ulimit {ulimit} && exec \"$0\" -n {ranks} true"),
    ])
    .arg(env!("CARGO_BIN_EXE_rbtlrun"));
    output_within(c, Duration::from_secs(60))
}

#[test]
fn a_job_beyond_the_open_file_limit_is_refused_before_anything_starts() {
    // 200 ranks need 4 descriptors each in the launcher, and more beside.
    let out = under_limit("-n 256", "200");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "-n 200 needs about 864 open files (ulimit -n), and this process may have 256"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("cannot start rank"),
        "ranks were started: {stderr}"
    );
    // Under a hard limit that holds them, a low soft limit is raised to fit.
    let out = under_limit("-S -n 256", "200");
    assert!(out.status.success(), "{out:?}");
}
