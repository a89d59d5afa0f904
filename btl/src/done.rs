//! What is finished and waits for progress to run its callback: callbacks run from
//! progress (or flush), never inside the call that started the work. Shared by the
//! transports that queue their completions (`sm`, `tcp`).

use crate::{Descriptor, Endpoint, ErrorEvent, RdmaCallback, RdmaCompletion, Result};

/// A finished send or one-sided operation, or a failure, queued for `progress`.
pub enum Done {
    /// A send is over: its callback, with the descriptor and how it ended.
    Send {
        /// The descriptor's callback.
        callback: crate::SendCallback,
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
