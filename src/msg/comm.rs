//! The communicator: the modules and routes it holds, its progress loop, and the
//! messages that wait for room in a transport.

use super::liveness::{IdleWait, Needs};
use super::offload::Offload;
use super::state::{self, lock, Shared};
use super::{Error, Result};
use crate::pmi::Job;
use rbtl_btl::{Endpoint, Module};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A communicator over every rank of the job.
pub struct Comm {
    pub(super) rank: u32,
    pub(super) size: u32,
    pub(super) id: u64,
    pub(super) modules: Vec<Box<dyn Module>>,
    pub(super) state: Shared,
    pub(super) signals: Arc<state::Signals>,
    /// Per rank: the module and endpoint that reach it (fixed after init).
    pub(super) routes: Vec<(usize, Endpoint)>,
    /// Per module: whether it reaches another rank (then it is always progressed),
    /// and whether work was started on it lately (a module that reaches only this
    /// process, `self`, is progressed only then: the poll loop is the latency).
    pub(super) remote: Vec<bool>,
    pub(super) dirty: Vec<bool>,
    /// Per module: its eager limit (read on every send).
    pub(super) eager: Vec<usize>,
    /// The blocking receive in progress, when its transport matches it itself.
    pub(super) offload: Option<Offload>,
    /// How long a blocking call waits for a silent peer (`msg_peer_timeout`).
    pub(super) peer_timeout: Option<std::time::Duration>,
    pub(super) job: Job,
    /// Per rank: its node, numbered in the order the ranks name them (every rank
    /// reads the same names from the modex, so every rank numbers alike).
    pub(super) nodes: Vec<u32>,
    /// Whether this node runs more of the job's ranks than they have processors.
    pub(super) node_oversubscribed: bool,
    /// Whether the node's first rank found reading a peer's memory by address slower
    /// than copying through its transports (see [`Comm::node_reads_slow`]).
    pub(super) node_reads_slow: bool,
    /// How often a layer above drives progress from a thread of its own
    /// (`msg_progress_thread`).
    pub(super) progress_thread: Option<std::time::Duration>,
    /// The collective algorithms of a layer above (`msg_<collective>_algorithm`).
    pub(super) coll_algorithms: super::CollAlgorithms,
    /// The transport to processes of other jobs of the launcher, once opened.
    pub(super) bridge: Option<super::bridge::Bridge>,
    /// Per rank: where its process answers liveness probes (read at the first probe).
    pub(super) cards: Vec<Option<super::responder::Card>>,
}

impl Comm {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// How long a blocking call waits for a peer that makes no progress
    /// (`msg_peer_timeout`; `None`: forever): a layer above that waits on its own
    /// (for a lock, say) gives up after as long.
    pub fn peer_timeout(&self) -> Option<std::time::Duration> {
        self.peer_timeout
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The transport that carries traffic to `rank`.
    pub fn transport_to(&self, rank: u32) -> Option<&str> {
        let (m, _) = self.routes.get(rank as usize)?;
        Some(self.modules[*m].name())
    }

    /// Whether ranks `a` and `b` run on one node, as every rank of the job sees it
    /// (from the node each published at start-up; not from the transports chosen,
    /// which configuration may make differ between ranks).
    pub fn same_node(&self, a: u32, b: u32) -> bool {
        let node = |r: u32| self.nodes.get(r as usize);
        node(a).is_some() && node(a) == node(b)
    }

    /// Whether this node runs more of the job's ranks than the processors they may run
    /// on between them (the union of their affinities when they started: all its online
    /// processors, or those of a cpuset that confines the job), so that they take turns
    /// on them (every rank of the node sees it alike): what
    /// `msg_yield_when_idle` and `msg_bind_to` decide by when `auto`.
    pub fn node_oversubscribed(&self) -> bool {
        self.node_oversubscribed
    }

    /// The interval at which a layer above that serializes its calls should drive
    /// this process's progress from a thread of its own while none of its calls is
    /// inside (`msg_progress_thread`); `None`: only inside calls.
    pub fn progress_thread(&self) -> Option<std::time::Duration> {
        self.progress_thread
    }

    /// The collective algorithms the user chose for a layer above
    /// (`msg_allreduce_algorithm`, `msg_bcast_algorithm`, `msg_barrier_algorithm`,
    /// `msg_allgather_algorithm`; each `Auto` by default), the same at every rank
    /// (checked against rank 0's when the communicator was made).
    pub fn coll_algorithms(&self) -> super::CollAlgorithms {
        self.coll_algorithms
    }

    /// Whether reading another process's memory by address alone is, on this node,
    /// not worth it at any size: a transport of the node's first rank offers such
    /// reads ([`BtlFlags::UNREGISTERED_REMOTE`]) but measured them slower than copies
    /// through its own buffers at start-up (`unregistered_remote_below` 0: `sm`'s
    /// probe under `btl_sm_rdma=auto`, or `btl_sm_by_address_below=0`). Every rank of
    /// the node sees the same answer, so that collectives may choose their pieces by it.
    ///
    /// [`BtlFlags::UNREGISTERED_REMOTE`]: rbtl_btl::BtlFlags::UNREGISTERED_REMOTE
    pub fn node_reads_slow(&self) -> bool {
        self.node_reads_slow
    }

    /// The largest message to `rank` that goes in one send, without rendezvous.
    pub fn eager_payload_to(&self, rank: u32) -> Option<usize> {
        let (m, _) = self.routes.get(rank as usize)?;
        Some(self.eager[*m].saturating_sub(super::protocol::EAGER_HEADER))
    }

    /// The modules in use, most exclusive first.
    ///
    /// Borrowed, never handed out by value: the message layer's callbacks live in
    /// them, and they must stay with this `Comm` (see `state::Local`).
    pub fn modules(&mut self) -> impl Iterator<Item = &mut dyn Module> + '_ {
        self.modules
            .iter_mut()
            .map(|m| m.as_mut() as &mut dyn Module)
    }

    /// How many processes this one is connected to are known to have failed (for
    /// tools): of its job, or of other jobs not disconnected from.
    pub fn failed_peers(&self) -> usize {
        self.signals.failed.load(Ordering::Acquire)
    }

    /// The identity of this communicator (windows check they are used with theirs).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The module and endpoint for `rank`; marks the module as having work.
    #[inline(always)]
    pub(super) fn route(&mut self, rank: u32) -> Result<(usize, Endpoint)> {
        let Some(&route) = self.routes.get(rank as usize) else {
            return Err(Error::BadRank(rank, self.size));
        };
        if self.signals.failed.load(Ordering::Acquire) > 0 {
            self.check_alive(rank)?;
        }
        self.dirty[route.0] = true;
        Ok(route)
    }

    /// `PeerFailed` if `rank` is known to have failed.
    #[cold]
    #[inline(never)]
    fn check_alive(&self, rank: u32) -> Result<()> {
        match lock(&self.state).failed.get(&rank) {
            Some(why) => Err(Error::PeerFailed {
                rank,
                why: why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Drive every transport once, then retry what waited for room.
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        let mut n = 0;
        for (i, m) in self.modules.iter_mut().enumerate() {
            if self.remote[i] || self.dirty[i] {
                let k = m.progress();
                self.dirty[i] = k > 0;
                n += k;
            }
        }
        if self.signals.deferred.load(Ordering::Acquire) == 0 {
            return n;
        }
        n + self.retry_deferred()
    }

    /// Send what waited for room, in order, then offer the served requests that
    /// waited to their server again (kept out of `progress`, whose loop is the
    /// latency of every receive).
    #[cold]
    #[inline(never)]
    fn retry_deferred(&mut self) -> usize {
        let mut n = 0;
        let mut s = lock(&self.state);
        let waiting = s.deferred.len();
        for _ in 0..waiting {
            let Some(d) = s.deferred.pop_front() else {
                break;
            };
            state::bump(&self.signals.deferred, -1);
            self.dirty[d.module] = true;
            let m = self.modules[d.module].as_mut();
            // SAFETY: a lent payload's request is still under way (it completes below,
            // or when its peer fails, which drops the message too).
            let payload = unsafe { d.payload() };
            match state::transmit(m, d.endpoint, d.tag, &d.bytes, payload) {
                Err(rbtl_btl::Error::OutOfResource(_)) => {
                    // Keep the order: this one and everything behind it wait.
                    s.deferred.push_front(d);
                    state::bump(&self.signals.deferred, 1);
                    break;
                }
                outcome => {
                    n += usize::from(outcome.is_ok());
                    s.deferred_left(&d, outcome);
                }
            }
        }
        let later = !s.later.is_empty();
        drop(s);
        if later {
            n += self.retry_later();
        }
        n
    }

    /// Leave the job: a barrier (so no peer still reads our memory), then tell the
    /// process manager.
    pub fn finalize(mut self) -> Result<()> {
        self.drain()?;
        self.barrier()?;
        self.drain()
    }

    /// Progress until nothing waits for room in a transport.
    fn drain(&mut self) -> Result<()> {
        let mut idle = IdleWait::new();
        // (Served requests waiting to be offered again are not messages to send, and
        // those to a failed peer were dropped at its failure.)
        while !lock(&self.state).deferred.is_empty() {
            if self.progress() > 0 {
                idle.busy();
            } else if idle.idle() {
                if let Some(rank) = self.first_deferred_rank() {
                    if let Some(e) = self.look_for(Needs::Rank(rank), &mut idle) {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The job's modex (for layers above that exchange their own data).
    pub fn job(&mut self) -> &mut Job {
        &mut self.job
    }
}
