//! Put, get and atomics over `tcp`, as active messages applied by the target.
//!
//! The origin checks what it can at the call with the bytes of the remote handle
//! (which name the target module, the registered range and its access: see
//! [`keytable`](rbtl_btl::transport_kit::keytable)), so that plain mistakes fail at once as they do on
//! `sm`. That check is a courtesy: the target checks every request again against its
//! own table of live registrations before touching memory, and a refusal comes back
//! as the same typed error through the origin's completion callback, the target
//! memory unchanged. Large puts and gets go in chunks striped over the peer's links;
//! each chunk is acknowledged (PUT_ACK, GET_DONE), and an operation completes when all
//! its chunks are, with the first refusal if any.

use crate::link::{self, GetReply, Head, Item};
use crate::wire::{Encoder, Kind};
use rbtl_btl::transport_kit::keytable::{HandleFields, KeyTableView, HANDLE_SIZE};
use rbtl_btl::transport_kit::{Answers, RdmaOp};
use rbtl_btl::{
    check_range, AtomicRequest, AtomicWidth, Endpoint, Error, ModuleId, RdmaCallback,
    RdmaCompletion, RemoteHandle, Result,
};
use rbtl_rcache::Access;
use std::collections::HashMap;

/// What an operation waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// A put's acknowledgements.
    Put,
    /// A get's data, written at `local`.
    Get {
        /// Where the data goes.
        local: usize,
    },
    /// An atomic's answer; fetching ones write the previous value at `result`.
    Atomic {
        /// Where the previous value goes.
        result: Option<usize>,
        /// The word's width (and the previous value's).
        width: AtomicWidth,
    },
}

struct Op {
    rdma: RdmaOp<Pending>,
    chunks_left: usize,
    status: Result<()>,
}

/// The origin's operations in flight, by request number.
#[derive(Default)]
pub struct Ops {
    ops: HashMap<u64, Op>,
    next: u64,
    /// Per endpoint index: operations in flight towards it.
    per_peer: Vec<u32>,
    /// Per endpoint index: answers that came to our operations (what a flush watches).
    pub answers: Answers,
}

/// A completion to run.
pub type Completion = (RdmaCallback, RdmaCompletion);

impl Ops {
    /// Start an operation of `chunks` chunks; its request number.
    pub fn start(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        size: usize,
        what: Pending,
        chunks: usize,
        callback: RdmaCallback,
    ) -> u64 {
        self.next += 1;
        let op = Op {
            rdma: RdmaOp {
                endpoint,
                local,
                size,
                what,
                callback,
            },
            chunks_left: chunks,
            status: Ok(()),
        };
        self.ops.insert(self.next, op);
        let p = endpoint.0 as usize;
        if p >= self.per_peer.len() {
            self.per_peer.resize(p + 1, 0);
        }
        self.per_peer[p] += 1;
        self.next
    }

    /// Take request `req` out of the operations in flight.
    fn remove(&mut self, req: u64) -> Option<Op> {
        let op = self.ops.remove(&req)?;
        if let Some(n) = self.per_peer.get_mut(op.rdma.endpoint.0 as usize) {
            *n -= 1;
        }
        Some(op)
    }

    /// What request `req` waits for, if it is in flight towards `endpoint`.
    pub fn pending(&self, req: u64, endpoint: Endpoint) -> Option<Pending> {
        self.ops
            .get(&req)
            .filter(|op| op.rdma.endpoint == endpoint)
            .map(|op| op.rdma.what)
    }

    /// Where `len` bytes at `offset` of get `req` from `endpoint` go; `None` if no such
    /// get, or if they fall outside it (a peer's protocol error).
    pub fn get_target(
        &self,
        req: u64,
        endpoint: Endpoint,
        offset: u64,
        len: usize,
    ) -> Option<usize> {
        let op = self
            .ops
            .get(&req)
            .filter(|op| op.rdma.endpoint == endpoint)?;
        let Pending::Get { local } = op.rdma.what else {
            return None;
        };
        let end = offset.checked_add(len as u64)?;
        (end <= op.rdma.size as u64).then(|| local + offset as usize)
    }

    /// A chunk of `req` is over with `status`: the completion once every chunk is.
    /// `None` also for an unknown request (the caller checked with
    /// [`Ops::pending`]).
    pub fn chunk_done(&mut self, req: u64, status: Result<()>) -> Option<Completion> {
        let op = self.ops.get_mut(&req)?;
        if op.status.is_ok() {
            op.status = status;
        }
        op.chunks_left = op.chunks_left.saturating_sub(1);
        if op.chunks_left > 0 {
            return None;
        }
        let op = self.remove(req)?;
        Some(done(op))
    }

    /// Fail every operation towards `endpoint`.
    pub fn fail(&mut self, endpoint: Endpoint, error: impl Fn() -> Error) -> Vec<Completion> {
        let reqs: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| op.rdma.endpoint == endpoint)
            .map(|(r, _)| *r)
            .collect();
        let mut out = Vec::with_capacity(reqs.len());
        for r in reqs {
            if let Some(mut op) = self.remove(r) {
                op.status = Err(error());
                out.push(done(op));
            }
        }
        out
    }

    /// Whether an operation towards `endpoint` (or any) is in flight.
    #[inline]
    pub fn pending_on(&self, endpoint: Option<Endpoint>) -> bool {
        match endpoint {
            Some(e) => self.per_peer.get(e.0 as usize).is_some_and(|&n| n > 0),
            None => !self.ops.is_empty(),
        }
    }

    /// The endpoint indices that operations in flight go to (among `endpoint`, or all).
    pub fn waiting(&self, endpoint: Option<Endpoint>) -> impl Iterator<Item = usize> + '_ {
        let only = endpoint.map(|e| e.0 as usize);
        self.per_peer
            .iter()
            .enumerate()
            .filter(move |&(p, &n)| n > 0 && only.is_none_or(|o| o == p))
            .map(|(p, _)| p)
    }
}

fn done(op: Op) -> Completion {
    op.rdma.completion(op.status)
}

/// Smallest share of a transfer that goes to a link of its own.
pub const STRIPE_MIN: usize = 64 << 10;

/// The chunk length for a transfer of `len` bytes to a peer with `links` links: one
/// chunk per link (none smaller than [`STRIPE_MIN`]), and more where a chunk would
/// exceed `max` (`btl_tcp_rdma_chunk`; see docs/performance.md for how its default
/// was chosen, across a network and on loopback).
pub fn chunk_len(len: usize, max: usize, links: usize) -> usize {
    let shares = links.min(len.div_ceil(STRIPE_MIN)).max(1);
    len.div_ceil(shares).clamp(1, max.max(1))
}

/// The chunks of a transfer of `len` bytes: (offset, length) pairs, one empty chunk
/// for zero bytes.
pub fn chunks(len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    let n = len.div_ceil(chunk).max(1);
    (0..n).map(move |i| (i * chunk, chunk.min(len - i * chunk)))
}

/// The origin's check of a remote handle by its own bytes: its length, the target
/// module it names, the range holding the access and the access it describes; the
/// one-range handle of that range, which the request carries. The target checks again.
pub fn precheck(
    target: u64,
    handle: &RemoteHandle,
    addr: u64,
    len: usize,
    needs: Access,
) -> Result<RemoteHandle> {
    let h = HandleFields::of(handle, target)?;
    let range = h.find(addr, len)?;
    let r = h.ranges()[range];
    check_range("remote", addr, len, r.base, r.len)?;
    if !h.access.contains(needs) {
        return Err(Error::AccessDenied {
            side: "remote",
            has: h.access,
            needs,
        });
    }
    Ok(h.narrow(range).to_handle())
}

/// The target's check of a request against its own live registrations.
pub fn check(
    table: &KeyTableView,
    me: ModuleId,
    handle: &[u8],
    addr: u64,
    len: usize,
    needs: Access,
) -> Result<RemoteHandle> {
    let handle = RemoteHandle::from_bytes(handle)?;
    table.check(me, &handle, addr, len, needs)?;
    Ok(handle)
}

/// Apply an atomic at the target after checking it: the previous value.
pub fn apply_atomic(
    table: &KeyTableView,
    me: ModuleId,
    handle: &[u8],
    addr: u64,
    atomic: AtomicRequest,
    operand: u64,
    compare: u64,
) -> Result<u64> {
    atomic.width.check_aligned(addr)?;
    check(
        table,
        me,
        handle,
        addr,
        atomic.width.bytes(),
        Access::ATOMIC,
    )?;
    // SAFETY: checked just now: aligned to its width, inside a live registration of
    // ours with atomic access.
    Ok(unsafe { atomic.apply(addr as usize as *mut u8, operand, compare) })
}

/// A put chunk: `len` bytes of the caller's memory at `data`, to `at` at the target.
pub fn put_chunk(req: u64, at: u64, handle: &[u8], data: usize, len: usize) -> Item {
    let head = Encoder::new(Kind::Put, HANDLE_SIZE as u8, 0, Kind::Put.ext() + len)
        .u64(req)
        .u64(at)
        .handle(handle);
    Item::Put {
        head: Head::new(head.as_bytes()),
        data,
        len,
    }
}

/// A get chunk's request: `len` bytes at `at`, the chunk at `offset` of the get.
pub fn get_request(req: u64, offset: u64, at: u64, len: usize, handle: &[u8]) -> Item {
    let head = Encoder::new(Kind::GetReq, HANDLE_SIZE as u8, 0, Kind::GetReq.ext())
        .u64(req)
        .u64(offset)
        .u64(at)
        .u64(len as u64)
        .handle(handle);
    Item::Bytes(head.as_bytes().to_vec())
}

/// An atomic's request (`code`: its [`AtomicRequest::code`](rbtl_btl::AtomicRequest::code)).
pub fn atomic_request(
    req: u64,
    at: u64,
    code: u8,
    operand: u64,
    compare: u64,
    handle: &[u8],
) -> Item {
    let msg = Encoder::new(
        Kind::AtomicReq,
        HANDLE_SIZE as u8,
        code,
        Kind::AtomicReq.ext(),
    )
    .u64(req)
    .u64(at)
    .u64(operand)
    .u64(compare)
    .handle(handle);
    Item::Bytes(msg.as_bytes().to_vec())
}

/// The target's answer to a get chunk's request: its data after the check, or the
/// refusal.
pub fn serve_get(
    table: &KeyTableView,
    me: ModuleId,
    req: u64,
    offset: u64,
    addr: u64,
    len: u64,
    handle: &[u8],
) -> Item {
    match check(
        table,
        me,
        handle,
        addr,
        len as usize,
        rbtl_btl::transport_kit::GET_REMOTE,
    ) {
        Ok(h) => Item::GetReply(Box::new(GetReply::new(
            req,
            offset,
            addr as usize,
            len as usize,
            h,
        ))),
        Err(e) => Item::Bytes(
            link::done_frame(req, offset, len, &Err(e))
                .as_bytes()
                .to_vec(),
        ),
    }
}

/// The target's answer to an atomic (applied by [`apply_atomic`] after the check): the
/// previous value or the refusal.
pub fn atomic_answer(req: u64, applied: Result<u64>) -> Item {
    let (old, status) = match applied {
        Ok(old) => (old, Ok(())),
        Err(e) => (0, Err(e)),
    };
    let resp = Encoder::new(Kind::AtomicResp, 0, 0, Kind::AtomicResp.ext())
        .u64(req)
        .u64(old)
        .status(&status);
    Item::Bytes(resp.as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rbtl_btl::PeerFailure;

    #[test]
    fn transfers_go_whole_on_one_link_and_shared_over_several() {
        let m = 4 << 20;
        assert_eq!(chunk_len(1 << 20, m, 1), 1 << 20, "one link: whole");
        assert_eq!(
            chunk_len(16 << 20, m, 1),
            m,
            "never above the largest chunk"
        );
        assert_eq!(chunk_len(1 << 20, m, 2), 512 << 10, "a share per link");
        assert_eq!(chunk_len(3 << 20, m, 4), 768 << 10);
        assert_eq!(
            chunk_len(100 << 10, m, 4),
            50 << 10,
            "no more shares than 64 KiB allow"
        );
        assert_eq!(chunk_len(1000, m, 3), 1000, "small: whole");
        assert_eq!(chunk_len(0, m, 3), 1);
        assert_eq!(chunk_len(10_000, 1000, 1), 1000);
        for (len, links) in [(1 << 20, 3), (5 << 20, 2), (12345, 7)] {
            let c = chunk_len(len, m, links);
            assert!(chunks(len, c).count() >= links.min(len.div_ceil(STRIPE_MIN)));
            assert_eq!(chunks(len, c).map(|(_, l)| l).sum::<usize>(), len);
        }
    }

    #[test]
    fn transfers_cut_into_chunks() {
        assert_eq!(chunks(0, 4).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(chunks(4, 4).collect::<Vec<_>>(), vec![(0, 4)]);
        assert_eq!(
            chunks(9, 4).collect::<Vec<_>>(),
            vec![(0, 4), (4, 4), (8, 1)]
        );
    }

    #[test]
    fn an_operation_completes_after_its_last_chunk_with_the_first_refusal() {
        let mut ops = Ops::default();
        let ep = Endpoint(1);
        let req = ops.start(
            ep,
            0x1000,
            12,
            Pending::Get { local: 0x1000 },
            3,
            Box::new(|_, _| {}),
        );
        assert_eq!(ops.get_target(req, ep, 8, 4), Some(0x1008));
        assert_eq!(ops.get_target(req, ep, 9, 4), None, "past the end");
        assert_eq!(
            ops.get_target(req, Endpoint(2), 0, 4),
            None,
            "another peer's"
        );
        assert!(ops.chunk_done(req, Ok(())).is_none());
        assert!(ops.chunk_done(req, Err(Error::Misaligned(3))).is_none());
        let (_, c) = ops.chunk_done(req, Ok(())).expect("the last chunk");
        assert!(matches!(c.status, Err(Error::Misaligned(3))));
        assert!(!ops.pending_on(None));
    }

    #[test]
    fn failing_a_peer_ends_only_its_operations() {
        let mut ops = Ops::default();
        ops.start(Endpoint(1), 0, 8, Pending::Put, 1, Box::new(|_, _| {}));
        ops.start(Endpoint(2), 0, 8, Pending::Put, 1, Box::new(|_, _| {}));
        let failed = ops.fail(Endpoint(1), || Error::PeerFailed {
            rank: 1,
            why: PeerFailure::Ended("gone".into()),
        });
        assert_eq!(failed.len(), 1);
        assert!(ops.pending_on(Some(Endpoint(2))));
        assert!(!ops.pending_on(Some(Endpoint(1))));
    }

    #[test]
    fn the_peers_waited_for_are_those_with_operations_in_flight() {
        let mut ops = Ops::default();
        let a = ops.start(Endpoint(3), 0, 8, Pending::Put, 2, Box::new(|_, _| {}));
        ops.start(Endpoint(0), 0, 8, Pending::Put, 1, Box::new(|_, _| {}));
        ops.start(Endpoint(3), 0, 8, Pending::Put, 1, Box::new(|_, _| {}));
        assert_eq!(ops.waiting(None).collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(ops.waiting(Some(Endpoint(3))).collect::<Vec<_>>(), vec![3]);
        assert_eq!(ops.waiting(Some(Endpoint(7))).count(), 0);
        assert!(ops.chunk_done(a, Ok(())).is_none());
        assert!(ops.chunk_done(a, Ok(())).is_some());
        assert!(ops.pending_on(Some(Endpoint(3))), "one more towards 3");
        ops.fail(Endpoint(3), || Error::Misaligned(0));
        assert_eq!(ops.waiting(None).collect::<Vec<_>>(), vec![0]);
        assert!(!ops.pending_on(Some(Endpoint(3))));
        assert!(ops.pending_on(None));
    }
}
