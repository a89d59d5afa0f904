//! One peer of a module: where its connection stands, its queue pair and receive
//! buffers, the credits towards it, and the work waiting for it, in order.

use crate::flow::Credits;
use rbtl_btl::{Descriptor, RdmaCallback, Tag};
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
    Failed(String),
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

/// One peer.
pub struct Peer {
    /// Its rank.
    pub rank: u32,
    /// Index of the CPC that connects it.
    pub cpc: usize,
    /// Its connection.
    pub link: Link,
    /// The queue pair once connected.
    pub qp: Option<Qp>,
    /// Receive buffers posted for it, by slot.
    pub recv: Vec<Option<Frag>>,
    /// Flow control towards it.
    pub credits: Credits,
    /// Free send-queue entries.
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
