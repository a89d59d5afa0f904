//! What is finished and waits for progress to run its callback: callbacks run from
//! progress (or flush), never inside the call that started the work. Queued by the
//! transports that complete later (`sm`, `tcp`, `openib`), with the one-sided operation
//! ([`RdmaOp`]) that becomes such a completion (`sm`, `tcp`), and run by [`run_done`]
//! (`sm`, `tcp`); every transport ends a send with [`complete_send`].

use crate::{
    DesFlags, Descriptor, Endpoint, ErrorEvent, Module, RdmaCallback, RdmaCompletion, Result,
    SendCallback, SendCompletion,
};
use std::collections::VecDeque;

/// A finished send or one-sided operation, or a failure, queued for `progress`.
pub enum Done {
    /// A send is over: its callback, with the descriptor and how it ended.
    Send {
        /// The descriptor's callback.
        callback: SendCallback,
        /// Where it went.
        endpoint: Endpoint,
        /// The descriptor, back to the caller through the callback.
        descriptor: Descriptor,
        /// How the send ended.
        status: Result<()>,
    },
    /// A put, get or atomic is over: its callback and what it reports.
    Rdma(RdmaCallback, RdmaCompletion),
    /// A failure for the error callback (run from progress, never inside a call).
    Error(ErrorEvent),
}

/// Run the `callback` of a send to `endpoint` that ended with `status`, on module `m`:
/// the descriptor goes back to the caller in the completion, or, where the module owns
/// it ([`DesFlags::OWNERSHIP`]), to `recycle` once the callback has run.
#[inline]
pub fn complete_send<M: Module>(
    m: &mut M,
    callback: SendCallback,
    endpoint: Endpoint,
    descriptor: Descriptor,
    status: Result<()>,
    recycle: impl FnOnce(&mut M, Descriptor),
) {
    let (kept, back) = if descriptor.flags.contains(DesFlags::OWNERSHIP) {
        (Some(descriptor), None)
    } else {
        (None, Some(descriptor))
    };
    let completion = SendCompletion {
        endpoint,
        descriptor: back,
        status,
    };
    callback(m, completion);
    if let Some(descriptor) = kept {
        recycle(m, descriptor);
    }
}

/// Run the callbacks of what `m` had done when called (what they queue waits for the
/// next call): `queue` is `m`'s queue, `recycle` takes back a descriptor that `m`
/// keeps ([`complete_send`]), `error` hands a failure to `m`'s error callback. How
/// many ran.
#[inline]
pub fn run_done<M: Module>(
    m: &mut M,
    queue: impl Fn(&mut M) -> &mut VecDeque<Done>,
    recycle: impl Fn(&mut M, Descriptor),
    error: impl Fn(&mut M, &ErrorEvent),
) -> usize {
    let n = queue(m).len();
    for _ in 0..n {
        match queue(m).pop_front() {
            Some(Done::Send {
                callback,
                endpoint,
                descriptor,
                status,
            }) => complete_send(m, callback, endpoint, descriptor, status, &recycle),
            Some(Done::Rdma(cb, done)) => cb(m, done),
            Some(Done::Error(event)) => error(m, &event),
            None => break,
        }
    }
    n
}

/// A put, get or atomic under way, for a transport that completes it later (`sm`'s
/// copy protocol, `tcp`): what its completion reports, what it waits for (`what`, the
/// transport's own), and its callback.
pub struct RdmaOp<P> {
    /// The endpoint of the operation.
    pub endpoint: Endpoint,
    /// The local address given to it.
    pub local: usize,
    /// Bytes it transfers.
    pub size: usize,
    /// What it waits for.
    pub what: P,
    /// Its callback.
    pub callback: RdmaCallback,
}

impl<P> RdmaOp<P> {
    /// It is over with `status`: its callback and completion, for progress to run.
    pub fn completion(self, status: Result<()>) -> (RdmaCallback, RdmaCompletion) {
        let completion = RdmaCompletion {
            endpoint: self.endpoint,
            local_address: self.local,
            size: self.size,
            status,
        };
        (self.callback, completion)
    }
}
