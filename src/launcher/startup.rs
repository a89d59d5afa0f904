//! Starting a job's processes: every rank's process first, before the launcher starts
//! the threads that serve them, then (in `job`) the threads. Each start forks the
//! launcher, and a fork copies the launcher's mappings, which grow with every thread's
//! stack: starting ranks after their threads made start-up grow with the square of
//! the ranks. Starting stops early when a signal arrives or a started rank has
//! failed, and a job the process and descriptor limits cannot hold is refused
//! before anything starts.

use super::rank_process::ended;
use super::signals::Watch;
use super::spawn::{start_rank, Place, Started};
use super::{App, Error, LaunchOptions, RankExit};
use std::path::Path;
use std::time::{Duration, Instant};

/// Descriptors the launcher holds per rank: its end of the PMI socket and the server
/// thread's copy of it, and the read ends of the rank's stdout and stderr.
const FDS_PER_RANK: u64 = 4;
/// Tasks per rank, counted by the user's process limit and the kernel's pid space:
/// the rank and the launcher's threads for it (the one that sees it end, its PMI
/// server, its two output forwarders).
const TASKS_PER_RANK: u64 = 5;
/// Descriptors and tasks the launcher needs besides.
const SLACK: u64 = 64;
/// How often, while starting, the ranks started so far are looked at for a failure.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// Why starting stopped before every rank was started.
pub(super) enum Stopped {
    /// A start failed.
    Error(Error),
    /// A signal arrived (the job loop reports it).
    Signal,
    /// This rank, started, has already failed so (the job loop reports it).
    Failed(u32, RankExit),
}

/// Refuse a job of `ranks` that the open-file limit, the user's process limit or the
/// kernel's pid space cannot hold, raising the open-file and process limits' soft
/// values up to their hard ones where that is enough.
pub(super) fn check_limits(ranks: u32) -> Result<(), Error> {
    let ranks = u64::from(ranks);
    raise(
        libc::RLIMIT_NOFILE,
        FDS_PER_RANK * ranks + SLACK,
        "open files (ulimit -n)",
        ranks,
    )?;
    let tasks = TASKS_PER_RANK * ranks + SLACK;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // (Root is not held to the process limit.)
        raise(
            libc::RLIMIT_NPROC,
            tasks,
            "processes and threads (ulimit -u)",
            ranks,
        )?;
    }
    if let Some(pid_max) = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        if tasks > pid_max {
            return Err(Error::Limit {
                ranks,
                need: tasks,
                what: "processes and threads (sysctl kernel.pid_max)",
                limit: pid_max,
            });
        }
    }
    Ok(())
}

/// Raise the soft limit `resource` to `need` if it is lower, as far as its hard limit
/// allows; `Error::Limit` if that is not enough.
fn raise(
    resource: libc::__rlimit_resource_t,
    need: u64,
    what: &'static str,
    ranks: u64,
) -> Result<(), Error> {
    // SAFETY: rlimit is plain integers; getrlimit writes it.
    let mut limit: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: `limit` is ours to write.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 || limit.rlim_cur >= need {
        return Ok(());
    }
    if limit.rlim_max < need {
        return Err(Error::Limit {
            ranks,
            need,
            what,
            limit: limit.rlim_max,
        });
    }
    limit.rlim_cur = need;
    // SAFETY: a soft limit within the hard one, for this process (and its children).
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(Error::Limit {
            ranks,
            need,
            what,
            limit: limit.rlim_cur,
        });
    }
    Ok(())
}

/// Start the processes of ranks `0..opts.ranks`, each program's after those of the
/// programs before it in `apps` (rank `r` bound to `cores[r % len]` if any),
/// stopping at a signal or a started rank's failure: the processes started, in rank
/// order, and why starting stopped early, if it did.
pub(super) fn start_processes(
    apps: &[App],
    opts: &LaunchOptions,
    cores: &[Vec<usize>],
    signals: &Watch,
) -> (Vec<Started>, Option<Stopped>) {
    let mut started: Vec<Started> = Vec::with_capacity(opts.ranks as usize);
    let mut looked = Instant::now();
    let mut rank = 0u32;
    for app in apps {
        let place = Place {
            wdir: app.wdir.as_deref().or(opts.wdir.as_deref()),
            env: &app.env,
            ..Place::default()
        };
        for _ in 0..app.ranks {
            if signals.received().is_some() {
                return (started, Some(Stopped::Signal));
            }
            if looked.elapsed() >= LOOK_EVERY {
                looked = Instant::now();
                if let Some((r, exit)) = first_failed(&started) {
                    return (started, Some(Stopped::Failed(r, exit)));
                }
            }
            let core = (!cores.is_empty()).then(|| &cores[rank as usize % cores.len()][..]);
            let at = (Path::new(&app.program), place);
            match start_rank(at, &app.args, opts, (rank, opts.ranks, true), core) {
                Ok(s) => started.push(s),
                Err(e) => return (started, Some(Stopped::Error(e))),
            }
            rank += 1;
        }
    }
    (started, None)
}

/// The first of the `started` ranks that has ended with a failure, if any (left
/// unreaped).
fn first_failed(started: &[Started]) -> Option<(u32, RankExit)> {
    (0u32..).zip(started).find_map(|(rank, s)| {
        let pid = libc::pid_t::try_from(s.child.id()).ok()?;
        match ended(pid)? {
            RankExit::Exited(0) => None,
            exit => Some((rank, exit)),
        }
    })
}
