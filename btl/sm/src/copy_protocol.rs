// Over 600 lines on purpose: one protocol (requests, replies, their checks and
// what waits for room), which both ends must read the same way.
//! The `sm` transport's own protocol: put and get copied through the rings when
//! cross-memory attach is not used, and atomics applied by the target, as requests and
//! replies that the target checks against its registrations ([`wire`] holds their
//! format). [`CopyProtocol`] owns it: our operations awaiting a reply, what it queues
//! behind a peer's sends, and the handling of what arrives.
//!
//! * put: [`CopyProtocol::start_put`] queues the transfer and [`CopyProtocol::push`]
//!   copies it into the peer's ring in chunks as room allows (`PUT_DATA`); the target
//!   checks and applies each chunk and answers the last with one `PUT_ACK`.
//! * get: `GET_REQ` asks the target, which checks and queues its bytes, then pushes
//!   them back in chunks (`GET_DATA`), each checked again; the last completes the get.
//! * atomics: `ATOMIC_REQ`, applied by the target and answered by `ATOMIC_RESP` with
//!   the previous value.
//!
//! (A little over 600 lines: both sides of the three operations, which share the
//! queues and the checks, stay in one place.)

use super::path::RingSpeed;
use super::peer::{Outbound, Peer};
use super::ring::Producer;
use super::wire::{self, Message};
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::transport_kit::Answers;
use rbtl_btl::transport_kit::{Done, RdmaOp};
use rbtl_btl::transport_kit::{GET_REMOTE, PUT_REMOTE};
use rbtl_btl::{
    AtomicRequest, AtomicWidth, Endpoint, Error, ModuleId, RdmaCallback, RemoteAtomic,
    RemoteHandle, Result, Transfer,
};
use rbtl_rcache::Access;
use std::collections::{HashMap, VecDeque};

/// Bytes per chunk when a put or get of `len` bytes copies through the rings: about a
/// quarter of it, so that copying in at one end and out at the other overlap, but at
/// least 64 KiB (or `most`, if smaller) and at most `most`. Fewer, larger chunks cost
/// fewer round trips (measured: see docs/performance.md), while transfers of 128-512
/// KiB keep the pipelining of small chunks.
pub(super) fn chunk_for(len: usize, most: usize) -> usize {
    const LEAST: usize = 64 << 10;
    (len / 4)
        .next_multiple_of(4096)
        .clamp(LEAST.min(most), most)
}

/// What [`CopyProtocol::push`] got into a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pushed {
    /// All of the item.
    All,
    /// The next chunk of a transfer, not its last.
    Chunk,
    /// Nothing: the ring has no room.
    Nothing,
}

/// What the protocol queues until a peer's ring has room: requests, replies and puts
/// behind the peer's sends (`Peer::outbound`), the gets it serves after them
/// (`Peer::serving`).
pub(super) enum Outgoing {
    /// A request or a reply.
    Message { tag: u8, bytes: Vec<u8> },
    /// Our local bytes going to the peer's memory (a put by copy).
    Put {
        req: u64,
        local: usize,
        remote: u64,
        len: usize,
        sent: usize,
        handle: RemoteHandle,
    },
    /// Our own registered bytes going back to a peer that asked (a get by copy); the
    /// registration is checked again before each chunk, as it may go meanwhile.
    Get {
        req: u64,
        addr: usize,
        len: usize,
        sent: usize,
        handle: RemoteHandle,
    },
}

enum Pending {
    Put,
    Get {
        local: usize,
        size: usize,
        received: usize,
    },
    Atomic {
        result: Option<usize>,
        width: AtomicWidth,
    },
}

/// One of our operations, awaiting the target's reply.
type Op = RdmaOp<Pending>;

/// Put, get and atomics as messages through the rings (see the module's
/// documentation): the initiator's and the target's side.
pub(super) struct CopyProtocol {
    /// Our module: requests that reach us are checked against its registrations.
    id: ModuleId,
    /// Our key table (the module's registrations keep it mapped).
    own: KeyTableView,
    /// Largest chunk of a transfer.
    most: usize,
    /// Our operations awaiting their reply, by request number.
    ops: HashMap<u64, Op>,
    next_req: u64,
    /// Per endpoint index: replies that came to our operations (what a flush watches).
    answers: Answers,
}

/// Send a message of the protocol to `peer`, after anything already waiting.
fn send(peer: &mut Peer, tag: u8, bytes: Vec<u8>) {
    if !peer.outbound.is_empty() || !peer.producer.push(tag, &[&bytes], &[]) {
        peer.outbound
            .push_back(Outbound::Protocol(Outgoing::Message { tag, bytes }));
    }
}

impl CopyProtocol {
    /// The protocol of module `id`, whose key table is `own`, with chunks of at most
    /// `most` bytes.
    pub fn new(id: ModuleId, own: KeyTableView, most: usize) -> CopyProtocol {
        CopyProtocol {
            id,
            own,
            most,
            ops: HashMap::new(),
            next_req: 1,
            answers: Answers::default(),
        }
    }

    /// A reply to request `req` came: its peer answers.
    fn heard(&mut self, req: u64) {
        if let Some(op) = self.ops.get(&req) {
            self.answers.heard(op.endpoint.0 as usize);
        }
    }

    fn next_req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    fn start_op(
        &mut self,
        ep: Endpoint,
        local: usize,
        size: usize,
        what: Pending,
        callback: RdmaCallback,
    ) -> u64 {
        let req = self.next_req();
        self.ops.insert(
            req,
            Op {
                endpoint: ep,
                local,
                size,
                what,
                callback,
            },
        );
        req
    }

    fn complete_op(&mut self, req: u64, status: Result<()>, done: &mut VecDeque<Done>) {
        if let Some(op) = self.ops.remove(&req) {
            let (callback, completion) = op.completion(status);
            done.push_back(Done::Rdma(callback, completion));
        }
    }

    /// Start put `op` at `peer`, its ranges checked by the caller (its remote handle
    /// the one-range handle of the range it lies in): it is queued behind what waits
    /// for the peer's ring, and the caller then drains that queue.
    pub fn start_put(
        &mut self,
        peer: &mut Peer,
        (op, handle): (&Transfer<'_>, &RemoteHandle),
        callback: RdmaCallback,
    ) {
        let (local, size) = (op.local.addr, op.len);
        let req = self.start_op(op.endpoint, local, size, Pending::Put, callback);
        peer.outbound.push_back(Outbound::Protocol(Outgoing::Put {
            req,
            local,
            remote: op.remote.addr,
            len: size,
            sent: 0,
            handle: *handle,
        }));
    }

    /// Start get `op` at `peer`, checked as a put: a request to the peer (a get of
    /// nothing completes at once).
    pub fn start_get(
        &mut self,
        peer: &mut Peer,
        (op, handle): (&Transfer<'_>, &RemoteHandle),
        callback: RdmaCallback,
        done: &mut VecDeque<Done>,
    ) {
        let (local, size) = (op.local.addr, op.len);
        let pending = Pending::Get {
            local,
            size,
            received: 0,
        };
        let req = self.start_op(op.endpoint, local, size, pending, callback);
        if size == 0 {
            self.complete_op(req, Ok(()), done);
        } else {
            let msg = wire::Writer::default()
                .u64(req)
                .u64(op.remote.addr)
                .u64(size as u64)
                .handle(handle)
                .0;
            send(peer, wire::GET_REQ, msg);
        }
    }

    /// Start atomic `op` at `peer`, checked as a put: the target applies it and
    /// answers with the previous value, which goes to `op.result` if any.
    pub fn start_atomic(
        &mut self,
        peer: &mut Peer,
        (op, handle): (&RemoteAtomic<'_>, &RemoteHandle),
        callback: RdmaCallback,
    ) {
        let result = op.result.map(|r| r.addr);
        let atomic = op.request();
        let (operand, compare) = op.operands();
        let width = atomic.width;
        let req = self.start_op(
            op.endpoint,
            result.unwrap_or(0),
            width.bytes(),
            Pending::Atomic { result, width },
            callback,
        );
        let msg = wire::Writer::default()
            .u64(req)
            .u64(op.remote.addr)
            .u64(operand)
            .u64(compare)
            .u64(u64::from(atomic.code()))
            .handle(handle)
            .0;
        send(peer, wire::ATOMIC_REQ, msg);
    }

    /// Copy `item`, or the next chunk of a transfer, into `producer`, counting large
    /// copies in `speed`.
    pub fn push(
        &self,
        item: &mut Outgoing,
        producer: &mut Producer,
        speed: &mut RingSpeed,
    ) -> Pushed {
        let (view, id, most) = (self.own, self.id, self.most);
        let done = |ok: bool, sent: usize, len: usize| match (ok, sent == len) {
            (false, _) => Pushed::Nothing,
            (true, true) => Pushed::All,
            (true, false) => Pushed::Chunk,
        };
        match item {
            Outgoing::Message { tag, bytes } => {
                if producer.push(*tag, &[bytes], &[]) {
                    Pushed::All
                } else {
                    Pushed::Nothing
                }
            }
            Outgoing::Put {
                req,
                local,
                remote,
                len,
                sent,
                handle,
            } => {
                // A put of no bytes still sends its one (last) chunk.
                let l = chunk_for(*len, most).min(*len - *sent);
                let last = u64::from(*sent + l == *len);
                let hdr = wire::Writer::default()
                    .u64(*req)
                    .u64(*remote + *sent as u64)
                    .u64(last)
                    .handle(handle)
                    .0;
                // SAFETY: the local range was checked against its registration when
                // the put was started (or is unregistered); the caller keeps it alive
                // until the completion (register_mem's or `Local::unregistered`'s
                // contract).
                let data = unsafe { std::slice::from_raw_parts((*local + *sent) as *const u8, l) };
                let ok = speed.timed(l, || producer.push(wire::PUT_DATA, &[&hdr, data], &[]));
                if ok {
                    *sent += l;
                }
                done(ok, *sent, *len)
            }
            Outgoing::Get {
                req,
                addr,
                len,
                sent,
                handle,
            } => {
                if *sent == *len {
                    return Pushed::All;
                }
                let l = chunk_for(*len, most).min(*len - *sent);
                let at = (*addr + *sent) as u64;
                if let Err(e) = view.check(id, handle, at, l, GET_REMOTE) {
                    // Deregistered meanwhile: refuse the rest.
                    let code = u64::from(wire::status_code(&e));
                    let hdr = wire::Writer::default()
                        .u64(*req)
                        .u64(*sent as u64)
                        .u64(code)
                        .u64(0)
                        .0;
                    let ok = producer.push(wire::GET_DATA, &[&hdr], &[]);
                    if ok {
                        *sent = *len;
                    }
                    return done(ok, *sent, *len);
                }
                // The rate of our copies into this ring rides along: the receiver
                // chooses the path of its next gets by it.
                let hdr = wire::Writer::default()
                    .u64(*req)
                    .u64(*sent as u64)
                    .u64(0)
                    .u64(speed.to_wire())
                    .0;
                // SAFETY: the range was checked just now against our own live
                // registration with remote-read access.
                let data = unsafe { std::slice::from_raw_parts((*addr + *sent) as *const u8, l) };
                let ok = speed.timed(l, || producer.push(wire::GET_DATA, &[&hdr, data], &[]));
                if ok {
                    *sent += l;
                }
                done(ok, *sent, *len)
            }
        }
    }

    /// A message of the protocol from `peer`: a request to check and apply or answer,
    /// or a reply that completes one of our operations. An error for a malformed one.
    pub fn on_message(
        &mut self,
        peer: &mut Peer,
        tag: u8,
        segs: &[&[u8]],
        done: &mut VecDeque<Done>,
    ) -> Result<()> {
        let (own, id) = (self.own, self.id);
        let check = |h: &[u8], addr: u64, len: usize, needs: Access| -> Result<()> {
            let handle = RemoteHandle::from_bytes(h)?;
            own.check(id, &handle, addr, len, needs)
        };
        match wire::decode(tag, segs)? {
            Message::PutData {
                req,
                addr,
                last,
                handle,
                data,
            } => {
                let status = match peer.put_refused.get(&req) {
                    // Refused already: apply no later chunk either.
                    Some(_) => Err(Error::BadRemoteHandle("refused earlier".into())),
                    None => check(handle, addr, data.len(), PUT_REMOTE),
                };
                if status.is_ok() {
                    // SAFETY: the range lies inside our live registration with
                    // remote-write access (checked just now).
                    unsafe {
                        rbtl_btl::copy_bytes(data.as_ptr(), addr as usize as *mut u8, data.len())
                    };
                }
                // One acknowledgement, after the last chunk: the initiator keeps reading
                // its buffer until then. The first refusal is remembered for it.
                let refused = &mut peer.put_refused;
                if let Err(e) = &status {
                    refused.entry(req).or_insert(wire::status_code(e));
                }
                if last {
                    let code = refused.remove(&req).unwrap_or(0);
                    send(
                        peer,
                        wire::PUT_ACK,
                        wire::Writer::default().u64(req).u32(code).0,
                    );
                }
            }
            Message::PutAck { req, status } => {
                self.heard(req);
                self.complete_op(req, wire::status_error(status), done)
            }
            Message::GetReq {
                req,
                addr,
                len,
                handle,
            } => {
                // (A length past the address space is refused by the check.)
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                match check(handle, addr, len, GET_REMOTE) {
                    Ok(()) if len > 0 => {
                        let handle = RemoteHandle::from_bytes(handle).expect("checked above");
                        // Served by `progress` once it has read what waits in the
                        // ring: gets asked for together are then served together,
                        // a chunk of each in turn.
                        peer.serving.push_back(Outgoing::Get {
                            req,
                            addr: addr as usize,
                            len,
                            sent: 0,
                            handle,
                        });
                        return Ok(());
                    }
                    Ok(()) => {}
                    Err(e) => {
                        let hdr = wire::Writer::default()
                            .u64(req)
                            .u64(0)
                            .u64(u64::from(wire::status_code(&e)))
                            .0;
                        send(peer, wire::GET_DATA, hdr);
                    }
                }
            }
            Message::GetData {
                req,
                offset,
                status,
                rate,
                data,
            } => {
                if let Some(speed) = RingSpeed::from_wire(rate) {
                    peer.in_speed = speed;
                }
                self.heard(req);
                let Some(Op {
                    what:
                        Pending::Get {
                            local,
                            size,
                            received,
                        },
                    ..
                }) = self.ops.get_mut(&req)
                else {
                    return Ok(());
                };
                // The chunk lies inside the get's buffer (checked without overflow: the
                // offset is the peer's word).
                let end = usize::try_from(offset)
                    .ok()
                    .and_then(|off| off.checked_add(data.len()))
                    .filter(|&end| end <= *size);
                let outcome = match (status, end) {
                    (0, Some(end)) => {
                        let off = end - data.len();
                        // SAFETY: `[off, end)` lies inside the local range, which was
                        // checked against its registration with local-write access when
                        // the get started (or unregistered); it stays alive until the
                        // completion.
                        let copy = || unsafe {
                            rbtl_btl::copy_bytes(
                                data.as_ptr(),
                                (*local + off) as *mut u8,
                                data.len(),
                            );
                            true
                        };
                        // Timed: the choice of the path of our next gets weighs it.
                        peer.out_of_ring_speed.timed(data.len(), copy);
                        *received += data.len();
                        (*received >= *size).then_some(Ok(()))
                    }
                    (0, None) => Some(wire::status_error(5)),
                    (code, _) => Some(wire::status_error(u32::try_from(code).unwrap_or(5))),
                };
                if let Some(status) = outcome {
                    self.complete_op(req, status, done);
                }
            }
            Message::AtomicReq {
                req,
                addr,
                operand,
                compare,
                op,
                handle,
            } => {
                let request = u8::try_from(op).ok().and_then(AtomicRequest::of_code);
                let status = match request {
                    None => Err(Error::NotSupported("atomic operation code")),
                    Some(r) => r
                        .width
                        .check_aligned(addr)
                        .and_then(|()| check(handle, addr, r.width.bytes(), Access::ATOMIC))
                        .map(|()| r),
                };
                let (old, code) = match status {
                    Ok(r) => {
                        // SAFETY: checked: aligned to its width, inside our live
                        // registration with atomic access.
                        (
                            unsafe { r.apply(addr as usize as *mut u8, operand, compare) },
                            0,
                        )
                    }
                    Err(e) => (0, wire::status_code(&e)),
                };
                send(
                    peer,
                    wire::ATOMIC_RESP,
                    wire::Writer::default().u64(req).u64(old).u32(code).0,
                );
            }
            Message::AtomicResp { req, old, status } => {
                self.heard(req);
                if let Some(Op {
                    what:
                        Pending::Atomic {
                            result: Some(at),
                            width,
                        },
                    ..
                }) = self.ops.get(&req)
                {
                    if status == 0 {
                        // SAFETY: `width` bytes checked against a live local registration
                        // with local-write access when the atomic started, or unregistered
                        // with its creator's promise (`Local::unregistered`).
                        unsafe { width.store(*at, old) };
                    }
                }
                self.complete_op(req, wire::status_error(status), done);
            }
        }
        Ok(())
    }

    /// Fail every operation of ours towards `ep` with `err()`.
    pub fn fail_all_to(
        &mut self,
        ep: Endpoint,
        err: impl Fn() -> Error,
        done: &mut VecDeque<Done>,
    ) {
        let reqs: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| op.endpoint == ep)
            .map(|(r, _)| *r)
            .collect();
        for req in reqs {
            self.complete_op(req, Err(err()), done);
        }
    }

    /// Whether operations of ours towards `ep` (or towards anyone) await their reply.
    pub fn pending_on(&self, ep: Option<Endpoint>) -> bool {
        self.ops
            .values()
            .any(|op| ep.is_none_or(|e| e == op.endpoint))
    }

    /// The peers (endpoint indices, each once) that operations of ours awaiting their
    /// reply go to, among `ep` (or all), and the replies each has sent so far.
    pub fn waiting(&self, ep: Option<Endpoint>) -> (Vec<usize>, &Answers) {
        let mut peers: Vec<usize> = self
            .ops
            .values()
            .filter(|op| ep.is_none_or(|e| e == op.endpoint))
            .map(|op| op.endpoint.0 as usize)
            .collect();
        peers.sort_unstable();
        peers.dedup();
        (peers, &self.answers)
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_for;

    #[test]
    fn a_transfer_goes_in_about_four_chunks_within_bounds() {
        const K: usize = 1024;
        assert_eq!(chunk_for(100 * K, 512 * K), 64 * K, "at least 64 KiB");
        assert_eq!(chunk_for(1024 * K, 512 * K), 256 * K, "a quarter");
        assert_eq!(chunk_for(1000 * K, 512 * K), 252 * K, "whole pages");
        assert_eq!(chunk_for(4096 * K, 512 * K), 512 * K, "at most the largest");
        assert_eq!(
            chunk_for(1024 * K, 32 * K),
            32 * K,
            "a small ring's largest"
        );
    }
}
