//! The openib module: one per active device port (Open MPI: `mca_btl_openib_module_t`).
//! Sends go over a reliable-connected queue pair per peer, made on first use by the
//! connection method both sides chose; what is sent meanwhile waits, in order. Puts and
//! gets are RDMA writes and reads, atomics the device's fetch-add and compare-swap
//! (32-bit ones emulated with compare-swap steps: `emu32`).
//!
//! This file holds the module's state and its `Module` implementation, which hands
//! each call to the file of its concern: `endpoints` (peers: adding, removing,
//! connecting on first use), `send` (sends, credit messages, and what waits for a
//! peer), `receive` (delivering received messages, reposting their buffers), `rdma`
//! (puts, gets, atomics, flush), `progress` (one progress call: the connection
//! methods, the completion queue, reporting completions) and `leaving` (what a module
//! going away waits for).

mod emu32;
mod endpoints;
mod leaving;
mod progress;
mod rdma;
mod receive;
mod send;

use crate::core::Core;
use crate::peer::Waiting;
use crate::remote_key::{KeyRange, RemoteKey};
use emu32::{Op32, Scratch};
use rbtl_btl::transport_kit::ExpectedSlot;
use rbtl_btl::{
    ActiveMessage, AmCallback, AtomicKind, AtomicWidth, Attributes, Descriptor, DescriptorRequest,
    Endpoint, Error, ErrorCallback, MemHandle, Modex, Module, ModuleId, Proc, RdmaCallback,
    RegRequest, RemoteAtomic, RemoteHandle, Result, SendResult, SendiOutcome, Tag, Transfer,
};
use rbtl_cpc::select::Offer;
use rbtl_cpc::CpcModule;
use rbtl_verbs::{Completion, Op};
use rdma::{device_op, emulated_op, Regs, Way};
use std::collections::VecDeque;
use std::sync::Arc;

/// One port's module.
pub struct OpenibModule {
    pub(crate) core: Core,
    pub(crate) cpcs: Vec<(Box<dyn CpcModule<Core>>, Offer)>,
    pub(crate) modex_key: String,
    pub(crate) subnet: [u8; 8],
    calls: u32,
    /// The progress call that first saw the peers of `core.ended`.
    ended_since: Option<u32>,
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
    /// Landing places of emulated 32-bit atomics, registered on first use.
    scratch: Option<Arc<Scratch>>,
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
            ended_since: None,
            delivering: 0,
            received: VecDeque::new(),
            expected: ExpectedSlot::default(),
            filled: false,
            scratch: None,
        }
    }

    /// What this module publishes: the subnet prefix, how it receives (1: through a
    /// shared receive queue, 0: per peer), then the CPC offers.
    pub(crate) fn modex_blob(&self) -> Vec<u8> {
        crate::address::Address {
            subnet: self.subnet,
            shared: self.core.shared.is_some(),
            offers: self.cpcs.iter().map(|c| c.1.clone()).collect(),
        }
        .encode()
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
        self.add_peers(procs, modex)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        self.remove_peers(endpoints)
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.core.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.core.on_error = Some(callback);
    }

    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle> {
        if let Some(key) = request.key() {
            return Err(Error::KeyRejected {
                key,
                why: "the device assigns each memory region's remote key (rkey): register \
                      without a requested key and send the handle to peers",
            });
        }
        request.check(&self.core.attrs)?;
        let (ranges, access) = (request.ranges(), request.access());
        let regs = ranges
            .iter()
            .map(|r| self.core.rcache.register(r.base, r.len, access))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let keys: Vec<KeyRange> = ranges
            .iter()
            .zip(&regs)
            .map(|(r, reg)| KeyRange {
                base: r.base as u64,
                len: r.len as u64,
                rkey: reg.handle().rkey(),
            })
            .collect();
        let key = u64::from(keys[0].rkey);
        let remote = RemoteHandle::from_bytes(&RemoteKey::new(access, key, &keys).to_bytes())?;
        Ok(MemHandle::new(
            self.core.id,
            key,
            ranges,
            access,
            remote,
            Box::new(Regs(regs)),
        ))
    }

    fn registration_stats(&self) -> Option<rbtl_rcache::Stats> {
        Some(self.core.rcache.stats())
    }

    fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        self.alloc_descriptor(request)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        descriptor.check_owner(self.core.id)?;
        self.core.send_frags.put(descriptor.into_frag());
        Ok(())
    }

    fn send(&mut self, endpoint: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult {
        self.send_descriptor(endpoint, descriptor, tag)
    }

    fn sendi(&mut self, m: &ActiveMessage<'_>) -> Result<SendiOutcome> {
        self.send_inline(m)
    }

    fn put(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.transfer(op, Way::Put, callback)
    }

    fn get(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        self.transfer(op, Way::Get, callback)
    }

    /// The device's fetch-add and compare-swap on 64-bit words; on 32-bit ones, the
    /// same emulated with 64-bit compare-swap steps.
    fn atomic(&mut self, op: &RemoteAtomic<'_>, callback: RdmaCallback) -> Result<()> {
        let ep = op.endpoint;
        self.core.peer(ep)?;
        let sides = (op.result, op.remote);
        let remote = op.remote.addr;
        match (op.width, op.kind) {
            (AtomicWidth::W64, AtomicKind::Op(o, operand)) => {
                let o = device_op(o, remote, operand)?;
                self.atomic64(ep, sides, o, callback)
            }
            (AtomicWidth::W32, AtomicKind::Op(o, operand)) => {
                let o = emulated_op(o, operand)?;
                self.atomic32(ep, sides, o, callback)
            }
            (AtomicWidth::W64, AtomicKind::CompareSwap { compare, value }) => {
                let o = move |rkey| Op::CompareSwap {
                    remote,
                    rkey,
                    compare,
                    swap: value,
                };
                self.atomic64(ep, sides, o, callback)
            }
            (AtomicWidth::W32, AtomicKind::CompareSwap { compare, value }) => {
                let o = Op32::Cswap {
                    compare: compare as u32,
                    value: value as u32,
                };
                self.atomic32(ep, sides, o, callback)
            }
        }
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        self.flush_rdma(endpoint)
    }

    fn expected_slot(&mut self) -> Option<&mut ExpectedSlot> {
        Some(&mut self.expected)
    }

    fn expects_from(&self, endpoint: Endpoint) -> bool {
        self.core.peers.get(endpoint.0 as usize).is_some()
    }

    fn progress(&mut self) -> usize {
        self.run_progress()
    }
}

impl Drop for OpenibModule {
    fn drop(&mut self) {
        self.let_sends_arrive();
        for c in &mut self.cpcs {
            c.0.finalize();
        }
        // Queue pairs go first (with them, the work posted on fragments), then the
        // shared receive queues (the XRC one with its initiators and targets), then the
        // fragments return to their pools, which can then release their chunks.
        let core = &mut self.core;
        for peer in &mut core.peers {
            peer.qp = None;
        }
        if let Some(shared) = core.shared.take() {
            shared.release(&mut core.recv_frags);
        }
        if let Some(xrc) = core.xrc.take() {
            xrc.release(&mut core.recv_frags);
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
