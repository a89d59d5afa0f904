//! The PMI-1 client, the PMI modex and `pmi::job()` with real ranks: under the
//! launcher, alone, and under MPICH's `mpiexec`.

use crate::harness::{
    launch_self, options, output_of, output_within, role_args, self_exe, without_pmi, Scratch,
};
use rbtl::launcher::{Bind, LaunchOptions, RankExit};
use rbtl::pmi::{self, Client};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `command`, whose last word runs this binary, made to run `role` alone (none of
/// PMI's variables of this process given to it) with its reports in `scratch`.
fn as_role<'c>(command: &'c mut Command, role: &str, scratch: &Scratch) -> &'c mut Command {
    without_pmi(
        command
            .args(role_args())
            .env("RBTL_TEST_ROLE", role)
            .env("RBTL_TEST_DIR", &scratch.0),
    )
}

/// Assert that the command of `out` succeeded, with what it wrote if it did not.
fn assert_succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn four_ranks_exchange_multi_kib_blobs_through_pmi_modex() {
    let scratch = Scratch::new("modex");
    let mut opts = options(4, "modex", &scratch);
    // The universe the role expects to be told.
    opts.universe_size = Some(9);
    opts.env.push(("RBTL_TEST_UNIVERSE".into(), "9".into()));
    let summary = launch_self(opts);
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
    as_role(&mut command, "singleton", &scratch);
    assert_succeeded(&output_of(command));
    assert!(scratch.reported(0));
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
    command.args(extra).args(["-n", "2"]).arg(self_exe());
    as_role(&mut command, role, &scratch);
    assert_succeeded(&output_of(command));
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

/// The rank side of [`a_client_gives_up_on_a_silent_server`]: starting the client
/// fails with a timeout that says how to wait longer.
pub fn silent_server_role() {
    let start = Instant::now();
    match Client::from_env() {
        Err(e @ pmi::Error::Timeout { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("cmd=init") && text.contains("PMI_TIMEOUT"),
                "{text}"
            );
            assert!(start.elapsed() >= Duration::from_secs(1), "{text}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").unwrap());
    std::fs::write(dir.join("ok.0"), b"ok").unwrap();
}

#[test]
fn a_client_gives_up_on_a_silent_server() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and never answers; holds the connection until the client closes it.
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let mut sink = Vec::new();
        let _ = conn.read_to_end(&mut sink);
    });
    let scratch = Scratch::new("silent");
    let mut command = Command::new(self_exe());
    as_role(&mut command, "silent_server", &scratch)
        .env("PMI_PORT", format!("127.0.0.1:{port}"))
        .env("PMI_TIMEOUT", "1");
    assert_succeeded(&output_within(command, Duration::from_secs(30)));
    assert!(scratch.reported(0));
    server.join().unwrap();
}
