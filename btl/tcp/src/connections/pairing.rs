//! How two ranks pair their interfaces into links, from what each published.
//!
//! As in Open MPI's `btl/tcp`, a link joins an interface of each rank, and each
//! interface is in at most one pair: where both ranks have several interfaces, they
//! get one link (times `btl_tcp_links`) per pair, and stripe put and get data over
//! them. A pair of interfaces connects over IPv4 where both of them have a usable
//! IPv4 address, over IPv6 otherwise (Open MPI's rule too: IPv4 first); both ends of
//! a link are always of one family, and the pair is on one network or routed as the
//! addresses it connects over are (by the shorter prefix). Loopback addresses pair
//! only with loopback addresses, and only on one node.
//!
//! # Which pairs
//!
//! Of all the ways to pair the two ranks' interfaces, the one with the most pairs on
//! one network, and among those the one with the most pairs in all; among equally
//! good ones, the first in the lower rank's order of interfaces (the order they first
//! appear in its published list), each taking the higher rank's earliest interface it
//! can, and none only last ([`assignment`]). That is one weight per pair, more for a
//! pair on one network than all the routed pairs there can be, and the assignment of
//! the greatest total weight, exact for any number of interfaces. So where the lower
//! rank's interface A reaches the higher rank's C and D and its B reaches only C, the
//! pairs are A-D and B-C (taking, for each interface in turn, the first free one would
//! pair A-C and leave B out); and a routed pair never takes the place of a pair on one
//! network. A pair on one network wins even over two routed ones: where A reaches C
//! on one network and D routed, and B only C, routed, A-C is the only pair.
//!
//! Open MPI finds its pairs as a bipartite assignment too (a minimum-cost flow), but
//! puts the number of pairs first and then the quality of each (one network over
//! routed, public over private IPv4 addresses, bandwidth); this module publishes no
//! bandwidth, and puts pairs on one network first: a routed pair beside them would
//! stripe data through a router. Both ranks compute the list from the same two
//! published lists, with the lower rank's first, so they agree on it ([`pairs_with`]).

use crate::assignment;
use crate::family;
use crate::published::Listener;

/// How a pair of addresses reaches across.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// Both in one network (by the shorter prefix).
    SameNetwork,
    /// Through a router.
    Routed,
}

/// Whether listeners `a` and `b` can be the two ends of a link, and how.
fn reach(a: &Listener, b: &Listener, same_node: bool) -> Option<Reach> {
    let (x, y) = (a.addr.ip(), b.addr.ip());
    if x.is_ipv4() != y.is_ipv4() {
        return None;
    }
    if x.is_loopback() || y.is_loopback() {
        return (x.is_loopback() && y.is_loopback() && same_node).then_some(Reach::SameNetwork);
    }
    Some(if family::same_network(x, y, a.prefix.min(b.prefix)) {
        Reach::SameNetwork
    } else {
        Reach::Routed
    })
}

/// The listeners of `side`, grouped by interface, in the order the interfaces first
/// appear.
fn by_interface(side: &[Listener]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u8, Vec<usize>)> = Vec::new();
    for (i, l) in side.iter().enumerate() {
        match groups.iter_mut().find(|(iface, _)| *iface == l.iface) {
            Some((_, members)) => members.push(i),
            None => groups.push((l.iface, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// The addresses a link between interfaces `a` (of `lower`) and `b` (of `higher`)
/// joins, and how they reach: IPv4 if both have a usable IPv4 pair, else IPv6; within
/// the family, the first same-network pair, else the first routed one.
fn link_between(
    (lower, a): (&[Listener], &[usize]),
    (higher, b): (&[Listener], &[usize]),
    same_node: bool,
) -> Option<(usize, usize, Reach)> {
    [true, false].into_iter().find_map(|v4| {
        let mut routed = None;
        for &i in a.iter().filter(|&&i| lower[i].addr.is_ipv4() == v4) {
            for &j in b.iter().filter(|&&j| higher[j].addr.is_ipv4() == v4) {
                match reach(&lower[i], &higher[j], same_node) {
                    Some(Reach::SameNetwork) => return Some((i, j, Reach::SameNetwork)),
                    Some(Reach::Routed) if routed.is_none() => routed = Some((i, j, Reach::Routed)),
                    _ => {}
                }
            }
        }
        routed
    })
}

/// Pair the lower rank's listeners with the higher rank's: at most one pair per
/// interface of each side, the most pairs on one network, then the most pairs in all,
/// the first such assignment in the lower rank's order (see the module doc).
/// Both ranks compute the same list of (lower index, higher index), sorted: link `k`
/// of the pair of ranks runs between the addresses of pair `k % len`.
pub fn pairs(lower: &[Listener], higher: &[Listener], same_node: bool) -> Vec<(usize, usize)> {
    let (ours, theirs) = (by_interface(lower), by_interface(higher));
    let links: Vec<Vec<Option<(usize, usize, Reach)>>> = ours
        .iter()
        .map(|a| {
            theirs
                .iter()
                .map(|b| link_between((lower, a), (higher, b), same_node))
                .collect()
        })
        .collect();
    // More than the pairs there can be: one same-network pair outweighs all routed ones.
    let same = u32::try_from(ours.len().min(theirs.len()) + 1).unwrap_or(u32::MAX);
    let weights: Vec<Vec<u32>> = links
        .iter()
        .map(|row| {
            row.iter()
                .map(|link| match link {
                    Some((_, _, Reach::SameNetwork)) => same,
                    Some((_, _, Reach::Routed)) => 1,
                    None => 0,
                })
                .collect()
        })
        .collect();
    let mut out: Vec<(usize, usize)> = assignment::best(&weights)
        .into_iter()
        .enumerate()
        .filter_map(|(g, h)| h.and_then(|h| links[g][h]).map(|(i, j, _)| (i, j)))
        .collect();
    out.sort_unstable();
    out
}

/// [`pairs`] as rank `rank` (with listeners `ours`) sees them with rank `peer` (with
/// listeners `theirs`): (our index, their index), in the order of the list both ranks
/// compute, so that link `k` is the same pair of addresses on both sides.
pub fn pairs_with(
    rank: u32,
    ours: &[Listener],
    peer: u32,
    theirs: &[Listener],
    same_node: bool,
) -> Vec<(usize, usize)> {
    if rank < peer {
        pairs(ours, theirs, same_node)
    } else {
        pairs(theirs, ours, same_node)
            .into_iter()
            .map(|(lower, higher)| (higher, lower))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::SECRET;
    use proptest::prelude::*;
    use std::net::SocketAddr;

    /// A listener on `ip`/`prefix`, on interface `iface`.
    fn l(ip: &str, prefix: u8, iface: u8) -> Listener {
        Listener {
            addr: SocketAddr::new(ip.parse().unwrap(), 1000),
            prefix,
            iface,
            secret: [0; SECRET],
        }
    }

    #[test]
    fn interfaces_pair_by_network_then_by_order() {
        let a = [l("10.1.0.1", 24, 0), l("10.2.0.1", 24, 1)];
        let b = [l("10.2.0.2", 24, 0), l("10.1.0.2", 24, 1)];
        assert_eq!(pairs(&a, &b, false), vec![(0, 1), (1, 0)], "same networks");
        let c = [l("192.0.2.9", 24, 0)];
        assert_eq!(pairs(&a, &c, false), vec![(0, 0)], "routed, once");
        let lo = [l("127.0.0.1", 8, 0)];
        assert_eq!(pairs(&lo, &lo, true), vec![(0, 0)]);
        assert_eq!(pairs(&lo, &lo, false), vec![], "loopback across nodes");
        assert_eq!(pairs(&lo, &a, true), vec![], "loopback to another address");
    }

    #[test]
    fn a_pair_of_interfaces_uses_ipv4_where_both_have_it_else_ipv6() {
        // Loopback of both families on one interface: one link, over IPv4.
        let lo = [l("127.0.0.1", 8, 0), l("::1", 128, 0)];
        assert_eq!(pairs(&lo, &lo, true), vec![(0, 0)]);
        let lo6 = [l("::1", 128, 0)];
        assert_eq!(
            pairs(&lo, &lo6, true),
            vec![(1, 0)],
            "IPv6 when one end has only it"
        );
        assert_eq!(pairs(&lo6, &lo, true), vec![(0, 1)]);
        assert_eq!(pairs(&lo6, &lo6, false), vec![], "loopback across nodes");
        let lo4 = [l("127.0.0.1", 8, 0)];
        assert_eq!(pairs(&lo4, &lo6, true), vec![], "no family in common");
        // IPv4 even routed, over IPv6 on one network (as Open MPI: IPv4 first).
        let a = [l("10.1.0.1", 24, 0), l("2001:db8::1", 64, 0)];
        let b = [l("10.2.0.1", 24, 0), l("2001:db8::2", 64, 0)];
        assert_eq!(pairs(&a, &b, false), vec![(0, 0)]);
    }

    #[test]
    fn one_link_per_pair_of_interfaces_whatever_their_addresses() {
        // Two interfaces each: eth0 dual-stack, eth1 IPv6 only, listed by family.
        let a = [
            l("10.1.0.1", 24, 0),
            l("2001:db8:0::1", 64, 0),
            l("2001:db8:1::1", 64, 1),
        ];
        let b = [
            l("10.1.0.2", 24, 0),
            l("2001:db8:1::2", 64, 1),
            l("2001:db8:0::2", 64, 0),
        ];
        assert_eq!(
            pairs(&a, &b, false),
            vec![(0, 0), (2, 1)],
            "eth0 over IPv4, eth1 over IPv6"
        );
        // Both addresses of one interface of the lower rank never make two links.
        let one = [l("10.1.0.1", 24, 0), l("10.1.0.9", 24, 0)];
        let two = [l("10.1.0.2", 24, 0), l("10.1.0.3", 24, 1)];
        assert_eq!(pairs(&one, &two, false), vec![(0, 0)]);
        assert_eq!(pairs(&two, &one, false), vec![(0, 0)]);
        // The same network wins over routed, across families and interfaces: the
        // lower rank's interface 0 reaches the higher rank's interface 1 over IPv6 on
        // one network and its interface 0 only routed; its interface 1 reaches
        // interface 0 on one network (10.3.0.0/24).
        let a = [
            l("10.1.0.1", 24, 0),
            l("fd00:1::1", 64, 0),
            l("10.3.0.1", 24, 1),
        ];
        let b = [
            l("10.2.0.2", 24, 0),
            l("fd00:1::2", 64, 1),
            l("10.3.0.2", 24, 0),
        ];
        assert_eq!(pairs(&a, &b, false), vec![(1, 1), (2, 2)]);
    }

    #[test]
    fn loopback_pairs_with_loopback_beside_other_interfaces() {
        let a = [
            l("127.0.0.1", 8, 0),
            l("10.1.0.1", 16, 1),
            l("::1", 128, 0),
            l("fd00::1", 64, 2),
        ];
        let b = [l("10.1.7.7", 16, 4), l("fd00::7", 64, 3), l("::1", 128, 9)];
        assert_eq!(pairs(&a, &b, true), vec![(1, 0), (2, 2), (3, 1)]);
        assert_eq!(
            pairs(&a, &b, false),
            vec![(1, 0), (3, 1)],
            "not across nodes"
        );
    }

    #[test]
    fn the_most_pairs_where_taking_the_first_free_interface_leaves_one_out() {
        // A (IPv4 only) reaches C and D; B (IPv6 only) reaches only C (dual-stack).
        let lower = [l("10.1.0.1", 24, 0), l("fd00::1", 64, 1)];
        let higher = [
            l("10.1.0.2", 24, 0),
            l("fd00::2", 64, 0),
            l("10.1.0.3", 24, 1),
        ];
        assert_eq!(greedy(&lower, &higher, false), vec![(0, 0)]);
        assert_eq!(
            pairs(&lower, &higher, false),
            vec![(0, 2), (1, 1)],
            "A-D, B-C"
        );
    }

    #[test]
    fn a_routed_pair_never_takes_the_place_of_one_on_one_network() {
        // A (/16) shares a network with C and D; B (/24) with C only, D is routed.
        let lower = [l("10.1.0.1", 16, 0), l("10.1.0.9", 24, 1)];
        let higher = [l("10.1.0.2", 24, 0), l("10.1.5.5", 24, 1)];
        assert_eq!(
            greedy(&lower, &higher, false),
            vec![(0, 0), (1, 1)],
            "A-C on one network, B-D routed"
        );
        assert_eq!(pairs(&lower, &higher, false), vec![(0, 1), (1, 0)]);
        assert_eq!(
            quality(&lower, &higher, &pairs(&lower, &higher, false)),
            (2, 2)
        );
    }

    #[test]
    fn one_pair_on_one_network_outweighs_two_routed() {
        // A reaches C on one network and D routed; B (IPv6 only) reaches C routed.
        let lower = [l("10.1.0.1", 24, 0), l("fd00:1::1", 64, 1)];
        let higher = [
            l("10.1.0.2", 24, 0),
            l("fd00:2::2", 64, 0),
            l("10.9.0.1", 24, 1),
        ];
        assert_eq!(pairs(&lower, &higher, false), vec![(0, 0)]);
    }

    #[test]
    fn a_pair_is_as_good_as_the_addresses_it_connects_over() {
        // A and C have both families, routed over IPv4 and on one network over IPv6;
        // their pair goes over IPv4, so it is routed, and A pairs with D (IPv6 only,
        // on A's IPv6 network) instead.
        let lower = [l("10.1.0.1", 24, 0), l("fd00::1", 64, 0)];
        let higher = [
            l("10.2.0.1", 24, 0),
            l("fd00::2", 64, 0),
            l("fd00::3", 64, 1),
        ];
        assert_eq!(pairs(&lower, &higher, false), vec![(1, 2)]);
        // Without D, A-C over IPv4, routed.
        assert_eq!(pairs(&lower, &higher[..2], false), vec![(0, 0)]);
    }

    #[test]
    fn both_ranks_compute_the_same_pairs() {
        let a = [
            l("127.0.0.1", 8, 0),
            l("10.1.0.1", 16, 1),
            l("fd00::1", 64, 2),
            l("10.3.0.1", 24, 3),
        ];
        let b = [
            l("10.1.7.7", 16, 4),
            l("fd00::7", 64, 3),
            l("127.0.0.1", 8, 9),
            l("10.3.0.7", 24, 3),
        ];
        for (ra, rb) in [(0, 1), (7, 2)] {
            let seen_by_a = pairs_with(ra, &a, rb, &b, true);
            let seen_by_b = pairs_with(rb, &b, ra, &a, true);
            assert!(!seen_by_a.is_empty());
            assert_eq!(transposed(&seen_by_b), seen_by_a, "ranks {ra} and {rb}");
        }
        assert_eq!(pairs_with(0, &a, 1, &b, true), pairs(&a, &b, true));
        assert_eq!(
            pairs_with(1, &a, 0, &b, true),
            transposed(&pairs(&b, &a, true))
        );
    }

    fn transposed(pairs: &[(usize, usize)]) -> Vec<(usize, usize)> {
        pairs.iter().map(|&(x, y)| (y, x)).collect()
    }

    /// The pairs on one network and the pairs in all.
    fn quality(
        lower: &[Listener],
        higher: &[Listener],
        pairs: &[(usize, usize)],
    ) -> (usize, usize) {
        let same = pairs
            .iter()
            .filter(|&&(i, j)| reach(&lower[i], &higher[j], true) == Some(Reach::SameNetwork))
            .count();
        (same, pairs.len())
    }

    /// Pairing by taking, for each interface of the lower rank in order, the higher
    /// rank's first free interface: on one network first, then routed.
    fn greedy(lower: &[Listener], higher: &[Listener], same_node: bool) -> Vec<(usize, usize)> {
        let (ours, theirs) = (by_interface(lower), by_interface(higher));
        let mut used = vec![false; theirs.len()];
        let mut paired = vec![false; ours.len()];
        let mut out = Vec::new();
        for want in [Reach::SameNetwork, Reach::Routed] {
            for (g, a) in ours.iter().enumerate() {
                if paired[g] {
                    continue;
                }
                let hit = theirs.iter().enumerate().find_map(|(h, b)| {
                    match link_between((lower, a), (higher, b), same_node) {
                        Some((i, j, r)) if r == want && !used[h] => Some((h, i, j)),
                        _ => None,
                    }
                });
                if let Some((h, i, j)) = hit {
                    used[h] = true;
                    paired[g] = true;
                    out.push((i, j));
                }
            }
        }
        out.sort_unstable();
        out
    }

    /// Listeners on up to 5 interfaces, from a few networks of both families (some
    /// sharing a network by the shorter prefix only) and loopback.
    fn listeners() -> impl Strategy<Value = Vec<Listener>> {
        let pool = [
            ("10.1.0.1", 24),
            ("10.1.0.2", 24),
            ("10.1.5.5", 16),
            ("10.2.0.1", 24),
            ("192.0.2.1", 24),
            ("fd00::1", 64),
            ("fd00::2", 64),
            ("fd00:0:0:1::1", 48),
            ("2001:db8::1", 64),
            ("127.0.0.1", 8),
            ("::1", 128),
        ];
        proptest::collection::vec((0..pool.len(), 0u8..5), 0..8).prop_map(move |picked| {
            picked
                .into_iter()
                .map(|(k, iface)| l(pool[k].0, pool[k].1, iface))
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        // A valid pairing, never worse than taking the first free interface, as good
        // whichever rank is the lower one, and the same list on both ranks.
        #[test]
        fn pairs_are_a_best_matching(
            a in listeners(),
            b in listeners(),
            same_node in any::<bool>(),
        ) {
            let got = pairs(&a, &b, same_node);
            prop_assert!(got.windows(2).all(|w| w[0] < w[1]), "sorted");
            let mut lower_ifaces: Vec<u8> = got.iter().map(|&(i, _)| a[i].iface).collect();
            let mut higher_ifaces: Vec<u8> = got.iter().map(|&(_, j)| b[j].iface).collect();
            lower_ifaces.sort_unstable();
            lower_ifaces.dedup();
            higher_ifaces.sort_unstable();
            higher_ifaces.dedup();
            prop_assert_eq!(lower_ifaces.len(), got.len(), "one pair per interface");
            prop_assert_eq!(higher_ifaces.len(), got.len(), "one pair per interface");
            for &(i, j) in &got {
                prop_assert!(reach(&a[i], &b[j], same_node).is_some());
                // IPv6 only where no IPv4 address of one interface reaches one of the other.
                let v4_reaches = a
                    .iter()
                    .filter(|x| x.iface == a[i].iface && x.addr.is_ipv4())
                    .any(|x| {
                        b.iter()
                            .filter(|y| y.iface == b[j].iface)
                            .any(|y| y.addr.is_ipv4() && reach(x, y, same_node).is_some())
                    });
                prop_assert!(a[i].addr.is_ipv4() || !v4_reaches, "IPv4 first");
            }
            let best = quality(&a, &b, &got);
            prop_assert!(best >= quality(&a, &b, &greedy(&a, &b, same_node)));
            let swapped = pairs(&b, &a, same_node);
            prop_assert_eq!(best, quality(&b, &a, &swapped));
            prop_assert_eq!(transposed(&pairs_with(1, &b, 0, &a, same_node)), got);
        }
    }
}
