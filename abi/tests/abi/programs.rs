// Over 600 lines on purpose: a test per program, each a few lines, and the helpers
// they share.
//! The library's own conformance programs (`programs/*.c`), each built with `mpicc`
//! against the MPI Forum's reference header and run under `mpiexec` at the rank
//! counts it is meant for: every rank must print its `PASS` line, none a `FAIL`
//! line, and the job must end with status 0. Each program checks one chapter of
//! the standard, as long as that chapter's checks need (the collectives' and
//! point-to-point's are the longest).
//!
//! * `p2p`: point-to-point in every mode, wildcards, ordering, truncation, probes,
//!   cancel, the completion calls, persistent requests, large messages.
//! * `datatype`: every datatype constructor, bounds and sizes, decoding, packing,
//!   matching type signatures, absolute addresses.
//! * `comm`: communicators, groups, attributes, names, topologies, info objects
//!   (run again under the launchers' options in [`super::launchers`]).
//! * `coll`: every collective, blocking and nonblocking, against results computed
//!   locally, at 1 to 8 ranks and at 12 (where the barrier disseminates again).
//! * `algorithms`: each all-reduce, broadcast, barrier and all-gather algorithm a
//!   user may choose (`msg_<collective>_algorithm`), checked to run and to give the
//!   reference result, at 1 to 7 ranks.
//! * `large`: the large-count (`_c`) bindings that their `int` twins serve, those
//!   with arrays of counts too, and a count beyond `int` in a reduction refused, at
//!   1 to 3 ranks.
//! * `bigcount`: counts beyond `int` (2^31 + 7 bytes) sent, received and broadcast,
//!   blocking and nonblocking, and counted back, at 1 and 2 ranks (2 GiB per rank).
//! * `neighbor`: the neighbourhood collectives, blocking and nonblocking, on a
//!   Cartesian grid (edges, and a neighbour on both sides), on distributed graphs
//!   made from each rank's edges and from parts of the graph (repeated edges, a rank
//!   its own neighbour, weights) and on an MPI-1 graph; the graphs' errors, one
//!   rank's bad edge failing all; at 1 to 6 ranks.
//! * `rma`: one-sided communication: windows created and allocated, put and get
//!   with derived types under fences, locks and flushes, post/start/complete/wait,
//!   every accumulate, concurrent atomic increments, the request-based operations,
//!   the errors of each, at 1 to 4 ranks.
//! * `progress`: with the progress thread on, a rank that computes without calling
//!   MPI answers a lock, a shipped accumulate and a rendezvous another rank waits
//!   for, over `sm` and `tcp`, at 2 and 3 ranks.
//! * `shared`: shared-memory windows: contiguous parts, `MPI_Win_shared_query`,
//!   loads and stores beside puts and accumulates, at 1 to 4 ranks, from the `sm`
//!   heap or a segment of the window's own (a small heap, `tcp` alone); refused
//!   alike by every rank across nodes.
//! * `errors`: the error classes of bad input, through each kind of error handler;
//!   freed and foreign handles; the environment's inquiries; at 1, 2 and 4 ranks
//!   (where some members learn of others' differing counts only from a third).
//! * `fatal`: the default error handler ends the job, naming the call.
//! * `threads`: `MPI_THREAD_MULTIPLE`: several threads of each rank at once, in
//!   point-to-point calls and collectives, blocking calls (a barrier, a fence,
//!   `MPI_Win_start`, `MPI_Win_wait`, `MPI_Win_lock` and `_lock_all`, the making
//!   and merging of intercommunicators, `MPI_Comm_accept`) that wait for another
//!   thread of their own rank, and communicators (intercommunicators among them),
//!   windows, files and spawned processes made by two threads at once, in opposite
//!   orders on two ranks, at 1 to 3 ranks.
//! * `partitioned`: partitioned sends and receives around the ring: rounds,
//!   partitions ready in any order, cut differently at each end, strided, apart
//!   from wildcard receives, the errors, at 1 to 3 ranks.
//! * `session`: sessions before and beside the world model, and alone: process
//!   sets, communicators from groups, their traffic kept apart, error handlers, at
//!   1 to 3 ranks.
//! * `inquiry`: MPI 4.1's and 5.0's inquiries (the ABI's info, the environment's,
//!   requests' statuses without completion), error classes removed, the value-index
//!   pairs, status conversions, at 1 and 2 ranks.
//! * `grequest`: generalized requests: their functions (an MPI call from each),
//!   completion by another thread, cancel, free before completion, their errors.
//! * `spawn`: dynamic processes: a refused spawn, a spawn, traffic both ways over
//!   the intercommunicator, its barrier, `MPI_Intercomm_create` of both worlds,
//!   merge and disconnect, then the two jobs connected again through a port; a
//!   spawn from one parent alone, met by all through `MPI_Intercomm_create`, then
//!   through a port between groups of both jobs, which then spawn one more.
//! * `ports`: ports and names: accept and connect (twice on one port), publish,
//!   look up and withdraw a name, and their errors; two ranks joined over a
//!   loopback socket (`MPI_Comm_join`), at 2 and 3 ranks.
//! * `representations`: packing in `external32` (sizes, bytes, round trips alone
//!   and between ranks, conversions refused) and the Fortran 90 parameterized
//!   types, at 1 and 2 ranks.
//! * `callbacks`: MPI calls from inside the library's callbacks: a reduction
//!   function's (blocking collectives and `MPI_Reduce_local`; its type's size and
//!   bounds in nonblocking and persistent ones), attribute copy and delete
//!   functions', `MPI_COMM_SELF`'s at `MPI_Finalize`.
//!
//! The program calling every function not implemented is in [`super::unsupported`].

use super::unsupported::{unsupported_functions, Function};
use super::{compile, mpiexec, report, scratch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

/// The folder of the programs' sources.
fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/abi/programs")
}

/// Build `programs/<name>.c` against the reference header: the executable.
/// Built once per run of the tests: those that run the same program at once share
/// the executable (a second build would remove it under the first).
pub(crate) fn build(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(exe) = built.get(name) {
        return exe.clone();
    }
    let dir = scratch(&format!("programs-{name}"));
    let exe = dir.join(name);
    compile(&sources().join(format!("{name}.c")), &exe, true);
    built.insert(name.to_string(), exe.clone());
    exe
}

/// The longest a job may run: far above what it needs, so that only a hang (or a
/// machine many times slower) reaches it.
const LIMIT: Duration = Duration::from_secs(120);

/// Asserts that the job `what` printed no `FAIL` (no check of its program failed).
fn assert_no_failed_check(o: &Output, what: &str) {
    let printed = [&o.stdout, &o.stderr].map(|bytes| String::from_utf8_lossy(bytes));
    assert!(
        printed.iter().all(|text| !text.contains("FAIL")),
        "{what}: a check failed\n{}",
        report(o)
    );
}

/// Run `exe` (program `name`) at `ranks` with `args` and the environment `genv`:
/// it must succeed on every rank. What it printed.
pub(crate) fn run_passing(
    exe: &Path,
    name: &str,
    ranks: usize,
    args: &[&str],
    genv: &[(&str, &str)],
) -> Output {
    let mut cmd = Command::new(super::MPIEXEC);
    cmd.args(["-n", &ranks.to_string()]);
    for (k, v) in genv {
        cmd.args(["-genv", k, v]);
    }
    job_passes(
        cmd.arg(exe).args(args),
        name,
        ranks,
        &format!("{name} at {ranks} ranks"),
    )
}

/// Run `cmd`, a job of program `name` at `ranks` (`shown` in messages): it must
/// succeed on every rank. What it printed.
pub(crate) fn job_passes(cmd: &mut Command, name: &str, ranks: usize, shown: &str) -> Output {
    let o = super::run_for(cmd, LIMIT);
    assert_no_failed_check(&o, shown);
    if let Err(why) = passed(&o, name, ranks) {
        panic!("{shown}: {why}");
    }
    o
}

/// Whether the job `o` of program `name` at `ranks` ended well, every rank having
/// reported success; else why not, with what it printed.
pub(crate) fn passed(o: &Output, name: &str, ranks: usize) -> Result<(), String> {
    let out = String::from_utf8_lossy(&o.stdout);
    if !o.status.success() || out.contains("FAIL") {
        return Err(format!(
            "{name} at {ranks} ranks ended with {:?}\n{}",
            o.status,
            report(o)
        ));
    }
    match (0..ranks).find(|r| {
        !out.lines()
            .any(|l| l == format!("PASS {name} rank {r}/{ranks}"))
    }) {
        Some(r) => Err(format!(
            "{name} at {ranks} ranks: rank {r} did not report success\n{}",
            report(o)
        )),
        None => Ok(()),
    }
}

/// Build `name` and run it at each of `ranks`.
fn passes(name: &str, ranks: &[usize]) {
    let exe = build(name);
    for &n in ranks {
        run_passing(&exe, name, n, &[], &[]);
    }
}

#[test]
fn p2p() {
    passes("p2p", &[2, 3]);
}

#[test]
fn datatype() {
    passes("datatype", &[2, 3]);
}

#[test]
fn comm() {
    passes("comm", &[1, 2, 3, 4]);
}

/// And at 2 ranks both ways a broadcast of 16-128 KiB goes there, whatever this host's
/// reads by address: whole where they are worth it, in pieces where not (as the
/// node's first rank finds them, here set).
#[test]
fn coll() {
    passes("coll", &[1, 2, 3, 4, 5, 6, 7, 8, 12]);
    let exe = build("coll");
    for below in ["0", "1m"] {
        run_passing(
            &exe,
            "coll",
            2,
            &[],
            &[("RBTL_BTL_SM_BY_ADDRESS_BELOW", below)],
        );
    }
}

/// Each collective algorithm a user may choose (`msg_allreduce_algorithm`,
/// `msg_bcast_algorithm`, `msg_barrier_algorithm`, `msg_allgather_algorithm`) runs
/// where it applies (the program counts each rank's sends and receives) and gives
/// the reference result; `auto` alike. An unknown one is refused at start-up, the
/// error naming the parameter, and so are ranks that chose otherwise than rank 0.
#[test]
fn collective_algorithms() {
    let exe = build("algorithms");
    let chosen = [
        ["auto", "auto", "auto", "auto"],
        ["doubling", "binomial", "dissemination", "doubling"],
        ["ring", "in_order", "gathered", "ring"],
        ["halving", "flat", "dissemination", "doubling"],
        ["gathered", "binomial", "gathered", "ring"],
    ];
    let names =
        ["ALLREDUCE", "BCAST", "BARRIER", "ALLGATHER"].map(|p| format!("RBTL_MSG_{p}_ALGORITHM"));
    for algorithms in chosen {
        let genv: Vec<(&str, &str)> = names.iter().map(String::as_str).zip(algorithms).collect();
        for n in [1, 2, 3, 4, 6, 7] {
            run_passing(&exe, "algorithms", n, &algorithms, &genv);
        }
    }
    let mut cmd = Command::new(super::MPIEXEC);
    cmd.args([
        "-n",
        "1",
        "-genv",
        "RBTL_MSG_ALLREDUCE_ALGORITHM",
        "butterfly",
    ]);
    let o = super::run_for(
        cmd.arg(&exe).args(["butterfly", "auto", "auto", "auto"]),
        LIMIT,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("msg_allreduce_algorithm") && err.contains("halving"),
        "an unknown algorithm: {}",
        report(&o)
    );
    // Ranks that chose otherwise than rank 0 are refused at start-up, not left to
    // wait in their first all-reduce for messages nobody sends.
    let exe = exe.to_str().unwrap();
    let (first, others) = (["auto"; 4], ["ring", "auto", "auto", "auto"]);
    let mut cmd = Command::new(super::MPIEXEC);
    cmd.args(["-n", "1", exe])
        .args(first)
        .args([":", "-n", "2", "-env", &names[0], "ring", exe])
        .args(others);
    let o = super::run_for(&mut cmd, LIMIT);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("must be the same at every rank")
            && err.contains("msg_allreduce_algorithm = auto at rank 0")
            && err.contains("msg_allreduce_algorithm = ring at rank "),
        "algorithms chosen unlike rank 0's: {}",
        report(&o)
    );
}

/// Intercommunicators between the even and the odd ranks: every collective across.
#[test]
fn intercomm() {
    passes("intercomm", &[2, 3, 4, 5]);
}

/// MPI-IO: in a folder of the test's own (`TMPDIR`), which the program removes.
#[test]
fn io() {
    let exe = build("io");
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("io");
    std::fs::create_dir_all(&tmp).unwrap();
    let tmp = tmp.to_str().unwrap();
    for n in [1, 2, 3, 4] {
        run_passing(&exe, "io", n, &[], &[("TMPDIR", tmp)]);
    }
}

/// The tool information interface: rbtl's parameters as control variables (one set
/// through the environment, as a user would), the message layer's performance
/// variables.
#[test]
fn tool() {
    let exe = build("tool");
    for n in [1, 2] {
        run_passing(&exe, "tool", n, &[], &[("RBTL_MSG_PEER_TIMEOUT", "77")]);
    }
}

/// Subarray and distributed-array types, the `_x` queries.
#[test]
fn arrays() {
    passes("arrays", &[1, 2, 3]);
}

/// `MPI_Alloc_mem`, statuses written by hand, info lookups, hints.
#[test]
fn utilities() {
    passes("utilities", &[1, 2]);
}

#[test]
fn partitioned() {
    passes("partitioned", &[1, 2, 3]);
}

#[test]
fn session() {
    passes("session", &[1, 2, 3]);
    let exe = build("session");
    for n in [1, 3] {
        run_passing(&exe, "session", n, &["only"], &[]);
    }
}

#[test]
fn representations() {
    passes("representations", &[1, 2]);
}

#[test]
fn inquiry() {
    passes("inquiry", &[1, 2]);
}

#[test]
fn grequest() {
    passes("grequest", &[1, 2]);
}

#[test]
fn large_count() {
    passes("large", &[1, 2, 3]);
}

/// Counts beyond `int` in the large-count forms: moved and counted back.
#[test]
fn big_count() {
    passes("bigcount", &[1, 2]);
}

#[test]
fn neighbor() {
    passes("neighbor", &[1, 2, 3, 4, 6]);
}

#[test]
fn rma() {
    passes("rma", &[1, 2, 3, 4]);
}

/// Over `tcp` alone no member maps another's memory: every accumulate that no
/// transport atomic performs is shipped to its target and applied there.
#[test]
fn rma_over_tcp() {
    let exe = build("rma");
    for n in [2, 3] {
        run_passing(&exe, "rma", n, &[], &[("RBTL_BTL", "self,tcp")]);
    }
}

/// With `msg_progress_thread` at 100 µs, a rank that computes without calling MPI
/// still answers what another rank waits for: its lock word, an accumulate shipped
/// to it, a rendezvous; over `sm` and over `tcp` alone. (Without the thread the
/// computing rank gives up after 20 s and fails.)
#[test]
fn a_computing_rank_progresses_with_the_progress_thread() {
    let exe = build("progress");
    for btl in ["self,sm", "self,tcp"] {
        for n in [2, 3] {
            let genv = [("RBTL_BTL", btl), ("RBTL_MSG_PROGRESS_THREAD", "100")];
            run_passing(&exe, "progress", n, &[], &genv);
        }
    }
}

/// Also with a heap of 16 MiB, which cannot hold the window of 48 MiB of
/// `test_large`: it becomes a segment of its own, which every rank maps.
#[test]
fn shared_windows() {
    passes("shared", &[1, 2, 3, 4]);
    let exe = build("shared");
    run_passing(&exe, "shared", 3, &[], &[("RBTL_BTL_SM_HEAP_SIZE", "16m")]);
}

/// Over `tcp` alone no transport has a heap: the ranks of the node still share a
/// segment of the window's own. (Across nodes every rank is refused alike:
/// `osu::nodes`.)
#[test]
fn shared_windows_over_tcp_alone_share_a_segment() {
    let exe = build("shared");
    run_passing(&exe, "shared", 2, &[], &[("RBTL_BTL", "self,tcp")]);
}

/// A lock whose holder computes past the peer timeout is waited for; one whose holder
/// waits for the rank that wants it is given up on with `MPI_ERR_RMA_SYNC` (`rma.c
/// held-lock`, with `msg_peer_timeout` at 1 s). Where the two ranks share one
/// processor, the waiter sleeps between its tries, leaving the processor to the
/// holder whatever their sessions (a yield seldom hands it to another session); with
/// a processor each, it yields.
#[test]
fn a_lock_held_while_computing_is_waited_for_and_one_held_while_waiting_is_given_up() {
    let exe = build("rma");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let first = rbtl_testkit::cpus::allowed()[0].to_string();
    for shared in [true, false] {
        if !shared && cpus < 2 {
            continue;
        }
        let mut cmd = if shared {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", &first, super::MPIEXEC]);
            c
        } else {
            std::process::Command::new(super::MPIEXEC)
        };
        let o = super::run_for(
            cmd.args(["-n", "2", "-genv", "RBTL_MSG_PEER_TIMEOUT", "1"])
                .arg(&exe)
                .arg("held-lock"),
            LIMIT,
        );
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && !out.contains("FAIL"),
            "{}",
            report(&o)
        );
        for r in 0..2 {
            assert!(
                out.contains(&format!("PASS rma rank {r}/2")),
                "{}",
                report(&o)
            );
        }
        // Sleeps of tens of microseconds over 2.5 s, against the few of the probes.
        let pauses: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("held-lock: rank 0 gave up the processor "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count of pauses: {}", report(&o)));
        assert_eq!(
            pauses >= 1000,
            shared,
            "rank 0 gave up the processor {pauses} times, sharing one with the holder: {shared}"
        );
    }
}

#[test]
fn errors() {
    passes("errors", &[1, 2, 4]);
}

/// Parents at 1 and 2 ranks spawn two children, then their first rank two more,
/// then all of those and the parents one: every parent and child reports. A child
/// asked on this node (the info key `host`) runs there; one asked elsewhere is
/// refused on every rank. Four parents spawning on their own at once, over `tcp`:
/// every child reports.
#[test]
fn spawn() {
    let exe = build("spawn");
    for parents in [1, 2] {
        let o = run_passing(&exe, "spawn", parents, &[], &[]);
        assert_children_passed(&o, &format!("spawn from {parents} ranks"));
    }
    let o = run_passing(&exe, "spawn", 2, &["placed"], &[]);
    assert!(
        printed(&o, PLACED_PASSED),
        "the child placed on this node did not report\n{}",
        report(&o)
    );
    run_passing(&exe, "spawn", 2, &["misplaced", "elsewhere.invalid"], &[]);
    let o = run_passing(
        &exe,
        "spawn",
        4,
        &["selves", "3"],
        &[("RBTL_BTL", "self,tcp")],
    );
    if let Err(why) = selves_reported(&o, 4, 3) {
        panic!("{why}\n{}", report(&o));
    }
}

/// Whether every child of `parents` parents of `spawn selves ROUNDS` (the job `o`)
/// reported success: three a round.
pub(crate) fn selves_reported(o: &Output, parents: usize, rounds: usize) -> Result<(), String> {
    let expected = parents * rounds * 3;
    let reported = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with("PASS spawn-self rank "))
        .count();
    match reported == expected {
        true => Ok(()),
        false => Err(format!(
            "{reported} of the {expected} children of parents spawning on their own reported"
        )),
    }
}

/// What the child of `spawn placed` prints once it ran where it was asked to.
pub(crate) const PLACED_PASSED: &str = "PASS spawn-placed rank 0/1";

/// Whether the job `o` printed `line`, whole, on its standard output.
pub(crate) fn printed(o: &Output, line: &str) -> bool {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .any(|l| l == line)
}

/// Every process that the program `spawn` started (the job `o`, `shown`) reported
/// success.
pub(crate) fn assert_children_passed(o: &Output, shown: &str) {
    let children = [
        ("child", 0, 2),
        ("child", 1, 2),
        ("late", 0, 2),
        ("late", 1, 2),
        ("grand", 0, 1),
    ];
    for (who, c, n) in children {
        let line = format!("PASS spawn-{who} rank {c}/{n}");
        assert!(
            printed(o, &line),
            "{shown}: {who} {c} did not report success\n{}",
            report(o)
        );
    }
}

/// Ports and names: one side accepts, the other connects (twice on one port),
/// found by its published name; the intercommunicator carries traffic and merges.
#[test]
fn ports() {
    passes("ports", &[2, 3]);
}

/// `MPI_THREAD_MULTIPLE`: threads of a rank calling at once, blocking calls that
/// end only after another thread of the same rank has made its call; a value
/// asked for between two levels gets the lower.
#[test]
fn threads() {
    passes("threads", &[1, 2, 3]);
    run_passing(&build("threads"), "threads", 2, &["between"], &[]);
}

/// MPI calls from inside the library's callbacks (a user's reduction function,
/// attribute callbacks, `MPI_COMM_SELF`'s delete callbacks at `MPI_Finalize`).
#[test]
fn callbacks() {
    passes("callbacks", &[1, 2, 3]);
}

/// Each case of `fatal.c` (its argument), with the words its job's error output
/// must hold, and the job's exit status (`None`: any but 0).
const FATAL: &[(&str, &[&str], Option<i32>)] = &[
    ("send", &["MPI_Send", "MPI_ERR_RANK"], None),
    ("wait", &["MPI_Wait", "MPI_ERR_TRUNCATE"], None),
    ("bcast", &["MPI_Bcast", "MPI_ERR_ROOT"], None),
    ("type", &["MPI_Type_size", "MPI_ERR_TYPE"], None),
    ("errors_abort", &["MPI_Recv", "MPI_ERR_TAG"], None),
    ("call_errhandler", &["MPI_Comm_call_errhandler"], None),
    ("abort", &["MPI_Abort", "7"], Some(7)),
    (
        "init_thread",
        &["MPI_Init_thread", "MPI_ERR_ARG", "provided"],
        None,
    ),
];

/// Run a job that must end through an error: `case`'s job at 2 ranks, whose error
/// output holds `words`, with exit `status` (`None`: any but 0).
fn run_fatal(exe: &Path, case: &str, args: &[&str], words: &[&str], status: Option<i32>) {
    let o = mpiexec(2, exe, args, LIMIT);
    assert_no_failed_check(&o, &format!("fatal {case}"));
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "fatal {case}: the job ended with status 0\n{}",
        report(&o)
    );
    if let Some(s) = status {
        assert_eq!(
            o.status.code(),
            Some(s),
            "fatal {case}: the job's status\n{}",
            report(&o)
        );
    }
    for w in words {
        assert!(
            err.contains(w),
            "fatal {case}: the error output does not say {w:?}\n{}",
            report(&o)
        );
    }
    assert!(
        out.contains(&format!("REACHED {case}")),
        "fatal {case}: the program did not reach the faulty call\n{}",
        report(&o)
    );
    assert!(
        !out.contains("PASS") && !out.contains("RETURNED"),
        "fatal {case}: the faulty call returned\n{}",
        report(&o)
    );
}

/// The default error handler (and `MPI_ERRORS_ABORT`, and `MPI_Abort`) ends the
/// whole job, with a status that is not 0 and a message naming the call; also for
/// a function the library does not implement, where the header has one (but in
/// the tool interface, whose functions return codes).
#[test]
fn fatal() {
    let exe = build("fatal");
    for &(case, words, status) in FATAL {
        run_fatal(&exe, case, &[case], words, status);
    }
    // One that takes a communicator if any is left, else one of no object (whose
    // error goes to MPI_COMM_SELF's handler, fatal by default as well).
    let unsupported = unsupported_functions();
    let on_comm =
        |f: &&Function| f.object.as_deref() == Some("MPI_Comm") && !f.name.starts_with("MPI_File_");
    let Some(f) = (unsupported.iter().find(on_comm))
        .or_else(|| unsupported.iter().find(|f| !f.name.starts_with("MPI_T_")))
    else {
        return;
    };
    let program = format!(
        r#"/* fatal_unsupported.c, written by the test: a function the library does not
 * implement ends the job through the default error handler. */
#include "check.h"

int main(int argc, char **argv) {{
  start("fatal", &argc, &argv);
  if (rank == 0) {{
    printf("REACHED unsupported\n");
    fflush(stdout);
    int rc = {call};
    printf("RETURNED %d\n", rc);
  }} else {{
    int x;
    MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }}
  return finish();
}}
"#,
        call = f.call("")
    );
    let exe = build_written("fatal_unsupported", &program);
    let words = [f.name.as_str(), "MPI_ERR_UNSUPPORTED_OPERATION"];
    run_fatal(&exe, "unsupported", &[], &words, None);
}

/// Build a program the test wrote (`check.h` beside it): the executable.
pub(crate) fn build_written(name: &str, program: &str) -> PathBuf {
    let dir = scratch(&format!("programs-{name}"));
    let source = dir.join(format!("{name}.c"));
    std::fs::write(&source, program).expect("write the program");
    std::fs::copy(sources().join("check.h"), dir.join("check.h")).expect("copy check.h");
    let exe = dir.join(name);
    compile(&source, &exe, true);
    exe
}
