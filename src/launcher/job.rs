//! Running a job: start every rank with its PMI server and output forwarding, watch
//! them, end the survivors when one fails, and clean up after them.

use super::cores::cores;
use super::spawn::start_rank;
use super::{output, server, signals};
use super::{Abort, Bind, Error, ExitStatusSummary, LaunchOptions, RankExit};
use std::ffi::OsString;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long SIGTERM has before SIGKILL follows.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for output still held open by a rank's leftover children.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// One started rank.
struct Rank {
    child: Child,
    exit: Option<RankExit>,
    /// The launcher's end of the PMI socketpair, to shut down at the end.
    pmi: UnixStream,
}

/// What the launcher is doing about a failure.
#[derive(Clone, Copy)]
enum Phase {
    Running,
    /// Waiting for the survivors until then.
    Grace(Instant),
    /// SIGTERM sent; SIGKILL at that time.
    Terminating(Instant),
    /// SIGKILL sent.
    Killed,
}

/// Starts `opts.ranks` ranks of `program` with `args`, serves them PMI-1, forwards
/// their output, and returns how they ended once all have. While it runs, SIGINT,
/// SIGTERM and SIGHUP to this process end the job instead of the process (the
/// previous handlers are restored afterwards). Errors are for a job that could not
/// be started; a failing job is an `Ok` summary with a non-zero code.
pub fn launch(
    program: &Path,
    args: &[OsString],
    opts: &LaunchOptions,
) -> Result<ExitStatusSummary, Error> {
    if opts.ranks == 0 {
        return Err(Error::NoRanks);
    }
    let cores = match opts.bind {
        Bind::None => Vec::new(),
        Bind::Core => cores().map_err(Error::Affinity)?,
    };
    let signal_watch = signals::Watch::install();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let kvsname = format!("rbtl_kvs_{}_{}", std::process::id(), now.as_nanos());
    let shared = server::Shared::new(opts.ranks, kvsname);
    let (events_tx, events) = mpsc::channel();
    let (output_done_tx, output_done) = mpsc::channel::<()>();

    let mut ranks: Vec<Rank> = Vec::new();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut output_threads = 0usize;
    let mut started = Ok(());
    for rank in 0..opts.ranks {
        let core = (!cores.is_empty()).then(|| &cores[rank as usize % cores.len()][..]);
        match start_rank(program, args, opts, rank, core) {
            Ok((mut child, pmi)) => {
                let spawn_thread = |name: String, f: Box<dyn FnOnce() + Send>| {
                    thread::Builder::new()
                        .name(name)
                        .spawn(f)
                        .map_err(Error::Thread)
                };
                let result = (|| {
                    let server_end = pmi
                        .try_clone()
                        .map_err(|source| Error::Socket { rank, source })?;
                    let (shared, events_tx) = (shared.clone(), events_tx.clone());
                    threads.push(spawn_thread(
                        format!("pmi-{rank}"),
                        Box::new(move || server::serve(rank, server_end, shared, events_tx)),
                    )?);
                    let tag = opts.tag_output;
                    if let Some(out) = child.stdout.take() {
                        let done = output_done_tx.clone();
                        spawn_thread(
                            format!("stdout-{rank}"),
                            Box::new(move || {
                                output::forward(out, rank, tag, output::Stream::Stdout);
                                let _ = done.send(());
                            }),
                        )?;
                        output_threads += 1;
                    }
                    if let Some(err) = child.stderr.take() {
                        let done = output_done_tx.clone();
                        spawn_thread(
                            format!("stderr-{rank}"),
                            Box::new(move || {
                                output::forward(err, rank, tag, output::Stream::Stderr);
                                let _ = done.send(());
                            }),
                        )?;
                        output_threads += 1;
                    }
                    Ok(())
                })();
                ranks.push(Rank {
                    child,
                    exit: None,
                    pmi,
                });
                if let Err(e) = result {
                    started = Err(e);
                    break;
                }
            }
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    drop(events_tx);
    drop(output_done_tx);

    let mut job_code: Option<i32> = None;
    let mut abort: Option<Abort> = None;
    let mut interrupted: Option<i32> = None;
    let mut phase = Phase::Running;
    if started.is_err() {
        // End what did start, then report the failure.
        phase = terminate(&mut ranks);
    }
    loop {
        match events.recv_timeout(POLL) {
            Ok(server::Event::Abort {
                rank,
                code,
                message,
            }) => {
                eprintln!(
                    "[rbtl launcher] rank {rank} aborted the job with exit code {code}: {message}"
                );
                job_code.get_or_insert(code);
                abort.get_or_insert(Abort {
                    rank,
                    code,
                    message,
                });
                if matches!(phase, Phase::Running | Phase::Grace(_)) {
                    phase = terminate(&mut ranks);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout | mpsc::RecvTimeoutError::Disconnected) => {}
        }
        if let Some(signal) = signal_watch.received() {
            if interrupted.is_none() {
                eprintln!("[rbtl launcher] got signal {signal}: ending the job");
                interrupted = Some(signal);
                job_code.get_or_insert(128 + signal);
                if matches!(phase, Phase::Running | Phase::Grace(_)) {
                    phase = terminate(&mut ranks);
                }
            }
        }
        let mut ended = Vec::new();
        for (rank, r) in ranks.iter_mut().enumerate() {
            if r.exit.is_none() {
                if let Ok(Some(status)) = r.child.try_wait() {
                    let exit = RankExit::from_status(status);
                    r.exit = Some(exit);
                    ended.push((rank, exit));
                }
            }
        }
        let alive = ranks.iter().filter(|r| r.exit.is_none()).count();
        for (rank, exit) in ended.into_iter().filter(|(_, exit)| !exit.success()) {
            if job_code.is_none() {
                job_code = Some(exit.code());
                let more = if alive > 0 && matches!(phase, Phase::Running) {
                    format!(
                        "; the other ranks get {:.1} s to exit, then SIGTERM",
                        opts.grace.as_secs_f64()
                    )
                } else {
                    String::new()
                };
                eprintln!("[rbtl launcher] rank {rank} {exit}{more}");
            }
            if let Phase::Running = phase {
                // Capped so that an absurd grace cannot overflow the clock.
                let grace = opts.grace.min(Duration::from_secs(365 * 24 * 3600));
                phase = Phase::Grace(Instant::now() + grace);
            }
        }
        if ranks.iter().all(|r| r.exit.is_some()) {
            break;
        }
        let now = Instant::now();
        match phase {
            Phase::Grace(until) if now >= until => phase = terminate(&mut ranks),
            Phase::Terminating(until) if now >= until => {
                signal_alive(&mut ranks, libc::SIGKILL);
                phase = Phase::Killed;
            }
            _ => {}
        }
    }

    // Every rank has ended: release barrier waiters, close the PMI connections, and
    // let the output threads drain what the ranks wrote last.
    shared.shut_down();
    for r in &ranks {
        let _ = r.pmi.shutdown(std::net::Shutdown::Both);
    }
    for t in threads {
        let _ = t.join();
    }
    let deadline = Instant::now() + OUTPUT_DRAIN;
    for _ in 0..output_threads {
        let left = deadline.saturating_duration_since(Instant::now());
        if output_done.recv_timeout(left).is_err() {
            break;
        }
    }
    let removed_segments = cleanup_segments(opts);
    drop(signal_watch);
    started?;
    Ok(ExitStatusSummary {
        ranks: ranks
            .iter()
            .map(|r| r.exit.expect("every rank has ended"))
            .collect(),
        code: job_code.unwrap_or(0),
        abort,
        interrupted,
        removed_segments,
    })
}

/// Removes the segments dead processes left in the launcher's shared-memory
/// directory ([`rbtl_mpool::cleanup_stale`]) and in any other one the ranks were
/// given through `opts.env`.
fn cleanup_segments(opts: &LaunchOptions) -> Vec<PathBuf> {
    let mut dirs = vec![rbtl_mpool::shm_dir()];
    for (name, value) in &opts.env {
        if name == rbtl_mpool::SHM_DIR_ENV && !value.is_empty() {
            let dir = PathBuf::from(value);
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    let mut removed = Vec::new();
    for dir in dirs {
        match rbtl_mpool::cleanup_stale_in(&dir) {
            Ok(paths) => removed.extend(paths),
            Err(e) => eprintln!(
                "[rbtl launcher] warning: cannot clean up shared memory in {}: {e}",
                dir.display()
            ),
        }
    }
    removed
}

/// Sends SIGTERM to the ranks still running; SIGKILL is due [`KILL_AFTER`] later.
fn terminate(ranks: &mut [Rank]) -> Phase {
    signal_alive(ranks, libc::SIGTERM);
    Phase::Terminating(Instant::now() + KILL_AFTER)
}

/// Sends `signal` to every rank not yet reaped. Reaping happens on this thread
/// only, so a pid here is still our child's, never a reused one.
fn signal_alive(ranks: &mut [Rank], signal: libc::c_int) {
    for r in ranks.iter().filter(|r| r.exit.is_none()) {
        let Ok(pid) = libc::pid_t::try_from(r.child.id()) else {
            continue;
        };
        // SAFETY: kill(2) takes plain integers; `pid` is an unreaped child of ours.
        unsafe { libc::kill(pid, signal) };
    }
}
