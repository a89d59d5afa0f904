//! What is finished and waits for progress to run its callback: callbacks run from
//! progress (or flush), never inside the call that started the work. Shared by the
//! transports of this crate that queue their completions (`sm`, `tcp`).

use crate::{Descriptor, Endpoint, ErrorEvent, RdmaCallback, RdmaCompletion, Result};

pub(crate) enum Done {
    Send {
        callback: crate::SendCallback,
        endpoint: Endpoint,
        descriptor: Descriptor,
        status: Result<()>,
    },
    Rdma(RdmaCallback, RdmaCompletion),
    /// A failure for the error callback (run from progress, never inside a call).
    Error(ErrorEvent),
}
