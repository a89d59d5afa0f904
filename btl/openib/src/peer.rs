//! One peer of a module: where its connection stands, its queue pair (or, over XRC,
//! its way through its node's initiator) and receive buffers, the credits towards it,
//! and the work waiting for it, in order.

use crate::flow::Credits;
use rbtl_btl::{Descriptor, PeerFailure, RdmaCallback, Tag};
use rbtl_mpool::Frag;
use rbtl_verbs::Qp;
use std::collections::VecDeque;

/// Where a peer's connection stands.
#[derive(Debug)]
pub enum Link {
    /// Nothing asked yet.
    Idle,
    /// The CPC is at work.
    Connecting,
    /// Connected.
    Up,
    /// Failed; everything for it fails with this.
    Failed(PeerFailure),
}

/// Something waiting for the connection, credits or send-queue room, in order.
pub enum Waiting {
    /// A descriptor to send.
    Send(Descriptor, Tag),
    /// A put, get or atomic to post.
    Rdma(Box<RdmaRequest>),
}

/// A one-sided operation ready to post.
pub struct RdmaRequest {
    /// What to post.
    pub op: rbtl_verbs::Op,
    /// Local address, length and key.
    pub local: usize,
    /// Bytes.
    pub size: usize,
    /// Local key.
    pub lkey: u32,
    /// Runs on completion.
    pub callback: RdmaCallback,
}

/// How sends reach a peer connected by the `xrc` method: the initiator of its node,
/// shared with the other peers there, and its own XRC shared receive queue, which
/// every work request to it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XrcPath {
    /// The node's number, the index of its initiator in `XrcResources::initiators`.
    pub node: usize,
    /// The peer's XRC SRQ number.
    pub srqn: u32,
    /// Bytes a send through the initiator may carry inline.
    pub max_inline: u32,
}

/// One peer.
pub struct Peer {
    /// Its rank.
    pub rank: u32,
    /// The node it runs on, as `add_procs` said (empty: unknown).
    pub node: String,
    /// Index of the CPC that connects it.
    pub cpc: usize,
    /// Its connection.
    pub link: Link,
    /// Removed by `del_procs`: nothing more from it is delivered, even what had arrived.
    pub removed: bool,
    /// The queue pair once connected (not over XRC).
    pub qp: Option<Qp>,
    /// Its way through its node's initiator once connected over XRC.
    pub xrc: Option<XrcPath>,
    /// Receive buffers posted for it, by slot.
    pub recv: Vec<Option<Frag>>,
    /// Flow control towards it.
    pub credits: Credits,
    /// Free send-queue entries (over XRC: of its share of the node's initiator).
    pub sq_free: u32,
    /// What waits, in order.
    pub waiting: VecDeque<Waiting>,
    /// Puts, gets and atomics posted and not completed.
    pub rdma_in_flight: u32,
    /// A credit-only message is due.
    pub credit_due: bool,
    /// A credit-only message is in flight (its trailer slot is in use).
    pub credit_in_flight: bool,
    /// Unsignalled requests posted since the last signalled one.
    pub unsignaled: u32,
    /// Receive slots consumed before the queue pair reached this side (the CPC still
    /// holds it), with whether they were reserved ones: reposted once connected.
    pub unposted: Vec<(usize, bool)>,
}
