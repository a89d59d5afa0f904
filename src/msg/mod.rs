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
//!   finish message. Where the transport reads a peer's memory by its address (`sm`
//!   with cross-memory attach), the request names the buffer without a registration,
//!   and a message of `msg_split_from` bytes or more (32 KiB by default) is copied by
//!   both processes, half each: the receiver asks the sender to write the second half
//!   while it reads the first (not offered while the sender has rendezvous sends to
//!   other ranks under way, nor by [`Comm::isend_unsplit_in`], for one of several sends
//!   at once: each receiver then reads alone). A receive buffer too small gives
//!   [`Error::Truncated`].
//! * One-sided windows: [`Window`] registers memory, exchanges handles, and offers put,
//!   get and flush.
//! * Served contexts ([`Comm::serve`]): messages that a layer above answers where they
//!   arrive instead of matching them (the MPI library ships its accumulates so).
//!
//! Non-blocking operations borrow their buffers for a [`Comm::scope`]: the scope waits
//! for everything started in it, so a buffer can never be freed under a transfer.
//!
//! A blocking call polls the transports; after [`SPIN_BEFORE_YIELD`] idle rounds it
//! yields the processor between rounds. Where a node runs more ranks than the
//! processors they may run on between them (its online processors, or fewer where a
//! cpuset or the affinity they started with confines them) it yields at every idle
//! round instead (`msg_yield_when_idle`: `auto`, the default; `always`; `never`), as
//! Open MPI does when oversubscribed: a spinning rank would hold the processor the
//! rank it waits for needs.
//!
//! A `Comm` has no lock: it progresses inside its owner's calls only. A layer above
//! that serializes its calls behind a lock of its own may also drive it from a thread
//! while none of them is inside, every `msg_progress_thread` microseconds (0, the
//! default: never; [`Comm::progress_thread`]): the MPI library does. The same
//! library reads the collective algorithms the user chose
//! (`msg_<collective>_algorithm`, [`Comm::coll_algorithms`]), which every rank
//! compares with rank 0's at start-up: a rank that chose otherwise fails there.
//!
//! # Ranks and processors
//!
//! Where a node's ranks outnumber its processors, how many share each processor sets
//! the time of every collective, and left to the kernel it changes under the job:
//! ranks woken from a wait in the kernel (the process manager's answers during
//! start-up, a full pipe of output) land where the waking thread runs, and the load
//! balancer moves ranks that only yield, every few tens of milliseconds, often to a
//! worse split. So there, by default (`msg_bind_to`: `auto`; `core` binds always,
//! `none` never), each rank binds itself during start-up to processor `i mod n` of the
//! `n` it may run on, `i` being its index among the node's ranks, as a launcher's
//! `--bind-to core` would (Open MPI's and MPICH's leave oversubscribed ranks unbound).
//! A rank its launcher bound to one processor stays there; threads the rank starts
//! afterwards inherit its processor (`none` leaves them free).
//!
//! # Failed and silent peers
//!
//! No blocking call waits forever for a peer that is gone:
//!
//! * **A peer that dies** is noticed by its transport; every operation involving it
//!   fails with [`Error::PeerFailed`], and so does every later call naming it.
//! * **A peer that stops responding.** A blocking call (a receive, a wait, a
//!   rendezvous send, a window's put or get, a barrier, `finalize`) that waits for an
//!   operation needing rank R, and sees no progress at all on any transport for
//!   `msg_peer_timeout` seconds (default 60; 0 waits forever), probes R's process:
//!   every process answers small UDP probes from a thread of its own (over loopback
//!   on its node, else to the IPv4 addresses `tcp` would choose). If R's does not
//!   answer for a further second (it is stopped, dead or out of reach), the call
//!   fails with [`Error::PeerTimeout`] naming R. R is then treated as failed: every
//!   other operation involving it fails with [`Error::PeerFailed`], later calls
//!   naming it fail at once, and its transports drop it (`del_procs`), so that
//!   nothing it might still send lands anywhere. A process that answers is waited
//!   for, however long it computes between messages. Any progress (a message from
//!   any rank) starts the count again, so a peer that stops is noticed once the job
//!   around it goes quiet, which it does when the others come to wait for it.
//! * **A job that waits on itself.** The answer to a probe says whether the process
//!   is waiting in a blocking call of this layer, and for how long. A wait past the
//!   timeout whose probes find every other rank waiting as long, twice 2.5 s apart in
//!   the same run, and none waiting longer (the lowest rank deciding among those as
//!   long), fails with [`Error::Stalled`] naming R, which is treated as failed as
//!   above. One rank deciding is enough: its error ends its wait, and what it does
//!   next moves the others.
//! * **A receive from any source no live rank can satisfy.** A blocking receive from
//!   [`ANY_SOURCE`] cannot be satisfied by its caller (nothing else runs meanwhile),
//!   so once every other rank has failed it fails with [`Error::AllFailed`] naming
//!   them; a non-blocking one does so when waited for. When a single other rank is
//!   alive such a receive needs that one and times out as above. With several alive
//!   it fails with [`Error::AnySourceTimeout`] naming them once none answers probes
//!   or every one waits as well, but treats none as failed: none in particular was
//!   needed.

// `Comm`'s methods are grouped by concern, one file each: `bootstrap` (making it),
// `comm` (its state and progress), `p2p` (sends, receives, waits), `offload` (a
// blocking receive matched by its transport), `liveness` (waits that cannot end
// well), `collectives`, `scope`, `served` (served contexts); `callbacks` holds the
// receive callbacks it installs in the modules.
mod background;
mod bootstrap;
mod bridge;
mod callbacks;
mod cancel;
mod coll_choice;
mod collectives;
mod comm;
mod error;
mod liveness;
mod meeting;
mod named;
mod offload;
mod onesided;
mod p2p;
mod pending;
mod pieces;
mod placement;
mod protocol;
mod requests;
mod responder;
mod scope;
mod served;
mod spawn_turn;
mod split;
mod state;
mod window;

pub use coll_choice::{
    AllgatherAlgorithm, AllreduceAlgorithm, BarrierAlgorithm, BcastAlgorithm, CollAlgorithms,
};
pub use comm::Comm;
pub use error::{Error, Result};
pub use liveness::{register_params, IdleWait, PEER_TIMEOUT_PARAM};
pub use onesided::{Atomic, Exposed, SharedRegion, Target};
pub use p2p::{Matched, SendMode, Status, ANY_SOURCE, ANY_TAG, SPIN_BEFORE_YIELD, WORLD};
pub use pending::Pending;
pub use rbtl_btl::PeerFailure;
pub use scope::Scope;
pub use served::{Request as ServedRequest, Served, Server, SERVED};
pub use state::ReqId;
pub use window::Window;
