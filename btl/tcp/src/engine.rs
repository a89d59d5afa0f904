//! Everything of a `tcp` module below the user's callbacks: its registrations, its
//! connections and links ([`net`](crate::net)), its send path ([`sends`](crate::sends))
//! and one-sided operations ([`onesided`](crate::onesided)), the completions waiting
//! for their callbacks, and the end of failed peers.
//!
//! The links' frames are read by the [`Reader`](crate::reader::Reader), which hands
//! each to its owner here.

use crate::failures::Failures;
use crate::interfaces::Interface;
use crate::link::Item;
use crate::net::Net;
use crate::onesided::OneSided;
use crate::peer::endpoint;
use crate::published::Published;
use crate::sends::Sends;
use crate::slot::Sent;
use crate::sockets::{self, LinkBytes};
use crate::wire::Limits;
use crate::{Refused, Settings, FLUSH_TIMEOUT_PARAM, MAX_CHUNK, MODEX_KEY};
use rbtl_btl::transport_kit::registrations::Registrations;
use rbtl_btl::transport_kit::Done;
use rbtl_btl::transport_kit::FlushWatch;
use rbtl_btl::{
    ActiveMessage, Attributes, Descriptor, DescriptorRequest, Endpoint, Error, ErrorEvent,
    MemHandle, Modex, ModuleId, PeerFailure, Proc, RdmaCallback, RegRequest, RemoteAtomic, Result,
    SendError, SendOutcome, SendResult, Tag, Transfer,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

pub struct Engine {
    id: ModuleId,
    rank: u32,
    /// The largest frames this module takes.
    pub limits: Limits,
    /// Connections and links.
    pub net: Net,
    /// The module's registrations.
    pub regs: Arc<Registrations>,
    sends: Sends,
    /// Put, get and atomics.
    pub onesided: OneSided,
    failures: Failures,
    /// Peers one of whose links closed, ended once their other links are read.
    closing: Vec<(usize, PeerFailure)>,
    /// Connections listed during a round, looked at in the same round.
    extra: usize,
    /// Completions waiting for their callbacks.
    pub done: VecDeque<Done>,
}

impl Engine {
    /// Listen on every address of `interfaces` and publish them in the modex.
    pub fn new(
        attrs: &Attributes,
        settings: Settings,
        interfaces: &[Interface],
        modex: &mut dyn Modex,
    ) -> Result<Engine> {
        let id = ModuleId::fresh();
        let capacity = settings.max_registrations.max(1);
        let regs = Registrations::anonymous(capacity, settings.rcache.clone())?;
        let limits = Limits {
            am_payload: attrs.max_send_size,
            rdma_data: MAX_CHUNK,
        };
        let (rank, size) = (modex.rank(), modex.size());
        let net = Net::new(
            id,
            regs.view(),
            settings.clone(),
            limits,
            (rank, size),
            interfaces,
        )?;
        modex.publish(MODEX_KEY, &net.published(id).encode())?;
        Ok(Engine {
            id,
            rank,
            limits,
            net,
            regs,
            sends: Sends::new(id, attrs.max_send_size, settings.max_frags)?,
            onesided: OneSided::new(id, settings.rdma_chunk),
            failures: Failures::default(),
            closing: Vec::new(),
            extra: 0,
            done: VecDeque::new(),
        })
    }

    /// The module's id.
    pub fn id(&self) -> ModuleId {
        self.id
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.net.refused()
    }

    /// How many links reach `endpoint`, and how many of them are up.
    pub fn links(&self, endpoint: Endpoint) -> Option<(usize, usize)> {
        let p = self.net.peers.get(endpoint.0 as usize)?;
        Some((
            p.links.len(),
            p.links.iter().filter(|s| s.up.is_some()).count(),
        ))
    }

    /// What the kernel counts of each link to `endpoint` that is up.
    pub fn link_bytes(&self, endpoint: Endpoint) -> Option<Vec<std::io::Result<LinkBytes>>> {
        let p = self.net.peers.get(endpoint.0 as usize)?;
        Some(
            p.links
                .iter()
                .filter_map(|s| self.net.conns.get(s.up?))
                .map(|c| sockets::link_bytes(&c.sock))
                .collect(),
        )
    }

    /// Whether `endpoint` is a peer not removed (an expected receive may wait for it).
    pub fn known(&self, endpoint: Endpoint) -> bool {
        self.net
            .peers
            .get(endpoint.0 as usize)
            .is_some_and(|p| !p.removed)
    }

    /// Run what the connections left: completions of descriptors written whole, and
    /// the end of peers whose links failed.
    #[inline]
    pub fn settle(&mut self) {
        while let Some(d) = self.net.written.pop() {
            self.sends.frags.finish(d, false, Ok(()), &mut self.done);
        }
        while let Some((p, why)) = self.net.failures.pop() {
            self.peer_closed(p, why);
        }
    }

    // ---- Peers.

    /// Make endpoints for `procs`, from what they published.
    pub fn add_procs(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        let my_node = procs
            .iter()
            .find(|p| p.rank == self.rank)
            .map(|p| p.node.clone());
        let mut out = Vec::with_capacity(procs.len());
        for proc_ in procs {
            let r = proc_.rank;
            if r == self.rank {
                out.push(None);
                continue;
            }
            // A known peer is handed back whatever `modex` is (the one it came from
            // knew it).
            if let Some(p) = self.net.peer_of(r) {
                out.push((!self.net.peers[p].removed).then(|| endpoint(p)));
                continue;
            }
            if r >= modex.size() {
                out.push(None);
                continue;
            }
            let Some(blob) = modex.lookup(r, MODEX_KEY)? else {
                out.push(None);
                continue;
            };
            let remote = Published::decode(&blob).map_err(|why| {
                Error::Modex(format!(
                    "the tcp addresses rank {r} published ({} bytes) are unreadable: {why}",
                    blob.len()
                ))
            })?;
            let same_node = my_node.as_ref() == Some(&proc_.node);
            let p = self.net.add_peer(r, &remote, same_node);
            self.settle();
            out.push(p.map(endpoint));
        }
        Ok(out)
    }

    /// Remove `endpoints`: their operations fail, their links close.
    pub fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let p = ep.0 as usize;
            let peer = self.net.peers.get(p).ok_or(Error::UnknownEndpoint(ep.0))?;
            if !peer.removed {
                if peer.failed.is_none() {
                    self.end_peer(p, PeerFailure::Removed);
                }
                self.net.peers[p].removed = true;
            }
        }
        Ok(())
    }

    // ---- Memory.

    /// Register the ranges of `request`, checked against `attrs`.
    ///
    /// # Safety
    ///
    /// As [`Module::register`](rbtl_btl::Module::register).
    pub unsafe fn register(
        &mut self,
        attrs: &Attributes,
        request: &RegRequest,
    ) -> Result<MemHandle> {
        self.regs.register(self.id, attrs, request)
    }

    // ---- Sends.

    /// A descriptor for `ep`.
    pub fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        self.net.live_peer(request.endpoint)?;
        self.sends.frags.alloc(request)
    }

    /// Take back a descriptor.
    pub fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.sends.frags.free(descriptor)
    }

    /// Take back a descriptor whose callback ran.
    pub fn recycle(&mut self, descriptor: Descriptor) {
        self.sends.frags.recycle(descriptor);
    }

    /// Send `descriptor` to `ep` on `tag`.
    // (The contract's own result: a failed send hands its descriptor back.)
    #[allow(clippy::result_large_err)]
    pub fn send(&mut self, ep: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult {
        let (descriptor, p) = rbtl_btl::transport_kit::admit_send(descriptor, self.id, |_| {
            rbtl_btl::transport_kit::check_not_reserved(tag)?;
            self.net.live_peer(ep)
        })?;
        let sent = self.sends.send(&mut self.net, p, descriptor, tag);
        self.settle();
        match sent {
            Sent::Written(d) => Ok(SendOutcome::Done(self.sends.frags.finish(
                d,
                true,
                Ok(()),
                &mut self.done,
            ))),
            Sent::Queued | Sent::NotUp => Ok(SendOutcome::Queued),
            Sent::Failed(why, descriptor) => {
                let why = PeerFailure::Broken(why);
                let error = Error::PeerFailed {
                    rank: self.net.peers[p].rank,
                    why: why.clone(),
                };
                self.peer_closed(p, why);
                Err(SendError { error, descriptor })
            }
        }
    }

    /// Send `m` (checked by the module), copied.
    #[inline]
    pub fn sendi(&mut self, m: &ActiveMessage<'_>) -> Result<()> {
        let p = self.net.live_peer(m.endpoint)?;
        let sent = self.sends.sendi(&mut self.net, p, m);
        self.settle();
        sent
    }

    // ---- One-sided operations.

    /// Start put (`put`) or get `t`.
    pub fn transfer(&mut self, t: &Transfer<'_>, put: bool, callback: RdmaCallback) -> Result<()> {
        let p = self.net.live_peer(t.endpoint)?;
        let module = self.net.peers[p].module;
        let r = self
            .onesided
            .transfer(&mut self.net, (p, module), (t, put), callback);
        self.settle();
        r
    }

    /// Start atomic `a`.
    pub fn atomic(&mut self, a: &RemoteAtomic<'_>, callback: RdmaCallback) -> Result<()> {
        let p = self.net.live_peer(a.endpoint)?;
        let module = self.net.peers[p].module;
        let r = self
            .onesided
            .atomic(&mut self.net, (p, module), a, callback);
        self.settle();
        r
    }

    /// Whether an operation towards `ep` (or any; an unknown one is an error) is in
    /// flight.
    pub fn rdma_pending(&self, ep: Option<Endpoint>) -> Result<bool> {
        if let Some(ep) = ep.filter(|ep| self.net.peers.get(ep.0 as usize).is_none()) {
            return Err(Error::UnknownEndpoint(ep.0));
        }
        Ok(self.onesided.pending_on(ep))
    }

    /// At `now`, through `watch`: the error that ends a flush of `ep` (or of all), if
    /// every peer it still waits for has sent no answer for the timeout.
    pub fn silent_peers(
        &self,
        ep: Option<Endpoint>,
        watch: &mut FlushWatch,
        now: Instant,
    ) -> Option<Error> {
        let (waiting, answers) = self.onesided.waiting(ep);
        let rank_of = |p: usize| self.net.peers[p].rank;
        watch.timed_out(now, waiting, answers, rank_of, FLUSH_TIMEOUT_PARAM)
    }

    // ---- Progress.

    /// Begin a round of progress: list what to look at, accept new connections, and
    /// run out the clocks; the connections listed and the events handled.
    #[inline]
    pub fn begin(&mut self) -> (usize, usize) {
        let n = self.net.look();
        if self.net.timers_pending() {
            self.net.expire();
            self.settle();
        }
        (self.net.ready_len(), n)
    }

    /// Connections listed for this round since it began (a closed link's siblings).
    #[inline]
    pub fn take_extra(&mut self) -> usize {
        std::mem::take(&mut self.extra)
    }

    // ---- Failures.

    /// Queue `error` for the error callback (about peer `p`, if given).
    pub fn report(&mut self, p: Option<usize>, error: Error) {
        let event = ErrorEvent {
            endpoint: p.map(endpoint),
            rank: p.map(|p| self.net.peers[p].rank),
            error,
        };
        self.done.push_back(Done::Error(event));
    }

    /// A link of peer `p` closed or failed: its other links are read first (a peer
    /// that ends closes them all, and its last messages may be on another one), then,
    /// at the end of the round, the peer ends: its operations fail then, the error
    /// callback hears of it once this module is quiet ([`Failures`]).
    pub fn peer_closed(&mut self, p: usize, why: PeerFailure) {
        let peer = &mut self.net.peers[p];
        if peer.closing || peer.is_gone() {
            return;
        }
        peer.closing = true;
        for k in 0..self.net.peers[p].links.len() {
            if let Some(id) = self.net.peers[p].links[k].up {
                if self.net.conns.get(id).is_some_and(|c| !c.busy) {
                    self.net.look_next(id);
                    self.extra += 1;
                }
            }
        }
        self.closing.push((p, why));
    }

    /// End the peers whose links closed, now that their other links were read.
    #[inline]
    pub fn end_closing(&mut self) {
        if !self.closing.is_empty() {
            self.end_closed();
        }
    }

    #[cold]
    fn end_closed(&mut self) {
        while let Some((p, why)) = self.closing.pop() {
            if self.net.peers[p].is_gone() {
                continue;
            }
            tracing::info!(rank = self.net.peers[p].rank, %why, "tcp: peer closed");
            self.end_peer(p, why.clone());
            self.failures.closed(p, why);
        }
    }

    /// Peer `p` broke the protocol: it ends, and the error callback hears of it now.
    pub fn fail_peer(&mut self, p: usize, why: PeerFailure) {
        if self.net.peers[p].is_gone() {
            return;
        }
        tracing::warn!(rank = self.net.peers[p].rank, %why, "tcp: peer failed");
        self.end_peer(p, why.clone());
        let rank = self.net.peers[p].rank;
        self.report(Some(p), Error::PeerFailed { rank, why });
    }

    /// Close every link of peer `p` and fail its operations and queued sends.
    fn end_peer(&mut self, p: usize, why: PeerFailure) {
        let rank = self.net.peers[p].rank;
        self.net.peers[p].failed = Some(why.clone());
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        for item in self.net.close_peer(p) {
            if let Item::Desc { descriptor, .. } = item {
                self.sends
                    .frags
                    .finish(descriptor, false, Err(err()), &mut self.done);
            }
        }
        self.onesided.fail(endpoint(p), err, &mut self.done);
    }

    /// After a progress call that found work (`busy`) or none: queue the reports of
    /// peers whose links closed, once the module is quiet (or at the latest
    /// [`REPORT_WITHIN`](crate::failures::REPORT_WITHIN) after); how many.
    #[inline]
    pub fn report_closed(&mut self, busy: bool) -> usize {
        let due = self.failures.due(busy, Instant::now);
        let n = due.len();
        for (p, why) in due {
            let rank = self.net.peers[p].rank;
            self.report(Some(p), Error::PeerFailed { rank, why });
        }
        n
    }
}
