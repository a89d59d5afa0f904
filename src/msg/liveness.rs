//! Waits that cannot end well: how a blocking call learns that what it waits for will
//! not come (a peer that stopped responding, or a receive from any source when every
//! other rank has failed), and ends with an error instead of spinning forever. What
//! the user sees is described in the message layer's documentation ("Failed and
//! silent peers").
//!
//! The hot path pays nothing for this: a wait looks only while idle, first when it
//! starts yielding the processor (after [`SPIN_BEFORE_YIELD`] idle rounds, then a
//! system call every [`YIELD_EVERY`] rounds; after [`SPIN_WHEN_OVERSUBSCRIBED`], then
//! every round, on a node that runs more ranks than it has processors, see
//! `msg_yield_when_idle`) and then every [`LOOK_EVERY`] rounds, and reads the clock
//! only then.

use super::state::{lock, Posted};
use super::{Comm, Error, ReqId, Result, SPIN_BEFORE_YIELD};
use rbtl_btl::PeerFailure;
use rbtl_config::{Config, Registry, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The parameter that sets the peer timeout, in seconds.
pub const PEER_TIMEOUT_PARAM: &str = "msg_peer_timeout";
/// Its default: generous, as a peer may compute for long between messages.
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
        "seconds a blocking call waits, with no progress at all, for a peer it needs before failing with a peer timeout and treating the peer as failed (0: wait forever)",
    )?;
    registry.register(
        YIELD_PARAM,
        Value::Str("auto".into()),
        "when an idle wait yields the processor at every idle round instead of spinning first: auto (when this node runs more ranks than it has online processors), always, never",
    )?;
    super::split::register_params(registry)?;
    super::placement::register_params(registry)
}

/// Set how long this process's waits spin before yielding, from `config` and the
/// number of ranks on this node: whether they yield early.
pub(super) fn set_yield(config: &Config, ranks_here: usize) -> Result<bool> {
    let early = super::placement::yield_chosen(config, ranks_here)?;
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
    let secs = match config.int(PEER_TIMEOUT_PARAM) {
        Ok(s) => s,
        Err(rbtl_config::Error::NotRegistered(_)) => DEFAULT_PEER_TIMEOUT_SECS,
        Err(e) => return Err(e.into()),
    };
    match u64::try_from(secs) {
        Ok(0) => Ok(None),
        Ok(s) => Ok(Some(Duration::from_secs(s))),
        Err(_) => Err(Error::BadParameter(format!(
            "{PEER_TIMEOUT_PARAM} = {secs}: give the seconds to wait for a silent peer, or 0 to wait forever"
        ))),
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
}

impl IdleWait {
    /// A wait that has not idled yet.
    pub const fn new() -> IdleWait {
        IdleWait {
            rounds: 0,
            since: None,
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
    /// first look of a run starts its clock).
    fn idle_for(&mut self) -> Duration {
        let now = Instant::now();
        // The first look of a run: the first multiple of LOOK_EVERY once yielding.
        if self.rounds == spin_limit().div_ceil(LOOK_EVERY) * LOOK_EVERY {
            self.since = Some(now);
        }
        now.duration_since(*self.since.get_or_insert(now))
    }
}

impl Default for IdleWait {
    fn default() -> Self {
        IdleWait::new()
    }
}

/// What a waited-for operation needs.
#[derive(Clone, Copy, Debug)]
pub(super) enum Needs {
    /// A message or an answer from this rank.
    Rank(u32),
    /// A message from any other rank (a wildcard receive, still unmatched).
    AnyOther,
}

/// What a look found.
enum Verdict {
    /// Keep waiting.
    Wait,
    /// It can never complete.
    Fail(Error),
    /// The rank it needs gave no sign of life for the timeout.
    TimedOut { rank: u32, waited: Duration },
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
            Verdict::TimedOut { rank, waited } => {
                // This request ends with the timeout, the others involving the rank
                // with its failure.
                end(self, Error::PeerTimeout { rank, waited });
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
            Verdict::TimedOut { rank, waited } => {
                self.give_up_on(rank, waited);
                Some(Error::PeerTimeout { rank, waited })
            }
        }
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
        // The one rank the wait needs, or the several live ones any of which would do.
        let needed = match needs {
            Needs::Rank(rank) if rank == self.rank => return Verdict::Wait,
            Needs::Rank(rank) => Ok(rank),
            Needs::AnyOther => {
                let (live, failed) = self.other_ranks();
                match live[..] {
                    // Alone in the job: no peer to wait for, or to fail.
                    [] if failed.is_empty() => return Verdict::Wait,
                    [] => return Verdict::Fail(Error::AllFailed { failed }),
                    [one] => Ok(one),
                    // Several could send: the same wait, and none to blame.
                    _ => Err(live),
                }
            }
        };
        let Some(limit) = self.peer_timeout else {
            return Verdict::Wait;
        };
        let waited = idle.idle_for();
        if waited < limit {
            return Verdict::Wait;
        }
        match needed {
            Ok(rank) => Verdict::TimedOut { rank, waited },
            Err(live) => Verdict::Fail(Error::AnySourceTimeout { live, waited }),
        }
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
            "no response for {} s (raise {PEER_TIMEOUT_PARAM} if it computes that long)",
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
