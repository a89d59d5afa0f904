//! The send-queue room of one node's XRC initiator, shared by the peers of that node
//! (Open MPI: `ib_address_t.max_wqe`, which grows with each endpoint of the address).
//!
//! The transport counts free send-queue entries per peer, so each peer that comes up
//! through the initiator takes a fixed share (its quota) of the queue the initiator was
//! made with; the shares never add up to more than the queue, so no post can overrun
//! it. The initiator is sized, when it is made, for the node's peers known then, at
//! one peer's full depth each, within the device's largest queue; a peer beyond those
//! gets what is left, and none when nothing is. A failed peer's share is not handed
//! out again (its work may still be in flight); a new initiator starts afresh.

/// The room of one initiator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    quota: u32,
    left: u32,
}

impl Room {
    /// The depth to ask of the device for an initiator serving `peers` peers of
    /// `per_peer` entries each, within the device's largest queue `max` (at least 1).
    pub fn depth(per_peer: u32, peers: usize, max: u32) -> u32 {
        let peers = u32::try_from(peers.max(1)).unwrap_or(u32::MAX);
        per_peer.saturating_mul(peers).clamp(1, max.max(1))
    }

    /// The room of an initiator the device made with `depth` entries, for `peers`
    /// peers that want `per_peer` each.
    pub fn new(depth: u32, per_peer: u32, peers: usize) -> Room {
        let peers = u32::try_from(peers.max(1)).unwrap_or(u32::MAX);
        Room {
            quota: per_peer.min(depth / peers).max(1),
            left: depth,
        }
    }

    /// A peer's share, taken from what is left; `None` when nothing is.
    pub fn take(&mut self) -> Option<u32> {
        let q = self.quota.min(self.left);
        if q == 0 {
            return None;
        }
        self.left -= q;
        Some(q)
    }

    /// What is left.
    pub fn left(&self) -> u32 {
        self.left
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_known_peer_gets_its_full_depth_when_the_device_allows() {
        assert_eq!(Room::depth(100, 4, 32768), 400);
        let mut r = Room::new(400, 100, 4);
        assert_eq!([r.take(), r.take(), r.take(), r.take()], [Some(100); 4]);
        assert_eq!(r.take(), None, "a fifth peer finds nothing left");
    }

    #[test]
    fn a_small_device_queue_is_divided() {
        assert_eq!(Room::depth(100, 8, 500), 500);
        let mut r = Room::new(500, 100, 8);
        let shares: Vec<_> = std::iter::from_fn(|| r.take()).collect();
        assert_eq!(shares, vec![62, 62, 62, 62, 62, 62, 62, 62, 4]);
        // More peers than entries: one each while they last.
        let mut r = Room::new(3, 100, 10);
        assert_eq!(std::iter::from_fn(|| r.take()).count(), 3);
        assert_eq!(Room::depth(0, 0, 0), 1);
    }

    proptest! {
        /// Whatever the device grants, the shares handed out never exceed the queue,
        /// and the known peers each get one while it lasts.
        #[test]
        fn shares_never_exceed_the_queue(
            per_peer in 1u32..200,
            peers in 0usize..300,
            max in 1u32..40_000,
            grant_extra in 0u32..64,
            takers in 0usize..400,
        ) {
            let depth = Room::depth(per_peer, peers, max);
            prop_assert!(depth >= 1 && depth <= max);
            let granted = depth + grant_extra;
            let mut r = Room::new(granted, per_peer, peers);
            let shares: Vec<u32> = (0..takers).filter_map(|_| r.take()).collect();
            prop_assert!(shares.iter().map(|&s| u64::from(s)).sum::<u64>() <= u64::from(granted));
            prop_assert!(shares.iter().all(|&s| s >= 1 && s <= per_peer));
            let known = peers.max(1).min(takers);
            if (granted as usize) >= peers.max(1) {
                prop_assert!(shares.len() >= known, "{} of {} known peers served", shares.len(), known);
            }
            prop_assert_eq!(r.left(), granted - shares.iter().sum::<u32>());
        }
    }
}
