// Long on purpose: one type, with its `Module` impl (the whole contract) and the progress
// that runs the callbacks, which take the module itself; what it drives (peers, copy
// protocol, own segment, settings) lives in the files beside it.
//! The `sm` module: one per process, reaching the other processes on its node. It
//! creates and publishes this process's segment, connects to the peers' ([`Peer`]),
//! sends by copying into their rings and polls its own, runs every callback from
//! progress, and hands put and get to cross-memory attach or to the [`CopyProtocol`],
//! atomics to the latter.

use super::cma;
use super::component::{RdmaPath, Settings, DEFAULT_EAGER_LIMIT, FLUSH_TIMEOUT_PARAM, NAME};
use super::copy_protocol::{CopyProtocol, Pushed};
use super::own_segment::{self, slot_of, OwnSegment};
use super::peer::{self, Outbound, Peer, MODEX_KEY};
use super::ring::{self, Producer, RingLayout};
use super::segment::Layout;
use rbtl_btl::transport_kit::registrations::{NoPin, Reg, Registrations};
use rbtl_btl::transport_kit::send_frags::SendFrags;
use rbtl_btl::transport_kit::ExpectedSlot;
use rbtl_btl::transport_kit::FlushWatch;
use rbtl_btl::transport_kit::{admit_send, AmTable};
use rbtl_btl::transport_kit::{run_done, Done};
use rbtl_btl::{
    ActiveMessage, AmCallback, Attributes, BtlFlags, Descriptor, DescriptorRequest, Endpoint,
    Error, ErrorCallback, ErrorEvent, MemHandle, Modex, Module, ModuleId, PeerFailure, Proc,
    RdmaCallback, RdmaCompletion, RdmaFlags, Received, RegRequest, RemoteAtomic, RemoteHandle,
    Result, SendOutcome, SendResult, SendiOutcome, SharedMem, Tag, Transfer, MAX_SEGMENTS,
};
use rbtl_rcache::Access;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Idle progress calls between two looks at the peers' liveness. A look costs a
/// system call per peer: at this interval a rank that only polls makes one about every
/// half millisecond, and a ping-pong every few thousand round trips (at a sixteenth of
/// it, the calls showed in `osu latency`; measured: see docs/performance.md).
const LIVENESS_INTERVAL: u32 = 1 << 16;

/// Most messages taken from one ring per progress call.
const BATCH: usize = 32;

/// The `sm` module.
pub struct SmModule {
    id: ModuleId,
    rank: u32,
    /// This process's place among the node's ranks (see [`slot_of`]).
    slot: usize,
    node: String,
    attrs: Attributes,
    settings: Settings,
    /// This process's segment.
    own: OwnSegment,
    regs: Arc<Registrations>,
    frags: SendFrags,
    peers: Vec<Peer>,
    am: AmTable,
    /// The receive posted with `Module::expect`.
    expected: ExpectedSlot,
    error_cb: Option<ErrorCallback>,
    done: VecDeque<Done>,
    copy: CopyProtocol,
    idle: u32,
    /// Under `auto`, where the start-up probe found naming by address not worth it
    /// alone: the hint follows the rings' speed ([`crate::by_address`]).
    by_address: Option<crate::by_address::Watch>,
}

/// Copy a descriptor into a ring, keeping its segment cut; false when the ring is full.
fn push_descriptor(producer: &mut Producer, des: &Descriptor, tag: Tag) -> bool {
    let mut lens = [0usize; MAX_SEGMENTS];
    let n = des.segment_count();
    for (slot, len) in lens.iter_mut().zip(des.segment_lens()) {
        *slot = len;
    }
    // One segment needs no segment table.
    let lens = if n > 1 { &lens[..n] } else { &[] };
    producer.push(tag.0, &[des.bytes()], lens)
}

/// The one-range handle of the range of `handle` (made by module `target`) that holds
/// `[addr, addr+len)`.
fn narrow(
    target: rbtl_btl::ModuleId,
    handle: &RemoteHandle,
    addr: u64,
    len: usize,
) -> Result<RemoteHandle> {
    let fields = rbtl_btl::transport_kit::keytable::HandleFields::of(handle, target.0)?;
    Ok(fields.narrow(fields.find(addr, len)?).to_handle())
}

impl SmModule {
    /// Create this process's segment and publish it in the modex.
    pub fn new(
        attrs: Attributes,
        mut settings: Settings,
        modex: &mut dyn Modex,
    ) -> Result<SmModule> {
        let too_large = |name: &str, v: usize| {
            Error::NotAvailable(format!("{name} = {v} is too large for this machine"))
        };
        let pow2 = |name: &str, v: usize| v.checked_next_power_of_two().ok_or(too_large(name, v));
        let mut ring = RingLayout {
            nslots: pow2("btl_sm_ring_slots", settings.ring_slots.max(2))?,
            data_bytes: pow2("btl_sm_ring_bytes", settings.ring_bytes.max(4096))?,
        };
        let fits =
            |r: &RingLayout| attrs.max_send_size.saturating_add(64) <= r.max_message(MAX_SEGMENTS);
        if !fits(&ring) {
            return Err(Error::NotAvailable(format!(
                "btl_sm_ring_bytes ({}) must exceed max_send_size ({}) with room to spare",
                ring.data_bytes, attrs.max_send_size
            )));
        }
        // One ring per rank of the node, where the launcher says which they are, each
        // of its share of the rings' budget: no larger, halved while the largest send
        // still fits.
        let (slot, slots) = slot_of(modex);
        let share = settings.rings_budget / slots.saturating_sub(1).max(1);
        while ring.data_bytes > share && ring.data_bytes > 4096 {
            let half = RingLayout {
                data_bytes: ring.data_bytes / 2,
                ..ring
            };
            if !fits(&half) {
                break;
            }
            ring = half;
        }
        // A ring holds several chunks in flight.
        settings.copy_chunk = settings.copy_chunk.min(ring.data_bytes / 4).max(4096);
        // Read once: it sizes the heap by default and bounds the node's segments.
        let memory = own_segment::memory_total();
        let layout = Layout {
            nranks: slots,
            ring,
            registrations: settings.max_registrations.max(1),
            heap_bytes: match settings.heap_bytes {
                0 => own_segment::auto_heap(memory, slots),
                bytes => bytes,
            },
        };
        if layout.checked_bytes().is_none() {
            return Err(Error::NotAvailable(format!(
                "the sm segment of {} ranks with these btl_sm_* sizes (ring slots and bytes, \
                 registrations, heap) would not fit the address space: lower them",
                layout.nranks
            )));
        }
        own_segment::fits_the_machine(&layout, memory)?;
        let own = OwnSegment::create(modex.rank(), layout)?;
        let id = ModuleId::fresh();
        own.stamp(id);
        let segment = own.region();
        // SAFETY: the table area is inside our fresh (zeroed) segment, page-aligned and
        // used for nothing else; `regs` keeps the segment mapped (handles outliving the
        // module keep it too).
        let regs = unsafe {
            Registrations::new(
                segment.as_ptr().add(layout.table_offset()),
                layout.registrations,
                segment.clone(),
                settings.rcache.clone(),
            )
        };
        let node = peer::node_id();
        let by_address = attrs.flags.contains(BtlFlags::UNREGISTERED_REMOTE);
        let card = peer::card(id, segment, (&layout, slot), by_address, &node);
        modex.publish(MODEX_KEY, &card)?;
        if settings.eager_by_probe {
            let limit = attrs.eager_limit as u64;
            modex.publish(crate::by_address::EAGER_KEY, &limit.to_le_bytes())?;
        }
        let copy = CopyProtocol::new(id, regs.view(), settings.copy_chunk);
        let probed_not_worth_it = by_address
            && settings.rdma == RdmaPath::Auto
            && settings.by_address_below.is_none()
            && attrs.unregistered_remote_below == 0;
        let slow_below = settings.cma_below as f64 / 1000.0;
        // Where the probe chose the eager limit, slow rings give it back to the
        // component's default: larger messages then go by cross-memory attach.
        let slow_eager = settings.eager_by_probe.then_some(DEFAULT_EAGER_LIMIT);
        let by_address =
            probed_not_worth_it.then(|| crate::by_address::Watch::new(slow_below, slow_eager));
        Ok(SmModule {
            id,
            rank: modex.rank(),
            slot,
            node,
            frags: SendFrags::new(id, attrs.max_send_size, settings.max_frags)?,
            attrs,
            settings,
            own,
            regs,
            peers: Vec::new(),
            am: AmTable::default(),
            error_cb: None,
            done: VecDeque::new(),
            copy,
            idle: 0,
            expected: ExpectedSlot::default(),
            by_address,
        })
    }

    /// The name of this process's segment (`/proc/<pid>/fd` lists it as
    /// `memfd:<name>`; for tests and diagnostics).
    pub fn segment_name(&self) -> &str {
        self.own.region().name()
    }

    /// This process's slot among the node's ranks, how many there are, and the data
    /// bytes of each ring (for tests and diagnostics).
    pub fn rings(&self) -> (usize, usize, usize) {
        let l = self.own.layout();
        (self.slot, l.nranks, l.ring.data_bytes)
    }

    /// Bytes of this process's heap (for windows).
    pub fn heap_bytes(&self) -> usize {
        self.own.layout().heap_bytes
    }

    /// Whether put/get to `endpoint` may use cross-memory attach.
    pub fn uses_cma(&self, endpoint: Endpoint) -> Option<bool> {
        self.peers.get(endpoint.0 as usize).map(|p| p.cma_ok)
    }

    fn peer(&self, ep: Endpoint) -> Result<&Peer> {
        // Not `ok_or`: on every operation's path, and the error it builds is dropped
        // there when unused.
        let Some(p) = self.peers.get(ep.0 as usize) else {
            return Err(Error::UnknownEndpoint(ep.0));
        };
        match &p.failed {
            Some(why) => Err(Error::PeerFailed {
                rank: p.rank,
                why: why.clone(),
            }),
            None => Ok(p),
        }
    }

    /// Peer `ep` for a one-sided operation: as [`SmModule::peer`], and a peer that has
    /// removed us is failed here first (it gives back what it offered us).
    fn reachable(&mut self, ep: Endpoint) -> Result<&Peer> {
        self.peer(ep)?;
        self.fail_if_removed_us(ep.0 as usize);
        self.peer(ep)
    }

    /// Fail peer `i` if it removed us (its flag in its segment) and is not failed yet.
    fn fail_if_removed_us(&mut self, i: usize) {
        if self.peers[i].failed.is_none() && self.peers[i].removed_us() {
            self.fail_peer(i, PeerFailure::RemovedUs);
        }
    }

    /// `e`, peer `ep`'s refusal of its handle; or the peer's failure when it removed us
    /// meanwhile (its flag is set before it releases anything).
    fn refused(&mut self, ep: Endpoint, e: Error) -> Error {
        self.reachable(ep).err().unwrap_or(e)
    }

    /// Peer `ep`'s check of its handle for `len` bytes at `remote` with `access`: the
    /// peer's module, or the refusal (see [`SmModule::refused`]).
    fn check_remote(
        &mut self,
        ep: Endpoint,
        remote_handle: &RemoteHandle,
        remote: u64,
        len: usize,
        access: Access,
    ) -> Result<ModuleId> {
        let peer = self.reachable(ep)?;
        let module = peer.module;
        match peer.table.check(module, remote_handle, remote, len, access) {
            Ok(()) => Ok(module),
            Err(e) => Err(self.refused(ep, e)),
        }
    }

    /// Queue the completion of a descriptor that went out (or failed); `immediate`
    /// sends without ALWAYS_CALLBACK hand a kept descriptor straight back.
    fn finish_send(
        &mut self,
        des: Descriptor,
        immediate: bool,
        status: Result<()>,
    ) -> Option<Descriptor> {
        self.frags.finish(des, immediate, status, &mut self.done)
    }

    /// Push what waits for peer `i`'s ring as far as room allows: first what
    /// `outbound` holds, in order, then the gets we serve, a chunk of each in turn.
    ///
    /// The gets we serve may be overtaken by our later sends: nothing we send depends
    /// on them (the peer that asked learns of their end from their data alone). So a
    /// get's data never holds back a send, not even the rendezvous request of the
    /// next message, and gets served together advance together (as Open MPI's ob1
    /// schedules its pending sends): when they read the same buffer (a window of
    /// messages, as OSU's bandwidth tests send), each chunk is copied at both ends
    /// while it is still in the processors' caches (docs/performance.md).
    ///
    /// A full ring of a peer that removed us stays full: the peer is failed then.
    #[inline(never)]
    fn drain_outbound(&mut self, i: usize) -> usize {
        let mut n = 0;
        loop {
            let peer = &mut self.peers[i];
            let (producer, speed) = (&mut peer.producer, &mut peer.out_speed);
            let pushed = match peer.outbound.front_mut() {
                Some(Outbound::Desc { descriptor, tag }) => {
                    if push_descriptor(producer, descriptor, *tag) {
                        Pushed::All
                    } else {
                        Pushed::Nothing
                    }
                }
                Some(Outbound::Protocol(item)) => self.copy.push(item, producer, speed),
                None => break,
            };
            match pushed {
                Pushed::Nothing => {
                    self.fail_if_removed_us(i);
                    return n;
                }
                // A put's chunks go one after another.
                Pushed::Chunk => {}
                Pushed::All => {
                    n += 1;
                    if let Some(Outbound::Desc { descriptor, .. }) =
                        self.peers[i].outbound.pop_front()
                    {
                        self.finish_send(descriptor, false, Ok(()));
                    }
                }
            }
        }
        let peer = &mut self.peers[i];
        if !peer.serving.is_empty() {
            peer.last_served = Some(Instant::now());
        }
        while let Some(get) = peer.serving.front_mut() {
            match self.copy.push(get, &mut peer.producer, &mut peer.out_speed) {
                Pushed::Nothing => {
                    self.fail_if_removed_us(i);
                    break;
                }
                Pushed::Chunk => peer.serving.rotate_left(1),
                Pushed::All => {
                    n += 1;
                    peer.serving.pop_front();
                }
            }
        }
        n
    }

    /// Put (`Write`) or get (`Read`): both ranges checked, then by cross-memory attach
    /// or by the copy protocol; a peer's side named by address alone
    /// (`Remote::unregistered`) only by cross-memory attach, the kernel checking it.
    fn rdma(
        &mut self,
        dir: cma::Direction,
        op: &Transfer<'_>,
        callback: RdmaCallback,
    ) -> Result<()> {
        if self.attach(dir, op)? {
            let done = RdmaCompletion {
                endpoint: op.endpoint,
                local_address: op.local.addr,
                size: op.len,
                status: Ok(()),
            };
            self.done.push_back(Done::Rdma(callback, done));
            return Ok(());
        }
        let (ep, remote, size) = (op.endpoint, op.remote.addr, op.len);
        let i = ep.0 as usize;
        // The copy protocol's requests carry the one-range handle of the range the
        // transfer lies in (checked by `attach`).
        let narrowed = narrow(self.peers[i].module, op.remote.registered()?, remote, size)?;
        match dir {
            cma::Direction::Write => {
                self.copy
                    .start_put(&mut self.peers[i], (op, &narrowed), callback);
                self.drain_outbound(i);
            }
            cma::Direction::Read => self.copy.start_get(
                &mut self.peers[i],
                (op, &narrowed),
                callback,
                &mut self.done,
            ),
        }
        Ok(())
    }

    /// The first part of [`SmModule::rdma`]: both ranges checked, then copied by
    /// cross-memory attach where the transfer goes so. Whether it was copied (else it
    /// goes by the copy protocol).
    fn attach(&mut self, dir: cma::Direction, op: &Transfer<'_>) -> Result<bool> {
        let put = matches!(dir, cma::Direction::Write);
        let (local_needs, remote_needs) = Transfer::needs(put);
        op.check_limits(&self.attrs, put)?;
        let (ep, local, remote, size) = (op.endpoint, op.local.addr, op.remote.addr, op.len);
        op.local.check::<Reg<NoPin>>(self.id, size, local_needs)?;
        let by_address = match op.remote.handle() {
            Some(handle) => {
                self.check_remote(ep, handle, remote, size, remote_needs)?;
                false
            }
            None => {
                self.reachable(ep)?;
                true
            }
        };
        let peer = &mut self.peers[ep.0 as usize];
        let cma = if by_address {
            // The peer's process could not check a request of the copy protocol.
            if !peer.cma_ok {
                return Err(Error::UnregisteredRemote);
            }
            true
        } else if op.flags.contains(RdmaFlags::UNATTENDED) {
            // The one path that needs nothing of the target, where it is allowed.
            peer.cma_ok
        } else {
            peer.goes_by_cma(dir, size, &self.settings)
        };
        if cma {
            let start = Peer::cma_timer(&self.settings, size);
            // SAFETY: the local range lies inside a live registration of ours with the
            // needed access (register_mem's contract keeps it mapped and lets the
            // transport read or write it), or is unregistered with the same promise
            // (`Local::unregistered`); the kernel checks the remote range.
            match unsafe { cma::copy(peer.pid, dir, local, remote, size) } {
                Ok(()) => {
                    peer.observe_cma(dir, size, start);
                    return Ok(true);
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EPERM)
                        && self.settings.rdma == RdmaPath::Auto =>
                {
                    tracing::debug!(
                        rank = peer.rank,
                        "cross-memory attach refused: copying through the rings"
                    );
                    self.peers[ep.0 as usize].cma_ok = false;
                    self.attrs.flags.remove(BtlFlags::UNREGISTERED_REMOTE);
                    if by_address {
                        return Err(Error::UnregisteredRemote);
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.fail_peer(
                        ep.0 as usize,
                        PeerFailure::Ended("process gone (ESRCH)".into()),
                    );
                    return Err(self.peer(ep).err().unwrap_or(Error::UnknownEndpoint(ep.0)));
                }
                Err(source) => {
                    return Err(Error::Os {
                        call: "process_vm_readv/writev",
                        source,
                    })
                }
            }
        }
        Ok(false)
    }

    /// Queue a failure for the error callback, which runs from progress.
    fn report(&mut self, i: Option<usize>, error: Error) {
        let event = ErrorEvent {
            endpoint: i.map(|i| Endpoint(i as u32)),
            rank: i.map(|i| self.peers[i].rank),
            error,
        };
        self.done.push_back(Done::Error(event));
    }

    fn deliver_error(&mut self, event: &ErrorEvent) {
        match &mut self.error_cb {
            Some(cb) => cb(event),
            None => tracing::error!(?event, "sm"),
        }
    }

    /// Take up to [`BATCH`] messages from peer `i`'s ring, stopping after one that
    /// fills the expected receive: how many, and whether that happened.
    fn poll_peer(&mut self, i: usize) -> (usize, bool) {
        let mut n = 0;
        while n < BATCH {
            let peer = &self.peers[i];
            if peer.busy || peer.removed {
                break;
            }
            let Some(rec) = peer.consumer.peek() else {
                break;
            };
            if self.expected.is_posted() && self.fill_expected(i, &rec) {
                // A blocking receive ended: its caller often answers the same peer.
                self.peers[i].producer.prepare_next();
                self.peers[i].consumer.release(rec);
                return (n + 1, true);
            }
            let delivered = if rec.segment_count() == 1 {
                // SAFETY: used before the record is released below.
                let one = [unsafe { rec.payload() }];
                self.dispatch(i, rec.tag, &one)
            } else {
                let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
                // SAFETY: as above.
                let nseg = unsafe { rec.segments(&mut segs) };
                self.dispatch(i, rec.tag, &segs[..nseg])
            };
            if !delivered {
                break;
            }
            self.peers[i].consumer.release(rec);
            n += 1;
        }
        (n, false)
    }

    /// Fill the expected receive with `rec`, from peer `i`, if it is the one; whether
    /// it was.
    #[inline(always)]
    fn fill_expected(&mut self, i: usize, rec: &ring::Record) -> bool {
        let (ep, tag) = (Endpoint(i as u32), Tag(rec.tag));
        if rec.segment_count() == 1 {
            // SAFETY: the record is not released yet; the receive's buffer is valid as
            // `Module::expect` requires.
            unsafe { self.expected.fill(ep, tag, &[rec.payload()]) }
        } else {
            let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
            // SAFETY: the record is not released yet.
            let nseg = unsafe { rec.segments(&mut segs) };
            // SAFETY: the segments are used before the record is released; the
            // receive's buffer is valid as `Module::expect` requires.
            unsafe { self.expected.fill(ep, tag, &segs[..nseg]) }
        }
    }

    /// Hand a message from peer `i` to its callback (or to the transport's own
    /// protocol); false when its callback is running further up the stack (it called
    /// progress), so the message must wait.
    #[inline(always)]
    fn dispatch(&mut self, i: usize, tag: u8, segs: &[&[u8]]) -> bool {
        let tag = Tag(tag);
        if tag.is_reserved() {
            self.internal(i, tag.0, segs);
        } else {
            let Some(mut cb) = self.am.take(tag) else {
                if !self.am.is_registered(tag) {
                    self.report(
                        Some(i),
                        Error::BadTag {
                            tag,
                            why: "a message arrived for it, but no receive callback is registered; dropped",
                        },
                    );
                    return true;
                }
                // Its callback is running further up the stack.
                return false;
            };
            self.peers[i].busy = true;
            cb(
                self,
                &Received {
                    endpoint: Endpoint(i as u32),
                    tag,
                    segments: segs,
                },
            );
            self.peers[i].busy = false;
            self.am.restore(tag, cb);
        }
        true
    }

    /// A message of the transport's own protocol from peer `i`.
    #[inline(never)]
    fn internal(&mut self, i: usize, tag: u8, segs: &[&[u8]]) {
        if let Err(e) = self
            .copy
            .on_message(&mut self.peers[i], tag, segs, &mut self.done)
        {
            self.report(Some(i), e);
        }
    }

    #[cold]
    #[inline(never)]
    fn check_liveness(&mut self) {
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            if p.failed.is_some() {
                continue;
            }
            let why = if p.has_exited() {
                PeerFailure::Ended(format!("process {} ended", p.pid))
            } else if p.removed_us() {
                PeerFailure::RemovedUs
            } else {
                continue;
            };
            // Seen gone first, its ring read after: what it wrote before it went is
            // there now. That is read first (a finished peer's last messages are often
            // its last barrier's): progress reads the ring, and a later look fails it.
            if !p.removed && p.consumer.has_unread() {
                continue;
            }
            self.fail_peer(i, why);
        }
    }

    /// Peer `i` is gone: fail what involves it and tell the upper layer.
    fn fail_peer(&mut self, i: usize, why: PeerFailure) {
        self.end_peer(i, why.clone());
        let rank = self.peers[i].rank;
        self.report(Some(i), Error::PeerFailed { rank, why });
    }

    /// Fail every operation and queued send involving peer `i`.
    fn end_peer(&mut self, i: usize, why: PeerFailure) {
        let rank = self.peers[i].rank;
        self.peers[i].failed = Some(why.clone());
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        self.copy
            .fail_all_to(Endpoint(i as u32), err, &mut self.done);
        self.peers[i].serving.clear();
        let queued: Vec<Outbound> = self.peers[i].outbound.drain(..).collect();
        for o in queued {
            if let Outbound::Desc { descriptor, .. } = o {
                self.finish_send(descriptor, false, Err(err()));
            }
        }
    }

    #[inline(never)]
    fn run_done(&mut self) -> usize {
        run_done(
            self,
            |m| &mut m.done,
            |m, d| m.frags.recycle(d),
            |m, event| m.deliver_error(event),
        )
    }
}

impl Module for SmModule {
    fn name(&self) -> &str {
        NAME
    }

    fn id(&self) -> ModuleId {
        self.id
    }

    fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        if std::mem::take(&mut self.settings.eager_by_probe) {
            if let Some(limit) = crate::by_address::node_eager_limit(procs, self.rank, modex)? {
                self.attrs.eager_limit = limit.min(self.attrs.max_send_size);
            }
        }
        let mut out = Vec::with_capacity(procs.len());
        let my_node = procs.iter().find(|p| p.rank == self.rank).map(|p| &p.node);
        for p in procs {
            // Another node as the caller (the launcher) sees it is never ours, even
            // when its card looks local.
            if p.rank == self.rank || my_node.is_some_and(|n| *n != p.node) {
                out.push(None);
                continue;
            }
            if let Some(i) = self.peers.iter().position(|q| q.rank == p.rank) {
                out.push(Some(Endpoint(i as u32)));
                continue;
            }
            let Some(blob) = modex.lookup(p.rank, MODEX_KEY)? else {
                out.push(None);
                continue;
            };
            let peer = Peer::connect(
                p,
                &blob,
                self.slot,
                &self.node,
                self.own.layout(),
                self.own.region(),
                &self.settings,
            )?;
            match peer {
                Some(peer) => {
                    if let Some(q) = self.peers.iter().find(|q| q.slot == peer.slot) {
                        return Err(Error::Modex(format!(
                            "ranks {} and {} both have sm slot {}: each rank of a node \
                             needs a slot of its own",
                            q.rank, peer.rank, peer.slot
                        )));
                    }
                    if !(peer.cma_ok && peer.reads_by_address) {
                        // By address only where both sides may attach: a peer's get
                        // of our memory so named would otherwise be refused.
                        self.attrs.flags.remove(BtlFlags::UNREGISTERED_REMOTE);
                    }
                    self.peers.push(peer);
                    out.push(Some(Endpoint(self.peers.len() as u32 - 1)));
                }
                None => out.push(None),
            }
        }
        Ok(out)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let i = ep.0 as usize;
            let p = self.peers.get(i).ok_or(Error::UnknownEndpoint(ep.0))?;
            if !p.removed {
                let slot = p.slot;
                self.end_peer(i, PeerFailure::Removed);
                self.peers[i].removed = true;
                // Its operations towards us would wait for answers that never come.
                self.own.mark_removed(slot);
            }
        }
        Ok(())
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.error_cb = Some(callback);
    }

    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle> {
        self.regs.register(self.id, &self.attrs, request)
    }

    fn registration_stats(&self) -> Option<rbtl_rcache::Stats> {
        Some(self.regs.cache_stats())
    }

    fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        self.peer(request.endpoint)?;
        self.frags.alloc(request)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.frags.free(descriptor)
    }

    fn send(&mut self, endpoint: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult {
        let (descriptor, ()) = admit_send(descriptor, self.id, |_| {
            self.peer(endpoint)?;
            rbtl_btl::transport_kit::check_not_reserved(tag)
        })?;
        let peer = &mut self.peers[endpoint.0 as usize];
        let pushed =
            peer.outbound.is_empty() && push_descriptor(&mut peer.producer, &descriptor, tag);
        if pushed {
            Ok(SendOutcome::Done(self.finish_send(
                descriptor,
                true,
                Ok(()),
            )))
        } else {
            peer.outbound.push_back(Outbound::Desc { descriptor, tag });
            Ok(SendOutcome::Queued)
        }
    }

    #[inline]
    fn sendi(&mut self, m: &ActiveMessage<'_>) -> Result<SendiOutcome> {
        m.check(self.attrs.max_send_size)?;
        let (endpoint, tag, header, payload) = (m.endpoint, m.tag, m.header, m.payload);
        let size = m.len();
        // (`let else`, not `ok_or`: that builds and drops an error on every send.)
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return Err(Error::UnknownEndpoint(endpoint.0));
        };
        let pushed = |p: &mut ring::Producer| {
            if size <= ring::INLINE_MAX {
                p.push_small(tag.0, header, payload)
            } else {
                p.push(tag.0, &[header, payload], &[])
            }
        };
        // Messages above the default eager limit (eager where the probe raised it)
        // time their copies into the ring, as the copy protocol does, and tell the
        // watch at once (a blocking receive the transport matches itself may take
        // every message meanwhile, outside `progress`' count): while those copies
        // run slow, the limit comes back down (`by_address::Watch`).
        let timed = if size > DEFAULT_EAGER_LIMIT { size } else { 0 };
        if peer.failed.is_none()
            && peer.outbound.is_empty()
            && peer.out_speed.timed(timed, || pushed(&mut peer.producer))
        {
            if let (Some(w), true) = (&mut self.by_address, timed > 0) {
                w.copied(endpoint.0 as usize, peer.rings_gbs(), &mut self.attrs);
            }
            return Ok(SendiOutcome::Sent);
        }
        // A peer that removed us reads its ring no more.
        self.reachable(endpoint)?;
        Err(Error::OutOfResource("sm ring full"))
    }

    fn put(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.rdma(cma::Direction::Write, op, callback)
    }

    fn get(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.rdma(cma::Direction::Read, op, callback)
    }

    /// By cross-memory attach, the transfers that go only so: flagged
    /// [`RdmaFlags::UNATTENDED`], or naming the peer's side by address. Others may
    /// go by the copy protocol, whose choice counts the transfers (`path.rs`): left
    /// to `put` and `get`.
    fn transfer_now(&mut self, op: &Transfer<'_>, put: bool) -> Option<Result<()>> {
        if !op.flags.contains(RdmaFlags::UNATTENDED) && op.remote.handle().is_some() {
            return None;
        }
        let dir = match put {
            true => cma::Direction::Write,
            false => cma::Direction::Read,
        };
        match self.attach(dir, op) {
            Ok(true) => Some(Ok(())),
            Ok(false) => None,
            Err(e) => Some(Err(e)),
        }
    }

    /// Checked, then applied by the target through the copy protocol.
    fn atomic(&mut self, op: &RemoteAtomic<'_>, callback: RdmaCallback) -> Result<()> {
        op.check_word()?;
        let (ep, remote, bytes) = (op.endpoint, op.remote.addr, op.width.bytes());
        if let Some(r) = op.result {
            r.check::<Reg<NoPin>>(self.id, bytes, Access::LOCAL_WRITE)?;
        }
        let handle = op.remote.registered()?;
        let module = self.check_remote(ep, handle, remote, bytes, Access::ATOMIC)?;
        let narrowed = narrow(module, handle, remote, bytes)?;
        self.copy
            .start_atomic(&mut self.peers[ep.0 as usize], (op, &narrowed), callback);
        Ok(())
    }

    fn alloc_shared(&mut self, len: usize) -> Result<Option<SharedMem>> {
        Ok(self.own.alloc_shared(len))
    }

    fn free_shared(&mut self, mem: SharedMem) -> Result<()> {
        self.own.free_shared(mem)
    }

    fn map_remote(
        &mut self,
        endpoint: Endpoint,
        remote: u64,
        remote_handle: &RemoteHandle,
        len: usize,
        access: Access,
    ) -> Result<Option<*mut u8>> {
        let layout = *self.own.layout();
        let mapped =
            self.reachable(endpoint)?
                .map_heap(remote, remote_handle, len, access, &layout);
        mapped.map_err(|e| self.refused(endpoint, e))
    }

    /// Cross-memory attach completes at the call; the copy protocol waits for the
    /// peers' replies, for as long as they reply: once every peer it waits for has
    /// sent none for `btl_sm_flush_timeout` (a stopped or hung process),
    /// [`Error::PeerTimeout`] names them and their operations stay pending.
    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint.filter(|ep| self.peers.get(ep.0 as usize).is_none()) {
            return Err(Error::UnknownEndpoint(ep.0));
        }
        let mut watch = FlushWatch::new(self.settings.flush_timeout);
        let mut outcome = Ok(());
        while self.copy.pending_on(endpoint) {
            let busy = self.progress() > 0;
            if !busy {
                // The peer serving the operation may need this processor.
                std::thread::yield_now();
            }
            if watch.due(busy) {
                let (waiting, answers) = self.copy.waiting(endpoint);
                let rank_of = |i: usize| self.peers[i].rank;
                if let Some(e) = watch.timed_out(
                    Instant::now(),
                    waiting,
                    answers,
                    rank_of,
                    FLUSH_TIMEOUT_PARAM,
                ) {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // Completed operations' callbacks run before flush returns.
        while self.done.iter().any(|d| matches!(d, Done::Rdma(..))) {
            self.run_done();
        }
        outcome
    }

    fn expected_slot(&mut self) -> Option<&mut ExpectedSlot> {
        Some(&mut self.expected)
    }

    fn expects_from(&self, endpoint: Endpoint) -> bool {
        self.peers
            .get(endpoint.0 as usize)
            .is_some_and(|p| !p.removed)
    }

    fn progress(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.peers.len() {
            let (taken, filled) = self.poll_peer(i);
            n += taken;
            if filled {
                // The caller learns of it before any later message is delivered.
                return n;
            }
            let sending = !self.peers[i].outbound.is_empty() || !self.peers[i].serving.is_empty();
            if sending {
                n += self.drain_outbound(i);
            }
            if let Some(w) = &mut self.by_address {
                if taken > 0 || sending {
                    w.copied(i, self.peers[i].rings_gbs(), &mut self.attrs);
                }
            }
        }
        if !self.done.is_empty() {
            n += self.run_done();
        }
        if n == 0 {
            self.idle += 1;
            if self.idle >= LIVENESS_INTERVAL {
                self.idle = 0;
                self.check_liveness();
                if let Some(w) = &mut self.by_address {
                    w.idle(&mut self.attrs);
                }
            }
        }
        n
    }
}

impl Drop for SmModule {
    fn drop(&mut self) {
        // Peers' segments unmap with `peers`; ours with `own`, and goes when the last
        // process that maps it does.
        self.peers.clear();
    }
}

#[cfg(test)]
#[path = "ended_peer_tests.rs"]
mod ended_peer_tests;
