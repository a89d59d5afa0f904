//! The rank side: what each `RBTL_TEST_ROLE` does inside a rank.

use rbtl::btl::Modex;
use rbtl::pmi::{self, Client, PmiModex};
use std::path::PathBuf;
use std::thread;
use std::time::Duration;

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
pub fn modex() {
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
    assert_eq!(client.appnum().unwrap(), Some(0));
    // The universe's size: the one the test set, else (rbtlrun's default, hydra's
    // unbounded one) the job's or none.
    let universe = client.universe_size().unwrap();
    match std::env::var("RBTL_TEST_UNIVERSE") {
        Ok(v) => assert_eq!(universe, v.parse().ok()),
        Err(_) => assert!(universe.is_none_or(|n| n == size), "{universe:?}"),
    }
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
pub fn job() {
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
    let cpus: Vec<String> = rbtl_testkit::cpus::allowed()
        .iter()
        .map(|c| c.to_string())
        .collect();
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").expect("RBTL_TEST_DIR"));
    std::fs::write(dir.join(format!("cpus.{}", job.rank)), cpus.join(",")).unwrap();
    report_ok(job.rank);
}

/// No launcher: `job()` is a one-process job.
pub fn singleton() {
    assert!(Client::from_env().unwrap().is_none());
    let mut job = pmi::job().unwrap();
    assert_eq!((job.rank, job.size), (0, 1));
    exchange(job.modex.as_mut());
    report_ok(0);
}

/// Rank 1 exits with `code`; the others sleep until the launcher ends them.
pub fn exit(code: i32) {
    if my_rank() == 1 {
        std::process::exit(code);
    }
    sleep_long();
}

/// Rank 0 kills itself with SIGKILL; rank 1 sleeps; rank 2 ignores SIGTERM.
pub fn kill_self() {
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
pub fn echo() {
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

/// Rank 1 aborts the job with `code` and `message`; the others wait in a barrier.
fn rank_1_aborts(code: i32, message: &str) -> ! {
    let mut client = Client::from_env().unwrap().unwrap();
    if client.rank() == 1 {
        client.abort(code, message).unwrap();
    } else {
        let _ = client.barrier();
    }
    sleep_long();
}

/// Rank 1 aborts the job with code 5; the others wait in a barrier.
pub fn abort() {
    rank_1_aborts(5, "rank 1 gives up: no peers");
}

/// Rank 0 creates a shared-memory segment, says where, and dies by SIGKILL.
pub fn shm_crash() {
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
pub fn sleep() {
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

/// Every rank starts PMI; rank 1 then exits with code 0 without finalizing, the
/// others wait in a barrier it will never enter.
pub fn unfinalized() {
    let client = Client::from_env().unwrap().unwrap();
    if client.rank() == 1 {
        std::process::exit(0);
    }
    wait_in_barrier(client);
}

/// Wait in a PMI barrier until the launcher ends the job.
fn wait_in_barrier(mut client: Client) -> ! {
    if let Err(e) = client.barrier() {
        // The launcher closes the connection of a failing job: say so and leave.
        eprintln!("rank {}: {e}", client.rank());
        std::process::exit(1);
    }
    sleep_long();
}

/// Every rank starts PMI; rank 1 then closes its connection without finalizing and
/// lives on, the others wait in a barrier it will never enter.
pub fn pmi_closed() {
    let client = Client::from_env().unwrap().unwrap();
    if client.rank() == 1 {
        drop(client);
        sleep_long();
    }
    wait_in_barrier(client);
}

/// Rank 1 exits with code 0 without ever speaking PMI; the others start PMI and wait
/// in a barrier.
pub fn never_init() {
    if my_rank() == 1 {
        std::process::exit(0);
    }
    unfinalized();
}

/// Rank 1 aborts the job with exit code 0; the others wait in a barrier.
pub fn abort_zero() {
    rank_1_aborts(0, "rank 1 ends the job");
}

/// Rank 3 dies by SIGKILL; rank 1 watches it (as a transport watches a peer) and
/// exits with code 1 the moment it has died; the others sleep.
pub fn blame() {
    let dir = PathBuf::from(std::env::var_os("RBTL_TEST_DIR").unwrap());
    let pid_file = dir.join("pid.3");
    match my_rank() {
        3 => {
            std::fs::write(dir.join("pid.3.tmp"), std::process::id().to_string()).unwrap();
            std::fs::rename(dir.join("pid.3.tmp"), &pid_file).unwrap();
            // Give rank 1 time to start watching.
            thread::sleep(Duration::from_millis(200));
            // SAFETY: signals this very process; nothing is shared.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        1 => {
            let pid: libc::pid_t = loop {
                match std::fs::read_to_string(&pid_file) {
                    Ok(text) => break text.parse().unwrap(),
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            };
            // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
            assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
            let mut poll = libc::pollfd {
                fd: fd as libc::c_int,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll reads and writes the one pollfd on this stack frame.
            let rc = unsafe { libc::poll(&mut poll, 1, 60_000) };
            assert_eq!(rc, 1, "rank 3 did not die");
            std::process::exit(1);
        }
        _ => sleep_long(),
    }
    sleep_long();
}
