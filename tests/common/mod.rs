//! What the multi-process test binaries share: this binary, started again under the
//! launcher as the rank program; and, for tests of a hang, a watchdog and a rank
//! stopped with SIGSTOP.

#[allow(dead_code)] // not every binary that shares this module uses it
pub mod offered;

use rbtl::btl::Proc;
use rbtl::launcher::{self, LaunchOptions};
use std::time::{Duration, Instant};

/// The job's `size` ranks as `add_procs` takes them, all on one node.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn procs(size: u32) -> Vec<Proc> {
    (0..size)
        .map(|rank| Proc {
            rank,
            node: "n".into(),
        })
        .collect()
}

/// Run `ranks` copies of this test binary, each running only its `rank_role_entry`
/// test with `env` added (and the tcp transport on loopback); the job's exit code.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn launch_ranks(ranks: u32, env: Vec<(String, String)>) -> i32 {
    launch(LaunchOptions {
        ranks,
        env,
        grace: Duration::from_secs(5),
        ..LaunchOptions::default()
    })
}

/// Run this test binary as the rank program under `opts`, each rank running only its
/// `rank_role_entry` test, with the tcp transport on loopback (`lo`, unless `opts`
/// names the loopback addresses itself, such as `::1/128`); the job's exit code.
pub fn launch(mut opts: LaunchOptions) -> i32 {
    // The tcp transport opens beside the others: on loopback only.
    const INCLUDE: &str = "RBTL_BTL_TCP_IF_INCLUDE";
    let given = opts.env.iter().find(|(k, _)| k == INCLUDE);
    match given.map(|(_, v)| v.as_str()) {
        None => opts.env.push((INCLUDE.into(), "lo".into())),
        Some("lo" | "::1/128" | "127.0.0.1/32") => {}
        // The addresses of a network namespace the test made (the benchmarking range).
        Some(nets) if nets.split(',').all(benchmarking_network) => {}
        Some(other) => panic!(
            "{INCLUDE}={other}: tests use loopback, or networks of 198.18.0.0/15 in a \
             namespace they made"
        ),
    }
    let exe = std::env::current_exe().unwrap();
    let args: Vec<std::ffi::OsString> = [
        "rank_role_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(Into::into)
    .collect();
    launcher::launch(&exe, &args, &opts).unwrap().code
}

/// Whether `cidr` is a network within 198.18.0.0/15.
fn benchmarking_network(cidr: &str) -> bool {
    use rbtl::tcp::family::Net;
    let range = Net::parse("198.18.0.0/15").expect("a network");
    Net::parse(cidr).is_some_and(|n| n.prefix >= range.prefix && range.contains(n.addr))
}

/// Tests that each run one job and expect every rank to report success: each entry
/// `name: role, ranks, env;`, under its doc comment, becomes the test `name`, which
/// calls `expect_all_ok(role, ranks, env)` of the binary that holds it.
#[allow(unused_macros)] // not every binary that shares this module uses it
macro_rules! all_ok_tests {
    ($($(#[$doc:meta])* $name:ident: $role:expr, $ranks:expr, $env:expr;)+) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                expect_all_ok($role, $ranks, $env);
            }
        )+
    };
}
#[allow(unused_imports)] // not every binary that shares this module uses it
pub(crate) use all_ok_tests;

/// Exit with code 99 if this rank still runs after `limit`: a test of a hang fails by
/// itself, in bounded time, with a code that says so.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("watchdog: still running after {limit:?}");
        std::process::exit(99);
    });
}

/// The state letter of process `pid` (`T` when stopped, `Z` a zombie): `None` once
/// it is gone.
#[allow(dead_code)]
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit(')').next()?;
    after_name.trim_start().chars().next()
}

/// Whether process `pid` has ended: gone, or a zombie its parent has not reaped.
#[allow(dead_code)]
pub fn process_ended(pid: i32) -> bool {
    process_state(pid).is_none_or(|state| state == 'Z')
}

/// A process stopped by SIGSTOP (a rank that answers nothing, while its kernel may
/// still take what comes), sent SIGCONT when dropped: it runs again, whatever happens
/// to the test.
#[allow(dead_code)]
pub struct Continue(i32);

#[allow(dead_code)]
impl Continue {
    /// Stop `pid` and wait until it is stopped (a hang guard fails after 10 s).
    pub fn stop(pid: i32) -> Continue {
        // SAFETY: a signal to a rank of this job; the guard sends SIGCONT in any case.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let resume = Continue(pid);
        wait_until_stopped(pid);
        resume
    }
}

/// Wait until process `pid` is stopped (a hang guard fails after 10 s).
#[allow(dead_code)]
pub fn wait_until_stopped(pid: i32) {
    let stopping = Instant::now();
    while process_state(pid) != Some('T') {
        assert!(
            stopping.elapsed() < Duration::from_secs(10),
            "process {pid} did not stop"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl Drop for Continue {
    fn drop(&mut self) {
        // SAFETY: a signal to a rank of this job.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Progress `m` until `done` holds; a hang guard fails the test after 60 s, naming
/// `what` it waited for.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn progress_until(m: &mut dyn rbtl::btl::Module, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        if m.progress() == 0 {
            std::thread::yield_now();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "still waiting for {what}"
        );
    }
}

/// Assert that `e` is a flush's `PeerTimeout` naming rank `rank` at `ep` alone, silent
/// for `silent_for`, the value of `param`.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn assert_timed_out_on(
    e: &rbtl::btl::Error,
    (ep, rank): (rbtl::btl::Endpoint, u32),
    silent_for: Duration,
    param: &str,
) {
    let peer = rbtl::btl::SilentPeer { endpoint: ep, rank };
    match e {
        rbtl::btl::Error::PeerTimeout {
            peers,
            silent_for: silent,
            param: named,
        } => {
            assert_eq!(peers[..], [peer], "{e}");
            assert_eq!((*silent, *named), (silent_for, param), "{e}");
        }
        other => panic!("expected PeerTimeout, got {other:?}"),
    }
}

/// `flush(None)` of `m`, which gives up on `peer` (its endpoint and rank) alone once it
/// was silent for `timeout` (the value of `param`; and well within 20 s): the error,
/// checked by [`assert_timed_out_on`].
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn flush_giving_up_on(
    m: &mut dyn rbtl::btl::Module,
    peer: (rbtl::btl::Endpoint, u32),
    timeout: Duration,
    param: &str,
) -> rbtl::btl::Error {
    let start = Instant::now();
    let e = m.flush(None).expect_err("a peer does not answer");
    let took = start.elapsed();
    assert!(
        took >= timeout && took < Duration::from_secs(20),
        "flush gave up after {took:?}, for a timeout of {timeout:?}"
    );
    assert_timed_out_on(&e, peer, timeout, param);
    e
}

/// The senders of the messages that come to `m` on `tag`, in order.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn senders(
    m: &mut dyn rbtl::btl::Module,
    tag: rbtl::btl::Tag,
) -> std::sync::Arc<std::sync::Mutex<Vec<rbtl::btl::Endpoint>>> {
    let got: std::sync::Arc<std::sync::Mutex<Vec<rbtl::btl::Endpoint>>> = Default::default();
    let g = got.clone();
    m.register_am(
        tag,
        Box::new(move |_, r| g.lock().unwrap().push(r.endpoint)),
    )
    .unwrap();
    got
}

/// What `m`'s error callback hears, each report as `note` makes it.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn errors_heard<T: Send + 'static>(
    m: &mut dyn rbtl::btl::Module,
    note: fn(&rbtl::btl::ErrorEvent) -> T,
) -> std::sync::Arc<std::sync::Mutex<Vec<T>>> {
    let heard: std::sync::Arc<std::sync::Mutex<Vec<T>>> = Default::default();
    let h = heard.clone();
    m.register_error(Box::new(move |e| h.lock().unwrap().push(note(e))));
    heard
}

/// How many messages have come to `m` on `tag`, counted with `Release` ordering.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn arrivals(
    m: &mut dyn rbtl::btl::Module,
    tag: rbtl::btl::Tag,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let count: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
    let c = count.clone();
    m.register_am(
        tag,
        Box::new(move |_, _| {
            c.fetch_add(1, std::sync::atomic::Ordering::Release);
        }),
    )
    .unwrap();
    count
}

/// Send an 8-byte descriptor to `ep` on `tag` that owns itself and always calls back:
/// its completion status, as `note` makes it, goes to `statuses`. The send's outcome
/// (a refused send's descriptor is dropped).
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn send_noted<T: Send + 'static>(
    m: &mut dyn rbtl::btl::Module,
    ep: rbtl::btl::Endpoint,
    tag: rbtl::btl::Tag,
    statuses: &std::sync::Arc<std::sync::Mutex<Vec<T>>>,
    note: fn(&rbtl::btl::Result<()>) -> T,
) -> rbtl::btl::Result<rbtl::btl::SendOutcome> {
    use rbtl::btl::{DesFlags, DescriptorRequest, SendCompletion};
    let flags = DesFlags::OWNERSHIP | DesFlags::ALWAYS_CALLBACK;
    let mut des = m
        .alloc(&DescriptorRequest::new(ep, 8).flagged(flags))
        .expect("a send descriptor");
    let st = statuses.clone();
    des.set_callback(Box::new(move |_, done: SendCompletion| {
        st.lock().unwrap().push(note(&done.status))
    }));
    m.send(ep, des, tag).map_err(|e| e.error)
}

/// Offer this rank's memory at `addr`, registered as `handle`, through `job`'s modex
/// under `key`, fence, and read `peer`'s offer: its address and handle.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn swap_regions(
    job: &mut rbtl::pmi::Job,
    key: &str,
    addr: u64,
    handle: &rbtl::btl::MemHandle,
    peer: u32,
) -> (u64, rbtl::btl::RemoteHandle) {
    let mut blob = addr.to_le_bytes().to_vec();
    blob.extend_from_slice(handle.remote().as_bytes());
    job.modex.publish(key, &blob).unwrap();
    job.modex.fence().unwrap();
    let theirs = job.modex.lookup(peer, key).unwrap().unwrap();
    rbtl_conformance::remote_of(&theirs)
}

/// The partners of this rank of `job` in the contract suite: rank ^ 1, then (with 4
/// ranks or more) rank ^ 2, so that it meets several peers at once.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn contract_partners(job: &rbtl::pmi::Job) -> Vec<u32> {
    let mut partners = vec![job.rank ^ 1];
    if job.size >= 4 {
        partners.push(job.rank ^ 2);
    }
    partners
}

/// The contract suite over `m`, which reaches the ranks of `job` through `eps`: with
/// each of `partners` in turn, one pairing at a time (a fence after each: nobody starts
/// the next round's exchange early); then every rank at once on rank 0's words.
#[allow(dead_code)] // not every binary that shares this module calls it
pub fn contract_suite(
    m: &mut dyn rbtl::btl::Module,
    eps: &[Option<rbtl::btl::Endpoint>],
    job: &mut rbtl::pmi::Job,
    partners: &[u32],
) {
    for &partner in partners {
        let ep = eps[partner as usize].expect("the transport reaches every partner");
        rbtl_conformance::run_all(m, ep);
        job.modex.fence().unwrap();
    }
    let rank = job.rank as usize;
    let mut meet = meet_through_modex(job);
    rbtl_conformance::atomics_on_shared_words(m, eps, rank, &mut meet);
}

/// Meet every rank of `job` through its PMI modex: publish this rank's bytes, fence,
/// read every rank's, by rank (for checks that run on every rank at once).
#[allow(dead_code)] // not every binary that shares this module uses it
pub fn meet_through_modex(job: &mut rbtl::pmi::Job) -> impl FnMut(&[u8]) -> Vec<Vec<u8>> + '_ {
    // Keys never published before by this process, whichever meeting asks.
    static ROUND: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    move |mine: &[u8]| {
        let round = ROUND.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = format!("meet.{round}");
        job.modex.publish(&key, mine).unwrap();
        job.modex.fence().unwrap();
        (0..job.size)
            .map(|r| job.modex.lookup(r, &key).unwrap().unwrap_or_default())
            .collect()
    }
}
