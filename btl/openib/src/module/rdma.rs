//! One-sided operations: puts and gets (RDMA write and read) and atomics (the device's
//! fetch-add and compare-swap), checked against both handles, then posted at once or
//! queued behind the connection, earlier work, or the operations in flight; and flush,
//! which waits for them.

use super::OpenibModule;
use crate::core::{Core, Done, Posted};
use crate::peer::{Link, RdmaRequest, Waiting};
use crate::wire::RemoteKey;
use rbtl_btl::{
    AtomicOp, Endpoint, Error, MemHandle, Module, RdmaCallback, RdmaCompletion, RemoteHandle,
    Result,
};
use rbtl_rcache::{Access, Registration};
use rbtl_verbs::{Op, Sge, VerbsRegistrar};

/// What a memory handle of this module holds.
type Reg = Registration<VerbsRegistrar>;

/// Most operations that may wait for one peer before `OutOfResource`.
const MAX_WAITING: usize = 4096;

/// Which way a put or get moves bytes.
#[derive(Clone, Copy)]
pub(super) enum Transfer {
    /// Local to remote (RDMA write).
    Put,
    /// Remote to local (RDMA read).
    Get,
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

impl OpenibModule {
    /// Check a put or get against both handles and its limit, then start it.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn transfer(
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
                rbtl_btl::transport_kit::PUT_REMOTE,
                Access::LOCAL_READ,
                self.core.attrs.put_limit,
                "put",
            ),
            Transfer::Get => (
                rbtl_btl::transport_kit::GET_REMOTE,
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

    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
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

    #[inline]
    fn lkey(&self, handle: &MemHandle, addr: usize, len: usize, needs: Access) -> Result<u32> {
        Ok(handle
            .check::<Reg>(self.core.id, addr, len, needs)?
            .handle()
            .lkey())
    }

    /// (`Module::flush`) Progress until the one-sided operations towards `endpoint`
    /// (every peer when `None`) have completed and been reported.
    pub(super) fn flush_rdma(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
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
}
