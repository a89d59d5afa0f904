//! One-sided operations: puts and gets (RDMA write and read) and atomics (the device's
//! fetch-add and compare-swap; 32-bit ones emulated, see `emu32`), checked against both
//! handles, then posted at once or queued behind the connection, earlier work, or the
//! operations in flight; and flush, which waits for them while the peers it waits for
//! answer: their handshake while their connection is being made, their device's
//! completions once connected (`btl_openib_flush_timeout`).

use super::emu32::{Emulation, Half, Op32, Scratch};
use super::OpenibModule;
use crate::core::{Core, Posted};
use crate::peer::{Link, Peer, RdmaRequest, Waiting};
use crate::remote_key::RemoteKey;
use rbtl_btl::transport_kit::Done;
use rbtl_btl::transport_kit::FlushWatch;
use rbtl_btl::{
    AtomicOp, AtomicWidth, BtlFlags, Endpoint, Error, Local, Module, RdmaCallback, RdmaCompletion,
    RegRequest, Remote, Result, Transfer,
};
use rbtl_rcache::{Access, Registration};
use rbtl_verbs::{Op, Sge, VerbsRegistrar};
use std::sync::Arc;
use std::time::Instant;

/// What a memory handle of this module holds: a device registration per range.
pub(super) struct Regs(pub(super) Vec<Registration<VerbsRegistrar>>);

/// Idle rounds of a flush after which it gives the processor up between rounds and
/// starts watching connected peers for silence.
const LONG_IDLE: u32 = 1 << 14;

/// Most operations that may wait for one peer before `OutOfResource`.
const MAX_WAITING: usize = 4096;

/// Whether a put, get or atomic towards `peer` is in flight or waiting.
fn rdma_pending(peer: &Peer) -> bool {
    peer.rdma_in_flight > 0 || peer.waiting.iter().any(|w| matches!(w, Waiting::Rdma(_)))
}

/// Which way a put or get moves bytes.
#[derive(Clone, Copy)]
pub(super) enum Way {
    /// Local to remote (RDMA write).
    Put,
    /// Remote to local (RDMA read).
    Get,
}

/// Refuse atomics on a device without them.
fn check_atomics(m: &OpenibModule) -> Result<()> {
    if m.core.attrs.flags.contains(BtlFlags::ATOMIC_FOPS) {
        Ok(())
    } else {
        Err(Error::NotSupported("atomics on a device without them"))
    }
}

/// The device operation for `op` on the word at `remote`, given the remote key (verbs
/// devices have fetch-add and compare-swap).
pub(super) fn device_op(op: AtomicOp, remote: u64, operand: u64) -> Result<impl FnOnce(u32) -> Op> {
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

/// The 32-bit emulation of `op` (add and compare-swap, as on 64 bits).
pub(super) fn emulated_op(op: AtomicOp, operand: u64) -> Result<Op32> {
    match op {
        AtomicOp::Add => Ok(Op32::Apply(op, operand as u32)),
        _ => Err(Error::NotSupported(
            "atomics other than add and compare-swap",
        )),
    }
}

impl OpenibModule {
    /// Check a put or get against both handles and its limit, then start it.
    #[inline(always)]
    pub(super) fn transfer(
        &mut self,
        t: &Transfer<'_>,
        way: Way,
        callback: RdmaCallback,
    ) -> Result<()> {
        let put = matches!(way, Way::Put);
        let (needs_local, needs_remote) = Transfer::needs(put);
        // (The limits keep a transfer within the port's largest message, and so within
        // a work request's u32 length.)
        t.check_limits(&self.core.attrs, put)?;
        self.core.peer(t.endpoint)?;
        let (local, remote, size) = (t.local.addr, t.remote.addr, t.len);
        let key = RemoteKey::from_bytes(t.remote.registered()?.as_bytes())?;
        let rkey = key.check(remote, size, needs_remote)?;
        let lkey = self.lkey(&t.local, size, needs_local)?;
        let op = match way {
            Way::Put => Op::Write { remote, rkey },
            Way::Get => Op::Read { remote, rkey },
        };
        self.start_rdma(
            t.endpoint,
            RdmaRequest {
                op,
                local,
                size,
                lkey,
                callback,
            },
        )
    }

    /// A 64-bit atomic: the device's operation `op` (given the remote key) on the word
    /// at `remote`, its previous value to `local` if any.
    pub(super) fn atomic64(
        &mut self,
        ep: Endpoint,
        (local, remote): (Option<Local<'_>>, Remote<'_>),
        op: impl FnOnce(u32) -> Op,
        callback: RdmaCallback,
    ) -> Result<()> {
        check_atomics(self)?;
        let key = RemoteKey::from_bytes(remote.registered()?.as_bytes())?;
        let rkey = key.check(remote.addr, 8, Access::ATOMIC)?;
        AtomicWidth::W64.check_aligned(remote.addr)?;
        let (addr, lkey, callback) = match local {
            Some(l) => (l.addr, self.lkey(&l, 8, Access::LOCAL_WRITE)?, callback),
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
                op: op(rkey),
                local: addr,
                size: 8,
                lkey,
                callback,
            },
        )
    }

    /// A 32-bit atomic on the word at `remote`, emulated with 64-bit compare-and-swap
    /// steps on the aligned 8-byte word around it (see `emu32`), which must lie inside
    /// the remote registration; the previous value (4 bytes) goes to `local` if any.
    pub(super) fn atomic32(
        &mut self,
        ep: Endpoint,
        (local, remote): (Option<Local<'_>>, Remote<'_>),
        op: Op32,
        callback: RdmaCallback,
    ) -> Result<()> {
        check_atomics(self)?;
        let (remote, remote_handle) = (remote.addr, remote.registered()?);
        AtomicWidth::W32.check_aligned(remote)?;
        let word = remote & !7;
        RemoteKey::from_bytes(remote_handle.as_bytes())?.check(word, 8, Access::ATOMIC)?;
        if let Some(l) = local {
            l.handle().ok_or(Error::Unregistered)?.check::<Regs>(
                self.core.id,
                l.addr,
                4,
                Access::LOCAL_WRITE,
            )?;
        }
        let landing = self.scratch()?.take()?;
        let (compare, swap) = op.first(Half::of(remote));
        let emulation = Emulation {
            endpoint: ep,
            remote,
            handle: *remote_handle,
            op,
            result: local.map(|l| l.addr),
            landing,
            callback,
        };
        let scratch = emulation.landing.scratch();
        let at = emulation.landing.addr();
        let (_cell, step) = emulation.step_callback(compare);
        let cas = move |rkey| Op::CompareSwap {
            remote: word,
            rkey,
            compare,
            swap,
        };
        // Refused here, the step's callback and the emulation with it are dropped (its
        // landing place given back), and the caller gets the error.
        let local = Local::new(at, scratch.handle());
        self.atomic64(
            ep,
            (Some(local), Remote::new(word, remote_handle)),
            cas,
            step,
        )
    }

    /// The module's scratch area for emulated atomics, registered on first use.
    fn scratch(&mut self) -> Result<Arc<Scratch>> {
        if let Some(s) = &self.scratch {
            return Ok(Arc::clone(s));
        }
        let access = Access::LOCAL_READ | Access::LOCAL_WRITE;
        let s = Scratch::new(|base, len| {
            // SAFETY: the scratch area owns this memory and drops the handle before it.
            unsafe { self.register(&RegRequest::new(base, len, access)) }
        })?;
        self.scratch = Some(Arc::clone(&s));
        Ok(s)
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

    #[inline(always)]
    pub(super) fn post_rdma(&mut self, ep: usize, r: RdmaRequest) {
        let sge = Sge {
            addr: r.local as u64,
            len: r.size as u32,
            lkey: r.lkey,
        };
        let (op, local, size) = (r.op, r.local, r.size);
        let id = self.core.track(Posted::Rdma(ep, r.callback, local, size));
        // SAFETY: the local range was checked against its registration (whose key
        // this is) when the operation was started; the caller keeps it until the
        // callback.
        let posted = unsafe { self.core.post_send(ep, id, op, &[sge], false, true) };
        let peer = &mut self.core.peers[ep];
        match posted {
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

    #[inline]
    fn lkey(&self, local: &Local<'_>, len: usize, needs: Access) -> Result<u32> {
        // Every access goes through the device, which needs the registration's key.
        let handle = local.handle().ok_or(Error::Unregistered)?;
        let (regs, i) = handle.check_at::<Regs>(self.core.id, local.addr, len, needs)?;
        Ok(regs.0[i].handle().lkey())
    }

    /// (`Module::flush`) Progress until the one-sided operations towards `endpoint`
    /// (every peer when `None`) have completed and been reported; or, once no peer it
    /// still waits for has answered for `btl_openib_flush_timeout`, return
    /// `PeerTimeout` naming them. A peer answers with a handshake message while its
    /// connection is being made, and with a completion of work posted to it once
    /// connected (a stopped peer whose shared receive queue is empty answers nothing:
    /// its device retries the send it cannot take without end, and the work posted
    /// behind it waits). Their operations stay pending: they complete if the peer
    /// answers again, or fail at the connection's deadline or with `del_procs`.
    pub(super) fn flush_rdma(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.core.peer(ep)?;
        }
        let covers = move |i: usize| endpoint.is_none_or(|e| e.0 as usize == i);
        let pending = |c: &Core| {
            c.peers
                .iter()
                .enumerate()
                .any(|(i, p)| covers(i) && rdma_pending(p))
        };
        // Made when a connection is first seen under way, or once the flush has been
        // idle for a long stretch: a flush that the devices answer soon never reads
        // the clock.
        let mut watch: Option<FlushWatch> = None;
        let mut outcome = Ok(());
        // Spin: a completion is a device round trip away. Give the processor up only
        // after a long idle stretch (a peer on this core may need it).
        let mut idle = 0u32;
        while pending(&self.core) || !self.core.done.is_empty() {
            let busy = self.progress() > 0;
            if busy {
                idle = 0;
            } else {
                idle += 1;
                if idle >= LONG_IDLE {
                    std::thread::yield_now();
                }
            }
            if watch.is_none() && self.core.connecting == 0 && idle < LONG_IDLE {
                continue;
            }
            let timeout = self.core.settings.flush_timeout;
            let w = watch.get_or_insert_with(|| FlushWatch::new(timeout));
            if w.due(busy) {
                if let Some(e) = self.silent_peers(covers, w, Instant::now()) {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // Completed operations' callbacks run before flush returns.
        while self.core.done.iter().any(|d| matches!(d, Done::Rdma(..))) {
            self.progress();
        }
        outcome
    }

    /// At `now`, through `watch`: the error that ends a flush of the peers `covers`
    /// accepts, if every one it still waits for has been silent for the timeout.
    fn silent_peers(
        &self,
        covers: impl Fn(usize) -> bool,
        watch: &mut FlushWatch,
        now: Instant,
    ) -> Option<Error> {
        let peers = &self.core.peers;
        let waited = (0..peers.len()).filter(|&i| covers(i) && rdma_pending(&peers[i]));
        let rank_of = |i: usize| peers[i].rank;
        let param = crate::FLUSH_TIMEOUT_PARAM;
        watch.timed_out(now, waited, &self.core.answers, rank_of, param)
    }
}
