//! Soak: 4 ranks on one node under the launcher, each running a seeded random mix of
//! message-layer operations, every payload checked: sends and receives of random sizes
//! (eager and rendezvous; blocking, non-blocking and in scopes; by source and tag, and
//! by any source or any tag in runs without kills), window puts and gets (each origin
//! gets back what it last put), and 64-bit atomics (fetch-add, compare-and-swap, add)
//! through the BTL module that routes each pair, each waited for by that module's
//! `flush`, as the message layer offers no atomics. Some runs kill a rank (SIGKILL): the rank itself at a chosen operation, or
//! this harness once the rank's report shows a chosen number of operations started
//! (landing anywhere in an operation).
//!
//! Each rank appends to a report file as it goes (`report.rs`), so that a killed
//! rank's record survives. Afterwards the harness checks the reports (`checks.rs`): no
//! completed receive, get or fetching atomic carried a wrong value; no message a
//! sender completed went missing at a receiver that survived, unless the sender was
//! killed; every failure is a typed peer failure (`PeerFailed`, `PeerTimeout`, or the
//! BTL's own from an atomic) blaming the killed rank the operation involved (or, for a
//! one-sided operation on a killed target, the device's refusal of the dying target's
//! memory, see `checks.rs`); no rank panicked; every operation
//! a survivor started ended; and the job ended by itself (a watchdog kills it, and
//! fails the test, if not). Runs without a kill must end with exit code 0; runs with
//! one end with the killed rank's signal, which is expected: there the reports are
//! what is checked.
//!
//! Survivors finish their schedule (operations naming a dead rank fail at once, or
//! after `msg_peer_timeout` or the modules' flush timeouts, 5 s here), then wait, progressing, until every other rank
//! has finished or died, so that no rank leaving early fails another's operations;
//! then they call `finalize`.
//!
//! Runs cycle through `sm` and `tcp` (on loopback, `sm` excluded: every message, put,
//! get and atomic between ranks goes over sockets, and a killed rank's end shows as
//! closed connections): no kill over sm (put/get `auto`, windows in the shared heap,
//! direct loads and stores); a rank killing itself over tcp; the harness killing a
//! rank over sm (cross-memory attach, private windows); no kill over tcp; a rank
//! stopped (SIGSTOP) for 1.5 s, within the peer timeout, then let go on (SIGCONT), over
//! sm (rings): the run must end as if nothing happened; a rank killing itself over sm
//! (put/get copied through the rings, private windows); the harness killing a rank over
//! tcp; no kill over sm (rings, private windows); one rank killing itself and the
//! harness killing another, over sm (`auto`) and over tcp; a rank stopped over tcp.
//! Every fault planned must take place (a kill at an operation the schedule never
//! reaches fails the run), and every kind of operation must have run and completed
//! checked somewhere in the soak.
//!
//! With `SOAK_TRANSPORT=openib` (a build with the `openib` feature, on a machine with
//! an RDMA device: `.ci/run` runs it in the soft-RoCE guest) the runs go over `openib`
//! instead, cycling through no fault, a rank killing itself, the harness killing one
//! and a rank stopped for a while.
//!
//! Environment (not `RBTL_*`: the ranks inherit it, and their configuration reads
//! every `RBTL_*` variable as a parameter and refuses those it does not know):
//! * `SOAK_SECONDS` (default 15): runs keep starting until this much time has passed;
//!   at least 5 (each kind of kill, tcp with and without kills, a pause) are made. The
//!   default takes about 20 s.
//! * `SOAK_RUNS`: at most this many runs.
//! * `SOAK_STEPS` (default 120): steps per run (per rank: one exchange of messages,
//!   perhaps a put, a get and an atomic).
//! * `SOAK_SEED`: the first run's seed (default: from the clock); run i uses seed + i,
//!   its faults chosen by i (a failure prints the `SOAK_SEED` and `SOAK_RUNS` that replay it).
//!   Each run prints its seed (`--nocapture`); a failure names it.
//!
//! A long soak: `SOAK_SECONDS=600 SOAK_STEPS=400 cargo test --release --test soak --
//! --nocapture`.

mod atomics;
mod checks;
#[path = "../common/mod.rs"]
mod common;
mod rank;
mod report;
mod schedule;

use checks::Stats;
use rbtl::launcher::LaunchOptions;
use report::RankLog;
use schedule::{Rng, RANKS};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The rank program, when this binary runs as one (a no-op test otherwise).
#[test]
fn rank_role_entry() {
    if let Some(code) = rank::main() {
        std::process::exit(code);
    }
}

/// `bad`'s first lines about each rank (where its trouble began) and how many more
/// there are, so that a short tail of the output still shows how every rank fared.
fn first_of_each_rank(bad: &[String]) -> String {
    const SHOWN: usize = 4;
    let mut per_rank: std::collections::BTreeMap<&str, usize> = Default::default();
    let mut shown = Vec::new();
    for line in bad {
        let rank = line
            .split_once(": ")
            .filter(|(r, _)| r.starts_with("rank "));
        if let Some((rank, _)) = rank {
            let n = per_rank.entry(rank).or_default();
            *n += 1;
            if *n > SHOWN {
                continue;
            }
        }
        shown.push(line.clone());
    }
    for (rank, n) in per_rank.into_iter().filter(|(_, n)| *n > SHOWN) {
        shown.push(format!("{rank}: {} more like these", n - SHOWN));
    }
    shown.join("\n")
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn soak_mixed_operations_with_killed_ranks() {
    let seconds = env_u64("SOAK_SECONDS").unwrap_or(15);
    let max_runs = env_u64("SOAK_RUNS");
    let steps = env_u64("SOAK_STEPS").unwrap_or(120).max(1);
    let first_seed = env_u64("SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let began = Instant::now();
    let mut stats = Stats::default();
    for run in 0.. {
        let out_of_time = began.elapsed() >= Duration::from_secs(seconds);
        let at_least = max_runs.unwrap_or(MIN_RUNS).min(MIN_RUNS);
        if max_runs.is_some_and(|m| run >= m) || (out_of_time && run >= at_least) {
            break;
        }
        let seed = first_seed.wrapping_add(run);
        let plan = Plan::new(run, seed, steps);
        eprintln!("soak run {run}: SOAK_SEED={seed} {plan:?}");
        let bad = plan.run(&mut stats);
        assert!(
            bad.is_empty(),
            "soak run {run} (replay: SOAK_SEED={first_seed} SOAK_RUNS={} SOAK_STEPS={steps}, \
             as a run's faults follow its number; {plan:?}):\n{}",
            run + 1,
            first_of_each_rank(&bad)
        );
    }
    eprintln!(
        "soak: {} runs in {:.1?}, {} ranks killed; {} operations started ({:?}), {} ok, \
         failed {:?}; lost {}, corrupt {}, dropped from killed senders {}",
        stats.runs,
        began.elapsed(),
        stats.kills,
        stats.started,
        stats.by_kind,
        stats.ok,
        stats.failed,
        stats.lost,
        stats.corrupt,
        stats.dropped_from_killed
    );
    // Every kind of operation ran, and completed checked, somewhere in the soak.
    for kind in KINDS {
        let (started, ok) = (
            stats.by_kind.get(kind).copied().unwrap_or(0),
            stats.ok_by_kind.get(kind).copied().unwrap_or(0),
        );
        assert!(
            started > 0 && ok > 0,
            "{kind}: {started} started, {ok} completed and checked ({:?})",
            stats.ok_by_kind
        );
    }
}

/// The kinds of operation a rank's schedule holds.
const KINDS: [&str; 8] = [
    "send",
    "recv",
    "put",
    "get",
    "fetch-add",
    "cswap",
    "cswap-miss",
    "add",
];

/// Runs made at least, whatever the time: the first five of the cycle, which cover
/// no kill, a rank killing itself and the harness killing one, over `sm` and `tcp`
/// with and without kills, and a rank stopped for a while.
const MIN_RUNS: u64 = 5;

/// The transport between the ranks (`self` to themselves).
#[derive(Clone, Copy, Debug)]
enum Between {
    /// `sm`, with its put/get path (`btl_sm_rdma`) and windows in its shared heap
    /// (direct loads and stores) or outside it (put and get through the transport).
    Sm {
        rdma: &'static str,
        private_windows: bool,
    },
    /// `tcp` on loopback, `sm` excluded: put, get and atomics applied by the target.
    Tcp,
    /// `openib` (`SOAK_TRANSPORT=openib`, in the guest with its RDMA device), `sm`
    /// excluded: put, get and atomics by the device.
    Openib,
}

/// What one run does.
#[derive(Clone, Copy, Debug)]
struct Plan {
    seed: u64,
    steps: u64,
    between: Between,
    /// (rank, operation) where a rank kills itself.
    self_kill: Option<(u32, u64)>,
    /// (rank, operations started) after which the harness kills a rank.
    harness_kill: Option<(u32, u64)>,
    /// (rank, operations started) after which the harness stops a rank (SIGSTOP) for
    /// [`PAUSE`], then lets it go on (SIGCONT).
    pause: Option<(u32, u64)>,
}

/// How long a paused rank stays stopped: well within the peer timeout (5 s), so that
/// the pause must cost nothing but time.
const PAUSE: Duration = Duration::from_millis(1500);

/// What the harness does to a rank.
#[derive(Clone, Copy)]
enum Fault {
    Kill,
    Pause,
}

impl Plan {
    fn new(run: u64, seed: u64, steps: u64) -> Plan {
        let mut rng = Rng::new(seed, 0x50a4, 0);
        // A rank starts about three operations a step: kill in the first two thirds.
        let (a, b) = (1 + rng.below(2 * steps), 1 + rng.below(2 * steps));
        let victim = rng.below(u64::from(RANKS)) as u32;
        let other = (victim + 1 + rng.below(u64::from(RANKS) - 1) as u32) % RANKS;
        let plan = |between, self_kill, harness_kill| Plan {
            seed,
            steps,
            between,
            self_kill,
            harness_kill,
            pause: None,
        };
        let paused = |between| Plan {
            pause: Some((victim, a)),
            ..plan(between, None, None)
        };
        let sm = |rdma, private_windows| Between::Sm {
            rdma,
            private_windows,
        };
        let (kills_itself, killed_too) = (Some((victim, a)), Some((other, b)));
        if std::env::var("SOAK_TRANSPORT").as_deref() == Ok("openib") {
            return match run % 4 {
                0 => plan(Between::Openib, None, None),
                1 => plan(Between::Openib, kills_itself, None),
                2 => plan(Between::Openib, None, Some((victim, a))),
                _ => paused(Between::Openib),
            };
        }
        match run % 11 {
            0 => plan(sm("auto", false), None, None),
            1 => plan(Between::Tcp, kills_itself, None),
            2 => plan(sm("cma", true), None, Some((victim, a))),
            3 => plan(Between::Tcp, None, None),
            4 => paused(sm("copy", true)),
            5 => plan(sm("copy", true), kills_itself, None),
            6 => plan(Between::Tcp, None, Some((victim, a))),
            7 => plan(sm("copy", true), None, None),
            8 => plan(sm("auto", false), kills_itself, killed_too),
            9 => plan(Between::Tcp, kills_itself, killed_too),
            _ => paused(Between::Tcp),
        }
    }

    fn kills(&self) -> bool {
        self.self_kill.is_some() || self.harness_kill.is_some()
    }

    /// How long a rank may run before its own watchdog ends it.
    fn rank_limit(&self) -> Duration {
        Duration::from_secs(60 + self.steps / 2)
    }

    /// The ranks' environment.
    fn env(&self, dir: &Path, shm: &Path) -> Vec<(String, String)> {
        let mut env = vec![
            ("SOAK_RANK_DIR", dir.display().to_string()),
            ("SOAK_RANK_SEED", self.seed.to_string()),
            ("SOAK_RANK_STEPS", self.steps.to_string()),
            ("SOAK_RANK_LIMIT", self.rank_limit().as_secs().to_string()),
            ("RBTL_SHM_DIR", shm.display().to_string()),
        ];
        match self.between {
            Between::Sm {
                rdma,
                private_windows,
            } => {
                env.push(("RBTL_BTL_SM_RDMA", rdma.to_string()));
                if private_windows {
                    env.push(("RBTL_BTL_SM_HEAP_SIZE", "0".into()));
                }
            }
            // (The launcher's environment holds RBTL_BTL_TCP_IF_INCLUDE=lo.)
            Between::Tcp => env.push(("RBTL_BTL", "self,tcp".into())),
            Between::Openib => {
                env.push(("RBTL_BTL", "self,openib".into()));
                env.push(("SOAK_RANK_OPENIB", "1".into()));
            }
        }
        if !self.kills() {
            env.push(("SOAK_RANK_WILDCARDS", "1".into()));
        }
        if let Some((rank, op)) = self.self_kill {
            env.push(("SOAK_RANK_SELF_KILL", format!("{rank}:{op}")));
        }
        env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    /// Run the job; what went wrong, as sentences.
    fn run(&self, stats: &mut Stats) -> Vec<String> {
        let dir =
            std::env::temp_dir().join(format!("rbtl-soak-{}-{}", std::process::id(), self.seed));
        let shm = dir.join("shm");
        std::fs::create_dir_all(&shm).unwrap();
        let _cleanup = TempDir(dir.clone());
        let opts = LaunchOptions {
            ranks: RANKS,
            env: self.env(&dir, &shm),
            // Survivors end by themselves: the launcher must not end them first.
            grace: Duration::from_secs(60),
            ..LaunchOptions::default()
        };
        let over = Arc::new(AtomicBool::new(false));
        let fault = |(rank, after): (u32, u64), fault: Fault| {
            let (dir, over) = (dir.clone(), over.clone());
            std::thread::spawn(move || fault_when(&dir, rank, after, &over, fault))
        };
        let killer = self.harness_kill.map(|k| fault(k, Fault::Kill));
        let pauser = self.pause.map(|p| fault(p, Fault::Pause));
        let limit = self.rank_limit() + Duration::from_secs(30);
        let (stop, watchdog) = watchdog(dir.clone(), limit);
        let began = Instant::now();
        let code = common::launch(opts);
        let took = began.elapsed();
        over.store(true, Ordering::Release);
        let _ = stop.send(());
        let fired = watchdog.join().unwrap();
        let harness_killed = killer.is_some_and(|k| k.join().unwrap());
        let paused = pauser.is_some_and(|p| p.join().unwrap());
        let logs: Vec<RankLog> = (0..RANKS)
            .map(|r| RankLog::read(&report::path(&dir, r)))
            .collect();
        let mut killed = Vec::new();
        if let Some((rank, _)) = self.self_kill {
            if logs[rank as usize].killed_self {
                killed.push(rank);
            }
        }
        if let (Some((rank, _)), true) = (self.harness_kill, harness_killed) {
            killed.push(rank);
        }
        let mut run = Stats {
            runs: 1,
            kills: killed.len() as u64,
            ..Stats::default()
        };
        let mut bad = checks::check(self.kills(), &killed, code, &logs, &mut run);
        // Every fault planned took place.
        if let Some((rank, op)) = self.self_kill {
            if !logs[rank as usize].killed_self {
                bad.push(format!(
                    "rank {rank} was to kill itself at operation {op} and did not"
                ));
            }
        }
        if let Some((rank, after)) = self.harness_kill.filter(|_| !harness_killed) {
            bad.push(format!(
                "the harness was to kill rank {rank} after {after} operations and did not"
            ));
        }
        if let Some((rank, after)) = self.pause.filter(|_| !paused) {
            bad.push(format!(
                "the harness was to stop rank {rank} after {after} operations and did not"
            ));
        }
        if fired {
            bad.push(format!(
                "the job did not end by itself within {limit:?}: killed"
            ));
        }
        let left: Vec<_> = std::fs::read_dir(&shm)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        if !left.is_empty() {
            bad.push(format!("shared-memory segments left behind: {left:?}"));
        }
        eprintln!(
            "  {took:.1?}, exit code {code}, killed {killed:?}: {} operations, {} ok, \
             failed {:?}, lost {}, corrupt {}, dropped from killed senders {}",
            run.started, run.ok, run.failed, run.lost, run.corrupt, run.dropped_from_killed
        );
        stats.add(run);
        bad
    }
}

/// Removes a run's directory, whatever happens.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Do `fault` to `rank` once its report shows `after` operations started: SIGKILL,
/// or SIGSTOP then SIGCONT [`PAUSE`] later; whether it did.
fn fault_when(dir: &Path, rank: u32, after: u64, over: &AtomicBool, fault: Fault) -> bool {
    while !over.load(Ordering::Acquire) {
        let text = std::fs::read_to_string(report::path(dir, rank)).unwrap_or_default();
        if text.lines().any(|l| l == "done") {
            return false;
        }
        let started = text.lines().filter(|l| l.starts_with("start ")).count() as u64;
        let pid = text
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .and_then(|p| p.parse::<i32>().ok());
        if let (true, Some(pid)) = (started >= after, pid) {
            return match fault {
                // SAFETY: a signal to a rank of the running job, which the launcher
                // has not reaped: it waits for every rank before it returns.
                Fault::Kill => (unsafe { libc::kill(pid, libc::SIGKILL) }) == 0,
                Fault::Pause => {
                    // SAFETY: as above.
                    let stopped = unsafe { libc::kill(pid, libc::SIGSTOP) } == 0;
                    std::thread::sleep(PAUSE);
                    // SAFETY: as above.
                    stopped && unsafe { libc::kill(pid, libc::SIGCONT) } == 0
                }
            };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// A thread that SIGKILLs every rank of the job in `dir` (and its process group) if
/// nothing arrives on the channel within `limit`; it says whether it did.
fn watchdog(
    dir: PathBuf,
    limit: Duration,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<bool>) {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        if stopped.recv_timeout(limit).is_ok() {
            return false;
        }
        for r in 0..RANKS {
            if let Some(pid) = RankLog::read(&report::path(&dir, r)).pid {
                // SAFETY: signals to a rank of the job, a process group leader (the
                // launcher starts each rank in a group of its own), and its group.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
        true
    });
    (stop, thread)
}
