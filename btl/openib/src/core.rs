//! What the openib module owns besides its connection methods: the device's
//! resources, the fragment pools, the peers, and the work in flight. The connection
//! methods (CPCs) act on it as their host: they make queue pairs on its protection
//! domain and completion queue, ask it to post receives, and hand it connected queue
//! pairs. Over XRC (the `xrc` method), a peer has no queue pair of its own: its
//! sends go through its node's initiator, held here with the node's domain and this
//! process's XRC receives ([`XrcResources`]).

use crate::buffers::Control;
use crate::peer::{Link, Peer, Waiting, XrcPath};
use crate::srq::SharedReceives;
use crate::xrc::XrcResources;
use rbtl_btl::transport_kit::{AmTable, Answers, Done};
use rbtl_btl::{
    Attributes, Descriptor, Endpoint, Error, ErrorCallback, ErrorEvent, ModuleId, PeerFailure,
    RdmaCallback, RdmaCompletion, Result,
};
use rbtl_cpc::deadline::Deadlines;
use rbtl_cpc::{ConnectionHost, Failure};
use rbtl_mpool::{Frag, FreeList};
use rbtl_verbs::{Context, Cq, Mr, MrAccess, Op, Pd, Qp, QpCaps, Sge, VerbsRegistrar};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

/// A device port as queue pairs need it.
#[derive(Clone, Copy, Debug)]
pub struct PortDesc {
    /// Port number.
    pub num: u8,
    /// GID index used for addressing (the RoCEv2 IPv4 one on RoCE).
    pub gid_index: u8,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// The GID at `gid_index`.
    pub gid: [u8; 16],
    /// Active MTU as an `ibv_mtu`.
    pub mtu: u8,
}

/// Tunables of a module.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Receive buffers per peer for messages.
    pub recv_depth: u32,
    /// Extra receive buffers per peer for credit-only messages.
    pub rsv_depth: u32,
    /// Outstanding puts, gets and atomics per peer.
    pub rdma_depth: u32,
    /// Bytes a send may carry inline (0: never).
    pub max_inline: u32,
    /// Most send fragments.
    pub free_list_max: usize,
    /// Receive buffers in one queue shared by every peer (0: per-peer buffers).
    pub srq_depth: u32,
    /// Receive buffers in this process's XRC shared receive queue (peers connected by
    /// `xrc` send there).
    pub xrc_srq_depth: u32,
    /// Time a connection has to come up once needed.
    pub connect_timeout: Duration,
    /// Time `flush` waits for peers whose connection is being made and answers nothing.
    pub flush_timeout: Duration,
}

/// Completion-queue entries a module needs: those each peer's queue pair may fill,
/// and those of the shared receive queue (if any), counted once.
pub fn cq_entries(caps: QpCaps, settings: &Settings) -> (usize, usize) {
    match settings.srq_depth {
        0 => ((caps.max_send_wr + caps.max_recv_wr) as usize, 0),
        n => (caps.max_send_wr as usize, n as usize),
    }
}

/// Work posted on a send queue, by work-request id.
pub enum Posted {
    /// A descriptor (the caller's, or the module's own credit message), kept in
    /// [`Core::sent`] under the same id: every tracked request moves, and a descriptor
    /// is large.
    Send(usize),
    /// An inline send with no descriptor.
    Inline(usize),
    /// A one-sided operation.
    Rdma(usize, RdmaCallback, usize, usize),
    /// A credit-only message from the control area.
    Credit(usize),
}

impl Posted {
    /// The endpoint it went to.
    pub fn endpoint(&self) -> usize {
        match self {
            Posted::Send(ep) | Posted::Inline(ep) | Posted::Rdma(ep, ..) | Posted::Credit(ep) => {
                *ep
            }
        }
    }
}

/// A receive buffer to post again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repost {
    /// Slot `slot` of peer `ep`'s own buffers (a reserved one if `credit_only`).
    Peer {
        /// The peer.
        ep: usize,
        /// Its slot.
        slot: usize,
        /// Whether a credit-only message used it.
        credit_only: bool,
    },
    /// Slot `slot` of a shared queue (the XRC one if `xrc`); `ep` sent what it held.
    Shared {
        /// The sender, when known.
        ep: Option<usize>,
        /// The queue's slot.
        slot: usize,
        /// Whether it is the XRC shared receive queue.
        xrc: bool,
    },
}

impl Repost {
    /// The peer whose message the buffer held, when known.
    pub fn endpoint(&self) -> Option<usize> {
        match *self {
            Repost::Peer { ep, .. } => Some(ep),
            Repost::Shared { ep, .. } => ep,
        }
    }
}

/// Work-request ids of receives have this bit; the endpoint and slot follow.
pub const RECV_BIT: u64 = 1 << 63;

/// The module's state, host of its CPCs.
pub struct Core {
    /// This module.
    pub id: ModuleId,
    /// This process.
    pub rank: u32,
    /// The device.
    pub ctx: Context,
    /// The device's largest send queue.
    pub max_qp_wr: u32,
    /// Limits and flags.
    pub attrs: Attributes,
    /// Tunables.
    pub settings: Settings,
    /// The port.
    pub port: PortDesc,
    /// The protection domain of everything.
    pub pd: Pd,
    /// The one completion queue, for sends and receives.
    pub cq: Cq,
    /// Its entries (every peer's queue pair may fill its share).
    pub cq_depth: usize,
    /// Queue-pair sizes.
    pub caps: QpCaps,
    /// Registrations of user memory.
    pub rcache: Arc<rbtl_rcache::Rcache<VerbsRegistrar>>,
    /// Send fragments, registered once per chunk.
    pub send_frags: FreeList<Mr>,
    /// Receive fragments, registered once per chunk.
    pub recv_frags: FreeList<Mr>,
    /// The shared receive queue, when receives go through one.
    pub shared: Option<SharedReceives>,
    /// The XRC domain, receives and queue pairs, once the `xrc` method made them.
    pub xrc: Option<XrcResources>,
    /// Nodes whose XRC initiator had an error completion (their peers failed), with
    /// why: for the `xrc` method, which fails the peers still connecting there.
    pub xrc_broken: Vec<(usize, String)>,
    /// Peers by endpoint.
    pub peers: Vec<Peer>,
    /// Endpoint by rank.
    pub by_rank: HashMap<u32, usize>,
    /// Posted send-queue work by id, with the send-queue entries its completion frees
    /// (its own and those of the unsignalled requests before it).
    pub posted: Vec<Option<(Posted, u32)>>,
    pub free_ids: Vec<usize>,
    /// The descriptors of posted sends, by work-request id.
    pub sent: Vec<Option<Descriptor>>,
    /// Receive callbacks.
    pub am: AmTable,
    /// The error callback.
    pub on_error: Option<ErrorCallback>,
    /// Completions to report.
    pub done: VecDeque<Done>,
    /// Peers that just connected (their waiting work may go).
    pub ready: Vec<usize>,
    /// Receive slots consumed by the last poll: reposted at the start of the next, so
    /// that a reply the user sends in between does not wait behind them.
    pub to_repost: Vec<Repost>,
    /// Peers whose connection is being set up.
    pub connecting: usize,
    /// By when each of them must be up (by rank).
    pub deadlines: Deadlines,
    /// Per peer (by endpoint), the handshake messages and connection events that came
    /// from it: what a flush waiting on a connection counts as its answers.
    pub answers: Answers,
    /// Registered memory the module sends from on its own account.
    pub control: Control,
    /// Peers whose process ended or that disconnected, as their connection method saw,
    /// with why: each fails once a later poll found the completion queue holding less
    /// than a full batch (or a bounded number of progress calls later), so that what
    /// it sent before it went, which may lie in the queue behind a batch or more, is
    /// delivered first.
    pub ended: Vec<(u32, PeerFailure)>,
}
impl Core {
    /// The peer behind `ep`.
    pub fn peer(&self, ep: Endpoint) -> Result<&Peer> {
        // (`let else`, not `ok_or`: that builds and drops an error on every call.)
        let Some(peer) = self.peers.get(ep.0 as usize) else {
            return Err(Error::UnknownEndpoint(ep.0));
        };
        Ok(peer)
    }

    /// The shared receive queue, or the XRC one if `xrc`, when there is one.
    #[inline(always)]
    pub fn receives(&mut self, xrc: bool) -> Option<&mut SharedReceives> {
        if xrc {
            self.xrc.as_mut().map(|x| &mut x.receives)
        } else {
            self.shared.as_mut()
        }
    }

    /// The node `rank` runs on, as `add_procs` said (`None`: unknown).
    pub fn node_of(&self, rank: u32) -> Option<&str> {
        let ep = *self.by_rank.get(&rank)?;
        Some(self.peers[ep].node.as_str()).filter(|n| !n.is_empty())
    }

    /// Post a send-queue request for peer `ep`: on its queue pair, or over XRC on its
    /// node's initiator naming its receive queue.
    ///
    /// # Safety
    ///
    /// As `Qp::post_send_sg`: each piece lies inside the registration its key names
    /// (unless inline) and stays valid and untouched until the request completes.
    #[inline(always)]
    pub unsafe fn post_send(
        &mut self,
        ep: usize,
        id: u64,
        op: Op,
        sges: &[Sge],
        inline: bool,
        signaled: bool,
    ) -> rbtl_verbs::Result<()> {
        let peer = &mut self.peers[ep];
        if let Some(qp) = peer.qp.as_mut() {
            // SAFETY: the caller's promise.
            return unsafe { qp.post_send_sg(id, op, sges, inline, signaled) };
        }
        let initiator = peer.xrc.and_then(|path| {
            let ini = self.xrc.as_mut()?.initiators.get_mut(path.node)?.as_mut()?;
            Some((ini, path.srqn))
        });
        match initiator {
            // SAFETY: the caller's promise.
            Some((ini, srqn)) => unsafe { ini.post_send_sg(id, srqn, op, sges, inline, signaled) },
            None => Err(rbtl_verbs::Error::Call {
                call: "ibv_post_send",
                source: std::io::Error::from_raw_os_error(libc::ENOTCONN),
            }),
        }
    }

    /// Bytes a send to peer `ep` may carry inline.
    #[inline(always)]
    pub fn inline_max(&self, ep: usize) -> u32 {
        let peer = &self.peers[ep];
        match (&peer.qp, peer.xrc) {
            (Some(qp), _) => qp.caps.max_inline,
            (None, Some(path)) => path.max_inline,
            (None, None) => 0,
        }
    }

    /// Peer `rank` failed (as [`fail`](Self::fail), by rank; nothing for a stranger).
    pub fn fail_rank(&mut self, rank: u32, why: PeerFailure) {
        if let Some(&ep) = self.by_rank.get(&rank) {
            self.fail(ep, why);
        }
    }

    /// A send-queue request of peer `ep` completed with an error: its connection is
    /// over, and over XRC that of every peer sharing its node's initiator.
    pub fn fail_link(&mut self, ep: usize, why: PeerFailure) {
        let Some(path) = self.peers[ep].xrc else {
            return self.fail(ep, why);
        };
        let shared: Vec<usize> = (0..self.peers.len())
            .filter(|&i| self.peers[i].xrc.is_some_and(|p| p.node == path.node))
            .collect();
        for i in shared {
            self.fail(i, why.clone());
        }
        if !self.xrc_broken.iter().any(|(n, _)| *n == path.node) {
            self.xrc_broken.push((path.node, why.to_string()));
        }
    }

    /// A connection to peer `rank` came up: its endpoint, no longer counted as
    /// connecting and with its deadline settled; `None` for a rank it does not know or
    /// one already up, or given up on (its deadline passed, or it was removed), which
    /// stays failed.
    fn coming_up(&mut self, rank: u32) -> Option<usize> {
        let &ep = self.by_rank.get(&rank)?;
        match self.peers[ep].link {
            Link::Failed(_) | Link::Up => return None,
            Link::Connecting => self.connecting -= 1,
            Link::Idle => {}
        }
        self.deadlines.settle(rank);
        Some(ep)
    }

    /// Peer `rank` is connected over XRC by `path`, with `quota` entries of its node's
    /// initiator to itself.
    pub fn xrc_connected(&mut self, rank: u32, path: XrcPath, quota: u32) {
        let Some(ep) = self.coming_up(rank) else {
            return;
        };
        let peer = &mut self.peers[ep];
        tracing::debug!(
            rank,
            node = path.node,
            srqn = path.srqn,
            "openib: connected over xrc"
        );
        peer.link = Link::Up;
        peer.sq_free = quota;
        peer.xrc = Some(path);
        self.ready.push(ep);
    }

    /// Remember work posted on a send queue (signalled, so it takes over the
    /// unsignalled requests before it); its work-request id.
    #[inline(always)]
    pub fn track(&mut self, p: Posted) -> u64 {
        let ep = p.endpoint();
        let covers = 1 + std::mem::take(&mut self.peers[ep].unsignaled);
        let p = (p, covers);
        match self.free_ids.pop() {
            Some(i) => {
                self.posted[i] = Some(p);
                i as u64
            }
            None => {
                self.posted.push(Some(p));
                (self.posted.len() - 1) as u64
            }
        }
    }

    /// Remember a descriptor posted on a send queue, as [`Core::track`] does; its id.
    pub fn track_send(&mut self, ep: usize, des: Descriptor) -> u64 {
        let id = self.track(Posted::Send(ep));
        let i = id as usize;
        if self.sent.len() <= i {
            self.sent.resize_with(i + 1, || None);
        }
        self.sent[i] = Some(des);
        id
    }

    /// The descriptor of posted send `id` (after its untrack or unpost).
    pub fn take_sent(&mut self, id: u64) -> Option<Descriptor> {
        self.sent.get_mut(id as usize)?.take()
    }

    /// Take back the work of a completion, with the send-queue entries it frees.
    #[inline]
    pub fn untrack(&mut self, id: u64) -> Option<(Posted, u32)> {
        let p = self.posted.get_mut(id as usize)?.take();
        if p.is_some() {
            self.free_ids.push(id as usize);
        }
        p
    }

    /// The queue-pair access flags peers get.
    pub fn qp_access() -> MrAccess {
        MrAccess::LOCAL_WRITE
            | MrAccess::REMOTE_WRITE
            | MrAccess::REMOTE_READ
            | MrAccess::REMOTE_ATOMIC
    }

    /// A new RC queue pair on this module's resources, in INIT.
    pub fn new_qp(&self) -> std::result::Result<Qp, rbtl_cpc::Error> {
        let mut qp = Qp::create_rc(
            &self.pd,
            &self.cq,
            &self.cq,
            self.shared.as_ref().and_then(SharedReceives::srq),
            self.caps,
            self.port.num,
            self.port.gid_index,
        )
        .and_then(|mut qp| qp.to_init(Self::qp_access()).map(|_| qp))
        .map_err(|e| cpc_error(e.to_string()))?;
        qp.caps.max_inline = qp.caps.max_inline.min(self.settings.max_inline);
        Ok(qp)
    }

    /// Take back work whose posting failed: the unsignalled requests it took over
    /// wait for the next signalled one again.
    pub fn unpost(&mut self, id: u64) -> Option<Posted> {
        let (p, covers) = self.untrack(id)?;
        let ep = p.endpoint();
        self.peers[ep].unsignaled += covers - 1;
        Some(p)
    }

    /// Post receive `slot` of endpoint `ep` (its fragment is in place).
    pub fn post_recv_slot(&mut self, ep: usize, slot: usize) -> Result<()> {
        let peer = &mut self.peers[ep];
        let (Some(qp), Some(frag)) = (peer.qp.as_mut(), peer.recv[slot].as_ref()) else {
            return Ok(());
        };
        post_recv(qp, &self.recv_frags, ep, slot, frag)
    }

    /// Peer `ep` failed: everything waiting for it fails, the error callback hears.
    ///
    /// Its queue pair, if it has one, goes to the error state, so that the sends, puts,
    /// gets and atomics posted on it complete at once, flushed, and fail with this
    /// failure as their progress polls them (see `on_send_completion`), rather than
    /// when the device decides: never, for sends a stopped peer's empty shared receive
    /// queue holds back with receiver-not-ready retries (`rnr_retry` 7 retries
    /// forever), or after its retries against a dead one. (UCX's rc transports flush
    /// an endpoint's queue pair the same way when it is cancelled or cleaned up.) Over
    /// XRC the initiator is the node's, shared with its other peers: it is left alone here,
    /// and fails only with the link (`fail_link`, after an error completion, by which
    /// the device has moved it to error itself).
    pub fn fail(&mut self, ep: usize, why: PeerFailure) {
        let peer = &mut self.peers[ep];
        if matches!(peer.link, Link::Failed(_)) {
            return;
        }
        if matches!(peer.link, Link::Connecting) {
            self.connecting -= 1;
        }
        self.deadlines.settle(peer.rank);
        tracing::warn!(rank = peer.rank, %why, "openib: peer failed");
        if let Some(qp) = peer.qp.as_mut() {
            if let Err(e) = qp.to_error() {
                tracing::warn!(
                    rank = peer.rank,
                    %e,
                    "openib: the failed peer's queue pair did not go to error: its posted \
                     work completes when the device completes it"
                );
            }
        }
        peer.link = Link::Failed(why.clone());
        let rank = peer.rank;
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        for w in std::mem::take(&mut peer.waiting) {
            match w {
                Waiting::Send(mut des, _) => match des.take_callback() {
                    Some(cb) => self.done.push_back(Done::Send {
                        callback: cb,
                        endpoint: Endpoint(ep as u32),
                        descriptor: des,
                        status: Err(err()),
                    }),
                    None => self.send_frags.put(des.into_frag()),
                },
                Waiting::Rdma(r) => self.done.push_back(Done::Rdma(
                    r.callback,
                    RdmaCompletion {
                        endpoint: Endpoint(ep as u32),
                        local_address: r.local,
                        size: r.size,
                        status: Err(err()),
                    },
                )),
            }
        }
        self.report(ep, err());
    }

    /// Tell the error callback (from progress) about `error` involving peer `ep`.
    pub fn report(&mut self, ep: usize, error: Error) {
        self.done.push_back(Done::Error(ErrorEvent {
            endpoint: Some(Endpoint(ep as u32)),
            rank: Some(self.peers[ep].rank),
            error,
        }));
    }
}

/// What a connection method's `why` is to the peer's users.
pub fn peer_failure(why: Failure) -> PeerFailure {
    match why {
        Failure::Removed { .. } => PeerFailure::RemovedUs,
        Failure::TimedOut { .. } => PeerFailure::Connect(why.to_string()),
        Failure::Protocol { .. } => PeerFailure::Protocol(why.to_string()),
        // Refused or ended, by the peer, the device or the connection manager.
        _ => PeerFailure::Broken(why.to_string()),
    }
}

/// Post one receive into `frag`.
pub fn post_recv(
    qp: &mut Qp,
    list: &FreeList<Mr>,
    ep: usize,
    slot: usize,
    frag: &Frag,
) -> Result<()> {
    let mr = list.registration(frag);
    let id = RECV_BIT | ((ep as u64) << 32) | slot as u64;
    // SAFETY: the fragment lies in the registered chunk `mr` and stays in the peer's
    // slot, untouched, until its completion is polled.
    unsafe { qp.post_recv(id, mr, frag.as_ptr() as u64, frag.len() as u32) }
        .map_err(|e| Error::NotAvailable(format!("openib: posting a receive: {e}")))
}

/// A CPC error from text.
pub fn cpc_error(why: String) -> rbtl_cpc::Error {
    rbtl_cpc::Error::Connect { cpc: "openib", why }
}

impl ConnectionHost for Core {
    type Qp = Qp;

    fn rank(&self) -> u32 {
        self.rank
    }

    fn post_receives(
        &mut self,
        rank: u32,
        qp: &mut Qp,
    ) -> std::result::Result<(), rbtl_cpc::Error> {
        let ep = *self
            .by_rank
            .get(&rank)
            .ok_or_else(|| cpc_error(format!("rank {rank} is not a peer of this module")))?;
        if let Some(shared) = self.shared.as_mut() {
            // The queue pair receives through the shared queue.
            shared.serve(qp.qpn(), ep);
            return Ok(());
        }
        let n = (self.settings.recv_depth + self.settings.rsv_depth) as usize;
        let mut slots = Vec::with_capacity(n);
        for slot in 0..n {
            let frag = self
                .recv_frags
                .get()
                .map_err(|e| cpc_error(e.to_string()))?;
            post_recv(qp, &self.recv_frags, ep, slot, &frag)
                .map_err(|e| cpc_error(e.to_string()))?;
            slots.push(Some(frag));
        }
        for old in std::mem::replace(&mut self.peers[ep].recv, slots)
            .into_iter()
            .flatten()
        {
            self.recv_frags.put(old);
        }
        Ok(())
    }

    fn connected(&mut self, rank: u32, qp: Qp) {
        // Not coming up: the queue pair goes.
        let Some(ep) = self.coming_up(rank) else {
            return;
        };
        let peer = &mut self.peers[ep];
        tracing::debug!(rank, qpn = qp.qpn(), "openib: connected");
        peer.link = Link::Up;
        peer.sq_free = qp.caps.max_send_wr;
        peer.qp = Some(qp);
        for (slot, credit_only) in std::mem::take(&mut peer.unposted) {
            if let Err(e) = self.post_recv_slot(ep, slot) {
                return self.fail(ep, PeerFailure::Broken(e.to_string()));
            }
            self.peers[ep].credits.reposted(credit_only);
        }
        self.ready.push(ep);
    }

    fn failed(&mut self, rank: u32, why: Failure) {
        self.fail_rank(rank, peer_failure(why));
    }

    fn heard(&mut self, rank: u32) {
        if let Some(&ep) = self.by_rank.get(&rank) {
            self.answers.heard(ep);
        }
    }
}
