//! The launcher, the PMI-1 client and the PMI modex, with real processes: this test
//! binary re-executes itself as the rank program. `RBTL_TEST_ROLE` selects what a
//! rank does inside the `rank_role_entry` test (which does nothing when the variable
//! is unset, as in an ordinary test run); ranks leave `ok.<rank>` files in the
//! directory named by `RBTL_TEST_DIR` to report success.

use rbtl::btl::Modex;
use rbtl::launcher::{self, Bind, LaunchOptions, RankExit};
use rbtl::pmi::{self, Client, PmiModex};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

/// Hang guard for a whole job.
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Rank side.

/// Entry point of the ranks: runs the role named by `RBTL_TEST_ROLE`.
#[test]
fn rank_role_entry() {
    let Ok(role) = std::env::var("RBTL_TEST_ROLE") else {
        return;
    };
    match role.as_str() {
        "modex" => role_modex(),
        "job" => role_job(),
        "singleton" => role_singleton(),
        "exit3" => role_exit(3),
        "kill_self" => role_kill_self(),
        "echo" => role_echo(),
        "abort" => role_abort(),
        "shm_crash" => role_shm_crash(),
        "sleep" => role_sleep(),
        other => panic!("unknown RBTL_TEST_ROLE {other:?}"),
    }
}

fn my_rank() -> u32 {
    std::env::var("PMI_RANK").unwrap().parse().unwrap()
}

fn report_ok(rank: u32) {
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").expect("RBTL_TEST_DIR"));
    std::fs::write(dir.join(format!("ok.{rank}")), b"ok").unwrap();
}

fn sleep_long() -> ! {
    thread::sleep(Duration::from_secs(600));
    panic!("nobody ended this rank");
}

/// What `rank` publishes: a few KiB with every byte value, different per rank.
fn blob(rank: u32) -> Vec<u8> {
    let len = 4096 + 517 * rank as usize;
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7) as u8)
        .collect()
}

const BLOB_KEY: &str = "btl.test-blob";
const LONG_KEY: &str = "a_rather_long_modex_key_name_that_needs_shortening_to_fit_pmi";

/// Publishes, fences, and checks every peer's entries through `modex`.
fn exchange(modex: &mut dyn Modex) {
    let (rank, size) = (modex.rank(), modex.size());
    modex.publish(BLOB_KEY, &blob(rank)).unwrap();
    modex.publish(LONG_KEY, &rank.to_le_bytes()).unwrap();
    modex.publish("empty", &[]).unwrap();
    modex.fence().unwrap();
    for peer in 0..size {
        assert_eq!(
            modex.lookup(peer, BLOB_KEY).unwrap(),
            Some(blob(peer)),
            "peer {peer}"
        );
        assert_eq!(
            modex.lookup(peer, LONG_KEY).unwrap(),
            Some(peer.to_le_bytes().to_vec())
        );
        assert_eq!(modex.lookup(peer, "empty").unwrap(), Some(Vec::new()));
        assert_eq!(modex.lookup(peer, "never_published").unwrap(), None);
    }
    assert!(modex.lookup(size, BLOB_KEY).is_err());
}

/// The PMI client directly, then the modex over it.
fn role_modex() {
    let mut client = Client::from_env()
        .unwrap()
        .expect("started by a PMI launcher");
    assert!(matches!(
        Client::from_env(),
        Err(pmi::Error::AlreadyClaimed)
    ));
    let rank = client.rank();
    let size = client.size();
    assert!(rank < size);
    assert!(!client.kvsname().is_empty());
    assert_eq!(client.appnum().unwrap(), 0);
    assert!(client.max_value_len() >= 256, "{}", client.max_value_len());
    assert!(client.max_key_len() >= 32, "{}", client.max_key_len());
    // Blobs of several KiB need several PMI values.
    assert!(blob(0).len() * 4 / 3 > 2 * client.max_value_len());
    client
        .put(&format!("plain-{rank}"), &format!("value-of-{rank}"))
        .unwrap();
    assert!(matches!(
        client.put("bad key", "x"),
        Err(pmi::Error::InvalidToken { .. })
    ));
    assert!(matches!(
        client.put("k", &"x".repeat(client.max_value_len() + 1)),
        Err(pmi::Error::InvalidToken { .. })
    ));
    client.barrier().unwrap();
    for peer in 0..size {
        assert_eq!(
            client.get(&format!("plain-{peer}")).unwrap().as_deref(),
            Some(format!("value-of-{peer}").as_str())
        );
    }
    assert_eq!(client.get("no-such-key").unwrap(), None);
    let mut modex = PmiModex::new(client);
    exchange(&mut modex);
    modex.fence().unwrap();
    modex.finalize().unwrap();
    report_ok(rank);
}

/// `rbtl::pmi::job()` under a launcher.
fn role_job() {
    let mut job = pmi::job().unwrap();
    // Under `mpiexec -pmi-port` the rank comes from the PMI handshake, not PMI_RANK.
    if std::env::var_os("PMI_RANK").is_some() {
        assert_eq!(job.rank, my_rank());
    }
    assert!(job.size >= 2 && job.rank < job.size, "{job:?}");
    assert_eq!(job.modex.rank(), job.rank);
    assert_eq!(job.modex.size(), job.size);
    exchange(job.modex.as_mut());
    // Report where this rank may run, for the binding test.
    // SAFETY: cpu_set_t is plain bits; the kernel fills at most its size.
    let cpus: Vec<String> = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .map(|c| c.to_string())
            .collect()
    };
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").expect("RBTL_TEST_DIR"));
    std::fs::write(dir.join(format!("cpus.{}", job.rank)), cpus.join(",")).unwrap();
    report_ok(job.rank);
}

/// No launcher: `job()` is a one-process job.
fn role_singleton() {
    assert!(Client::from_env().unwrap().is_none());
    let mut job = pmi::job().unwrap();
    assert_eq!((job.rank, job.size), (0, 1));
    exchange(job.modex.as_mut());
    report_ok(0);
}

/// Rank 1 exits with `code`; the others sleep until the launcher ends them.
fn role_exit(code: i32) {
    if my_rank() == 1 {
        std::process::exit(code);
    }
    sleep_long();
}

/// Rank 0 kills itself with SIGKILL; rank 1 sleeps; rank 2 ignores SIGTERM.
fn role_kill_self() {
    match my_rank() {
        0 => {
            // SAFETY: signals this very process; nothing is shared.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            unreachable!("SIGKILL cannot be caught");
        }
        2 => {
            // SAFETY: sets SIGTERM's disposition to ignore; no handler code runs.
            unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
            report_ok(2);
            sleep_long();
        }
        _ => {
            report_ok(my_rank());
            sleep_long();
        }
    }
}

/// Many lines on stdout and a few on stderr.
fn role_echo() {
    use std::io::Write;
    let rank = my_rank();
    let mut out = std::io::stdout().lock();
    // End the harness's "test rank_role_entry ... " line first.
    writeln!(out).unwrap();
    for i in 0..200 {
        writeln!(out, "hello from {rank} line {i} {}", "x".repeat(100 + i)).unwrap();
        out.flush().unwrap();
    }
    eprintln!("complaint from {rank}");
}

/// Rank 1 aborts the job with code 5; the others wait in a barrier.
fn role_abort() {
    let mut client = Client::from_env().unwrap().unwrap();
    if client.rank() == 1 {
        client.abort(5, "rank 1 gives up: no peers").unwrap();
    } else {
        let _ = client.barrier();
    }
    sleep_long();
}

/// Rank 0 creates a shared-memory segment, says where, and dies by SIGKILL.
fn role_shm_crash() {
    if my_rank() == 0 {
        let region = rbtl::mpool::SharedRegion::create("launcher-test", 4096).unwrap();
        let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").unwrap());
        std::fs::write(dir.join("segment"), region.path().to_str().unwrap()).unwrap();
        // SAFETY: signals this very process; nothing is shared.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    }
    sleep_long();
}

/// Reports its pid, then sleeps until ended.
fn role_sleep() {
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").unwrap());
    let rank = my_rank();
    std::fs::write(
        dir.join(format!("pid.{rank}")),
        std::process::id().to_string(),
    )
    .unwrap();
    report_ok(rank);
    sleep_long();
}

// ---------------------------------------------------------------------------
// Launcher side.

/// A fresh directory for the ranks' reports, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("rbtl-launcher-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn reported(&self, rank: u32) -> bool {
        self.0.join(format!("ok.{rank}")).exists()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn self_exe() -> PathBuf {
    std::env::current_exe().unwrap()
}

/// The arguments that make this test binary run only `rank_role_entry`.
fn role_args() -> Vec<OsString> {
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

fn options(ranks: u32, role: &str, scratch: &Scratch) -> LaunchOptions {
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
fn launch_self(opts: LaunchOptions) -> launcher::ExitStatusSummary {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(launcher::launch(&self_exe(), &role_args(), &opts));
    });
    rx.recv_timeout(JOB_TIMEOUT)
        .expect("the job did not end: the launcher hangs")
        .expect("the job could not be started")
}

/// A command run to completion, failing the test instead of hanging.
fn output_of(mut command: Command) -> Output {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(command.output());
    });
    rx.recv_timeout(JOB_TIMEOUT)
        .expect("the command did not end")
        .expect("the command could not be started")
}

fn rbtlrun() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rbtlrun"));
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        command.env_remove(var);
    }
    command
}

#[test]
fn four_ranks_exchange_multi_kib_blobs_through_pmi_modex() {
    let scratch = Scratch::new("modex");
    let summary = launch_self(options(4, "modex", &scratch));
    assert_eq!(summary.code, 0, "{summary:?}");
    assert!(summary.success());
    assert_eq!(summary.ranks, vec![RankExit::Exited(0); 4]);
    assert!(summary.abort.is_none() && summary.interrupted.is_none());
    for rank in 0..4 {
        assert!(scratch.reported(rank), "rank {rank} did not report success");
    }
}

#[test]
fn job_uses_pmi_under_the_launcher_with_ranks_bound_to_cores() {
    let scratch = Scratch::new("job");
    let summary = launch_self(LaunchOptions {
        bind: Bind::Core,
        ..options(2, "job", &scratch)
    });
    assert_eq!(summary.ranks, vec![RankExit::Exited(0); 2], "{summary:?}");
    assert!(scratch.reported(0) && scratch.reported(1));
    // Each rank is bound to the hardware threads of one core, different ones where
    // there are two cores.
    let cpus = |rank: u32| std::fs::read_to_string(scratch.0.join(format!("cpus.{rank}"))).unwrap();
    let (a, b) = (cpus(0), cpus(1));
    assert!(!a.is_empty() && !b.is_empty());
    let online = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    if online >= 2 {
        assert_ne!(a, b, "ranks 0 and 1 share CPUs {a}");
        assert!(
            a.split(',').count() < online,
            "rank 0 is bound to a subset, not all {online} CPUs: {a}"
        );
    }
}

#[test]
fn job_is_a_singleton_without_a_launcher() {
    let scratch = Scratch::new("singleton");
    let mut command = Command::new(self_exe());
    command
        .args(role_args())
        .env("RBTL_TEST_ROLE", "singleton")
        .env("RBTL_TEST_DIR", &scratch.0);
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        command.env_remove(var);
    }
    let out = output_of(command);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(scratch.reported(0));
}

#[test]
fn a_failing_rank_sets_the_exit_code_and_the_others_are_ended() {
    let scratch = Scratch::new("exit3");
    let summary = launch_self(options(3, "exit3", &scratch));
    assert_eq!(summary.code, 3, "{summary:?}");
    assert_eq!(summary.ranks[1], RankExit::Exited(3));
    assert_eq!(summary.ranks[0], RankExit::Signaled(libc::SIGTERM));
    assert_eq!(summary.ranks[2], RankExit::Signaled(libc::SIGTERM));
}

#[test]
fn a_rank_killed_by_sigkill_gives_137_and_survivors_are_terminated_then_killed() {
    let scratch = Scratch::new("kill");
    let summary = launch_self(options(3, "kill_self", &scratch));
    assert_eq!(summary.code, 128 + libc::SIGKILL, "{summary:?}");
    assert_eq!(summary.ranks[0], RankExit::Signaled(libc::SIGKILL));
    // Whether they got as far as reporting depends on timing; what ends them does not.
    assert_eq!(summary.ranks[1], RankExit::Signaled(libc::SIGTERM));
    assert_eq!(summary.ranks[2], RankExit::Signaled(libc::SIGKILL));
}

#[test]
fn abort_ends_the_job_with_its_code() {
    let scratch = Scratch::new("abort");
    let summary = launch_self(options(3, "abort", &scratch));
    assert_eq!(summary.code, 5, "{summary:?}");
    let abort = summary.abort.expect("the abort is reported");
    assert_eq!(abort.rank, 1);
    assert_eq!(abort.code, 5);
    assert_eq!(abort.message, "rank 1 gives up: no peers");
    assert!(
        summary.ranks.iter().all(|r| !r.success()),
        "{:?}",
        summary.ranks
    );
}

#[test]
fn segments_of_a_dead_rank_are_removed() {
    let scratch = Scratch::new("shm");
    let shm = scratch.0.join("shm");
    std::fs::create_dir(&shm).unwrap();
    let mut opts = options(2, "shm_crash", &scratch);
    opts.env
        .push(("RBTL_SHM_DIR".into(), shm.to_string_lossy().into_owned()));
    let summary = launch_self(opts);
    assert_eq!(summary.code, 128 + libc::SIGKILL, "{summary:?}");
    let segment = PathBuf::from(std::fs::read_to_string(scratch.0.join("segment")).unwrap());
    assert!(segment.starts_with(&shm), "{segment:?}");
    assert!(!segment.exists(), "{segment:?} was left behind");
    assert!(summary.removed_segments.contains(&segment), "{summary:?}");
}

#[test]
fn sigterm_to_rbtlrun_ends_every_rank() {
    let scratch = Scratch::new("sigterm");
    let mut child = rbtlrun()
        .args(["-n", "2"])
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", "sleep")
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
    let mut command = rbtlrun();
    command
        .args(["-n", "3", "--tag-output"])
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", "echo");
    let out = output_of(command);
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
    let mut command = rbtlrun();
    command
        .args(["-n", "2", "--grace", "0.2"])
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", "abort");
    let out = output_of(command);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("rank 1 gives up: no peers"), "{stderr}");

    let mut command = rbtlrun();
    command
        .args(["-n", "2", "--grace=0.2"])
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", "exit3");
    let out = output_of(command);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
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

/// `mpiexec.mpich` on PATH, if installed.
fn mpiexec() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join("mpiexec.mpich"))
        .find(|p| p.is_file())
}

fn run_under_mpiexec(extra: &[&str], role: &str, name: &str) {
    let Some(mpiexec) = mpiexec() else {
        // Straight to stderr, past the test harness's output capture.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"SKIP: mpiexec.mpich is not installed (apt-get install mpich); \
              not testing the PMI client under hydra\n",
        );
        return;
    };
    let scratch = Scratch::new(name);
    let mut command = Command::new(mpiexec);
    command
        .args(extra)
        .args(["-n", "2"])
        .arg(self_exe())
        .args(role_args())
        .env("RBTL_TEST_ROLE", role)
        .env("RBTL_TEST_DIR", &scratch.0);
    for var in ["PMI_FD", "PMI_PORT", "PMI_ID", "PMI_RANK", "PMI_SIZE"] {
        command.env_remove(var);
    }
    let out = output_of(command);
    assert!(
        out.status.success(),
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(scratch.reported(0) && scratch.reported(1));
}

#[test]
fn pmi_client_and_modex_work_under_mpiexec_mpich() {
    run_under_mpiexec(&[], "modex", "hydra-fd");
}

#[test]
fn pmi_client_works_over_pmi_port_under_mpiexec_mpich() {
    run_under_mpiexec(&["-pmi-port"], "job", "hydra-port");
}
