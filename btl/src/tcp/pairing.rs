//! How two ranks pair their interfaces into links, from what each published.
//!
//! As in Open MPI's `btl/tcp`, a link joins an interface of each rank, and each
//! interface is in at most one pair: where both ranks have several interfaces, they
//! get one link (times `btl_tcp_links`) per pair, and stripe put and get data over
//! them. A pair of interfaces connects over IPv4 where both of them have a usable
//! IPv4 address, over IPv6 otherwise (Open MPI's rule too: IPv4 first); both ends of
//! a link are always of one family. Interfaces pair on the same network first, then
//! routed; loopback addresses only with loopback addresses, and only on one node.

use super::family;
use super::published::Listener;

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
/// interface of each side, interfaces that share a network first, then routed ones
/// (each in the lower rank's order, with the higher rank's first free interface).
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
    let mut used = vec![false; theirs.len()];
    let mut paired = vec![false; ours.len()];
    let mut out = Vec::new();
    for want in [Reach::SameNetwork, Reach::Routed] {
        for (g, row) in links.iter().enumerate() {
            if paired[g] {
                continue;
            }
            let hit = row.iter().enumerate().find_map(|(h, link)| match link {
                Some((i, j, r)) if *r == want && !used[h] => Some((h, *i, *j)),
                _ => None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tcp::wire::SECRET;
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
}
