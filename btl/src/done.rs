//! What is finished and waits for progress to run its callback: callbacks run from
//! progress (or flush), never inside the call that started the work. Shared by the
//! transports that queue their completions (`sm`, `tcp`); every transport ends a send
//! with [`complete_send`].

use crate::{
    DesFlags, Descriptor, Endpoint, ErrorEvent, Module, RdmaCallback, RdmaCompletion, Result,
    SendCallback, SendCompletion,
};

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
