//! Starting the local ranks of a job, with a PMI-1 server for them: the library
//! behind the `rbtlrun` binary, for programs that launch themselves.
//!
//! [`launch`] starts `ranks` copies of a program. Each gets one end of a socketpair
//! as its PMI connection (`PMI_FD`, `PMI_RANK`, `PMI_SIZE`: what
//! [`crate::pmi::Client::from_env`] reads) and a thread of the launcher serves it
//! the PMI-1 commands: `init`, `get_maxes`, `get_appnum`, `get_my_kvsname`,
//! `get_universe_size`, `put`, `get`, `barrier_in`, `finalize` and `abort`, over one
//! key-value space for the job.
//!
//! Each rank's stdout and stderr are copied to the launcher's line by line. When a
//! rank fails (exits non-zero or dies of a signal) the others get
//! [`LaunchOptions::grace`] to exit on their own, then SIGTERM, then SIGKILL two
//! seconds later; a rank's PMI `abort`, or SIGINT/SIGTERM/SIGHUP to the launcher, ends
//! them at once (SIGTERM, then SIGKILL). Once all have ended, shared-memory segments
//! left behind by dead ranks are removed ([`crate::mpool::cleanup_stale`], plus the
//! directory `RBTL_SHM_DIR` names in [`LaunchOptions::env`], if it does).

pub mod cli;
pub use cli::Invocation;
mod output;
mod server;
mod signals;

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::str::FromStr;
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long SIGTERM has before SIGKILL follows.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// How often the launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for output still held open by a rank's leftover children.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// What went wrong launching a job.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The command line of `rbtlrun` is wrong.
    #[error("{0}")]
    Usage(String),
    /// A job of zero ranks.
    #[error("a job needs at least one rank: ask for 1 or more")]
    NoRanks,
    /// The PMI socketpair for a rank could not be made.
    #[error("cannot create the PMI socket of rank {rank}: {source}; too many open files?")]
    Socket {
        /// The rank.
        rank: u32,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A rank's process could not be started.
    #[error(
        "cannot start rank {rank} ({program}): {source}; check the program's path and permissions"
    )]
    Spawn {
        /// The rank.
        rank: u32,
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The CPUs this launcher may use could not be read, for `--bind-to core`.
    #[error("cannot read this process's CPU affinity for --bind-to core: {0}; use --bind-to none")]
    Affinity(#[source] io::Error),
    /// A thread of the launcher could not be started.
    #[error("cannot start a launcher thread: {0}")]
    Thread(#[source] io::Error),
}

/// Where ranks may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// Wherever the OS puts them.
    #[default]
    None,
    /// Rank r pinned (with `sched_setaffinity`, before it starts) to the
    /// hardware threads of the `r % n`-th of the n physical cores the launcher may
    /// run on, as hwloc's topology lists them (Open MPI: `--bind-to core`). Where
    /// hwloc cannot read the topology, to the `r % n`-th allowed logical CPU.
    Core,
}

impl FromStr for Bind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Bind::None),
            "core" => Ok(Bind::Core),
            other => Err(format!("'--bind-to {other}': want none or core")),
        }
    }
}

/// How to run a job.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of ranks (default 1).
    pub ranks: u32,
    /// Where ranks may run (default [`Bind::None`]).
    pub bind: Bind,
    /// Prefix each forwarded line with `[rank] ` (default off).
    pub tag_output: bool,
    /// When a rank fails, how long the others get to exit on their own before SIGTERM
    /// (default 1 s).
    pub grace: Duration,
    /// Environment variables set in every rank, on top of the launcher's own.
    pub env: Vec<(String, String)>,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        Self {
            ranks: 1,
            bind: Bind::None,
            tag_output: false,
            grace: Duration::from_secs(1),
            env: Vec::new(),
        }
    }
}

/// How one rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this code.
    Exited(i32),
    /// It was killed by this signal.
    Signaled(i32),
}

impl RankExit {
    /// The shell's view: the exit code, or 128 + the signal.
    pub fn code(self) -> i32 {
        match self {
            RankExit::Exited(code) => code,
            RankExit::Signaled(signal) => 128 + signal,
        }
    }

    /// Whether it exited with code 0.
    pub fn success(self) -> bool {
        self == RankExit::Exited(0)
    }

    fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => RankExit::Exited(code),
            (None, Some(signal)) => RankExit::Signaled(signal),
            (None, None) => RankExit::Exited(-1),
        }
    }
}

impl fmt::Display for RankExit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RankExit::Exited(code) => write!(f, "exited with code {code}"),
            RankExit::Signaled(signal) => write!(f, "was killed by signal {signal}"),
        }
    }
}

/// A rank's PMI `abort`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Abort {
    /// The rank that aborted.
    pub rank: u32,
    /// The exit code it asked for.
    pub code: i32,
    /// Its message.
    pub message: String,
}

/// How a job ended.
#[derive(Debug, Clone)]
pub struct ExitStatusSummary {
    /// How each rank ended, by rank.
    pub ranks: Vec<RankExit>,
    /// The job's exit code: 0 if every rank exited 0; otherwise the first failure in
    /// time: a rank's non-zero exit code, 128 + S for a rank killed by signal S, the
    /// code of a PMI `abort`, or 128 + S when the launcher got signal S.
    pub code: i32,
    /// The first PMI `abort`, if a rank sent one.
    pub abort: Option<Abort>,
    /// The signal that interrupted the launcher, if one did.
    pub interrupted: Option<i32>,
    /// Shared-memory segments of dead processes removed after the job.
    pub removed_segments: Vec<PathBuf>,
}

impl ExitStatusSummary {
    /// Whether the job succeeded (`code == 0`).
    pub fn success(&self) -> bool {
        self.code == 0
    }
}

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

/// Starts one rank; returns it and the launcher's end of its PMI socketpair.
fn start_rank(
    program: &Path,
    args: &[OsString],
    opts: &LaunchOptions,
    rank: u32,
    cpus: Option<&[usize]>,
) -> Result<(Child, UnixStream), Error> {
    let (ours, theirs) = UnixStream::pair().map_err(|source| Error::Socket { rank, source })?;
    let mut theirs = OwnedFd::from(theirs);
    if theirs.as_raw_fd() < 3 {
        // Never let it sit where stdin/stdout/stderr get installed in the child
        // (try_clone_to_owned duplicates to descriptor 3 or above).
        theirs = theirs
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| Error::Socket { rank, source })?;
    }
    let fd = theirs.as_raw_fd();
    let cpu_set = cpus.map(|cpus| {
        // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            // SAFETY: CPU_SET writes one bit inside `set`; `cores` keeps only CPUs
            // below CPU_SETSIZE.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        set
    });
    let launcher_pid = std::process::id() as libc::pid_t;

    let mut command = Command::new(program);
    command
        .args(args)
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env("PMI_FD", fd.to_string())
        .env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", opts.ranks.to_string())
        .stdin(if rank == 0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the hook runs in the child between fork and exec and calls only
    // async-signal-safe functions (fcntl, prctl, getppid, sched_setaffinity) on data
    // copied into the closure beforehand; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // The PMI socket is close-on-exec like every descriptor std makes: keep
            // this one, in this child only.
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags == -1 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
                return Err(io::Error::last_os_error());
            }
            // Die with the launcher rather than outlive it unsupervised.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != launcher_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(set) = cpu_set {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|source| Error::Spawn {
        rank,
        program: program.to_path_buf(),
        source,
    })?;
    drop(theirs);
    Ok((child, ours))
}

/// The physical cores this process may run on, each as the logical CPUs (hardware
/// threads) it holds: from hwloc's topology with the `hwloc` feature, else from
/// `/sys/devices/system/cpu/cpuN/topology`; one core per allowed CPU if neither says.
fn cores() -> io::Result<Vec<Vec<usize>>> {
    let allowed = allowed_cpus()?;
    let cores: Vec<Vec<usize>> = topology_cores()
        .into_iter()
        .map(|core| {
            core.into_iter()
                .filter(|cpu| allowed.contains(cpu))
                .collect::<Vec<_>>()
        })
        .filter(|core| !core.is_empty())
        .collect();
    if cores.is_empty() {
        return Ok(allowed.into_iter().map(|cpu| vec![cpu]).collect());
    }
    Ok(cores)
}

/// Every core's hardware threads, from hwloc.
#[cfg(feature = "hwloc")]
fn topology_cores() -> Vec<Vec<usize>> {
    use hwlocality::object::types::ObjectType;
    let Ok(topology) = hwlocality::Topology::new() else {
        return Vec::new();
    };
    topology
        .objects_with_type(ObjectType::Core)
        .filter_map(|core| Some(core.cpuset()?.iter_set().map(usize::from).collect()))
        .collect()
}

/// Every core's hardware threads, from sysfs: CPUs sharing a package and core id.
#[cfg(not(feature = "hwloc"))]
fn topology_cores() -> Vec<Vec<usize>> {
    let read = |cpu: usize, what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    let mut cores: Vec<((i64, i64), Vec<usize>)> = Vec::new();
    for cpu in 0..8 * std::mem::size_of::<libc::cpu_set_t>() {
        let (Some(package), Some(core)) = (read(cpu, "physical_package_id"), read(cpu, "core_id"))
        else {
            continue;
        };
        match cores.iter_mut().find(|(key, _)| *key == (package, core)) {
            Some((_, cpus)) => cpus.push(cpu),
            None => cores.push(((package, core), vec![cpu])),
        }
    }
    cores.into_iter().map(|(_, cpus)| cpus).collect()
}

/// The logical CPUs this process may run on, in ascending order.
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    let is_set = |cpu: usize| {
        // SAFETY: CPU_ISSET reads one bit of `set`; `cpu` is below its size in bits.
        unsafe { libc::CPU_ISSET(cpu, &set) }
    };
    let cpus: Vec<usize> = (0..max).filter(|&cpu| is_set(cpu)).collect();
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no CPU in the affinity mask",
        ));
    }
    Ok(cpus)
}
