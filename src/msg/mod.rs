//! A small message layer on the BTL: the worked example of embedding it, the way an
//! MPI library's point-to-point layer (Open MPI's `pml/ob1`) does.
//!
//! * [`Comm::init`] takes the job from the PMI environment (or runs alone), opens the
//!   transports chosen by configuration, exchanges their addresses through the modex
//!   and routes each peer through the most exclusive transport that reaches it.
//! * Tagged send/receive, blocking and non-blocking, with any-source and any-tag and
//!   per-peer ordering (the transports deliver in order per endpoint). Messages up to
//!   the transport's eager limit go in one send; larger ones use rendezvous: a request
//!   carrying the sender's registration handle, an RDMA get by the receiver straight
//!   from the sender's buffer (registrations come from the registration cache), and a
//!   finish message. A receive buffer too small gives [`Error::Truncated`].
//! * One-sided windows: [`Window`] registers memory, exchanges handles, and offers put,
//!   get and flush.
//!
//! Non-blocking operations borrow their buffers for a [`Comm::scope`]: the scope waits
//! for everything started in it, so a buffer can never be freed under a transfer.

// `Comm`'s methods are grouped by concern, one file each: `bootstrap` (making it),
// `comm` (its state and progress), `p2p` (sends, receives, waits), `offload` (a
// blocking receive matched by its transport), `collectives`, `scope`; `callbacks`
// holds the receive callbacks it installs in the modules.
mod bootstrap;
mod callbacks;
mod collectives;
mod comm;
mod error;
mod offload;
mod p2p;
mod protocol;
mod requests;
mod scope;
mod state;
mod window;

pub use comm::Comm;
pub use error::{Error, Result};
pub use p2p::{Status, ANY_SOURCE, ANY_TAG, SPIN_BEFORE_YIELD};
pub use scope::Scope;
pub use state::ReqId;
pub use window::Window;
