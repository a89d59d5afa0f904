//! The OSU micro-benchmarks 7.2 (`../shared/external`), built unmodified by
//! `tools/osu.sh` with this build's `mpicc` against the MPI Forum's reference header,
//! run as a user runs them:
//!
//! * on this node under `mpiexec`: every point-to-point and one-sided benchmark at 2
//!   ranks (the one-sided ones on dynamic windows too), every blocking and nonblocking collective at 2 and 4 ranks, every
//!   neighbourhood collective at 4 (OSU's own least for its grid), with OSU's own
//!   check of the data it moved (`-c`) wherever the benchmark has one that holds (not
//!   `osu_fop_latency`'s, which fails on Open MPI as well);
//! * `osu_latency_mt` (`MPI_THREAD_MULTIPLE`) at 2 ranks, with two threads on each
//!   side (checked) and with its default threads;
//! * across two simulated nodes (`tools/nodes.sh`), `osu_latency`, `osu_bw` and
//!   `osu_allreduce` under MPICH's hydra and under Slurm (`srun --mpi=pmi2`), their
//!   data over tcp on the nodes' network (the bytes node 1's link carried are
//!   counted). These need root, MPICH and Slurm (`bash tools/packages.sh install host
//!   nodes`): without them they say SKIP, unless `NODES_REQUIRED=1`; then they fail.
//!
//! Every run must exit 0 and print its title and one table row per size asked for,
//! every value positive and every check `Pass`. The suite is built once per test run
//! (into `target/osu/abi-<profile>`, left as it is when up to date). The tests take
//! turns: one job of this file on the machine at a time, and one set of simulated
//! nodes (the tool refuses a second set: a set held by another process is waited for,
//! within a limit).

use crate::{report, run_limited};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// How a benchmark's table is laid out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Table {
    /// One row per size, 1 B to the largest asked for (`-m 1:MAX`), doubling.
    Sizes,
    /// One row, for the size of one element (the atomics, on `MPI_CHAR`: 1).
    Element,
    /// One row holding the latency alone (`osu_barrier`, which has no sizes).
    Latency,
}

/// A benchmark of the suite.
struct Bench {
    name: &'static str,
    /// Its title line.
    title: &'static str,
    table: Table,
    /// Whether it checks the data it moved: a `Pass` or `Fail` per row.
    checks: Check,
}

/// OSU's check of the data a benchmark moved.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    /// It has none.
    No,
    /// `-c`.
    Yes,
    /// `-c`, with its own warm-up (`-u`) shortened to one iteration.
    Warm,
}

/// A benchmark whose title is `# OSU <what> Test v7.2`.
macro_rules! bench {
    ($name:literal, $what:literal, $table:expr, $checks:expr) => {
        Bench {
            name: $name,
            title: concat!("# OSU ", $what, " Test v7.2"),
            table: $table,
            checks: $checks,
        }
    };
}

use Check::{No, Warm, Yes};
use Table::{Element, Latency, Sizes};

/// Point-to-point, standard and persistent (`osu_latency_mt` apart: see its test).
#[rustfmt::skip]
const PT2PT: &[Bench] = &[
    bench!("osu_latency", "MPI Latency", Sizes, Warm),
    bench!("osu_bw", "MPI Bandwidth", Sizes, Warm),
    bench!("osu_bibw", "MPI Bi-Directional Bandwidth", Sizes, Warm),
    bench!("osu_latency_mp", "MPI Multi-process Latency", Sizes, Warm),
    bench!("osu_mbw_mr", "MPI Multiple Bandwidth / Message Rate", Sizes, Warm),
    bench!("osu_multi_lat", "MPI Multi Latency", Sizes, Warm),
    bench!("osu_latency_persistent", "MPI Latency Persistent", Sizes, Warm),
    bench!("osu_bw_persistent", "MPI Bandwidth Persistent", Sizes, Warm),
    bench!("osu_bibw_persistent", "MPI Bi-Directional Bandwidth Persistent", Sizes, Warm),
];

/// One-sided, each with its own default window and synchronization.
#[rustfmt::skip]
const ONE_SIDED: &[Bench] = &[
    bench!("osu_put_latency", "MPI_Put Latency", Sizes, No),
    bench!("osu_get_latency", "MPI_Get latency", Sizes, No),
    bench!("osu_put_bw", "MPI_Put Bandwidth", Sizes, No),
    bench!("osu_get_bw", "MPI_Get Bandwidth", Sizes, No),
    bench!("osu_put_bibw", "MPI_Put Bi-directional Bandwidth", Sizes, No),
    bench!("osu_acc_latency", "MPI_Accumulate latency", Sizes, Yes),
    bench!("osu_get_acc_latency", "MPI_Get_accumulate latency", Sizes, No),
    // OSU's check of it fails on Open MPI too, with the same values (the target
    // finds one more operation's worth than the check expects).
    bench!("osu_fop_latency", "MPI_Fetch_and_op latency", Element, No),
    bench!("osu_cas_latency", "MPI_Compare_and_swap latency", Element, Yes),
];

/// Blocking collectives. `osu_barrier` lists `-c` in its help but refuses it.
#[rustfmt::skip]
const COLLECTIVES: &[Bench] = &[
    bench!("osu_allgather", "MPI Allgather Latency", Sizes, Warm),
    bench!("osu_allgatherv", "MPI Allgatherv Latency", Sizes, Warm),
    bench!("osu_allreduce", "MPI Allreduce Latency", Sizes, Warm),
    bench!("osu_alltoall", "MPI All-to-All Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_alltoallv", "MPI All-to-Allv Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_alltoallw", "MPI All-to-Allw Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_barrier", "MPI Barrier Latency", Latency, No),
    bench!("osu_bcast", "MPI Broadcast Latency", Sizes, Warm),
    bench!("osu_gather", "MPI Gather Latency", Sizes, Warm),
    bench!("osu_gatherv", "MPI Gatherv Latency", Sizes, Warm),
    bench!("osu_reduce", "MPI Reduce Latency", Sizes, Warm),
    bench!("osu_reduce_scatter", "MPI Reduce_scatter Latency", Sizes, Warm),
    bench!("osu_scatter", "MPI Scatter Latency", Sizes, Warm),
    bench!("osu_scatterv", "MPI Scatterv Latency", Sizes, Warm),
];

/// Nonblocking collectives: each row gives the overall time, the computation OSU
/// overlaps, the communication alone and the overlap (which may be 0).
#[rustfmt::skip]
const NONBLOCKING_COLLECTIVES: &[Bench] = &[
    bench!("osu_iallgather", "MPI Non-blocking Allgather Latency", Sizes, Warm),
    bench!("osu_iallgatherv", "MPI Non-blocking Allgatherv Latency", Sizes, Warm),
    bench!("osu_iallreduce", "MPI Non-blocking Allreduce Latency", Sizes, Warm),
    bench!("osu_ialltoall", "MPI Non-blocking All-to-All Latency", Sizes, Warm),
    bench!("osu_ialltoallv", "MPI Non-blocking All-to-Allv Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_ialltoallw", "MPI Non-blocking All-to-Allw Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_ibarrier", "MPI Non-blocking Barrier Latency", Latency, No),
    bench!("osu_ibcast", "MPI Non-Blocking Broadcast Latency", Sizes, Warm),
    bench!("osu_igather", "MPI Non-blocking Gather Latency", Sizes, Warm),
    bench!("osu_igatherv", "MPI Non-blocking Gatherv Latency", Sizes, Warm),
    bench!("osu_ireduce", "MPI Non-blocking Reduce Latency", Sizes, Warm),
    bench!("osu_ireduce_scatter", "MPI Non-blocking Reduce_scatter Latency", Sizes, Warm),
    bench!("osu_iscatter", "MPI Non-blocking Scatter Latency", Sizes, Warm),
    bench!("osu_iscatterv", "MPI Non-blocking Scatterv Latency", Sizes, Warm),
];

/// Neighbourhood collectives, blocking and nonblocking, on OSU's default grid (two
/// dimensions, radius 1: it needs 4 ranks at least). `osu_neighbor_alltoallw` bears
/// `osu_alltoallw`'s title.
#[rustfmt::skip]
const NEIGHBOURHOOD_COLLECTIVES: &[Bench] = &[
    bench!("osu_neighbor_allgather", "MPI Neighborhood Allgather Latency", Sizes, Warm),
    bench!("osu_neighbor_allgatherv", "MPI Neighborhood Allgatherv Latency", Sizes, Warm),
    bench!("osu_neighbor_alltoall", "MPI Neighborhood Alltoall Latency", Sizes, Warm),
    bench!("osu_neighbor_alltoallv", "MPI Neighborhood All-to-Allv Latency", Sizes, Warm),
    bench!("osu_neighbor_alltoallw", "MPI All-to-Allw Personalized Exchange Latency", Sizes, Warm),
    bench!("osu_ineighbor_allgather", "MPI Non-blocking Neighborhood Allgather Latency", Sizes, Warm),
    bench!("osu_ineighbor_allgatherv", "MPI Non-blocking Neighborhood Allgatherv Latency", Sizes, Warm),
    bench!("osu_ineighbor_alltoall", "MPI Non-blocking Neighborhood Alltoall Latency", Sizes, Warm),
    bench!("osu_ineighbor_alltoallv", "MPI Non-blocking Neighborhood Alltoallv Latency", Sizes, Warm),
    bench!("osu_ineighbor_alltoallw", "MPI Non-blocking Neighborhood Alltoallw Latency", Sizes, Warm),
];

/// How long a run on this node may take: far above what it needs, so that only a
/// hang (or a machine many times slower) reaches it.
const RUN_LIMIT: Duration = Duration::from_secs(120);
/// How long building the suite may take (`tools/osu.sh` bounds each of its steps
/// and its wait for another build of the same folder below this).
const BUILD_LIMIT: Duration = Duration::from_secs(1900);

/// One job of this file at a time (two cores serve every rank), and one set of
/// simulated nodes.
static TURN: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The suite's `bin/` folder (every benchmark by name), built by the first test
/// that needs it; the others wait for it.
fn suite() -> &'static Path {
    static SUITE: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match SUITE.get_or_init(build_suite) {
        Ok(bin) => bin,
        Err(why) => panic!("{why}"),
    }
}

fn build_suite() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/osu.sh");
    let profile = Path::new(crate::MPICC).parent().expect("a folder");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg("abi").arg(profile);
    let o = run_limited(&mut cmd, BUILD_LIMIT)?;
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    if !o.status.success() {
        return Err(format!(
            "{cmd:?} could not build the OSU suite ({}):\n{err}",
            o.status
        ));
    }
    let bin = PathBuf::from(out.lines().last().unwrap_or("").trim());
    match bin.join("osu_latency").is_file() {
        true => Ok(bin),
        false => Err(format!(
            "{cmd:?} named no folder of benchmarks:\n{out}{err}"
        )),
    }
}

/// The sizes of a `Sizes` table up to `max`: 1, 2, 4, ... `max`.
fn sizes(max: usize) -> Vec<usize> {
    std::iter::successors(Some(1usize), |s| Some(s * 2))
        .take_while(|&s| s <= max)
        .collect()
}

/// The benchmark's options: `iterations` timed after `warmup`, sizes up to `max`,
/// OSU's check of the data where it has one (after one check's warm-up).
fn options(b: &Bench, iterations: u32, warmup: u32, max: usize) -> Vec<String> {
    let mut args = vec![
        "-i".to_string(),
        iterations.to_string(),
        "-x".to_string(),
        warmup.to_string(),
    ];
    if b.table != Latency {
        args.extend(["-m".to_string(), format!("1:{max}")]);
    }
    match b.checks {
        No => {}
        Yes => args.push("-c".to_string()),
        Warm => args.extend(["-c", "-u", "1"].map(String::from)),
    }
    args
}

/// Checks what a run of `b` printed: its title (before it only `#` lines, blank
/// ones, and the neighbourhood benchmarks' lines on their grid), then its table (the
/// lines after the title up to a blank line, `#` lines and the atomics' per-rank
/// validation reports apart), one row per size asked for (up to `max`), the first
/// value positive and the others not negative (a nonblocking collective's overlap
/// may be 0), every row's check passed and no line of either output saying
/// `FAILED`. Returns the rows (size, first value; size 0 when the table has no
/// sizes).
fn check_table(b: &Bench, o: &Output, max: usize) -> Result<Vec<(usize, f64)>, String> {
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if let Some(l) = stdout
        .lines()
        .chain(stderr.lines())
        .find(|l| l.starts_with("FAILED"))
    {
        return Err(format!("a data check failed: `{l}`"));
    }
    let mut lines = stdout.lines();
    for line in lines.by_ref() {
        if line == b.title {
            break;
        }
        let grid = ["Dimensions size = ", "Time took to create topology graph:"]
            .iter()
            .any(|p| line.starts_with(p));
        if !line.starts_with('#') && !line.trim().is_empty() && !grid {
            return Err(format!("`{line}` before the title `{}`", b.title));
        }
    }
    let mut rows = Vec::new();
    for line in lines {
        // The atomic benchmarks' validation reports (`-c`), one per rank between lines
        // of dashes, may come before or among the rows: each rank's output reaches the
        // launcher through its own pipe.
        let report = ["---", "Atomic Data Validation", "PASSED:"]
            .iter()
            .any(|p| line.starts_with(p));
        if line.starts_with('#') || report || (line.trim().is_empty() && rows.is_empty()) {
            continue;
        }
        if line.trim().is_empty() {
            break;
        }
        let mut words: Vec<&str> = line.split_whitespace().collect();
        if b.checks != No {
            match words.pop() {
                Some("Pass" | "passed") => {}
                _ => return Err(format!("`{line}`: the data check did not pass")),
            }
        }
        let size = match b.table {
            Latency => 0,
            Sizes | Element => {
                let size = words.first().and_then(|w| w.parse::<usize>().ok());
                words.remove(0);
                size.ok_or_else(|| format!("`{line}` does not start with a size"))?
            }
        };
        if words.is_empty() {
            return Err(format!("`{line}` has no value"));
        }
        let mut values = Vec::new();
        for w in &words {
            match w.parse::<f64>() {
                Ok(v) if v >= 0.0 && v.is_finite() && (v > 0.0 || !values.is_empty()) => {
                    values.push(v)
                }
                _ => return Err(format!("`{line}`: `{w}` is not a value in range")),
            }
        }
        rows.push((size, values[0]));
    }
    let got: Vec<usize> = rows.iter().map(|r| r.0).collect();
    let want = match b.table {
        Sizes => sizes(max),
        Element => vec![1],
        Latency => vec![0],
    };
    if got != want {
        return Err(format!("rows for sizes {got:?}, asked for {want:?}"));
    }
    Ok(rows)
}

/// Runs each of `benches` at `ranks` on this node (`iterations` after `warmup`,
/// sizes up to `max`); panics naming every one that failed, and how.
fn run_each(benches: &[Bench], ranks: usize, iterations: u32, warmup: u32, max: usize) {
    run_each_with(benches, ranks, (iterations, warmup, max), &[]);
}

/// [`run_each`], each benchmark given `extra` options too.
fn run_each_with(
    benches: &[Bench],
    ranks: usize,
    (iterations, warmup, max): (u32, u32, usize),
    extra: &[&str],
) {
    let bin = suite();
    let _turn = turn();
    let mut failed = Vec::new();
    for b in benches {
        let mut cmd = Command::new(crate::MPIEXEC);
        cmd.args(["-n", &ranks.to_string()])
            .arg(bin.join(b.name))
            .args(options(b, iterations, warmup, max))
            .args(extra)
            // The tcp transport opens beside sm: on loopback only.
            .env("RBTL_BTL_TCP_IF_INCLUDE", "lo");
        let shown = format!("{cmd:?}");
        let why = match run_limited(&mut cmd, RUN_LIMIT) {
            Err(why) => why,
            Ok(o) if !o.status.success() => format!("failed\n{}", report(&o)),
            Ok(o) => match check_table(b, &o, max) {
                Ok(_) => continue,
                Err(why) => format!("{why}\n{}", report(&o)),
            },
        };
        failed.push(format!("{} at {ranks} ranks: {shown}: {why}", b.name));
    }
    assert!(
        failed.is_empty(),
        "{} of {} benchmarks failed:\n\n{}",
        failed.len(),
        benches.len(),
        failed.join("\n\n")
    );
}

#[test]
fn every_point_to_point_benchmark_runs_at_two_ranks() {
    // Up to 64 KiB: past sm's eager limit, into its rendezvous.
    run_each(PT2PT, 2, 10, 2, 64 << 10);
}

#[test]
fn every_one_sided_benchmark_runs_at_two_ranks() {
    run_each(ONE_SIDED, 2, 10, 2, 64 << 10);
}

/// On windows of `MPI_Win_create_dynamic`, the memory attached and reached by
/// address, with each kind of synchronization OSU offers.
#[test]
fn every_one_sided_benchmark_runs_on_a_dynamic_window() {
    run_each_with(ONE_SIDED, 2, (10, 2, 64 << 10), &["-w", "dynamic"]);
    let sync = ["lock", "flush_local", "lock_all", "pscw", "fence"];
    let latency = &ONE_SIDED[..2];
    for s in sync {
        run_each_with(latency, 2, (10, 2, 4 << 10), &["-w", "dynamic", "-s", s]);
    }
}

#[test]
fn every_blocking_collective_runs_at_two_and_four_ranks() {
    run_each(COLLECTIVES, 2, 10, 2, 16 << 10);
    // Four ranks on two cores take turns on them: fewer iterations and sizes.
    run_each(COLLECTIVES, 4, 5, 1, 4 << 10);
}

#[test]
fn every_nonblocking_collective_runs_at_two_and_four_ranks() {
    run_each(NONBLOCKING_COLLECTIVES, 2, 10, 2, 16 << 10);
    run_each(NONBLOCKING_COLLECTIVES, 4, 5, 1, 4 << 10);
}

#[test]
fn every_neighbourhood_collective_runs_at_four_ranks() {
    run_each(NEIGHBOURHOOD_COLLECTIVES, 4, 5, 1, 4 << 10);
}

/// `osu_latency_mt` (`MPI_THREAD_MULTIPLE`): two sending and two receiving threads,
/// OSU checking the data (its check needs as many of each); then its default, one
/// sending thread against two receiving ones, which it cannot check. OSU 7.2's
/// `osu_latency_mt` returns from `main` without `MPI_Finalize` (it finalizes only
/// a session), so the launcher ends the job as failed, saying so, as Open MPI's
/// `mpirun` does: the table must be whole and the launcher's note the only
/// complaint.
#[test]
fn osu_latency_mt_runs_with_several_threads_per_rank() {
    let checked = bench!("osu_latency_mt", "MPI Multi-threaded Latency", Sizes, Warm);
    let default = bench!("osu_latency_mt", "MPI Multi-threaded Latency", Sizes, No);
    let bin = suite();
    let _turn = turn();
    let max = 64 << 10;
    for (b, threads) in [(&checked, "2:2"), (&default, "1:2")] {
        let mut cmd = Command::new(crate::MPIEXEC);
        cmd.args(["-n", "2"])
            .arg(bin.join(b.name))
            .args(options(b, 10, 2, max))
            .args(["-t", threads])
            .env("RBTL_BTL_TCP_IF_INCLUDE", "lo");
        let o = run_limited(&mut cmd, RUN_LIMIT).unwrap_or_else(|why| panic!("{why}"));
        if let Err(why) = check_table(b, &o, max) {
            panic!("{threads} threads: {why}\n{}", report(&o));
        }
        let stderr = String::from_utf8_lossy(&o.stderr);
        let unfinalized = "exited with code 0 without finalizing PMI";
        assert!(
            stderr.lines().all(|l| l.contains(unfinalized)),
            "{threads} threads: a complaint besides the missing MPI_Finalize:\n{}",
            report(&o)
        );
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{threads} threads: {}",
            report(&o)
        );
    }
}

/// The table of an atomic benchmark is read whatever order the ranks' validation
/// reports reach the launcher in; without its row it is refused.
#[test]
fn tables_are_read_among_the_ranks_validation_reports() {
    use std::os::unix::process::ExitStatusExt;
    let cas = ONE_SIDED
        .iter()
        .find(|b| b.name == "osu_cas_latency")
        .unwrap();
    let report = |rank: u32| {
        format!(
            "---\nAtomic Data Validation results for Rank={rank}:\n\
             PASSED: All 1 combinations of ops and datatypes tested passed.\n---\n"
        )
    };
    let output = |table: &str| Output {
        status: std::process::ExitStatus::from_raw(0),
        stdout: format!("{}\n# Size Latency (us) Validation\n{table}", cas.title).into_bytes(),
        stderr: Vec::new(),
    };
    let row = "1                       6.06            passed\n";
    for table in [
        format!("{row}{}{}", report(0), report(1)),
        format!("{}{row}{}", report(1), report(0)),
    ] {
        let got = check_table(cas, &output(&table), 1);
        assert_eq!(got, Ok(vec![(1, 6.06)]), "{table}");
    }
    let no_row = format!("{}{}", report(1), report(0));
    assert!(check_table(cas, &output(&no_row), 1).is_err());
}

mod nodes;
