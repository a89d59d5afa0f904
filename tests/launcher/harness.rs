//! The launcher side: scratch directories, this binary as the rank program, and
//! jobs and commands that fail the test instead of hanging.

use rbtl::launcher::{self, LaunchOptions};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Hang guard for a whole job.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A fresh directory for the ranks' reports, removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rbtl-launcher-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn reported(&self, rank: u32) -> bool {
        self.0.join(format!("ok.{rank}")).exists()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn self_exe() -> PathBuf {
    std::env::current_exe().unwrap()
}

/// The arguments that make this test binary run only `rank_role_entry`.
pub fn role_args() -> Vec<OsString> {
    [
        "rank_role_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ]
    .iter()
    .map(OsString::from)
    .collect()
}

pub fn options(ranks: u32, role: &str, scratch: &Scratch) -> LaunchOptions {
    LaunchOptions {
        ranks,
        grace: Duration::from_millis(300),
        env: vec![
            ("RBTL_TEST_ROLE".into(), role.into()),
            (
                "RBTL_TEST_DIR".into(),
                scratch.0.to_string_lossy().into_owned(),
            ),
        ],
        ..LaunchOptions::default()
    }
}

/// `launcher::launch` of this binary, failing the test instead of hanging.
pub fn launch_self(opts: LaunchOptions) -> launcher::ExitStatusSummary {
    launch_self_within(opts, JOB_TIMEOUT)
}

/// [`launch_self`] for a job that must end by itself within `limit` (a job that once
/// hung: it fails the test instead).
pub fn launch_self_within(opts: LaunchOptions, limit: Duration) -> launcher::ExitStatusSummary {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(launcher::launch(&self_exe(), &role_args(), &opts));
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("the job did not end within {limit:?}: the launcher hangs"))
        .expect("the job could not be started")
}

/// A command run to completion, failing the test instead of hanging.
pub fn output_of(command: Command) -> Output {
    output_within(command, JOB_TIMEOUT)
}

/// A command that must end by itself within `limit`: killed and the test failed
/// otherwise.
pub fn output_within(mut command: Command, limit: Duration) -> Output {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("the command could not be started");
    wait_within(child, &format!("{command:?}"), limit)
}

/// The output of `child` (`what`), which must end by itself within `limit`: killed
/// and the test failed otherwise.
pub fn wait_within(child: Child, what: &str, limit: Duration) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => out.expect("waiting for the command"),
        Err(_) => {
            // SAFETY: kill(2) on the pid of our child, not reaped: its waiter thread
            // is still blocked in wait.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{what} did not end within {limit:?}: it hangs");
        }
    }
}

pub fn rbtlrun() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rbtlrun"));
    without_pmi(&mut command);
    command
}

/// Leave none of PMI's variables of this process to what `command` starts.
pub fn without_pmi(command: &mut Command) -> &mut Command {
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        command.env_remove(var);
    }
    command
}

/// Whether process `pid` runs (not a zombie) with a command line that starts with
/// `cmdline` (its arguments, each followed by NUL).
pub fn runs_with(pid: &str, cmdline: &[u8]) -> bool {
    let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    line.starts_with(cmdline) && state != Some(Some('Z'))
}
