//! Running a job: start every rank with its PMI server and output forwarding, watch
//! them, end the survivors when one fails, and clean up after them.

use super::cores::cores;
use super::event::Event;
use super::rank_process::RankProcess;
use super::spawn::{start_rank, Place, Started};
use super::startup::{self, Stopped};
use super::universe::SpawnRequest;
use super::verdict::Verdict;
use super::{output, server, signals};
use super::{App, Bind, Error, ExitStatusSummary, Failure, LaunchOptions};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long SIGTERM has before SIGKILL follows.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// How often the launcher looks at signals and deadlines when nothing happens.
const POLL: Duration = Duration::from_millis(20);
/// How long to wait for output still held open by a rank's leftover children.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

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

/// The ranks started so far and the launcher's threads serving them.
struct Ranks {
    ranks: Vec<RankProcess>,
    /// PMI servers and the threads that see ranks end: joined at the end.
    threads: Vec<JoinHandle<()>>,
    output_threads: usize,
    /// The jobs ranks spawned, kept for the launcher's life (their key-value spaces
    /// and PMI records outlive their processes); held, never read.
    _spawned: Vec<Arc<server::Shared>>,
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
    let app = App {
        program: program.into(),
        args: args.to_vec(),
        ranks: opts.ranks,
        env: Vec::new(),
        wdir: None,
    };
    launch_apps(&[app], opts)
}

/// As [`launch`], for a job of several programs (MPMD): `apps` in order, their
/// ranks numbered one after the other (`opts.ranks`, which must be their sum), each
/// rank's `get_appnum` its program's index.
pub fn launch_apps(apps: &[App], opts: &LaunchOptions) -> Result<ExitStatusSummary, Error> {
    if opts.ranks == 0 || apps.iter().any(|a| a.ranks == 0) {
        return Err(Error::NoRanks);
    }
    let total = apps.iter().try_fold(0u32, |n, a| n.checked_add(a.ranks));
    if total != Some(opts.ranks) {
        return Err(Error::Usage(format!(
            "the programs' ranks ({}) are not the job's {}",
            apps.iter()
                .map(|a| a.ranks.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            opts.ranks
        )));
    }
    let mut folders = apps
        .iter()
        .filter_map(|a| a.wdir.as_deref())
        .chain(opts.wdir.as_deref());
    if let Some(d) = folders.find(|d| !d.is_dir()) {
        return Err(Error::Usage(format!(
            "--wdir {}: not a folder",
            d.display()
        )));
    }
    let universe_size = opts.universe_size.unwrap_or(opts.ranks);
    if universe_size < opts.ranks {
        return Err(Error::Usage(format!(
            "a universe of {universe_size} processes cannot hold the job's {} ranks",
            opts.ranks
        )));
    }
    startup::check_limits(opts.ranks)?;
    let cores = match opts.bind {
        Bind::None => Vec::new(),
        Bind::Core => cores().map_err(Error::Affinity)?,
    };
    let signal_watch = signals::Watch::install();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let kvsname = format!("rbtl_kvs_{}_{}", std::process::id(), now.as_nanos());
    let appnums = server::appnums(apps.iter().map(|a| a.ranks));
    let shared = server::Shared::of_programs(appnums, kvsname);
    shared.universe().set_size(universe_size);
    let (events_tx, events) = mpsc::channel();
    let (output_done_tx, output_done) = mpsc::channel::<()>();
    let (spawn_tx, spawns) = mpsc::channel::<SpawnRequest>();
    shared.universe().accept_spawns(spawn_tx);

    let mut job = Ranks {
        ranks: Vec::new(),
        threads: Vec::new(),
        output_threads: 0,
        _spawned: Vec::new(),
    };
    // Every process first, then the threads that serve them (see `startup`).
    let (processes, stopped) = startup::start_processes(apps, opts, &cores, &signal_watch);
    let mut started = Ok(());
    let mut processes = processes.into_iter();
    for (rank, s) in (0u32..).zip(processes.by_ref()) {
        let served = job.serve(
            (rank, rank),
            s,
            opts.tag_output,
            &shared,
            &events_tx,
            &output_done_tx,
        );
        if let Err(e) = served {
            started = Err(e);
            break;
        }
    }
    // Unwatched, these would never be seen to end: ended here.
    for mut s in processes {
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    match stopped {
        Some(Stopped::Error(e)) => started = started.and(Err(e)),
        Some(Stopped::Failed(rank, exit)) => say!(
            "[rbtl launcher] rank {rank} {} while ranks were starting: no more are started \
             ({} of {})",
            exit,
            job.ranks.len(),
            opts.ranks
        ),
        Some(Stopped::Signal) | None => {}
    }
    // (The senders stay: spawned ranks get clones.)

    let mut verdict = Verdict::default();
    let mut interrupted: Option<i32> = None;
    // Capped so that an absurd limit cannot overflow the clock.
    let mut deadline = opts.timeout.map(|t| {
        (
            Instant::now() + t.min(Duration::from_secs(365 * 24 * 3600)),
            t,
        )
    });
    let mut phase = Phase::Running;
    if started.is_err() {
        // End what did start, then report the failure.
        phase = terminate(&job.ranks);
    }
    loop {
        for event in next_events(&events) {
            match event {
                Event::OutputLost { stream, error } => {
                    if lose_output(&mut verdict, stream, &error) {
                        shared.universe().shut_down();
                        if matches!(phase, Phase::Running | Phase::Grace(_)) {
                            phase = terminate(&job.ranks);
                        }
                    }
                    continue;
                }
                Event::Ended { rank, exit } => job.ranks[rank as usize].exit = Some(exit),
                Event::Abort { .. } | Event::PmiClosed { .. } => {}
            }
            verdict.push(event);
        }
        if let Some(signal) = signal_watch.received() {
            if interrupted.is_none() {
                say!("[rbtl launcher] got signal {signal}: ending the job");
                interrupted = Some(signal);
                verdict.failure.get_or_insert(Failure::Interrupted(signal));
                shared.universe().shut_down();
                if matches!(phase, Phase::Running | Phase::Grace(_)) {
                    phase = terminate(&job.ranks);
                }
            }
        }
        if let Some((_, limit)) = deadline.filter(|&(at, _)| Instant::now() >= at) {
            deadline = None;
            if verdict.failure.is_none() {
                let failure = Failure::TimedOut(limit);
                say!("[rbtl launcher] {failure}");
                verdict.failure = Some(failure);
            }
            shared.universe().shut_down();
            if matches!(phase, Phase::Running | Phase::Grace(_)) {
                phase = terminate(&job.ranks);
            }
        }
        let ended = || {
            (0u32..)
                .zip(&job.ranks)
                .filter(|(_, r)| r.exit.is_none())
                .filter_map(|(rank, r)| Some((rank, r.peek_exit()?)))
                .collect()
        };
        if let Some(failure) = verdict.judge(&shared, ended) {
            // Ranks blocked in a PMI barrier learn of it at once.
            shared.universe().shut_down();
            let alive = job.ranks.iter().any(|r| r.exit.is_none());
            let more = if alive && matches!(phase, Phase::Running) {
                if matches!(failure, Failure::Aborted(_)) {
                    "; ending the other ranks".to_string()
                } else {
                    format!(
                        "; the other ranks get {:.1} s to exit, then SIGTERM",
                        opts.grace.as_secs_f64()
                    )
                }
            } else {
                String::new()
            };
            say!("[rbtl launcher] {failure}{more}");
            if let Phase::Running = phase {
                // Capped so that an absurd grace cannot overflow the clock.
                let grace = opts.grace.min(Duration::from_secs(365 * 24 * 3600));
                phase = Phase::Grace(Instant::now() + grace);
            }
        }
        if verdict.take_abort_news() {
            // An abort ends the job at once, even during another failure's grace.
            if !matches!(verdict.failure, Some(Failure::Aborted(_))) {
                if let Some(abort) = &verdict.abort {
                    say!(
                        "[rbtl launcher] rank {} aborted the job with exit code {}: {}",
                        abort.rank,
                        abort.code,
                        abort.message
                    );
                }
            }
            if matches!(phase, Phase::Running | Phase::Grace(_)) {
                phase = terminate(&job.ranks);
            }
        }
        for request in spawns.try_iter() {
            let answer = if matches!(phase, Phase::Running) {
                job.spawn(&request, opts, &shared, &events_tx, &output_done_tx)
            } else {
                Err("the job is ending".to_string())
            };
            let _ = request.reply.send(answer);
        }
        if job.ranks.iter().all(|r| r.exit.is_some()) && verdict.settled() {
            break;
        }
        let now = Instant::now();
        match phase {
            Phase::Grace(until) if now >= until => phase = terminate(&job.ranks),
            Phase::Terminating(until) if now >= until => {
                signal_all(&job.ranks, libc::SIGKILL);
                phase = Phase::Killed;
            }
            _ => {}
        }
    }

    job.finish(&shared, &output_done);
    // Output written after the last rank ended can fail too.
    for event in events.try_iter() {
        if let Event::OutputLost { stream, error } = event {
            lose_output(&mut verdict, stream, &error);
        }
    }
    let removed_segments = cleanup_segments(opts);
    drop(signal_watch);
    started?;
    let failure = verdict.failure;
    Ok(ExitStatusSummary {
        ranks: job
            .ranks
            .iter()
            .map(|r| r.exit.expect("every rank has ended"))
            .collect(),
        code: failure.as_ref().map_or(0, Failure::code),
        failure,
        abort: verdict.abort,
        interrupted,
        removed_segments,
    })
}

/// Note that the ranks' output to `stream` could not be written: the job's failure
/// unless it has one (said at once); whether this was the first such loss.
fn lose_output(verdict: &mut Verdict, stream: output::Stream, error: &std::io::Error) -> bool {
    let first = !verdict.output_lost;
    verdict.output_lost = true;
    if first && verdict.failure.is_none() {
        let failure = Failure::OutputLost {
            stream: stream.name(),
            error: error.to_string(),
            broken_pipe: error.kind() == std::io::ErrorKind::BrokenPipe,
        };
        say!("[rbtl launcher] {failure}");
        verdict.failure = Some(failure);
    }
    first
}

/// The events that arrived within [`POLL`]: the first one waited for, the rest
/// taken as they are.
fn next_events(events: &Receiver<Event>) -> Vec<Event> {
    let mut out = Vec::new();
    if let Ok(event) = events.recv_timeout(POLL) {
        out.push(event);
        out.extend(events.try_iter());
    }
    out
}

impl Ranks {
    /// Start the job a spawn asks for, after the ranks started so far: its
    /// key-value space (holding the spawn's pre-put pairs and
    /// `rbtl_universe_base`, where its ranks start in the launcher's numbering), then
    /// its ranks. The new job's key-value space and base.
    fn spawn(
        &mut self,
        request: &SpawnRequest,
        opts: &LaunchOptions,
        first: &Arc<server::Shared>,
        events: &Sender<Event>,
        output_done: &Sender<()>,
    ) -> Result<(String, u32), String> {
        // (Before anything is started: a host elsewhere refuses the whole spawn.)
        for s in &request.segments {
            if let Some((_, host)) = s.command.info.iter().find(|(k, _)| k == "host") {
                let here = crate::pmi::host_name();
                if host != &here && host != "localhost" {
                    return Err(format!(
                        "the info key host = {host}: this launcher starts processes on \
                         this node only ({here})"
                    ));
                }
            }
        }
        let base = self.ranks.len() as u32;
        let appnums = server::appnums(request.segments.iter().map(|s| s.command.nprocs));
        let size = u32::try_from(appnums.len()).map_err(|_| "too many processes".to_string())?;
        let kvsname = format!("{}_spawn_{base}", first.kvsname());
        let job = server::Shared::in_universe(
            size,
            kvsname.clone(),
            base,
            appnums,
            first.universe().clone(),
        );
        let preput = request
            .segments
            .first()
            .map(|s| s.preput.clone())
            .unwrap_or_default();
        for (k, v) in preput
            .iter()
            .chain([("rbtl_universe_base".to_string(), base.to_string())].iter())
        {
            job.put_as_first(k, v)?;
        }
        let mut local = 0;
        for s in &request.segments {
            let args: Vec<OsString> = s.command.args.iter().map(OsString::from).collect();
            let program = PathBuf::from(&s.command.program);
            let info = |key| s.command.info.iter().find(|(k, _)| k == key);
            let wdir = info("wdir").map(|(_, v)| PathBuf::from(v));
            let place = Place {
                wdir: wdir.as_deref().or(opts.wdir.as_deref()),
                path: info("path").map(|(_, v)| v.as_str()),
                env: &[],
            };
            for _ in 0..s.command.nprocs {
                let at = (program.as_path(), place);
                let started = start_rank(at, &args, opts, (local, size, false), None)
                    .map_err(|e| e.to_string())?;
                self.serve(
                    (base + local, local),
                    started,
                    opts.tag_output,
                    &job,
                    events,
                    output_done,
                )
                .map_err(|e| e.to_string())?;
                local += 1;
            }
        }
        self._spawned.push(job);
        Ok((kvsname, base))
    }

    /// Adds a started rank (`global` in the launcher's numbering, `rank` in its
    /// job): the thread that sees it end, its PMI server and the threads that
    /// forward its output.
    fn serve(
        &mut self,
        (global, rank): (u32, u32),
        started: Started,
        tag: bool,
        shared: &Arc<server::Shared>,
        events: &Sender<Event>,
        output_done: &Sender<()>,
    ) -> Result<(), Error> {
        let Started {
            mut child,
            leads_group,
            pmi,
        } = started;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let process = RankProcess::new(child, leads_group, pmi);
        match process.watch(global, events.clone()) {
            Ok(waiter) => self.threads.push(waiter),
            Err(e) => {
                // Unwatched, it would never be seen to end: end it here.
                let mut process = process;
                process.signal(libc::SIGKILL);
                process.reap();
                return Err(Error::Thread(e));
            }
        }
        let server_end = process.pmi.try_clone();
        self.ranks.push(process);
        let server_end = server_end.map_err(|source| Error::Socket {
            rank: global,
            source,
        })?;
        let (shared, pmi_events) = (shared.clone(), events.clone());
        self.threads
            .push(spawn_thread(format!("pmi-{global}"), move || {
                server::serve(rank, server_end, shared, pmi_events)
            })?);
        let tell = (events, output_done);
        if let Some(out) = stdout {
            self.forward(global, out, tag, output::Stream::Stdout, tell)?;
        }
        if let Some(err) = stderr {
            self.forward(global, err, tag, output::Stream::Stderr, tell)?;
        }
        Ok(())
    }

    /// Starts the thread that copies `source` (a rank's stdout or stderr) to the
    /// launcher's `stream`, telling the job loop if that fails and when it is done.
    fn forward(
        &mut self,
        rank: u32,
        source: impl std::io::Read + Send + 'static,
        tag: bool,
        stream: output::Stream,
        (events, output_done): (&Sender<Event>, &Sender<()>),
    ) -> Result<(), Error> {
        let (events, done) = (events.clone(), output_done.clone());
        spawn_thread(format!("{}-{rank}", stream.name()), move || {
            output::forward(source, rank, tag, stream, |error| {
                let _ = events.send(Event::OutputLost { stream, error });
            });
            let _ = done.send(());
        })?;
        self.output_threads += 1;
        Ok(())
    }

    /// Once every rank has ended: closes the PMI connections, ends what the ranks
    /// left running in their process groups (SIGTERM, then SIGKILL once their output
    /// has drained or [`OUTPUT_DRAIN`] has passed), and reaps the ranks.
    fn finish(&mut self, shared: &server::Shared, output_done: &Receiver<()>) {
        shared.universe().shut_down();
        for r in &self.ranks {
            let _ = r.pmi.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        signal_all(&self.ranks, libc::SIGTERM);
        let deadline = Instant::now() + OUTPUT_DRAIN;
        for _ in 0..self.output_threads {
            let left = deadline.saturating_duration_since(Instant::now());
            if output_done.recv_timeout(left).is_err() {
                break;
            }
        }
        signal_all(&self.ranks, libc::SIGKILL);
        for r in &mut self.ranks {
            r.reap();
        }
    }
}

fn spawn_thread(name: String, f: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, Error> {
    thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(Error::Thread)
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
            Err(e) => say!(
                "[rbtl launcher] warning: cannot clean up shared memory in {}: {e}",
                dir.display()
            ),
        }
    }
    removed
}

/// Sends SIGTERM to every rank and its process group; SIGKILL is due
/// [`KILL_AFTER`] later.
fn terminate(ranks: &[RankProcess]) -> Phase {
    signal_all(ranks, libc::SIGTERM);
    Phase::Terminating(Instant::now() + KILL_AFTER)
}

/// Sends `signal` to every rank still running and to every rank's process group
/// (see [`RankProcess::signal`]).
fn signal_all(ranks: &[RankProcess], signal: libc::c_int) {
    for r in ranks {
        r.signal(signal);
    }
}
