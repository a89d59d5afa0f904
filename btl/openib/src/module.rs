//! The openib module: one per active device port (Open MPI: `mca_btl_openib_module_t`).
//! Sends go over a reliable-connected queue pair per peer, made on first use by the
//! connection method both sides chose; what is sent meanwhile waits, in order. Puts and
//! gets are RDMA writes and reads, atomics the device's fetch-add and compare-swap.

use crate::core::{Core, Done, Link, Peer, Posted, RdmaRequest, Waiting, RECV_BIT};
use crate::flow::Credits;
use crate::srq::SRQ_BIT;
use crate::wire::{self, RemoteKey, Trailer, CREDIT_ONLY, FRAG_EXTRA, TRAILER};
use rbtl_btl::{
    copy_bytes, AmCallback, AtomicOp, Attributes, DesFlags, Descriptor, Endpoint, Error,
    ErrorCallback, Expected, ExpectedSlot, MemHandle, Modex, Module, ModuleId, Order, Proc,
    RdmaCallback, RdmaCompletion, Received, RemoteHandle, Result, SendCompletion, SendError,
    SendOutcome, SendiOutcome, Tag, MAX_SEGMENTS,
};
use rbtl_cpc::select::{self, Offer};
use rbtl_cpc::CpcModule;
use rbtl_mpool::Frag;
use rbtl_rcache::{Access, Registration};
use rbtl_verbs::{Completion, Op, Sge, VerbsRegistrar};
use std::collections::VecDeque;
use std::mem::MaybeUninit;

/// What a memory handle of this module holds.
type Reg = Registration<VerbsRegistrar>;

/// Progress calls between two looks at the connection methods' own I/O while no
/// connection is being set up (requests from peers may arrive at any time).
const CPC_POLL_INTERVAL: u32 = 1 << 14;

/// The work-request id of unsignalled sends (completed only if they fail; no tracked
/// work has it).
const UNSIGNALED_ID: u64 = RECV_BIT - 1;

/// One inline send in this many asks for a completion.
const SIGNAL_EVERY: u32 = 16;
/// Inline sends up to this size (with their trailer) go out as one gathered piece.
const GATHER_MAX: usize = 128;

/// Most operations that may wait for one peer before `OutOfResource`.
const MAX_WAITING: usize = 4096;

/// One port's module.
pub struct OpenibModule {
    pub(crate) core: Core,
    pub(crate) cpcs: Vec<(Box<dyn CpcModule<Core>>, Offer)>,
    pub(crate) modex_key: String,
    pub(crate) subnet: [u8; 8],
    calls: u32,
    /// Receive callbacks running (a callback may progress the module again).
    delivering: u32,
    /// Receives polled and not yet delivered, in order. Only a progress call outside
    /// every receive callback delivers them, so that no callback runs inside itself
    /// and no message overtakes another.
    received: VecDeque<Completion>,
    /// The receive posted with `Module::expect`, and whether a message filled it in
    /// the progress call under way.
    expected: ExpectedSlot,
    filled: bool,
}

impl OpenibModule {
    pub(crate) fn new(
        core: Core,
        cpcs: Vec<(Box<dyn CpcModule<Core>>, Offer)>,
        modex_key: String,
        subnet: [u8; 8],
    ) -> OpenibModule {
        OpenibModule {
            core,
            cpcs,
            modex_key,
            subnet,
            calls: 0,
            delivering: 0,
            received: VecDeque::new(),
            expected: ExpectedSlot::default(),
            filled: false,
        }
    }

    /// What this module publishes: the subnet prefix, how it receives (1: through a
    /// shared receive queue, 0: per peer), then the CPC offers.
    pub(crate) fn modex_blob(&self) -> Vec<u8> {
        let offers: Vec<Offer> = self.cpcs.iter().map(|c| c.1.clone()).collect();
        let mut b = self.subnet.to_vec();
        b.push(u8::from(self.core.shared.is_some()));
        b.extend(select::encode(&offers));
        b
    }

    fn endpoint(&mut self, ep: Endpoint) -> Result<&mut Peer> {
        // (`let else`, not `ok_or`: that builds and drops an error on every send.)
        let Some(peer) = self.core.peers.get_mut(ep.0 as usize) else {
            return Err(Error::UnknownEndpoint(ep.0));
        };
        Ok(peer)
    }

    /// Make sure `ep` is connected or on its way; a failed peer is an error.
    fn connect(&mut self, ep: Endpoint) -> Result<()> {
        let peer = self.endpoint(ep)?;
        match &peer.link {
            Link::Up | Link::Connecting => Ok(()),
            Link::Failed(why) => Err(Error::PeerFailed {
                rank: peer.rank,
                why: why.clone(),
            }),
            Link::Idle => {
                peer.link = Link::Connecting;
                let (rank, cpc) = (peer.rank, peer.cpc);
                self.core.connecting += 1;
                if let Err(e) = self.cpcs[cpc].0.start_connect(rank, &mut self.core) {
                    self.core.fail(ep.0 as usize, e.to_string());
                    return Err(Error::PeerFailed {
                        rank,
                        why: e.to_string(),
                    });
                }
                Ok(())
            }
        }
    }

    /// Post what waits for `ep`, in order, as far as credits and queue room allow.
    fn drain(&mut self, ep: usize) -> usize {
        let mut n = 0;
        loop {
            let peer = &mut self.core.peers[ep];
            if !matches!(peer.link, Link::Up) || peer.sq_free == 0 {
                break;
            }
            let Some(front) = peer.waiting.front() else {
                break;
            };
            match front {
                Waiting::Send(..) if !peer.credits.take() => break,
                Waiting::Rdma(_) if peer.rdma_in_flight >= self.core.settings.rdma_depth => break,
                _ => {}
            }
            match peer.waiting.pop_front() {
                Some(Waiting::Send(des, tag)) => {
                    if let Err(e) = self.post_descriptor(ep, des, tag.0) {
                        self.finish_send(e.descriptor, Err(e.error));
                    }
                }
                Some(Waiting::Rdma(r)) => self.post_rdma(ep, *r),
                None => break,
            }
            n += 1;
        }
        // Credits may be owed for receives reposted just now (a connection that came
        // up after the peer had sent) or left due earlier.
        let peer = &self.core.peers[ep];
        if peer.credit_due || peer.credits.wants_credit_message() {
            self.send_credits(ep);
        }
        n
    }

    /// Post a descriptor (a credit has been taken for it).
    // The error carries the descriptor back by value, as `send`'s does.
    #[allow(clippy::result_large_err)]
    fn post_descriptor(
        &mut self,
        ep: usize,
        mut des: Descriptor,
        tag: u8,
    ) -> std::result::Result<(), SendError> {
        let peer = &mut self.core.peers[ep];
        let (credits, rsv) = peer.credits.piggyback();
        let mut lens = [0usize; MAX_SEGMENTS];
        let nseg = des.segment_count();
        for (l, s) in lens.iter_mut().zip(des.segment_lens()) {
            *l = s;
        }
        let t = Trailer {
            tag,
            flags: 0,
            nseg: nseg as u8,
            rsv,
            credits,
        };
        let len = des.len() + wire::write_trailer(des.spare_mut(), &lens[..nseg], t);
        let lkey = self.core.send_frags.registration(des.frag()).lkey();
        let sge = Sge {
            addr: des.frag().as_ptr() as u64,
            len: len as u32,
            lkey,
        };
        let id = self.core.track_send(ep, des);
        let peer = &mut self.core.peers[ep];
        let qp = peer.qp.as_mut().expect("a connected peer has a queue pair");
        // SAFETY: the fragment is in a registered chunk and stays, untouched, in the
        // posted table until its completion.
        match unsafe { qp.post_send_sg(id, Op::Send, &[sge], true, true) } {
            Ok(()) => {
                peer.sq_free -= 1;
                Ok(())
            }
            Err(e) => {
                peer.credits.returned(credits, rsv);
                let (Some(Posted::Send(_)), Some(des)) =
                    (self.core.unpost(id), self.core.take_sent(id))
                else {
                    unreachable!("just tracked");
                };
                Err(SendError {
                    error: Error::NotAvailable(format!("openib: {e}")),
                    descriptor: des,
                })
            }
        }
    }

    /// Return credits to `ep` with a credit-only message if one is due and possible:
    /// its trailer alone, from the peer's slot of the control area.
    fn send_credits(&mut self, ep: usize) {
        let peer = &mut self.core.peers[ep];
        peer.credit_due = false;
        if !matches!(peer.link, Link::Up) || !peer.credits.wants_credit_message() {
            return;
        }
        let Some((slot, lkey)) = self.core.control.credit_slot(ep) else {
            return;
        };
        if peer.sq_free == 0 || peer.credit_in_flight {
            peer.credit_due = true;
            return;
        }
        peer.credits.take_rsv();
        let (credits, rsv) = peer.credits.piggyback();
        let t = Trailer {
            tag: 0,
            flags: CREDIT_ONLY,
            nseg: 1,
            rsv,
            credits,
        };
        // SAFETY: the peer's 8-byte slot of the control area, not in use (no credit
        // message of this peer is in flight).
        unsafe { std::ptr::copy_nonoverlapping(t.to_bytes().as_ptr(), slot, TRAILER) };
        let sge = Sge {
            addr: slot as u64,
            len: TRAILER as u32,
            lkey,
        };
        let id = self.core.track(Posted::Credit(ep));
        let peer = &mut self.core.peers[ep];
        let qp = peer.qp.as_mut().expect("a connected peer has a queue pair");
        // SAFETY: the slot lies in the control area's registration and stays untouched
        // until the completion clears `credit_in_flight`.
        match unsafe { qp.post_send_sg(id, Op::Send, &[sge], true, true) } {
            Ok(()) => {
                peer.sq_free -= 1;
                peer.credit_in_flight = true;
            }
            Err(e) => {
                self.core.unpost(id);
                self.core.fail(ep, format!("openib: {e}"));
            }
        }
    }

    #[inline(always)]
    fn post_rdma(&mut self, ep: usize, r: RdmaRequest) {
        let sge = Sge {
            addr: r.local as u64,
            len: r.size as u32,
            lkey: r.lkey,
        };
        let (op, local, size) = (r.op, r.local, r.size);
        let id = self.core.track(Posted::Rdma(ep, r.callback, local, size));
        let peer = &mut self.core.peers[ep];
        let qp = peer.qp.as_mut().expect("a connected peer has a queue pair");
        // SAFETY: the local range was checked against its registration (whose key
        // this is) when the operation was started; the caller keeps it until the
        // callback.
        match unsafe { qp.post_send_sg(id, op, &[sge], false, true) } {
            Ok(()) => {
                peer.sq_free -= 1;
                peer.rdma_in_flight += 1;
            }
            Err(e) => {
                if let Some(Posted::Rdma(_, cb, local, size)) = self.core.unpost(id) {
                    self.core.done.push_back(Done::Rdma(
                        cb,
                        RdmaCompletion {
                            endpoint: Endpoint(ep as u32),
                            local_address: local,
                            size,
                            status: Err(Error::NotAvailable(format!("openib: {e}"))),
                        },
                    ));
                }
            }
        }
    }

    /// Start a one-sided operation: post it now, or queue it behind the connection,
    /// earlier work, or the operations in flight.
    #[inline(always)]
    fn start_rdma(&mut self, ep: Endpoint, r: RdmaRequest) -> Result<()> {
        if !matches!(
            self.core.peers.get(ep.0 as usize).map(|p| &p.link),
            Some(Link::Up)
        ) {
            self.connect(ep)?;
        }
        let depth = self.core.settings.rdma_depth;
        let peer = self.endpoint(ep)?;
        let now = matches!(peer.link, Link::Up)
            && peer.waiting.is_empty()
            && peer.sq_free > 0
            && peer.rdma_in_flight < depth;
        if now {
            self.post_rdma(ep.0 as usize, r);
        } else {
            if peer.waiting.len() >= MAX_WAITING {
                return Err(Error::OutOfResource(
                    "openib: operations waiting for a peer",
                ));
            }
            peer.waiting.push_back(Waiting::Rdma(Box::new(r)));
        }
        Ok(())
    }

    #[inline]
    fn lkey(&self, handle: &MemHandle, addr: usize, len: usize, needs: Access) -> Result<u32> {
        Ok(handle
            .check::<Reg>(self.core.id, addr, len, needs)?
            .handle()
            .lkey())
    }

    /// Queue a send completion (or recycle the descriptor when nobody waits for it).
    fn finish_send(&mut self, mut des: Descriptor, status: Result<()>) {
        let ep = des.endpoint();
        match des.take_callback() {
            Some(cb) => self.core.done.push_back(Done::Send(cb, ep, des, status)),
            None => self.core.send_frags.put(des.into_frag()),
        }
    }

    /// A send-queue completion: its work is done.
    fn on_send_completion(&mut self, c: Completion) {
        let failed = c.result().err().map(|e| e.to_string());
        let status = || match &failed {
            None => Ok(()),
            Some(e) => Err(Error::NotAvailable(format!("openib: {e}"))),
        };
        let Some((posted, covers)) = self.core.untrack(c.wr_id) else {
            return;
        };
        let ep = posted.endpoint();
        self.core.peers[ep].sq_free += covers;
        match posted {
            Posted::Send(_) => {
                if let Some(des) = self.core.take_sent(c.wr_id) {
                    self.finish_send(des, status());
                }
            }
            Posted::Inline(_) => {}
            Posted::Credit(_) => {
                let peer = &mut self.core.peers[ep];
                peer.credit_in_flight = false;
                if peer.credit_due && failed.is_none() {
                    self.send_credits(ep);
                }
            }
            Posted::Rdma(_, cb, local, size) => {
                self.core.peers[ep].rdma_in_flight -= 1;
                let rank = self.core.peers[ep].rank;
                let status = match &failed {
                    None => Ok(()),
                    Some(e) if c.is_remote_access_error() => Err(Error::BadRemoteHandle(format!(
                        "the target's device refused the access: {e}"
                    ))),
                    Some(e) => Err(Error::PeerFailed {
                        rank,
                        why: format!("the operation did not complete: {e}"),
                    }),
                };
                let c = RdmaCompletion {
                    endpoint: Endpoint(ep as u32),
                    local_address: local,
                    size,
                    status,
                };
                // At once when nothing completed earlier waits to be reported (this
                // is inside progress).
                if self.core.done.is_empty() && failed.is_none() {
                    cb(self, c);
                } else {
                    self.core.done.push_back(Done::Rdma(cb, c));
                }
            }
        }
        if let Some(e) = failed {
            self.core.fail(ep, format!("queue pair error: {e}"));
        } else if !self.core.peers[ep].waiting.is_empty() {
            self.drain(ep);
        }
    }

    #[inline(always)]
    fn on_receive(&mut self, c: Completion) {
        let slot = (c.wr_id & 0xffff_ffff) as usize;
        if c.wr_id & SRQ_BIT != 0 {
            return self.on_shared_receive(c, slot);
        }
        let ep = ((c.wr_id & !RECV_BIT) >> 32) as usize;
        let Some(frag) = self
            .core
            .peers
            .get_mut(ep)
            .and_then(|p| p.recv.get_mut(slot)?.take())
        else {
            return;
        };
        let Some(credit_only) = self.deliver(&c, ep, &frag) else {
            self.core.recv_frags.put(frag);
            return;
        };
        // The buffer is reposted, and owed to the peer, by the next progress call
        // (or once the queue pair is here: the peer may send before this side's CPC
        // has finished).
        let peer = &mut self.core.peers[ep];
        if matches!(peer.link, Link::Failed(_)) {
            self.core.recv_frags.put(frag);
            return;
        }
        peer.recv[slot] = Some(frag);
        if peer.qp.is_none() {
            peer.unposted.push((slot, credit_only));
        } else {
            self.core.to_repost.push((ep, slot, credit_only));
        }
        // Credits the message returned may let waiting sends go.
        if !self.core.peers[ep].waiting.is_empty() {
            self.drain(ep);
        }
    }

    /// A receive through the shared queue: the sender is known by its queue pair; the
    /// buffer goes back to the shared queue whatever became of the message.
    fn on_shared_receive(&mut self, c: Completion, slot: usize) {
        let Some(shared) = self.core.shared.as_mut() else {
            return;
        };
        let Some(frag) = shared.take(slot) else {
            return;
        };
        let ep = shared.endpoint(c.qp_num);
        if let Some(ep) = ep {
            self.deliver(&c, ep, &frag);
        } else {
            tracing::warn!(
                qpn = c.qp_num,
                "openib: a message on an unknown queue pair dropped"
            );
        }
        if let Some(shared) = self.core.shared.as_mut() {
            shared.keep(slot, frag);
        }
        self.core
            .to_repost
            .push((ep.unwrap_or(usize::MAX), slot, false));
        if let Some(ep) = ep.filter(|&ep| !self.core.peers[ep].waiting.is_empty()) {
            self.drain(ep);
        }
    }

    /// Hand a received fragment from `ep` to its callback, taking the credits its
    /// trailer returns; whether it was a credit-only message. `None` (the peer has
    /// failed) for an error completion or a malformed fragment.
    #[inline(always)]
    fn deliver(&mut self, c: &Completion, ep: usize, frag: &Frag) -> Option<bool> {
        if let Err(e) = c.result() {
            self.core.fail(ep, format!("queue pair error: {e}"));
            return None;
        }
        let bytes = &frag.as_slice()[..c.byte_len as usize];
        let mut lens = [0usize; MAX_SEGMENTS];
        let Some((t, nseg)) = wire::parse(bytes, &mut lens) else {
            self.core
                .fail(ep, format!("a malformed fragment of {} bytes", c.byte_len));
            return None;
        };
        let credit_only = t.flags & CREDIT_ONLY != 0;
        self.core.peers[ep].credits.returned(t.credits, t.rsv);
        if !credit_only {
            let tag = Tag(t.tag);
            let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
            let mut at = 0;
            for (s, &l) in segs.iter_mut().zip(&lens[..nseg]) {
                *s = &bytes[at..at + l];
                at += l;
            }
            // SAFETY: the buffer is valid as `Module::expect` requires.
            if unsafe { self.expected.fill(Endpoint(ep as u32), tag, &segs[..nseg]) } {
                self.filled = true;
                return Some(false);
            }
            match self.core.am.take(tag) {
                Some(mut cb) => {
                    let r = Received {
                        endpoint: Endpoint(ep as u32),
                        tag,
                        segments: &segs[..nseg],
                    };
                    self.delivering += 1;
                    cb(self, &r);
                    self.delivering -= 1;
                    self.core.am.restore(tag, cb);
                }
                None => self.core.report(
                    ep,
                    Error::BadTag {
                        tag,
                        why: "a message arrived for it, but no receive callback is registered; dropped",
                    },
                ),
            }
        }
        Some(credit_only)
    }

    /// Repost the receive buffers the last poll consumed, then send what their
    /// credits let go, or the credits themselves when enough are owed.
    fn repost(&mut self) -> usize {
        // (Nothing below receives, so nothing is added meanwhile.)
        let mut reposts = std::mem::take(&mut self.core.to_repost);
        for &(ep, slot, credit_only) in &reposts {
            let core = &mut self.core;
            if let Some(shared) = core.shared.as_mut() {
                if let Err(e) = shared.post(&core.recv_frags, slot) {
                    tracing::error!("{e}");
                }
                continue;
            }
            if matches!(self.core.peers[ep].link, Link::Failed(_)) {
                continue;
            }
            if let Err(e) = self.core.post_recv_slot(ep, slot) {
                self.core.fail(ep, e.to_string());
                continue;
            }
            self.core.peers[ep].credits.reposted(credit_only);
        }
        for (i, &(ep, ..)) in reposts.iter().enumerate() {
            // Once per peer (and not for a message from no known peer).
            if ep >= self.core.peers.len() || reposts[..i].iter().any(|r| r.0 == ep) {
                continue;
            }
            self.drain(ep);
        }
        let n = reposts.len();
        reposts.clear();
        self.core.to_repost = reposts;
        n
    }

    fn run_done(&mut self) -> usize {
        let mut n = 0;
        while let Some(d) = self.core.done.pop_front() {
            n += 1;
            match d {
                Done::Send(cb, endpoint, des, status) => {
                    if des.flags.contains(DesFlags::OWNERSHIP) {
                        cb(
                            self,
                            SendCompletion {
                                endpoint,
                                descriptor: None,
                                status,
                            },
                        );
                        self.core.send_frags.put(des.into_frag());
                    } else {
                        cb(
                            self,
                            SendCompletion {
                                endpoint,
                                descriptor: Some(des),
                                status,
                            },
                        );
                    }
                }
                Done::Rdma(cb, c) => cb(self, c),
                Done::Error(event) => {
                    if let Some(cb) = self.core.on_error.as_mut() {
                        cb(&event);
                    }
                }
            }
        }
        n
    }

    #[allow(clippy::too_many_arguments)]
    fn atomic(
        &mut self,
        ep: Endpoint,
        local: Option<(usize, &MemHandle)>,
        remote: u64,
        remote_handle: &RemoteHandle,
        op: impl FnOnce(u32) -> Op,
        callback: RdmaCallback,
    ) -> Result<()> {
        let key = RemoteKey::from_bytes(remote_handle.as_bytes())?;
        key.check(remote, 8, Access::ATOMIC)?;
        if remote % 8 != 0 {
            return Err(Error::Misaligned(remote));
        }
        let (addr, lkey, callback) = match local {
            Some((addr, h)) => (addr, self.lkey(h, addr, 8, Access::LOCAL_WRITE)?, callback),
            // The previous value nobody asked for lands in the module's scratch word
            // (any number of such operations may share it).
            None => {
                let (addr, lkey) = self.core.control.scratch();
                let cb: RdmaCallback = Box::new(move |m, mut c| {
                    c.local_address = 0;
                    callback(m, c)
                });
                (addr, lkey, cb)
            }
        };
        self.start_rdma(
            ep,
            RdmaRequest {
                op: op(key.rkey),
                local: addr,
                size: 8,
                lkey,
                callback,
            },
        )
    }
}

impl Module for OpenibModule {
    fn name(&self) -> &str {
        crate::NAME
    }

    fn id(&self) -> ModuleId {
        self.core.id
    }

    fn attributes(&self) -> &Attributes {
        &self.core.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        let local: Vec<Offer> = self.cpcs.iter().map(|c| c.1.clone()).collect();
        let mut out = Vec::with_capacity(procs.len());
        for p in procs {
            if p.rank == self.core.rank {
                out.push(None);
                continue;
            }
            if let Some(&ep) = self.core.by_rank.get(&p.rank) {
                out.push(Some(Endpoint(ep as u32)));
                continue;
            }
            let Some(blob) = modex.lookup(p.rank, &self.modex_key)? else {
                out.push(None);
                continue;
            };
            let Some((subnet, [shared, offers @ ..])) = blob.split_at_checked(8) else {
                return Err(Error::Modex(format!(
                    "rank {}'s openib address is {} bytes",
                    p.rank,
                    blob.len()
                )));
            };
            if subnet != self.subnet {
                out.push(None);
                continue;
            }
            // Credits flow only between ranks that both count them.
            let ours = self.core.shared.is_some();
            if (*shared != 0) != ours {
                let how = |shared: bool| match shared {
                    true => "through a shared receive queue",
                    false => "with per-peer buffers",
                };
                return Err(Error::NotAvailable(format!(
                    "openib: rank {} receives {}, this rank (rank {}) {}: every rank must set \
                     btl_openib_srq_depth alike (0, or more than 0)",
                    p.rank,
                    how(*shared != 0),
                    self.core.rank,
                    how(ours)
                )));
            }
            let remote = select::decode(offers).map_err(|e| Error::Modex(e.to_string()))?;
            let (li, ri) = select::find_match(&local, &remote, p.rank)
                .map_err(|e| Error::NotAvailable(format!("openib: {e}")))?;
            self.cpcs[li]
                .0
                .endpoint_init(p.rank, &remote[ri].blob)
                .map_err(|e| Error::NotAvailable(format!("openib: {e}")))?;
            let s = self.core.settings;
            let ep = self.core.peers.len();
            let (per_peer, shared) = crate::core::cq_entries(self.core.caps, &s);
            if shared + (ep + 1) * per_peer > self.core.cq_depth {
                return Err(Error::NotAvailable(format!(
                    "openib: the completion queue's {} entries hold {} peers of {per_peer}; \
                     lower btl_openib_recv_depth, btl_openib_rdma_depth or \
                     btl_openib_srq_depth",
                    self.core.cq_depth,
                    (self.core.cq_depth - shared.min(self.core.cq_depth)) / per_peer
                )));
            }
            self.core.peers.push(Peer {
                rank: p.rank,
                cpc: li,
                link: Link::Idle,
                qp: None,
                recv: Vec::new(),
                credits: match s.srq_depth {
                    0 => Credits::new(s.recv_depth, s.rsv_depth),
                    _ => Credits::unlimited(),
                },
                sq_free: 0,
                waiting: Default::default(),
                rdma_in_flight: 0,
                credit_due: false,
                credit_in_flight: false,
                unsignaled: 0,
                unposted: Vec::new(),
            });
            self.core.by_rank.insert(p.rank, ep);
            out.push(Some(Endpoint(ep as u32)));
        }
        Ok(out)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let peer = self.endpoint(ep)?;
            let (rank, cpc) = (peer.rank, peer.cpc);
            if !matches!(peer.link, Link::Failed(_)) {
                self.core.fail(ep.0 as usize, "removed by del_procs".into());
            }
            self.cpcs[cpc].0.endpoint_finalize(rank);
        }
        Ok(())
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.core.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.core.on_error = Some(callback);
    }

    unsafe fn register_mem(
        &mut self,
        _endpoint: Option<Endpoint>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<MemHandle> {
        rbtl_btl::registrations::check_span(base, len)?;
        let reg = self.core.rcache.register(base, len, access)?;
        let key = RemoteKey {
            base: base as u64,
            len: len as u64,
            rkey: reg.handle().rkey(),
            access,
        };
        let remote = RemoteHandle::from_bytes(&key.to_bytes())?;
        Ok(MemHandle::new(
            self.core.id,
            base,
            len,
            access,
            remote,
            Box::new(reg),
        ))
    }

    fn deregister_mem(&mut self, handle: &mut MemHandle) -> Result<()> {
        handle.release(self.core.id)
    }

    fn alloc(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        size: usize,
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.core.peer(endpoint)?;
        let max = self.core.attrs.max_send_size;
        if size > max {
            return Err(Error::TooLarge(format!(
                "{size} bytes exceed max_send_size {max}"
            )));
        }
        let frag = self.core.send_frags.get().map_err(|e| {
            if e.is_retryable() {
                Error::OutOfResource("openib: send fragments")
            } else {
                Error::Mpool(e)
            }
        })?;
        Descriptor::new(self.core.id, endpoint, frag, size, order, flags)
    }

    fn prepare_src(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        reserve: usize,
        data: &[&[u8]],
        flags: DesFlags,
    ) -> Result<Descriptor> {
        let len = rbtl_btl::send_frags::packed_len(self.core.attrs.max_send_size, reserve, data)?;
        let mut des = self.alloc(endpoint, order, len, flags)?;
        rbtl_btl::send_frags::pack(&mut des, reserve, data);
        Ok(des)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        descriptor.check_owner(self.core.id)?;
        self.core.send_frags.put(descriptor.into_frag());
        Ok(())
    }

    fn send(
        &mut self,
        endpoint: Endpoint,
        descriptor: Descriptor,
        tag: Tag,
    ) -> Result<SendOutcome, SendError> {
        let max = self.core.attrs.max_send_size;
        let checked = descriptor
            .check_owner(self.core.id)
            .and_then(|_| rbtl_btl::check_not_reserved(tag))
            .and_then(|_| {
                if descriptor.len() > max || descriptor.capacity() < descriptor.len() + FRAG_EXTRA {
                    Err(Error::TooLarge(format!(
                        "{} bytes exceed max_send_size {max}",
                        descriptor.len()
                    )))
                } else {
                    Ok(())
                }
            })
            .and_then(|_| self.connect(endpoint));
        if let Err(error) = checked {
            return Err(SendError { error, descriptor });
        }
        let ep = endpoint.0 as usize;
        let peer = &mut self.core.peers[ep];
        let now = matches!(peer.link, Link::Up)
            && peer.waiting.is_empty()
            && peer.sq_free > 0
            && peer.credits.take();
        if !now {
            peer.waiting.push_back(Waiting::Send(descriptor, tag));
            return Ok(SendOutcome::Queued);
        }
        match self.post_descriptor(ep, descriptor, tag.0) {
            Ok(()) => Ok(SendOutcome::Queued),
            Err(e) => {
                self.core.peers[ep].credits.returned(1, 0);
                Err(e)
            }
        }
    }

    fn sendi(
        &mut self,
        endpoint: Endpoint,
        header: &[u8],
        payload: &[u8],
        order: Order,
        flags: DesFlags,
        tag: Tag,
    ) -> Result<SendiOutcome> {
        rbtl_btl::check_not_reserved(tag)?;
        let size = header.len() + payload.len();
        if size > self.core.attrs.max_send_size {
            return Err(Error::TooLarge(format!(
                "{size} bytes exceed max_send_size {}",
                self.core.attrs.max_send_size
            )));
        }
        let ep = endpoint.0 as usize;
        if !matches!(self.core.peers.get(ep).map(|p| &p.link), Some(Link::Up)) {
            self.connect(endpoint)?;
        }
        let peer = &mut self.core.peers[ep];
        let inline_max = peer.qp.as_ref().map_or(0, |q| q.caps.max_inline) as usize;
        let now = matches!(peer.link, Link::Up)
            && peer.waiting.is_empty()
            && peer.sq_free > 0
            && size + TRAILER <= inline_max
            && peer.credits.take();
        if !now {
            let des = self.prepare_src(endpoint, order, 0, &[header, payload], flags)?;
            return Ok(SendiOutcome::Descriptor(des));
        }
        let (credits, rsv) = peer.credits.piggyback();
        let trailer = Trailer {
            tag: tag.0,
            flags: 0,
            nseg: 1,
            rsv,
            credits,
        }
        .to_bytes();
        // Small messages are gathered here first: the device then copies one piece.
        let mut gathered = [MaybeUninit::<u8>::uninit(); GATHER_MAX];
        let sge = |b: &[u8]| Sge {
            addr: b.as_ptr() as u64,
            len: b.len() as u32,
            lkey: 0,
        };
        let (one, three);
        let sges: &[Sge] = if size + TRAILER <= GATHER_MAX {
            let at = gathered.as_mut_ptr().cast::<u8>();
            // SAFETY: the three pieces add up to at most GATHER_MAX bytes, written in
            // turn from the start of `gathered`; only those bytes are read back.
            let filled = unsafe {
                copy_bytes(header.as_ptr(), at, header.len());
                copy_bytes(payload.as_ptr(), at.add(header.len()), payload.len());
                copy_bytes(trailer.as_ptr(), at.add(size), TRAILER);
                std::slice::from_raw_parts(at, size + TRAILER)
            };
            one = [sge(filled)];
            &one
        } else {
            three = [sge(header), sge(payload), sge(&trailer)];
            &three
        };
        // Most inline sends go unsignalled: no completion to poll, and their
        // send-queue entries come back with the next signalled request's.
        let peer = &mut self.core.peers[ep];
        let signaled = peer.unsignaled + 1 >= SIGNAL_EVERY || peer.sq_free <= SIGNAL_EVERY;
        let id = if signaled {
            self.core.track(Posted::Inline(ep))
        } else {
            UNSIGNALED_ID
        };
        let peer = &mut self.core.peers[ep];
        let qp = peer.qp.as_mut().expect("a connected peer has a queue pair");
        // SAFETY: an inline send: the device copies the bytes while posting.
        match unsafe { qp.post_send_sg(id, Op::Send, sges, true, signaled) } {
            Ok(()) => {
                peer.sq_free -= 1;
                if !signaled {
                    peer.unsignaled += 1;
                }
                Ok(SendiOutcome::Sent)
            }
            Err(e) => {
                peer.credits.returned(credits + 1, rsv);
                if signaled {
                    self.core.unpost(id);
                }
                Err(Error::NotAvailable(format!("openib: {e}")))
            }
        }
    }

    fn put(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let handles = (local_handle, remote_handle);
        self.transfer(
            endpoint,
            local,
            remote,
            handles,
            size,
            Transfer::Put,
            callback,
        )
    }

    fn get(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let handles = (local_handle, remote_handle);
        self.transfer(
            endpoint,
            local,
            remote,
            handles,
            size,
            Transfer::Get,
            callback,
        )
    }

    fn atomic_op(
        &mut self,
        endpoint: Endpoint,
        remote: u64,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.core.peer(endpoint)?;
        let op = device_op(op, remote, operand)?;
        self.atomic(endpoint, None, remote, remote_handle, op, callback)
    }

    fn atomic_fop(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.core.peer(endpoint)?;
        let op = device_op(op, remote, operand)?;
        self.atomic(
            endpoint,
            Some((local, local_handle)),
            remote,
            remote_handle,
            op,
            callback,
        )
    }

    fn atomic_cswap(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        compare: u64,
        value: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.core.peer(endpoint)?;
        let op = move |rkey| Op::CompareSwap {
            remote,
            rkey,
            compare,
            swap: value,
        };
        self.atomic(
            endpoint,
            Some((local, local_handle)),
            remote,
            remote_handle,
            op,
            callback,
        )
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.core.peer(ep)?;
        }
        let pending = |c: &Core| {
            c.peers.iter().enumerate().any(|(i, p)| {
                endpoint.is_none_or(|e| e.0 as usize == i)
                    && (p.rdma_in_flight > 0
                        || p.waiting.iter().any(|w| matches!(w, Waiting::Rdma(_))))
            })
        };
        // Spin: a completion is a device round trip away. Give the processor up only
        // after a long idle stretch (a peer on this core may need it).
        let mut idle = 0u32;
        while pending(&self.core) || !self.core.done.is_empty() {
            if self.progress() == 0 {
                idle += 1;
                if idle >= 1 << 14 {
                    std::thread::yield_now();
                }
            } else {
                idle = 0;
            }
        }
        Ok(())
    }

    unsafe fn expect(&mut self, e: Expected) -> bool {
        if self.core.peers.get(e.endpoint.0 as usize).is_none() {
            return false;
        }
        self.expected.post(&e);
        true
    }

    fn take_expected(&mut self) -> Option<usize> {
        self.expected.take()
    }

    fn cancel_expected(&mut self) {
        self.expected.cancel();
    }

    fn progress(&mut self) -> usize {
        let mut n = 0;
        self.calls = self.calls.wrapping_add(1);
        if self.core.connecting > 0 || self.calls % CPC_POLL_INTERVAL == 0 {
            for i in 0..self.cpcs.len() {
                n += self.cpcs[i].0.progress(&mut self.core);
            }
            for ep in std::mem::take(&mut self.core.ready) {
                n += 1 + self.drain(ep);
            }
        }
        if !self.core.to_repost.is_empty() {
            n += self.repost();
        }
        // Receives are delivered in the order polled. Those of this batch go at once
        // unless older ones wait; receives that a callback's own progress call polls
        // meanwhile are newer, and wait in `received` until after the batch.
        // A receive that fills the expected one ends the delivering: the caller
        // learns of it before any later message arrives.
        let direct = self.delivering == 0 && self.received.is_empty();
        let mut wc = [MaybeUninit::uninit(); 16];
        match self.core.cq.poll(&mut wc) {
            Ok(batch) => {
                for &c in batch {
                    if c.wr_id & RECV_BIT == 0 {
                        self.on_send_completion(c);
                    } else if direct && !self.filled {
                        self.on_receive(c);
                    } else {
                        self.received.push_back(c);
                    }
                }
                n += batch.len();
            }
            Err(e) => tracing::error!("openib: polling the completion queue: {e}"),
        }
        if self.delivering == 0 {
            while !self.filled {
                let Some(c) = self.received.pop_front() else {
                    break;
                };
                self.on_receive(c);
                n += 1;
            }
        }
        if std::mem::take(&mut self.filled) {
            return n;
        }
        if !self.core.done.is_empty() {
            n += self.run_done();
        }
        n
    }
}

/// Which way a put or get moves bytes.
#[derive(Clone, Copy)]
enum Transfer {
    /// Local to remote (RDMA write).
    Put,
    /// Remote to local (RDMA read).
    Get,
}

impl OpenibModule {
    /// Check a put or get against both handles and its limit, then start it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn transfer(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        (local_handle, remote_handle): (&MemHandle, &RemoteHandle),
        size: usize,
        way: Transfer,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.core.peer(endpoint)?;
        let (needs_remote, needs_local, limit, what) = match way {
            Transfer::Put => (
                rbtl_btl::PUT_REMOTE,
                Access::LOCAL_READ,
                self.core.attrs.put_limit,
                "put",
            ),
            Transfer::Get => (
                rbtl_btl::GET_REMOTE,
                Access::LOCAL_WRITE,
                self.core.attrs.get_limit,
                "get",
            ),
        };
        let key = RemoteKey::from_bytes(remote_handle.as_bytes())?;
        key.check(remote, size, needs_remote)?;
        let lkey = self.lkey(local_handle, local, size, needs_local)?;
        if size > limit {
            return Err(Error::NotAvailable(format!(
                "a {what} of {size} bytes exceeds the limit of {limit}"
            )));
        }
        let rkey = key.rkey;
        let op = match way {
            Transfer::Put => Op::Write { remote, rkey },
            Transfer::Get => Op::Read { remote, rkey },
        };
        self.start_rdma(
            endpoint,
            RdmaRequest {
                op,
                local,
                size,
                lkey,
                callback,
            },
        )
    }
}

/// The device operation for `op` on the word at `remote`, given the remote key (verbs
/// devices have fetch-add and compare-swap).
fn device_op(op: AtomicOp, remote: u64, operand: u64) -> Result<impl FnOnce(u32) -> Op> {
    match op {
        AtomicOp::Add => Ok(move |rkey| Op::FetchAdd {
            remote,
            rkey,
            add: operand,
        }),
        _ => Err(Error::NotSupported(
            "atomics other than add and compare-swap",
        )),
    }
}

impl Drop for OpenibModule {
    fn drop(&mut self) {
        for c in &mut self.cpcs {
            c.0.finalize();
        }
        // Queue pairs go first (with them, the work posted on fragments), then the
        // shared receive queue, then the fragments return to their pools, which can
        // then release their chunks.
        let core = &mut self.core;
        for peer in &mut core.peers {
            peer.qp = None;
        }
        if let Some(shared) = core.shared.take() {
            shared.release(&mut core.recv_frags);
        }
        for peer in &mut core.peers {
            for frag in peer.recv.drain(..).flatten() {
                core.recv_frags.put(frag);
            }
            for w in peer.waiting.drain(..) {
                if let Waiting::Send(des, _) = w {
                    core.send_frags.put(des.into_frag());
                }
            }
        }
        core.posted.clear();
        for des in core.sent.drain(..).flatten() {
            core.send_frags.put(des.into_frag());
        }
    }
}
