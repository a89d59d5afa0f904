//! Point-to-point: MPI's sends and receives over the message layer's, with the
//! communicator's context, its ranks translated to the job's, and datatypes that
//! are not contiguous packed on the way.

#[macro_use]
mod binding;
pub mod api;
pub mod bsend;
pub mod get_status;
pub mod grequest;
pub mod isendrecv;
pub mod partitioned;
pub mod persistent;
pub mod probe;
pub mod status;
pub mod wait;
pub mod wait_some;

use crate::comm::{Communicator, Group};
use crate::datatype::{pack, Datatype, Shape};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::request::{P2p, Request, Staging, Unpack};
use crate::state::Mpi;
use rbtl::msg::SendMode;
use std::sync::Arc;

/// An MPI send's mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Complete once the buffer may be reused (`MPI_Send`, and `MPI_Rsend`: a ready
    /// send may go as a standard one, its receive is posted already).
    Standard,
    /// Complete once a receive has matched it (`MPI_Ssend`).
    Synchronous,
    /// Copied into the attached buffer at once and sent from the copy (`MPI_Bsend`).
    Buffered,
}

/// The largest tag (`MPI_TAG_UB`): the message layer takes any non-negative `i32`.
pub const TAG_UB: c_int = i32::MAX;

/// A count argument.
#[inline(always)]
pub fn check_count(count: c_int) -> Result<usize> {
    usize::try_from(count)
        .map_err(|_| Error::new(MPI_ERR_COUNT, format!("count {count} is negative")))
}

/// A send's tag.
#[inline(always)]
pub fn check_send_tag(tag: c_int) -> Result<i32> {
    if tag < 0 {
        return Err(Error::new(
            MPI_ERR_TAG,
            format!("tag {tag} is negative: a send's tag is 0 to MPI_TAG_UB ({TAG_UB})"),
        ));
    }
    Ok(tag)
}

/// A receive's tag: `None` for `MPI_ANY_TAG`.
#[inline(always)]
pub fn check_recv_tag(tag: c_int) -> Result<Option<i32>> {
    match tag {
        MPI_ANY_TAG => Ok(None),
        t if t >= 0 => Ok(Some(t)),
        t => Err(Error::new(
            MPI_ERR_TAG,
            format!("tag {t} is neither MPI_ANY_TAG nor 0 to MPI_TAG_UB ({TAG_UB})"),
        )),
    }
}

/// Where a message goes or comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// `MPI_PROC_NULL`: nothing moves.
    Null,
    /// `MPI_ANY_SOURCE` (receives only).
    Any,
    /// A process, by job rank.
    Job(u32),
}

/// The peer `rank` names on `comm` (the remote group's rank on an
/// intercommunicator); `any`: whether `MPI_ANY_SOURCE` is allowed.
#[inline(always)]
pub fn peer(comm: &Communicator, rank: c_int, any: bool) -> Result<Peer> {
    match rank {
        MPI_PROC_NULL => Ok(Peer::Null),
        MPI_ANY_SOURCE if any => Ok(Peer::Any),
        r => match u32::try_from(r).ok().and_then(|r| comm.peers().job_rank(r)) {
            Some(j) => Ok(Peer::Job(j)),
            None => Err(Error::new(
                MPI_ERR_RANK,
                format!(
                    "rank {r} is not in the communicator \"{}\" of {} processes{}",
                    comm.name,
                    comm.peers().size(),
                    if any {
                        " (nor MPI_ANY_SOURCE or MPI_PROC_NULL)"
                    } else {
                        " (nor MPI_PROC_NULL)"
                    }
                ),
            )),
        },
    }
}

/// A buffer of `count` elements of `ty` at `buf`: null only where nothing is read or
/// written, or with a derived type (whose displacements may be absolute addresses,
/// `MPI_BOTTOM`).
#[inline(always)]
pub fn check_buffer(buf: *const c_void, count: usize, ty: &Datatype) -> Result<()> {
    if buf.is_null() && count > 0 && ty.size > 0 && ty.predefined {
        return Err(Error::new(
            MPI_ERR_BUFFER,
            format!("the buffer is null for {count} elements of {}", ty.name),
        ));
    }
    Ok(())
}

/// Store the status of a call that completes (or probes) one operation at `out`,
/// if given: every field but `MPI_ERROR`, which only the calls that return several
/// statuses may set (MPI 3.2.5).
///
/// # Safety
///
/// `out` is null or valid for writes of a status.
pub unsafe fn put_one(out: *mut Status, s: Status) {
    if out.is_null() {
        return;
    }
    // SAFETY: the caller's contract; each field is written alone, `error` left as
    // the caller had it.
    unsafe {
        std::ptr::addr_of_mut!((*out).source).write(s.source);
        std::ptr::addr_of_mut!((*out).tag).write(s.tag);
        std::ptr::addr_of_mut!((*out).internal).write(s.internal);
    }
}

/// Store an empty status at `out` (if not null), its `MPI_ERROR` field too
/// (`MPI_SUCCESS`, MPI 4.1 §3.7.3): the status of a null request, or of a call on
/// requests none of which is active.
///
/// # Safety
///
/// `out` is null or valid for writes of a status.
pub unsafe fn put_empty(out: *mut Status) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(Status::empty()) };
    }
}

/// Store whether a status was `found` at `flag` and, when it was, the status at
/// `status` (as [`put_one`]).
///
/// # Safety
///
/// `flag` is writable; `status` is null or valid for writes of a status.
pub unsafe fn put_found(flag: *mut c_int, status: *mut Status, found: Option<Status>) {
    // SAFETY: the caller's contract.
    unsafe {
        flag.write(c_int::from(found.is_some()));
        if let Some(s) = found {
            put_one(status, s);
        }
    }
}

/// The message-layer request of a send, and what it keeps alive.
pub struct Started {
    pub id: rbtl::msg::ReqId,
    pub staged: Option<Vec<u8>>,
}

impl Mpi {
    /// Whether a blocking call may wait inside the message layer's own blocking
    /// calls (its fastest way): the message layer's progress is all the library
    /// needs meanwhile (no nonblocking collective is in flight, freed or not: their
    /// schedules advance only by [`Mpi::progress`]), and no other thread's calls
    /// are to be let in (below `MPI_THREAD_MULTIPLE`).
    #[inline(always)]
    pub fn waits_in_layer(&self) -> bool {
        self.thread_level != MPI_THREAD_MULTIPLE
            && self.active.is_empty()
            && !self
                .detached
                .iter()
                .any(|(r, _)| matches!(r, Request::Coll(_) | Request::Dup(_)))
    }

    /// Drive the transports once, and the collectives in flight: how much happened.
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        let mut n = self.msg.progress();
        if !self.active.is_empty() {
            n += crate::coll::progress_active(self);
        }
        if !self.detached.is_empty() {
            n += self.reap_detached();
        }
        n
    }

    /// Drive the requests nobody waits for; drop those that completed (releasing
    /// their room in the attached buffer): how many did.
    #[cold]
    fn reap_detached(&mut self) -> usize {
        let mut detached = std::mem::take(&mut self.detached);
        let before = detached.len();
        detached.retain_mut(|(r, room)| {
            let done = match r {
                Request::P2p(p) => self.msg.test(p.id).is_some(),
                // SAFETY: a collective's caller keeps its buffers until it completes,
                // freed request or not.
                Request::Coll(s) => unsafe {
                    s.advance(&mut self.msg);
                    s.outcome().is_some()
                },
                Request::Dup(a) => {
                    a.advance(self);
                    a.is_done()
                }
                _ => true,
            };
            if done {
                self.bsend.release(*room);
            }
            !done
        });
        let n = before - detached.len();
        detached.append(&mut self.detached);
        self.detached = detached;
        n
    }

    /// Start sending `count` elements of `ty` at `buf` to job rank `dst` in context
    /// `ctx`.
    ///
    /// # Safety
    ///
    /// The buffer holds `count` elements of `ty` and stays unchanged until the send
    /// completes.
    pub unsafe fn start_send(
        &mut self,
        (buf, count): (*const c_void, usize),
        shape: &Shape,
        dst: u32,
        tag: i32,
        ctx: u32,
        mode: SendMode,
    ) -> Result<Started> {
        let len = shape.bytes(count)?;
        let ty = match shape {
            Shape::Contiguous { lb, .. } => {
                let at = buf.cast::<u8>().wrapping_offset(*lb);
                // SAFETY: the caller's contract.
                let id = unsafe { self.msg.isend_in(ctx, at, len, dst, tag, mode) }?;
                return Ok(Started { id, staged: None });
            }
            Shape::Typed(ty) => ty,
        };
        let mut staged = vec![0u8; len];
        // SAFETY: the caller's contract: the elements are readable.
        unsafe { pack::pack(ty, buf.cast(), count, &mut staged) };
        // SAFETY: `staged` moves into the request, which keeps it until completion (a
        // Vec's heap buffer does not move with it).
        let id = unsafe { self.msg.isend_in(ctx, staged.as_ptr(), len, dst, tag, mode) }?;
        Ok(Started {
            id,
            staged: Some(staged),
        })
    }

    /// Start receiving `count` elements of `ty` at `buf` from `src` (a job rank, or
    /// any) in context `ctx`.
    ///
    /// # Safety
    ///
    /// The buffer holds `count` elements of `ty`, and nobody else reads or writes it,
    /// until the receive completes.
    pub unsafe fn start_recv(
        &mut self,
        buf: *mut c_void,
        count: usize,
        shape: Shape,
        src: Option<u32>,
        tag: Option<i32>,
        ctx: u32,
    ) -> Result<(rbtl::msg::ReqId, Option<Box<Staging>>)> {
        let len = shape.bytes(count)?;
        let ty = match shape {
            Shape::Contiguous { lb, .. } => {
                let at = buf.cast::<u8>().wrapping_offset(lb);
                // SAFETY: the caller's contract.
                let id = unsafe { self.msg.irecv_in(ctx, at, len, src, tag) }?;
                return Ok((id, None));
            }
            Shape::Typed(ty) => ty,
        };
        let mut staging = vec![0u8; len];
        // SAFETY: the staging buffer moves into the request, which keeps it until the
        // receive completes (its heap buffer does not move).
        let id = unsafe { self.msg.irecv_in(ctx, staging.as_mut_ptr(), len, src, tag) }?;
        let u = Unpack {
            staging,
            base: buf.cast(),
            count,
            ty: *ty,
        };
        Ok((id, Some(Box::new(Staging::Unpack(u)))))
    }

    /// What a send to (or a receive from) `rank` of `comm` needs, checked: the
    /// communicator's context, the peer (`any`: `MPI_ANY_SOURCE` allowed), the group
    /// the request translates ranks through (`None`: the world's), and the shape of
    /// `count` elements of `ty` at `buf`.
    #[inline(always)]
    fn reach(
        &self,
        (buf, count, ty): (*const c_void, usize, Handle),
        rank: c_int,
        any: bool,
        comm: Handle,
    ) -> Result<(u32, Peer, Option<Arc<Group>>, Shape)> {
        let c = self.comm(comm)?;
        let (ctx, to) = (c.ctx, peer(c, rank, any)?);
        let peers = c
            .remote
            .clone()
            .or_else(|| (comm != MPI_COMM_WORLD).then(|| c.group.clone()));
        let t = match self.dtype(ty) {
            // Nothing moves to or from MPI_PROC_NULL, nor in a message of no
            // elements: the type is not looked at (as MPICH does).
            Err(_) if ty == MPI_DATATYPE_NULL && (matches!(to, Peer::Null) || count == 0) => {
                self.dtype(MPI_BYTE)?
            }
            t => t?,
        };
        check_buffer(buf, count, t)?;
        Ok((ctx, to, peers, t.shape()))
    }

    /// The request of a send on communicator `comm` (started; `MPI_PROC_NULL` done).
    ///
    /// # Safety
    ///
    /// As [`Mpi::start_send`].
    #[inline(always)]
    pub unsafe fn isend(
        &mut self,
        (buf, count, ty): (*const c_void, c_int, Handle),
        dest: c_int,
        tag: c_int,
        comm: Handle,
        mode: Mode,
    ) -> Result<Request> {
        let mode = match mode {
            // SAFETY: the caller's contract.
            Mode::Buffered => return unsafe { self.bsend((buf, count, ty), dest, tag, comm) },
            Mode::Standard => SendMode::Standard,
            Mode::Synchronous => SendMode::Synchronous,
        };
        let count = check_count(count)?;
        let tag = check_send_tag(tag)?;
        let (ctx, to, peers, shape) = self.reach((buf, count, ty), dest, false, comm)?;
        let Peer::Job(dst) = to else {
            return Ok(Request::Done(Status::proc_null()));
        };
        if let (SendMode::Standard, Shape::Contiguous { lb, .. }) = (mode, &shape) {
            // One eager message the transport takes now ends the send as it starts
            // (as a blocking send's): its request is done, with an empty status, no
            // message-layer request nor anything of the send's kept (measured:
            // docs/performance.md, "small nonblocking sends").
            let at = buf.cast::<u8>().wrapping_offset(*lb);
            // SAFETY: the caller's contract: the elements are readable.
            let data = unsafe { rbtl::btl::slice_at(at, shape.bytes(count)?) };
            if self.msg.try_isend_in(ctx, data, dst, tag)? {
                return Ok(Request::Done(Status::empty()));
            }
        }
        // SAFETY: the caller's contract.
        let s = unsafe { self.start_send((buf, count), &shape, dst, tag, ctx, mode) }?;
        Ok(Request::P2p(P2p {
            id: s.id,
            comm,
            peers,
            staging: s.staged.map(|v| Box::new(Staging::Send(v))),
            unit: 1,
        }))
    }

    /// The request of a receive on communicator `comm`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::start_recv`].
    #[inline(always)]
    pub unsafe fn irecv(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        ty: Handle,
        source: c_int,
        tag: c_int,
        comm: Handle,
    ) -> Result<Request> {
        let count = check_count(count)?;
        let tag = check_recv_tag(tag)?;
        let (ctx, from, peers, shape) = self.reach((buf, count, ty), source, true, comm)?;
        let src = match from {
            Peer::Null => return Ok(Request::Done(Status::proc_null())),
            Peer::Any => None,
            Peer::Job(j) => Some(j),
        };
        let unit = shape.unit();
        // SAFETY: the caller's contract.
        let (id, staging) = unsafe { self.start_recv(buf, count, shape, src, tag, ctx) }?;
        Ok(Request::P2p(P2p {
            id,
            comm,
            peers,
            staging,
            unit,
        }))
    }
}
