//! The one error type of the BTL contract.

use crate::{Endpoint, Tag};
use rbtl_rcache::Access;
use std::time::Duration;

/// Everything a BTL call can refuse. Open MPI returns `OPAL_ERR_*` codes; the names
/// below say which one each variant stands for where there is one.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Out of fragments, queue slots or credits: drive `progress()` and try again
    /// (`OPAL_ERR_OUT_OF_RESOURCE`).
    #[error("out of resources ({0}): call progress() and retry")]
    OutOfResource(&'static str),
    /// The size or alignment is beyond what this transport does for this operation
    /// (`OPAL_ERR_NOT_AVAILABLE`); use another path (e.g. send instead of put).
    #[error("not available: {0}")]
    NotAvailable(String),
    /// The transport does not offer this operation at all (`OPAL_ERR_NOT_SUPPORTED`).
    #[error("{0} is not supported by this transport")]
    NotSupported(&'static str),
    /// Registering zero bytes.
    #[error("cannot register zero bytes")]
    ZeroLength,
    /// `base + len` wraps around the address space.
    #[error("range {base:#x} + {len} overflows the address space")]
    Overflow {
        /// Start of the range.
        base: usize,
        /// Its length.
        len: usize,
    },
    /// A registration of no range, or of more than the transport takes in one
    /// (libfabric: `-FI_EINVAL` beyond `mr_iov_limit`).
    #[error("a registration covers 1 to {max} ranges, not {count}: split it into several")]
    TooManyRanges {
        /// Ranges asked for.
        count: usize,
        /// Most ranges one registration covers.
        max: usize,
    },
    /// A requested key that a live registration of this module holds already
    /// (libfabric: `-FI_ENOKEY`).
    #[error(
        "requested key {0:#x} is in use by a live registration of this module: request \
         another key, or deregister the one holding it"
    )]
    KeyInUse(u64),
    /// A requested key the transport will not honour (libfabric: `-FI_EKEYREJECTED`).
    #[error("requested key {key:#x} rejected: {why}")]
    KeyRejected {
        /// The key asked for.
        key: u64,
        /// Why it cannot be had.
        why: &'static str,
    },
    /// Access that the transport cannot grant (libfabric: `-FI_EINVAL`,
    /// `-FI_EOPNOTSUPP`).
    #[error("cannot register for access {requested:?}: {why}")]
    AccessNotSupported {
        /// The access asked for.
        requested: Access,
        /// Why it cannot be had.
        why: &'static str,
    },
    /// The registration cache or the registrar refused.
    #[error("registration failed: {0}")]
    Registration(#[from] rbtl_rcache::Error),
    /// A local handle or descriptor that another module made.
    #[error("the {what} belongs to another module (made by {owner:#x}, used on {this:#x})")]
    ForeignHandle {
        /// What was foreign: "memory handle" or "descriptor".
        what: &'static str,
        /// The module that made it.
        owner: u64,
        /// The module it was given to.
        this: u64,
    },
    /// The local handle was already deregistered.
    #[error("the memory handle was already deregistered")]
    Deregistered,
    /// The local side of a put or get has no registration, and this transport
    /// reaches memory only through one (`REGISTRATION_REQUIRED`).
    #[error("the local buffer is not registered: this transport needs it registered (REGISTRATION_REQUIRED)")]
    Unregistered,
    /// The peer's side of a put or get is named by its address alone, and this
    /// transport reaches a peer's memory only through a registration (no
    /// `UNREGISTERED_REMOTE`), or cannot reach this peer that way.
    #[error(
        "the remote buffer is not registered: this transport cannot reach it by address alone"
    )]
    UnregisteredRemote,
    /// A remote handle that the target does not know (wrong module, or deregistered).
    #[error("the remote handle is not a live registration of the target: {0}")]
    BadRemoteHandle(String),
    /// The bytes do not form a handle of this transport.
    #[error("malformed handle ({0} bytes)")]
    MalformedHandle(usize),
    /// The access falls outside the registration.
    #[error("{side} range {addr:#x}+{len} is outside its registration {base:#x}+{reg_len}")]
    OutOfRange {
        /// "local" or "remote".
        side: &'static str,
        /// Start of the access.
        addr: u64,
        /// Length of the access.
        len: usize,
        /// Start of the registration.
        base: u64,
        /// Length of the registration.
        reg_len: usize,
    },
    /// The registration lacks the access the operation needs.
    #[error("{side} registration has {has:?}; this operation needs {needs:?}")]
    AccessDenied {
        /// "local" or "remote".
        side: &'static str,
        /// What the registration allows.
        has: Access,
        /// What the operation needs.
        needs: Access,
    },
    /// Memory given back that the module did not hand out, or already took back.
    #[error(
        "{addr:#x}+{len} is not shared memory this module handed out (or it was freed already)"
    )]
    UnknownSharedMemory {
        /// Its start.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// An atomic on an address that is not aligned to its word (8 bytes, or 4 for a
    /// 32-bit atomic).
    #[error("atomic target {0:#x} is not aligned to its word (8 bytes; 4 for 32-bit atomics)")]
    Misaligned(u64),
    /// A tag in a reserved range, or with no receive callback.
    #[error("tag {tag}: {why}")]
    BadTag {
        /// The tag.
        tag: Tag,
        /// Why it was refused.
        why: &'static str,
    },
    /// More data or segments than the descriptor or transport can carry.
    #[error("{0}")]
    TooLarge(String),
    /// An endpoint this module did not make, or one already deleted.
    #[error("unknown endpoint {0}")]
    UnknownEndpoint(u32),
    /// The peer behind the endpoint failed (`OPAL_ERR_UNREACH`).
    #[error("peer rank {rank} is unreachable: {why}")]
    PeerFailed {
        /// The peer's rank.
        rank: u32,
        /// Why.
        why: PeerFailure,
    },
    /// `flush` gave up: every peer it still waited for sent no answer to our put, get or
    /// atomic operations for the transport's timeout (a stopped or hung process, or one
    /// that does not call progress; its kernel may still acknowledge what we send). The
    /// operations stay pending: they complete (callbacks with their status) if the peers
    /// answer later, or fail with [`Error::PeerFailed`] once the link breaks or the
    /// caller removes the peers with `del_procs`. UCX ends such an endpoint itself
    /// (`UCX_UD_TIMEOUT`, `UCS_ERR_ENDPOINT_TIMEOUT`); here the caller chooses.
    #[error(
        "flush: no answer from {} for {} ms; their puts, gets and atomics stay pending and \
         complete if they answer: call flush again to wait longer, remove them with \
         del_procs to fail those operations, or raise {param} if they are only slow",
        silent_list(peers),
        silent_for.as_millis()
    )]
    PeerTimeout {
        /// The peers that did not answer.
        peers: Vec<SilentPeer>,
        /// How long each was silent at least (the timeout).
        silent_for: Duration,
        /// The parameter that sets the timeout.
        param: &'static str,
    },
    /// A transport name that no component has.
    #[error("unknown transport `{name}`; valid transports: {}", valid.join(", "))]
    UnknownTransport {
        /// The name given.
        name: String,
        /// Every transport compiled in.
        valid: Vec<String>,
    },
    /// A parameter problem.
    #[error(transparent)]
    Config(#[from] rbtl_config::Error),
    /// A parameter's value is outside what the transport can work with.
    #[error("{name} = {value}: {allowed}")]
    ParamOutOfRange {
        /// The parameter.
        name: String,
        /// Its value.
        value: i64,
        /// What it may be.
        allowed: String,
    },
    /// A memory pool problem.
    #[error(transparent)]
    Mpool(#[from] rbtl_mpool::Error),
    /// The out-of-band exchange failed.
    #[error("modex: {0}")]
    Modex(String),
    /// An operating-system call failed.
    #[error("{call}: {source}")]
    Os {
        /// The call.
        call: &'static str,
        /// The error it returned.
        source: std::io::Error,
    },
}

/// Why a peer failed ([`Error::PeerFailed`]): whose doing it was, and what broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerFailure {
    /// Its process ended: its process handle said so, it no longer exists, or its
    /// connection closed as a process's does when it exits.
    #[error("{0}")]
    Ended(String),
    /// This process removed it (`del_procs`).
    #[error("removed by del_procs")]
    Removed,
    /// It removed this process (`del_procs` on its side): it takes nothing more from it.
    #[error("it removed this process (del_procs): it takes nothing more from it")]
    RemovedUs,
    /// Connecting to it failed, or did not finish in time (the connection method's
    /// words).
    #[error("{0}")]
    Connect(String),
    /// A connection to it broke: a link's or queue pair's error, a send that could not
    /// go (the transport's words).
    #[error("{0}")]
    Broken(String),
    /// It sent what the protocol does not allow.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// It answered nothing for the timeout of the layer above, which gave up on it
    /// (that layer's words).
    #[error("{0}")]
    Unresponsive(String),
}

/// A peer named by [`Error::PeerTimeout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SilentPeer {
    /// Its endpoint on the module.
    pub endpoint: Endpoint,
    /// Its rank.
    pub rank: u32,
}

fn silent_list(peers: &[SilentPeer]) -> String {
    let named: Vec<String> = peers
        .iter()
        .map(|p| format!("rank {} (endpoint {})", p.rank, p.endpoint.0))
        .collect();
    named.join(", ")
}

/// Result alias of the BTL crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
