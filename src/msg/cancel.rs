//! Sends taken back before a receive matched them (`MPI_Cancel` of a send).
//!
//! An eager send is complete as soon as it starts: there is nothing left to cancel,
//! and the message is received as any other. A rendezvous or synchronous send waits
//! for its receiver; the standard says a wait on it returns once it is cancelled.
//! So, as MPICH's `ch3` does:
//!
//! 1. the sender asks its receiver to drop the message (a
//!    [`CANCEL`](protocol::CANCEL) naming the sender's request), once per request;
//! 2. the receiver drops it if it still waits among the unexpected messages (an RTS,
//!    or a synchronous eager message) and answers whether it did (a
//!    [`CANCELLED`](protocol::CANCELLED));
//! 3. dropped, the sender's request completes with [`Error::Cancelled`]; not dropped
//!    (a receive had matched it), it completes as it would have, by its FIN.
//!
//! The CANCEL follows the message on the same route, so it never arrives first. The
//! receiver answers from its own progress: where the standard makes the wait local,
//! here a receiver that never calls the library leaves it waiting (one that fails
//! ends it with its failure). A send to this process is decided inside the call.

use super::protocol;
use super::state::{lock, Shared, State, Unexpected};
use super::{Comm, Error, ReqId};
use rbtl_btl::{Endpoint, Module};

impl Comm {
    /// Cancel send `req` if it is a rendezvous or synchronous send: its receiver is
    /// asked (once) to drop the message, and the request completes with
    /// [`Error::Cancelled`] if no receive had matched it, or as it would have if one
    /// had. Anything else (an eager send, complete as soon as it started, or a
    /// receive: see [`Comm::cancel`]) is left as it is.
    pub fn cancel_send(&mut self, req: ReqId) {
        let Some(peer) = take_cancellable(&self.state, req) else {
            return;
        };
        // A peer known to have failed: its failure ends the request.
        let Ok((mi, ep)) = self.route(peer) else {
            return;
        };
        if peer == self.rank {
            // A send to this process is decided inside the call, as programs that
            // look at the request right after the cancel expect (mpi4py's tests do):
            // its message, queued in the transport, is delivered first, then dropped
            // if no receive took it. (A transport that delivers it later leaves it to
            // the CANCEL below.)
            self.modules[mi].progress();
            let mut s = lock(&self.state);
            if s.drop_unexpected_send(peer, req) {
                s.complete(req, Err(Error::Cancelled));
                return;
            }
        }
        let m = self.modules[mi].as_mut();
        let body = protocol::cancel(req);
        let mut s = lock(&self.state);
        if let Err(e) = s.send_or_defer(m, mi, ep, protocol::CANCEL, &body, &[]) {
            tracing::warn!(%e, "could not ask for a send to be dropped");
        }
    }
}

/// The peer of send `req` if its receiver may still drop it; it is then marked asked.
fn take_cancellable(state: &Shared, req: ReqId) -> Option<u32> {
    let mut s = lock(state);
    let r = s.req_mut(req)?;
    if !r.cancellable || r.outcome.is_some() {
        return None;
    }
    r.cancellable = false;
    r.peer
}

impl State {
    /// Answer `src`'s CANCEL of its request `sreq` (through `route`): drop the
    /// message if no receive has matched it.
    pub(super) fn answer_cancel(
        &mut self,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        src: u32,
        sreq: u64,
    ) {
        let dropped = self.drop_unexpected_send(src, sreq);
        let body = protocol::cancelled(sreq, dropped);
        if let Err(e) = self.send_or_defer(m, module, ep, protocol::CANCELLED, &body, &[]) {
            // The sender is gone or unreachable: its request ends with it.
            tracing::warn!(%e, "could not answer a cancel");
        }
    }

    /// Remove the message of `src`'s request `sreq` from the unexpected ones: whether
    /// it was there.
    fn drop_unexpected_send(&mut self, src: u32, sreq: u64) -> bool {
        let found = self.unexpected.iter().position(|u| match u {
            Unexpected::Rts { src: s, rts } => *s == src && rts.sreq == sreq,
            Unexpected::Eager { src: s, ack, .. } => *s == src && *ack == Some(sreq),
        });
        found.and_then(|i| self.unexpected.remove(i)).is_some()
    }

    /// `src` answered the CANCEL of request `sreq`: dropped, the request completes
    /// as cancelled; not dropped, its FIN completes it. An answer from another rank
    /// than the request's peer, or for a request that is not a live send, is ignored.
    pub(super) fn cancel_answered(&mut self, src: u32, sreq: u64, dropped: bool) {
        let ours = self
            .reqs
            .get(sreq)
            .is_some_and(|r| r.peer == Some(src) && r.outcome.is_none());
        if dropped && ours {
            self.complete(sreq, Err(Error::Cancelled));
        }
    }
}
