//! Requests: what `MPI_Request` handles name, and how each kind completes.

use crate::coll::persistent::CollInit;
use crate::coll::Schedule;
use crate::comm::Group;
use crate::datatype::{pack, Datatype};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::p2p::persistent::Persistent;
use rbtl::msg;
use std::sync::Arc;

/// A request.
pub enum Request {
    /// A send or receive of the message layer.
    P2p(P2p),
    /// One that completed when it started (a message to `MPI_PROC_NULL`, a buffered
    /// send, a standard send whose one eager message the transport took at once):
    /// its status.
    Done(Status),
    /// A persistent send or receive, active or not.
    Persistent(Box<Persistent>),
    /// A nonblocking collective.
    Coll(Box<Schedule>),
    /// A persistent collective, active or not.
    CollInit(Box<CollInit>),
    /// A send or receive whose outcome was read (by `MPI_Request_get_status`)
    /// before any call completed it: the outcome, for the call that does.
    Finished(Box<Finished>),
    /// `MPI_Buffer_iflush`, `MPI_Comm_iflush_buffer`, `MPI_Session_iflush_buffer`:
    /// done when the buffered sends before number `upto` in `owner`'s buffer have
    /// left.
    Flush {
        owner: crate::p2p::bsend::Owner,
        upto: u64,
    },
    /// A generalized request: an operation the program runs itself.
    Generalized(Box<crate::p2p::grequest::Grequest>),
    /// A request-based one-sided operation (`MPI_Rput`, ...).
    Rma(Box<RmaOp>),
    /// `MPI_Comm_idup`'s agreement on the duplicate's context.
    Dup(Box<crate::comm::idup::Agreement>),
}

/// A request-based one-sided operation: done once every operation toward its
/// target member has completed (its own among them; completion at the target is
/// local completion here). A peer that stops answering ends it as the message
/// layer's waits end (`idle` carries that wait from one look to the next).
pub struct RmaOp {
    pub pending: msg::Pending,
    /// The target's job rank.
    pub job: u32,
    pub idle: msg::IdleWait,
}

impl RmaOp {
    /// Whether it is done, progressing once if not: `Some` of its outcome.
    pub fn look(&mut self, msg: &mut msg::Comm) -> Option<Result<()>> {
        msg.complete_round(&self.pending, Some(self.job), &mut self.idle)
            .map(|done| done.map_err(Error::from))
    }
}

/// The outcome of a send or receive, read before its completion.
pub struct Finished {
    pub status: Status,
    pub error: Option<Error>,
    /// The communicator it ran on.
    pub comm: Handle,
}

/// A send or receive of the message layer.
pub struct P2p {
    pub id: msg::ReqId,
    /// The communicator it was started on (whose error handler its errors go
    /// through in a completion call).
    pub comm: Handle,
    /// The group that names the peer (`None`: job ranks are the communicator's).
    pub peers: Option<Arc<Group>>,
    /// What it keeps for a type that is not contiguous (boxed: a request stays
    /// small, as it moves through every call).
    pub staging: Option<Box<Staging>>,
    /// A receive's basic element in bytes: a message that does not end on one was
    /// sent with another type signature (1: any length, a send's, or a type of
    /// several kinds received straight; a staged one's type is asked).
    pub unit: u32,
}

/// Whether `len` bytes end inside a basic element of `unit` bytes (a mask where
/// `unit` is a power of two, as nearly every one is: no division on the way).
#[inline]
pub fn ends_inside(len: usize, unit: u32) -> bool {
    let unit = unit as usize;
    match unit.is_power_of_two() {
        true => len & (unit - 1) != 0,
        false => len % unit != 0,
    }
}

/// The error of a receive whose message of `len` bytes ends inside a basic element
/// of its datatype (MPICH refuses it alike).
#[cold]
pub fn signature_mismatch(len: usize) -> Error {
    Error::new(
        MPI_ERR_TYPE,
        format!("the message of {len} bytes ends inside a basic element of the receive's datatype: the send's type signature differs"),
    )
}

/// What a send or receive of a type that is not contiguous keeps until it completes.
pub enum Staging {
    /// A receive lands here first.
    Unpack(Unpack),
    /// A send goes from here.
    Send(Vec<u8>),
}

/// A receive through a staging buffer, unpacked into the user's when it completes.
pub struct Unpack {
    pub staging: Vec<u8>,
    pub base: *mut u8,
    pub count: usize,
    pub ty: Datatype,
}

impl P2p {
    /// Whether a message of `len` bytes received by it ends inside a basic element
    /// of its datatype.
    #[inline]
    fn ends_inside_element(&self, len: usize) -> bool {
        match self.staging.as_deref() {
            Some(Staging::Unpack(u)) => !u.ty.ends_on_element(len),
            _ => ends_inside(len, self.unit),
        }
    }

    /// The status of its outcome: the error of a failed operation (a truncated
    /// receive still reports what it got). A receive through a staging buffer is
    /// unpacked (once).
    pub fn finish(&mut self, outcome: rbtl::msg::Result<msg::Status>) -> (Status, Option<Error>) {
        let mut status = Status::empty();
        status.tag = MPI_ANY_TAG;
        let source = |job: u32| match &self.peers {
            None => job as c_int,
            Some(g) => g.rank_of(job).map_or(MPI_UNDEFINED, |r| r as c_int),
        };
        let (s, mut error) = match outcome {
            Ok(s) => (s, None),
            Err(msg::Error::Cancelled) => {
                status.set_cancelled(true);
                return (status, None);
            }
            Err(msg::Error::Truncated {
                sender,
                tag,
                capacity,
                ..
            }) => {
                let e = Error::new(
                    MPI_ERR_TRUNCATE,
                    format!(
                        "the message from rank {} (tag {tag}) is longer than the {capacity}-byte receive buffer",
                        source(sender)
                    ),
                );
                (
                    msg::Status {
                        source: sender,
                        tag,
                        len: capacity,
                    },
                    Some(e),
                )
            }
            Err(e) => {
                let e = Error::from(e);
                status.error = e.class;
                return (status, Some(e));
            }
        };
        status.source = source(s.source);
        status.tag = s.tag;
        status.set_bytes(s.len as u64);
        if error.is_none() && self.ends_inside_element(s.len) {
            error = Some(signature_mismatch(s.len));
        }
        if let Some(Staging::Unpack(u)) = self.staging.take().map(|s| *s) {
            // SAFETY: the receive's caller promised `base` holds `count` elements of
            // `ty` until it completes (now); the staging buffer is ours.
            unsafe {
                pack::unpack(
                    &u.ty,
                    &u.staging[..s.len.min(u.staging.len())],
                    u.base,
                    u.count,
                )
            };
        }
        if let Some(e) = &error {
            status.error = e.class;
        }
        (status, error)
    }
}

/// Where a request stands after a look.
pub enum Outcome {
    /// Still running.
    Pending,
    /// Done, with its status and error; `keep`: a persistent request, which stays;
    /// `comm`: the communicator it ran on, whose error handler its error goes
    /// through (as in MPICH and Open MPI).
    Complete {
        status: Status,
        error: Option<Error>,
        keep: bool,
        comm: Option<Handle>,
    },
}

impl Outcome {
    /// That of an inactive request (persistent) on `comm`, or of a null one.
    pub fn inactive(comm: Option<Handle>) -> Outcome {
        Outcome::Complete {
            status: Status::empty(),
            error: None,
            keep: true,
            comm,
        }
    }
}

/// The communicator request `r` runs on, if known: a completion call raises the
/// request's error through its error handler (as MPICH and Open MPI do).
pub fn comm_of(r: &Request) -> Option<Handle> {
    match r {
        Request::P2p(p) => Some(p.comm),
        Request::Persistent(p) => Some(p.comm()),
        Request::Coll(s) => s.comm(),
        Request::Dup(a) => Some(a.parent),
        Request::CollInit(c) => Some(c.comm),
        Request::Finished(f) => Some(f.comm),
        Request::Flush { owner, .. } => owner.comm(),
        Request::Done(_) | Request::Generalized(_) | Request::Rma(_) => None,
    }
}

/// The message-layer request a waiting call may look at for a silent peer.
pub fn pending_id(r: &Request) -> Option<msg::ReqId> {
    match r {
        Request::P2p(p) => Some(p.id),
        Request::Persistent(p) => p.active.as_ref().map(|a| a.id),
        Request::Coll(s) => s.pending_id(),
        Request::Dup(a) => a.schedule().and_then(Schedule::pending_id),
        // The start under way is a request of its own ([`crate::state::Mpi::pending_of`]).
        Request::CollInit(_) | Request::Done(_) | Request::Finished(_) => None,
        // Its own look ends a wait for a silent peer ([`RmaOp::look`]).
        Request::Generalized(_) | Request::Rma(_) => None,
        // What it waits for is in the library's own requests ([`crate::state::Mpi::pending_of`]).
        Request::Flush { .. } => None,
    }
}

/// The first error of a call's requests, for a call that handles several.
pub fn first_error(errors: impl IntoIterator<Item = Option<Error>>) -> Result<()> {
    match errors.into_iter().flatten().next() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
