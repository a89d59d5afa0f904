//! Waits that cannot end well: how a blocking call learns that what it waits for will
//! not come (a peer stopped or gone, a job whose ranks all wait, or a receive from any
//! source when every other rank has failed), and ends with an error instead of
//! spinning forever. What the user sees is described in the message layer's
//! documentation ("Failed and silent peers"); the probes of other processes are in
//! [`super::responder`].
//!
//! The hot path pays nothing for this: a wait looks only while idle, first when it
//! starts yielding the processor (after [`SPIN_BEFORE_YIELD`] idle rounds, then a
//! system call every [`YIELD_EVERY`] rounds; after [`SPIN_WHEN_OVERSUBSCRIBED`], then
//! every round, on a node that runs more ranks than it has processors, see
//! `msg_yield_when_idle`) and then every [`LOOK_EVERY`] rounds, and reads the clock
//! only then. Each look records the wait's idle run for the responder; a wait that
//! idled says so when it ends.

use super::responder;
use super::state::{lock, Posted};
use super::{Comm, Error, ReqId, Result, SPIN_BEFORE_YIELD};
use rbtl_btl::PeerFailure;
use rbtl_config::{Config, Registry, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The parameter that sets the peer timeout, in seconds.
pub const PEER_TIMEOUT_PARAM: &str = "msg_peer_timeout";
/// Its default: a stopped peer, or a job that waits on itself, ends a wait after a
/// minute (a peer that computes is waited for however long).
const DEFAULT_PEER_TIMEOUT_SECS: i64 = 60;
/// Idle rounds between two yields, once a wait on a node with a processor per rank
/// yields: rarely, as a rank that calls into the kernel at every round slows the
/// cross-memory attach copies that peers make of its memory meanwhile (measured: see
/// docs/performance.md), while one that needs this processor still gets it within
/// tens of microseconds.
const YIELD_EVERY: u64 = 1024;
/// Idle rounds between two looks, once a wait yields.
pub const LOOK_EVERY: u64 = 1 << 10;

/// The parameter that says when waits yield the processor early.
pub const YIELD_PARAM: &str = "msg_yield_when_idle";
/// Idle rounds before yielding where ranks outnumber processors: every idle round
/// yields (as Open MPI's `mpi_yield_when_idle`, set when a node is oversubscribed),
/// since a rank spinning there holds a processor another rank needs.
pub const SPIN_WHEN_OVERSUBSCRIBED: u32 = 1;

/// The idle rounds before a wait yields, for every wait of this process.
static SPIN_LIMIT: AtomicU64 = AtomicU64::new(SPIN_BEFORE_YIELD as u64);

#[inline(always)]
fn spin_limit() -> u64 {
    SPIN_LIMIT.load(Ordering::Relaxed)
}

/// Register the message layer's parameters.
pub fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        PEER_TIMEOUT_PARAM,
        Value::Int(DEFAULT_PEER_TIMEOUT_SECS),
        "seconds a blocking call waits, with no progress at all, for a peer it needs before probing the peers' processes: one that does not answer (stopped, gone, out of reach) is given up with a peer timeout and treated as failed, as is a job whose ranks all wait; one computing is waited for (0: wait forever)",
    )?;
    registry.register(
        YIELD_PARAM,
        Value::Str("auto".into()),
        "when an idle wait yields the processor at every idle round instead of spinning first: auto (when this node runs more ranks than the processors they may run on between them), always, never",
    )?;
    super::split::register_params(registry)?;
    super::background::register_params(registry)?;
    super::coll_choice::register_params(registry)?;
    super::placement::register_params(registry)
}

/// Set how long this process's waits spin before yielding, from `config` and whether
/// this node's ranks outnumber their processors: whether they yield early.
pub(super) fn set_yield(config: &Config, oversubscribed: bool) -> Result<bool> {
    let early = super::placement::yield_chosen(config, oversubscribed)?;
    let limit = if early {
        SPIN_WHEN_OVERSUBSCRIBED
    } else {
        SPIN_BEFORE_YIELD
    };
    SPIN_LIMIT.store(u64::from(limit), Ordering::Relaxed);
    Ok(early)
}

/// The peer timeout `config` sets: `None` to wait forever. A configuration made
/// without the message layer's parameters gets the default.
pub(super) fn peer_timeout(config: &Config) -> Result<Option<Duration>> {
    duration_or_none(
        config,
        (PEER_TIMEOUT_PARAM, DEFAULT_PEER_TIMEOUT_SECS),
        Duration::from_secs,
        "give the seconds to wait for a silent peer, or 0 to wait forever",
    )
}

/// Integer parameter `name` of `config` as a duration of so many `unit`s, 0 for
/// `None`; `default` where the configuration was made without the message layer's
/// parameters. A negative value is refused, the error naming it and saying `hint`.
pub(super) fn duration_or_none(
    config: &Config,
    (name, default): (&str, i64),
    unit: fn(u64) -> Duration,
    hint: &str,
) -> Result<Option<Duration>> {
    let value = match config.int(name) {
        Ok(v) => v,
        Err(rbtl_config::Error::NotRegistered(_)) => default,
        Err(e) => return Err(e.into()),
    };
    match u64::try_from(value) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(unit(n))),
        Err(_) => Err(Error::BadParameter(format!("{name} = {value}: {hint}"))),
    }
}

/// The idle rounds of one blocking wait: a layer above that waits in a loop of its
/// own counts them here, and every so many asks [`Comm::look_at`] whether the
/// request it waits for can still complete.
pub struct IdleWait {
    /// Idle rounds in a row.
    rounds: u64,
    /// When this run of idle rounds was first looked at.
    since: Option<Instant>,
    /// What probes of the other ranks found in this run, once it lasted the timeout.
    probing: Option<Box<Probing>>,
}

impl IdleWait {
    /// A wait that has not idled yet.
    pub const fn new() -> IdleWait {
        IdleWait {
            rounds: 0,
            since: None,
            probing: None,
        }
    }

    /// Count a round that found nothing to do: after [`SPIN_BEFORE_YIELD`] in a row
    /// it yields the processor every `YIELD_EVERY` rounds (where ranks outnumber
    /// processors, after fewer and at every round), so that processes sharing a core
    /// still advance. Whether it is time to look whether the wait is in
    /// vain.
    #[inline(always)]
    pub fn idle(&mut self) -> bool {
        self.rounds += 1;
        let limit = spin_limit();
        if self.rounds >= limit {
            if limit == u64::from(SPIN_WHEN_OVERSUBSCRIBED) || self.rounds % YIELD_EVERY == 0 {
                std::thread::yield_now();
            }
            return self.rounds % LOOK_EVERY == 0;
        }
        false
    }

    /// Count a round that did something.
    #[inline(always)]
    pub fn busy(&mut self) {
        self.rounds = 0;
    }

    /// How long this run of idle rounds has lasted, as far as the looks tell (the
    /// first look of a run starts its clock); recorded for this process's responder.
    fn idle_for(&mut self) -> Duration {
        let now = Instant::now();
        // The first look of a run: the first multiple of LOOK_EVERY once yielding.
        if self.rounds == spin_limit().div_ceil(LOOK_EVERY) * LOOK_EVERY {
            self.since = Some(now);
            self.probing = None;
        }
        let since = *self.since.get_or_insert(now);
        waiting::record(since, now);
        now.duration_since(since)
    }
}

impl IdleWait {
    /// A wait of a layer above that started at `start` and counts no rounds: its
    /// looks ([`Comm::look_for_anyone`]) count its length from there.
    pub fn since(start: Instant) -> IdleWait {
        IdleWait {
            rounds: 0,
            since: Some(start),
            probing: None,
        }
    }
}

impl Default for IdleWait {
    fn default() -> Self {
        IdleWait::new()
    }
}

impl Drop for IdleWait {
    #[inline]
    fn drop(&mut self) {
        if let Some(since) = self.since {
            waiting::ended(since);
        }
    }
}

/// This process's waiting, as its responder tells the ranks that probe it: the idle
/// run of the wait looked at last, while its looks go on.
mod waiting {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    /// A wait not looked at for this long is over, or busy.
    const STALE: Duration = Duration::from_secs(2);
    /// The start of the run (ms on this process's clock, from 1; 0: none), and its
    /// last look.
    static SINCE: AtomicU64 = AtomicU64::new(0);
    static LOOKED: AtomicU64 = AtomicU64::new(0);

    fn ms(t: Instant) -> u64 {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        let epoch = *EPOCH.get_or_init(|| Instant::now() - Duration::from_millis(1));
        t.saturating_duration_since(epoch).as_millis() as u64 + 1
    }

    /// A look of a wait whose run started at `since`.
    pub(super) fn record(since: Instant, now: Instant) {
        SINCE.store(ms(since), SeqCst);
        LOOKED.store(ms(now), SeqCst);
    }

    /// The wait whose run started at `since` ended (unless another's is recorded).
    pub(super) fn ended(since: Instant) {
        let _ = SINCE.compare_exchange(ms(since), 0, SeqCst, SeqCst);
    }

    /// The run going on (its start, 0 with none) and how long it has lasted.
    pub(in crate::msg) fn now() -> (u64, Duration) {
        report(SINCE.load(SeqCst), LOOKED.load(SeqCst), ms(Instant::now()))
    }

    /// What a process reports at `now` of the run that started at `since` and was
    /// last looked at at `looked` (ms on its clock).
    pub(super) fn report(since: u64, looked: u64, now: u64) -> (u64, Duration) {
        if since == 0 || now.saturating_sub(looked) > STALE.as_millis() as u64 {
            return (0, Duration::ZERO);
        }
        (since, Duration::from_millis(now.saturating_sub(since)))
    }

    /// How long after a probe that found every rank waiting one may confirm it: a
    /// rank that got busy since no longer counts as waiting by then.
    pub(super) const CONFIRM_AFTER: Duration = Duration::from_millis(2500);
}

pub(super) use waiting::now as waiting_now;

/// What the probes of one idle run found.
struct Probing {
    /// When it last probed.
    asked: Instant,
    /// Since when no rank it needs has answered.
    silent_since: Option<Instant>,
    /// When every other rank answered that it waited as long as the timeout (and
    /// none longer than this wait), with each one's run, to be confirmed.
    all_waiting: Option<(Instant, Vec<(u32, u64)>)>,
}

/// How long the ranks a wait needs must leave its probes unanswered before it gives
/// up on them.
const SILENT_FOR: Duration = Duration::from_secs(1);

/// Waits whose lengths differ by at most this much count as equally long.
const SAME_WAIT: Duration = Duration::from_millis(500);

/// How often a wait past its timeout probes the other ranks.
fn probe_every(limit: Duration) -> Duration {
    (limit / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
}

/// What a waited-for operation needs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Needs {
    /// A message or an answer from this rank.
    Rank(u32),
    /// A message from any other rank (a wildcard receive, still unmatched).
    AnyOther,
    /// Something from one other rank or another, not known which (a lock's release):
    /// any of them that is silent may be the one.
    Unknown,
}

/// What a look found.
enum Verdict {
    /// Keep waiting.
    Wait,
    /// It can never complete.
    Fail(Error),
    /// The rank it needs gave no sign of life for the timeout (`stalled`: it
    /// answered, but it and every other rank have been waiting as long).
    TimedOut {
        rank: u32,
        waited: Duration,
        stalled: bool,
    },
}

/// The error of a wait given up on `rank`.
fn timed_out(rank: u32, waited: Duration, stalled: bool) -> Error {
    if stalled {
        Error::Stalled { rank, waited }
    } else {
        Error::PeerTimeout { rank, waited }
    }
}

impl Comm {
    /// Look whether the wait for request `req` is in vain (called every so many idle
    /// rounds, when [`IdleWait::idle`] says so); if so the request completes with the
    /// error that ends it (see "Failed and silent peers" in the [module
    /// documentation](super)).
    #[cold]
    #[inline(never)]
    pub fn look_at(&mut self, req: ReqId, idle: &mut IdleWait) {
        let needs = {
            let mut s = lock(&self.state);
            let posted = s.posted.iter().any(|p| p.req == req);
            match s.req_mut(req) {
                Some(r) if r.outcome.is_none() => match r.peer {
                    Some(rank) => Needs::Rank(rank),
                    // A wildcard receive that matched a message is under way: its
                    // transport ends it.
                    None if posted => Needs::AnyOther,
                    None => return,
                },
                _ => return,
            }
        };
        let end = |comm: &mut Comm, e: Error| {
            let mut s = lock(&comm.state);
            s.posted.retain(|p: &Posted| p.req != req);
            s.complete(req, Err(e));
        };
        match self.verdict(needs, idle) {
            Verdict::Wait => {}
            Verdict::Fail(e) => end(self, e),
            Verdict::TimedOut {
                rank,
                waited,
                stalled,
            } => {
                // This request ends with the timeout, the others involving the rank
                // with its failure.
                end(self, timed_out(rank, waited, stalled));
                self.give_up_on(rank, waited);
            }
        }
    }

    /// Look whether a wait that needs `needs` (and no request) is in vain: the error
    /// that ends it, if so. A peer that timed out is given up.
    #[cold]
    #[inline(never)]
    pub(super) fn look_for(&mut self, needs: Needs, idle: &mut IdleWait) -> Option<Error> {
        match self.verdict(needs, idle) {
            Verdict::Wait => None,
            Verdict::Fail(e) => Some(e),
            Verdict::TimedOut {
                rank,
                waited,
                stalled,
            } => {
                self.give_up_on(rank, waited);
                Some(timed_out(rank, waited, stalled))
            }
        }
    }

    /// Look whether a wait of a layer above for something that one other rank or
    /// another must do, not known which (the release of a lock it waits to take), is
    /// in vain: the error that ends it, if so. It is, once it has lasted the peer
    /// timeout and a rank does not answer probes (it may be the one), or every rank
    /// waits as well ([`Error::AnySourceTimeout`] naming the live ranks). No rank is
    /// treated as failed.
    #[cold]
    #[inline(never)]
    pub fn look_for_anyone(&mut self, idle: &mut IdleWait) -> Option<Error> {
        self.look_for(Needs::Unknown, idle)
    }

    /// The rank a deferred message waits to reach, if any.
    pub(super) fn first_deferred_rank(&self) -> Option<u32> {
        let s = lock(&self.state);
        let d = s.deferred.front()?;
        let rank = self
            .routes
            .iter()
            .position(|&(m, ep)| m == d.module && ep == d.endpoint)?;
        Some(rank as u32)
    }

    fn verdict(&mut self, needs: Needs, idle: &mut IdleWait) -> Verdict {
        let waited = idle.idle_for();
        // The one rank the wait needs, or the several live ones any of which would do.
        let needed = match needs {
            Needs::Rank(rank) if rank == self.rank => return Verdict::Wait,
            Needs::Rank(rank) => Ok(rank),
            Needs::AnyOther | Needs::Unknown => {
                let (live, failed) = self.other_ranks();
                match live[..] {
                    // Alone in the job: no peer to wait for, or to fail.
                    [] if failed.is_empty() => return Verdict::Wait,
                    [] => return Verdict::Fail(Error::AllFailed { failed }),
                    // (Nothing is given up on for a need not known.)
                    [one] if !matches!(needs, Needs::Unknown) => Ok(one),
                    // Several could send: the same wait, and none to blame.
                    _ => Err(live),
                }
            }
        };
        let Some(limit) = self.peer_timeout else {
            return Verdict::Wait;
        };
        if waited < limit {
            return Verdict::Wait;
        }
        let now = Instant::now();
        if idle
            .probing
            .as_ref()
            .is_some_and(|p| now.duration_since(p.asked) < probe_every(limit))
        {
            return Verdict::Wait;
        }
        let (live, answers) = self.probe_others();
        let p = idle.probing.get_or_insert_with(|| {
            Box::new(Probing {
                asked: now,
                silent_since: None,
                all_waiting: None,
            })
        });
        p.asked = now;
        let give_up = |stalled| match &needed {
            &Ok(rank) => Verdict::TimedOut {
                rank,
                waited,
                stalled,
            },
            Err(live) => Verdict::Fail(Error::AnySourceTimeout {
                live: live.clone(),
                waited,
            }),
        };
        // Nothing it needs answers (any that may be needed, when that is not known):
        // stopped, dead, or out of reach.
        let needed_ranks = match &needed {
            Ok(rank) => std::slice::from_ref(rank),
            Err(live) => &live[..],
        };
        let answered = |r: &u32| answers.iter().any(|a| a.0 == *r);
        let silent = match needs {
            Needs::Unknown => !needed_ranks.iter().all(answered),
            _ => !needed_ranks.iter().any(answered),
        };
        if silent {
            let since = *p.silent_since.get_or_insert(now);
            return match now.duration_since(since) >= SILENT_FOR {
                true => give_up(false),
                false => Verdict::Wait,
            };
        }
        p.silent_since = None;
        // A rank not waiting (computing, or working with others) may still send; one
        // silent may be what the others wait for, and they give up on it; one that
        // has waited longer than this wait (or as long, the last message having
        // started every run, and has a lower rank) decides instead.
        let decides_before = |r: u32, a: &responder::Answer| {
            a.waiting > waited + SAME_WAIT || (a.waiting + SAME_WAIT >= waited && r < self.rank)
        };
        // (Processes of other jobs, reached through the bridge, are not probed: one
        // of them may be what all wait for.)
        let other_jobs = self.routes.len() > self.size as usize;
        if other_jobs
            || answers.len() < live.len()
            || answers
                .iter()
                .any(|(r, a)| a.waiting < limit || decides_before(*r, a))
        {
            p.all_waiting = None;
            return Verdict::Wait;
        }
        // Every rank waits, and none longer: the job waits on itself, if a probe
        // later still finds each in the same run.
        let runs: Vec<(u32, u64)> = answers.iter().map(|(r, a)| (*r, a.run)).collect();
        match &p.all_waiting {
            Some((at, before)) if *before == runs => {
                match now.duration_since(*at) >= waiting::CONFIRM_AFTER {
                    true => give_up(true),
                    false => Verdict::Wait,
                }
            }
            _ => {
                p.all_waiting = Some((now, runs));
                Verdict::Wait
            }
        }
    }

    /// Probe every other live rank's process: the live ranks, and the answers by
    /// rank (in rank order).
    fn probe_others(&mut self) -> (Vec<u32>, Vec<(u32, responder::Answer)>) {
        let (live, _) = self.other_ranks();
        if self.cards.is_empty() {
            self.cards = (0..self.size)
                .map(
                    |rank| match self.job.modex.lookup(rank, responder::CARD_KEY) {
                        Ok(Some(bytes)) => responder::Card::decode(&bytes),
                        _ => None,
                    },
                )
                .collect();
        }
        let targets: Vec<(u32, Vec<std::net::SocketAddr>)> = live
            .iter()
            .filter_map(|&r| {
                let card = self.cards.get(r as usize)?.as_ref()?;
                let same_node = self.nodes[r as usize] == self.nodes[self.rank as usize];
                Some((r, card.targets(same_node)))
            })
            .collect();
        let mut answers: Vec<_> = responder::probe(&targets).into_iter().collect();
        answers.sort_by_key(|a| a.0);
        (live, answers)
    }

    /// The other ranks: those alive, and those that failed with why.
    fn other_ranks(&self) -> (Vec<u32>, Vec<(u32, PeerFailure)>) {
        let s = lock(&self.state);
        let (mut live, mut failed) = (Vec::new(), Vec::new());
        for rank in (0..self.size).filter(|&r| r != self.rank) {
            match s.failed.get(&rank) {
                Some(why) => failed.push((rank, why.clone())),
                None => live.push(rank),
            }
        }
        (live, failed)
    }

    /// Treat `rank`, silent for `waited`, as failed: fail what involves it, and drop it
    /// from its transport, which fails its operations there (nothing it might still
    /// send lands in a buffer given back).
    fn give_up_on(&mut self, rank: u32, waited: Duration) {
        let why = PeerFailure::Unresponsive(format!(
            "nothing from it for {} s: its process stopped or out of reach, or waiting as every other rank was ({PEER_TIMEOUT_PARAM})",
            waited.as_secs()
        ));
        tracing::warn!(rank, %why, "giving up on a peer");
        // The transport first: it tells the peer (where it can) before the memory
        // offered to it is given back with the requests failed below.
        if let Some(&(mi, ep)) = self.routes.get(rank as usize) {
            if let Err(e) = self.modules[mi].del_procs(&[ep]) {
                tracing::warn!(rank, %e, "could not drop a silent peer from its transport");
            }
        }
        lock(&self.state).peer_failed(rank, why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_counts_while_it_is_looked_at() {
        let ms = Duration::from_millis;
        // A run that started at 1000, looked at 500 ms ago: waiting 4 s at 5000.
        assert_eq!(waiting::report(1000, 4500, 5000), (1000, ms(4000)));
        // Its looks stopped more than 2 s ago: it ended, or is busy.
        assert_eq!(waiting::report(1000, 2900, 5000), (0, Duration::ZERO));
        // No run.
        assert_eq!(waiting::report(0, 4900, 5000), (0, Duration::ZERO));
    }

    #[test]
    fn probes_come_every_quarter_timeout_within_bounds() {
        assert_eq!(
            probe_every(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(probe_every(Duration::from_secs(8)), Duration::from_secs(2));
        assert_eq!(probe_every(Duration::from_secs(60)), Duration::from_secs(5));
    }
}
