//! Put, get and atomics of a `tcp` module, both sides: at the origin, the checks it
//! can make, the requests (put and get chunks striped over the peer's links) and the
//! answers that complete them; at the target, each request applied after the checks
//! against its own registrations ([`rdma`] has the bookkeeping and the
//! frames).

pub(crate) mod rdma;

use crate::net::Net;
use crate::sink::Sink;
use crate::wire::Frame;
use rbtl_btl::transport_kit::keytable::{KeyTableView, HANDLE_SIZE};
use rbtl_btl::transport_kit::registrations::{NoPin, Reg};
use rbtl_btl::transport_kit::Answers;
use rbtl_btl::transport_kit::Done;
use rbtl_btl::{
    AtomicRequest, Endpoint, Error, ModuleId, RdmaCallback, RemoteAtomic, Result, Transfer,
};
use rbtl_rcache::Access;
use rdma::{Ops, Pending};
use std::collections::VecDeque;

/// What a one-sided frame came to.
pub enum Handled {
    /// Taken.
    Taken,
    /// Its data streams in next.
    Stream(Sink),
    /// The peer broke the protocol.
    Violation(&'static str),
}

/// The origin's operations in flight, and how requests are served.
pub struct OneSided {
    id: ModuleId,
    chunk: usize,
    ops: Ops,
}

impl OneSided {
    /// For module `id`, put and get chunks of `chunk` bytes.
    pub fn new(id: ModuleId, chunk: usize) -> OneSided {
        OneSided {
            id,
            chunk,
            ops: Ops::default(),
        }
    }

    /// Start put (`put`) or get `t` with peer `p` (checked live), whose module is
    /// `module`.
    pub fn transfer(
        &mut self,
        net: &mut Net,
        (p, module): (usize, u64),
        (t, put): (&Transfer<'_>, bool),
        callback: RdmaCallback,
    ) -> Result<()> {
        let (local_needs, remote_needs) = Transfer::needs(put);
        let (local, size, remote) = (t.local.addr, t.len, t.remote.addr);
        t.local.check::<Reg<NoPin>>(self.id, size, local_needs)?;
        let remote_handle =
            rdma::precheck(module, t.remote.registered()?, remote, size, remote_needs)?;
        let chunk = rdma::chunk_len(size, self.chunk, net.peers[p].links.len());
        let n = rdma::chunks(size, chunk).count();
        let what = if put {
            Pending::Put
        } else {
            Pending::Get { local }
        };
        let req = self.ops.start(t.endpoint, local, size, what, n, callback);
        let links: Vec<usize> = net.peers[p].stripe(n).collect();
        let h = remote_handle.as_bytes();
        for ((off, len), k) in rdma::chunks(size, chunk).zip(links) {
            let at = remote + off as u64;
            let item = if put {
                rdma::put_chunk(req, at, h, local + off, len)
            } else {
                rdma::get_request(req, off as u64, at, len, h)
            };
            net.push(p, k, item);
        }
        Ok(())
    }

    /// Start atomic `a` with peer `p` (checked live), whose module is `module`.
    pub fn atomic(
        &mut self,
        net: &mut Net,
        (p, module): (usize, u64),
        a: &RemoteAtomic<'_>,
        callback: RdmaCallback,
    ) -> Result<()> {
        a.check_word()?;
        let (width, remote) = (a.width, a.remote.addr);
        let size = width.bytes();
        if let Some(r) = a.result {
            r.check::<Reg<NoPin>>(self.id, size, Access::LOCAL_WRITE)?;
        }
        let remote_handle =
            rdma::precheck(module, a.remote.registered()?, remote, size, Access::ATOMIC)?;
        let local = a.result.map(|r| r.addr);
        let what = Pending::Atomic {
            result: local,
            width,
        };
        let req = self
            .ops
            .start(a.endpoint, a.result_addr(), size, what, 1, callback);
        let (operand, compare) = a.operands();
        let h = remote_handle.as_bytes();
        let code = a.request().code();
        let msg = rdma::atomic_request(req, remote, code, operand, compare, h);
        net.push(p, 0, msg);
        Ok(())
    }

    /// A one-sided frame from peer `p` on link `k`: a request served (its answer
    /// queued on the same link), or an answer matched to its operation (a completed
    /// operation's callback queued in `done`). `table` is this module's registrations.
    pub fn on_frame(
        &mut self,
        net: &mut Net,
        table: &KeyTableView,
        (p, k): (usize, usize),
        frame: Frame<'_>,
        done: &mut VecDeque<Done>,
    ) -> Handled {
        let ep = crate::peer::endpoint(p);
        match frame {
            Frame::Put {
                req,
                addr,
                handle,
                data_len,
            } => {
                let Ok(h) = <[u8; HANDLE_SIZE]>::try_from(handle) else {
                    return Handled::Violation("malformed memory handle");
                };
                let status = rdma::check(
                    table,
                    self.id,
                    &h,
                    addr,
                    data_len,
                    rbtl_btl::transport_kit::PUT_REMOTE,
                );
                Handled::Stream(Sink::Put {
                    req,
                    at: addr as usize,
                    left: data_len,
                    status: status.map(drop),
                    handle: h,
                })
            }
            Frame::GetReq {
                req,
                offset,
                addr,
                len,
                handle,
            } => {
                let item = rdma::serve_get(table, self.id, req, offset, addr, len, handle);
                net.push(p, k, item);
                Handled::Taken
            }
            Frame::AtomicReq {
                req,
                addr,
                op,
                width,
                operand,
                compare,
                handle,
            } => {
                let atomic = AtomicRequest { op, width };
                let applied =
                    rdma::apply_atomic(table, self.id, handle, addr, atomic, operand, compare);
                net.push(p, k, rdma::atomic_answer(req, applied));
                Handled::Taken
            }
            Frame::GetData {
                req,
                offset,
                data_len,
            } => match self.ops.get_target(req, ep, offset, data_len) {
                Some(at) => {
                    self.ops.answers.heard(p);
                    Handled::Stream(Sink::Get { at, left: data_len })
                }
                None => Handled::Violation("data of no get"),
            },
            Frame::PutAck { req, status } => match self.ops.pending(req, ep) {
                Some(Pending::Put) => self.chunk_done(p, req, status, done),
                _ => Handled::Violation("an acknowledgement of no put"),
            },
            Frame::GetDone { req, status, .. } => match self.ops.pending(req, ep) {
                Some(Pending::Get { .. }) => self.chunk_done(p, req, status, done),
                _ => Handled::Violation("the end of no get"),
            },
            Frame::AtomicResp { req, old, status } => match self.ops.pending(req, ep) {
                Some(Pending::Atomic { result, width }) => {
                    if let (Ok(()), Some(at)) = (&status, result) {
                        // SAFETY: `width` bytes checked against a live local registration
                        // with local-write access when the atomic started, or unregistered
                        // with its creator's promise (`Local::unregistered`).
                        unsafe { width.store(at, old) };
                    }
                    self.chunk_done(p, req, status, done)
                }
                _ => Handled::Violation("the answer of no atomic"),
            },
            Frame::Am { .. } | Frame::Hello(_) | Frame::HelloAck | Frame::HelloNack => {
                Handled::Violation("not a one-sided frame")
            }
        }
    }

    /// An answer from peer `p` ends a chunk of `req`.
    fn chunk_done(
        &mut self,
        p: usize,
        req: u64,
        status: Result<()>,
        done: &mut VecDeque<Done>,
    ) -> Handled {
        self.ops.answers.heard(p);
        if let Some((cb, completion)) = self.ops.chunk_done(req, status) {
            done.push_back(Done::Rdma(cb, completion));
        }
        Handled::Taken
    }

    /// Fail every operation towards `ep` with `error`, their callbacks queued in
    /// `done`.
    pub fn fail(&mut self, ep: Endpoint, error: impl Fn() -> Error, done: &mut VecDeque<Done>) {
        for (cb, completion) in self.ops.fail(ep, error) {
            done.push_back(Done::Rdma(cb, completion));
        }
    }

    /// Whether an operation towards `ep` (or any) is in flight.
    #[inline]
    pub fn pending_on(&self, ep: Option<Endpoint>) -> bool {
        self.ops.pending_on(ep)
    }

    /// Peer `p` showed it is reading or answering (data of a get streaming in, or a
    /// link to it that had stopped taking bytes took some again): counted as an answer,
    /// so that a chunk that streams for longer than the flush timeout is not taken for
    /// silence.
    #[inline]
    pub fn heard(&mut self, p: usize) {
        self.ops.answers.heard(p);
    }

    /// The peers (endpoint indices) that operations in flight go to, among `ep` (or
    /// all), and the answers each has sent so far.
    pub fn waiting(&self, ep: Option<Endpoint>) -> (Vec<usize>, &Answers) {
        (self.ops.waiting(ep).collect(), &self.ops.answers)
    }
}
