//! The `rbtlrun` binary: signals, tagged output, exit codes and its command line.

use crate::harness::{
    output_of, output_within, rbtlrun, role_args, runs_with, self_exe, Scratch, JOB_TIMEOUT,
};
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// `rbtlrun` with `options` running this binary as the rank program, in `role`.
fn rbtlrun_role(options: &[&str], role: &str) -> Command {
    let mut command = rbtlrun();
    command
        .args(options)
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", role);
    command
}

#[test]
fn sigterm_to_rbtlrun_ends_every_rank() {
    let scratch = Scratch::new("sigterm");
    let mut child = rbtlrun_role(&["-n", "2"], "sleep")
        .env("RBTL_TEST_DIR", &scratch.0)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !(scratch.reported(0) && scratch.reported(1)) {
        if start.elapsed() > JOB_TIMEOUT {
            let _ = child.kill();
            panic!("the ranks never started");
        }
        thread::sleep(Duration::from_millis(20));
    }
    let pids: Vec<String> = (0..2)
        .map(|r| std::fs::read_to_string(scratch.0.join(format!("pid.{r}"))).unwrap())
        .collect();
    // SAFETY: kill(2) on the pid of a child of this process that has not been reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let status = rx
        .recv_timeout(JOB_TIMEOUT)
        .expect("rbtlrun did not end")
        .unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    // rbtlrun reaps its ranks before exiting, so their pids are gone.
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "rank pid {pid} still runs"
        );
    }
}

#[test]
fn rbtlrun_tags_output_lines_with_their_rank() {
    let out = output_of(rbtlrun_role(&["-n", "3", "--tag-output"], "echo"));
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let mut counts = [0usize; 3];
    for line in stdout.lines() {
        let (tag, rest) = line.split_once(' ').expect("every line is tagged");
        let rank: usize = tag
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("untagged line {line:?}"));
        if let Some(body) = rest.strip_prefix("hello from ") {
            let mut words = body.split(' ');
            assert_eq!(words.next(), Some(rank.to_string().as_str()), "{line:?}");
            assert_eq!(words.next(), Some("line"));
            let i: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(
                words.next(),
                Some("x".repeat(100 + i).as_str()),
                "mixed line {line:?}"
            );
            assert_eq!(words.next(), None);
            assert_eq!(i, counts[rank], "lines of rank {rank} out of order");
            counts[rank] += 1;
        }
    }
    assert_eq!(counts, [200; 3]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    for rank in 0..3 {
        assert!(
            stderr.contains(&format!("[{rank}] complaint from {rank}\n")),
            "{stderr}"
        );
    }
}

#[test]
fn rbtlrun_passes_on_the_failure_code_and_abort_message() {
    let out = output_of(rbtlrun_role(&["-n", "2", "--grace", "0.2"], "abort"));
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 1 gives up: no peers"), "{stderr}");

    let out = output_of(rbtlrun_role(&["-n", "2", "--grace=0.2"], "exit3"));
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    // An abort with exit code 0 is still a failure.
    let out = output_of(rbtlrun_role(&["-n", "2", "--grace", "0.2"], "abort_zero"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rank 1 aborted the job with exit code 0 (an aborted job exits with 1)"),
        "{stderr}"
    );
}

#[test]
fn a_job_past_its_time_limit_is_ended_and_exits_124() {
    // By the option, and by MPIEXEC_TIMEOUT (which the option overrides).
    for (options, env) in [
        (&["-n", "2", "--timeout", "0.5"][..], None),
        (&["-n", "2"][..], Some("0.5")),
        (&["-n", "2", "--timeout=0.5"][..], Some("3600")),
    ] {
        let mut command = rbtlrun();
        command.args(options).args(["sleep", "30"]);
        if let Some(v) = env {
            command.env("MPIEXEC_TIMEOUT", v);
        }
        let started = std::time::Instant::now();
        let out = output_within(command, JOB_TIMEOUT);
        assert_eq!(out.status.code(), Some(124), "{options:?} {env:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("ran past its time limit of 0.5 s"),
            "{stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{options:?} {env:?}"
        );
    }
    // A job within its limit is not touched; a limit that is no number is refused.
    let out = output_of({
        let mut c = rbtlrun();
        c.args(["-n", "2", "true"]).env("MPIEXEC_TIMEOUT", "60");
        c
    });
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = output_of({
        let mut c = rbtlrun();
        c.args(["-n", "2", "true"]).env("MPIEXEC_TIMEOUT", "soon");
        c
    });
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("MPIEXEC_TIMEOUT=soon"));
}

#[test]
fn rbtlrun_rejects_unknown_options_by_name() {
    let out = output_of({
        let mut c = rbtlrun();
        c.args(["--frobnicate", "true"]);
        c
    });
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--frobnicate"), "{stderr}");

    let out = output_of({
        let mut c = rbtlrun();
        c.arg("--help");
        c
    });
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for option in [
        "-n",
        "--bind-to",
        "--tag-output",
        "--grace",
        "--timeout",
        "MPIEXEC_TIMEOUT",
        "SIGKILL",
        "hwloc",
    ] {
        assert!(help.contains(option), "--help does not mention {option}");
    }
}

#[test]
fn rbtlrun_reports_a_program_that_cannot_start() {
    let out = output_of({
        let mut c = rbtlrun();
        c.args(["-n", "2", "/nonexistent/rbtl-test-program"]);
        c
    });
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("/nonexistent/rbtl-test-program"),
        "{stderr}"
    );
}

#[test]
fn a_bare_program_name_is_found_in_the_working_folder_after_path() {
    let scratch = Scratch::new("bare-name");
    let script = scratch.0.join("rbtl-bare-name-test");
    std::fs::write(&script, "#!/bin/sh\necho here $PMI_RANK\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut command = rbtlrun();
    command
        .current_dir(&scratch.0)
        .args(["-n", "2", "rbtl-bare-name-test"]);
    let out = output_within(command, ONCE_HUNG);
    assert!(out.status.success(), "{out:?}");
    let lines = sorted_lines(&out.stdout);
    assert_eq!(lines, ["here 0", "here 1"]);
}

/// The lines of `output`, sorted (ranks print in any order).
fn sorted_lines(output: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(output)
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

/// The deadline of commands that once hung: each ends by itself well within it.
const ONCE_HUNG: Duration = Duration::from_secs(30);

#[test]
fn a_rank_that_exits_0_while_osu_waits_for_it_ends_the_job() {
    let scratch = Scratch::new("exit0-osu");
    let shm = scratch.0.join("shm");
    std::fs::create_dir(&shm).unwrap();
    let mut command = rbtlrun();
    command
        .args(["-n", "2", "--grace", "0.5", "--env"])
        .arg(format!("RBTL_SHM_DIR={}", shm.display()))
        .args([
            "sh",
            "-c",
            "[ $PMI_RANK = 1 ] && exit 0; exec \"$0\" latency --max-size 8",
        ])
        .arg(env!("CARGO_BIN_EXE_osu"));
    let out = output_within(command, ONCE_HUNG);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("rank 1 exited with code 0 without finalizing"),
        "{stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&shm).unwrap().collect();
    assert!(left.is_empty(), "segments left behind: {left:?}");
}

#[test]
fn programs_that_never_speak_pmi_succeed() {
    let mut command = rbtlrun();
    command.args(["-n", "2", "sh", "-c", "echo rank $PMI_RANK of $PMI_SIZE"]);
    let out = output_within(command, ONCE_HUNG);
    assert!(out.status.success(), "{out:?}");
    let lines = sorted_lines(&out.stdout);
    assert_eq!(lines, ["rank 0 of 2", "rank 1 of 2"]);
}

/// Whether process `pid` still runs `sleep` (and is not a zombie).
fn sleep_runs(pid: &str) -> bool {
    runs_with(pid, b"sleep\0")
}

#[test]
fn ending_the_job_ends_what_the_ranks_started() {
    let scratch = Scratch::new("grandchildren");
    // Rank 1 fails; ranks 0 and 2 run a child that outlives a killed shell. Rank 1
    // also leaves a child behind it.
    let script = "sleep 30 & echo $! > \"$0/sleep.$PMI_RANK\"; \
                  [ $PMI_RANK = 1 ] && exit 7; wait";
    let mut command = rbtlrun();
    command
        .args(["-n", "3", "--grace", "0.2", "sh", "-c", script])
        .arg(&scratch.0);
    let out = output_within(command, ONCE_HUNG);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let pids: Vec<String> = (0..3)
        .map(|r| {
            std::fs::read_to_string(scratch.0.join(format!("sleep.{r}")))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    let survivors: Vec<&String> = pids.iter().filter(|p| sleep_runs(p)).collect();
    for pid in &survivors {
        // SAFETY: kill(2) with plain integers, on a `sleep` this test started.
        unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
    }
    assert!(survivors.is_empty(), "still running: {survivors:?}");

    // A job that succeeds ends what its ranks left running too.
    let script = "sleep 30 & echo $! > \"$0/left.$PMI_RANK\"";
    let mut command = rbtlrun();
    command
        .args(["-n", "2", "sh", "-c", script])
        .arg(&scratch.0);
    let out = output_within(command, ONCE_HUNG);
    assert!(out.status.success(), "{out:?}");
    for rank in 0..2 {
        let pid = std::fs::read_to_string(scratch.0.join(format!("left.{rank}"))).unwrap();
        let pid = pid.trim();
        if sleep_runs(pid) {
            // SAFETY: as above.
            unsafe { libc::kill(pid.parse().unwrap(), libc::SIGKILL) };
            panic!("rank {rank}'s sleep {pid} outlived the job");
        }
    }
}
