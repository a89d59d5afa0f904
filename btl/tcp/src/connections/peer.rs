//! A peer as a `tcp` module knows it: what it published, its links (each a
//! [`LinkSlot`]: the connection once up, our own attempt meanwhile, the frames queued
//! for it), and whether it failed.
//!
//! Active messages all go on link 0, so they arrive in the order they were sent. Put
//! and get chunks are striped over every link: `btl_tcp_links` per pair of interfaces
//! (see [`pairing::pairs`](crate::pairing::pairs)).

use crate::published::{Listener, Published};
use crate::slot::LinkSlot;
use rbtl_btl::Endpoint;
use rbtl_btl::PeerFailure;
use std::net::IpAddr;

/// A connection's index in the module's table.
pub type ConnId = usize;

/// A peer.
pub struct Peer {
    /// Its rank.
    pub rank: u32,
    /// Its module id (its handles carry it).
    pub module: u64,
    /// Per link: our local address and the peer's listener it connects to.
    routes: Vec<(IpAddr, Listener)>,
    /// The links.
    pub links: Vec<LinkSlot>,
    /// Why it failed, once it has.
    pub failed: Option<PeerFailure>,
    /// Removed by `del_procs`.
    pub removed: bool,
    /// A link closed: the others are being read before the peer fails.
    pub closing: bool,
    /// Next link of a striped transfer.
    next: usize,
}

impl Peer {
    /// A peer that published `remote`, reached over `pairs` (indices into `ours` and
    /// the peer's listeners, in that order) with `per_pair` links each.
    pub fn new(
        rank: u32,
        remote: &Published,
        ours: &[IpAddr],
        pairs: &[(usize, usize)],
        per_pair: usize,
    ) -> Peer {
        let mut routes = Vec::with_capacity(pairs.len() * per_pair);
        for _ in 0..per_pair {
            for &(mine, theirs) in pairs {
                routes.push((ours[mine], remote.listeners[theirs]));
            }
        }
        Peer {
            rank,
            module: remote.module,
            links: routes.iter().map(|_| LinkSlot::default()).collect(),
            routes,
            failed: None,
            removed: false,
            closing: false,
            next: 0,
        }
    }

    /// Where link `k` connects from and to.
    pub fn route(&self, k: usize) -> (IpAddr, Listener) {
        self.routes[k]
    }

    /// Whether the peer takes no more operations.
    #[inline]
    pub fn is_gone(&self) -> bool {
        self.failed.is_some() || self.removed
    }

    /// The links of a transfer of `n` chunks, starting after the previous transfer's.
    pub fn stripe(&mut self, n: usize) -> impl Iterator<Item = usize> {
        let links = self.links.len();
        let start = self.next;
        self.next = (start + n) % links;
        (0..n).map(move |i| (start + i) % links)
    }
}

/// A peer's endpoint on the module.
pub fn endpoint(index: usize) -> Endpoint {
    Endpoint(index as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};

    #[test]
    fn links_cycle_over_pairs_and_transfers_stripe_over_links() {
        let listener = |last: u8| Listener {
            addr: SocketAddr::new(Ipv4Addr::new(10, 0, last, 1).into(), 9),
            prefix: 24,
            iface: last,
            secret: [0; 16],
        };
        let remote = Published {
            module: 7,
            listeners: vec![listener(1), listener(2)],
        };
        let ours = [
            Ipv4Addr::new(10, 0, 1, 2).into(),
            Ipv4Addr::new(10, 0, 2, 2).into(),
        ];
        let mut p = Peer::new(3, &remote, &ours, &[(0, 0), (1, 1)], 2);
        assert_eq!(p.links.len(), 4);
        assert_eq!(p.route(0).0, ours[0]);
        assert_eq!(p.route(1).1, remote.listeners[1]);
        assert_eq!(p.route(2).0, ours[0]);
        assert_eq!(p.stripe(3).collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(p.stripe(2).collect::<Vec<_>>(), vec![3, 0]);
    }
}
