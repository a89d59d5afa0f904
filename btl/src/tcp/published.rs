//! What a `tcp` module publishes in the modex (its module id and, per chosen
//! interface, the listener's address, prefix length, port and secret), and how two
//! ranks pair their interfaces into links.
//!
//! ```text
//! version u8 (1) | module u64 | count u8 | count x (ipv4[4] | prefix u8 | port u16 | secret[16])
//! ```

use super::handshake::Secret;
use super::wire::SECRET;
use std::net::{Ipv4Addr, SocketAddrV4};

const VERSION: u8 = 1;
const ENTRY: usize = 4 + 1 + 2 + SECRET;

/// One listener as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its address and port.
    pub addr: SocketAddrV4,
    /// The prefix length of its interface's network.
    pub prefix: u8,
    /// What a connector must send first.
    pub secret: Secret,
}

/// A module's published addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The module's id (its handles carry it).
    pub module: u64,
    /// Its listeners, one per chosen interface.
    pub listeners: Vec<Listener>,
}

impl Published {
    /// The bytes for the modex.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![VERSION];
        b.extend_from_slice(&self.module.to_le_bytes());
        b.push(self.listeners.len() as u8);
        for l in &self.listeners {
            b.extend_from_slice(&l.addr.ip().octets());
            b.push(l.prefix);
            b.extend_from_slice(&l.addr.port().to_le_bytes());
            b.extend_from_slice(&l.secret);
        }
        b
    }

    /// Read what a peer published; `None` if the bytes are not such a blob.
    pub fn decode(b: &[u8]) -> Option<Published> {
        let (&version, rest) = b.split_first()?;
        if version != VERSION || rest.len() < 9 {
            return None;
        }
        let module = u64::from_le_bytes(rest[..8].try_into().ok()?);
        let count = usize::from(rest[8]);
        let entries = &rest[9..];
        if entries.len() != count * ENTRY {
            return None;
        }
        let listeners = entries
            .chunks_exact(ENTRY)
            .map(|e| {
                let ip = Ipv4Addr::new(e[0], e[1], e[2], e[3]);
                let port = u16::from_le_bytes([e[5], e[6]]);
                let mut secret = [0u8; SECRET];
                secret.copy_from_slice(&e[7..7 + SECRET]);
                Listener {
                    addr: SocketAddrV4::new(ip, port),
                    prefix: e[4].min(32),
                    secret,
                }
            })
            .collect();
        Some(Published { module, listeners })
    }
}

fn same_network(a: &Listener, b: &Listener) -> bool {
    let prefix = a.prefix.min(b.prefix);
    let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
    u32::from(*a.addr.ip()) & mask == u32::from(*b.addr.ip()) & mask
}

/// Pair the lower rank's listeners with the higher rank's: each index used at most
/// once, same-network pairs first, then any remaining non-loopback pairs (routed);
/// loopback pairs only with loopback, and only on one node. Both ranks compute the
/// same list, lower rank's index first: link `k` of the pair runs between the
/// interfaces of pair `k % len`.
pub fn pairs(lower: &[Listener], higher: &[Listener], same_node: bool) -> Vec<(usize, usize)> {
    let loopback = |l: &Listener| l.addr.ip().is_loopback();
    let usable = |a: &Listener, b: &Listener| {
        if loopback(a) || loopback(b) {
            loopback(a) && loopback(b) && same_node
        } else {
            true
        }
    };
    let mut used = vec![false; higher.len()];
    let mut out = Vec::new();
    let mut unpaired = Vec::new();
    for (i, a) in lower.iter().enumerate() {
        let hit = higher
            .iter()
            .enumerate()
            .position(|(j, b)| !used[j] && usable(a, b) && same_network(a, b));
        match hit {
            Some(j) => {
                used[j] = true;
                out.push((i, j));
            }
            None => unpaired.push(i),
        }
    }
    for i in unpaired {
        let a = &lower[i];
        let hit = (0..higher.len()).find(|&j| !used[j] && usable(a, &higher[j]));
        if let Some(j) = hit {
            used[j] = true;
            out.push((i, j));
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(ip: [u8; 4], prefix: u8) -> Listener {
        Listener {
            addr: SocketAddrV4::new(Ipv4Addr::from(ip), 1000 + u16::from(ip[3])),
            prefix,
            secret: [ip[3]; SECRET],
        }
    }

    #[test]
    fn the_blob_round_trips_and_refuses_garbage() {
        let p = Published {
            module: 0x1234,
            listeners: vec![l([127, 0, 0, 1], 8), l([10, 1, 0, 5], 24)],
        };
        let b = p.encode();
        assert_eq!(Published::decode(&b), Some(p));
        assert_eq!(Published::decode(&b[..b.len() - 1]), None);
        assert_eq!(Published::decode(&[]), None);
        assert_eq!(Published::decode(&[2; 40]), None);
    }

    fn listener() -> impl proptest::strategy::Strategy<Value = Listener> {
        use proptest::prelude::*;
        (
            any::<[u8; 4]>(),
            0u8..=32,
            any::<u16>(),
            any::<[u8; SECRET]>(),
        )
            .prop_map(|(ip, prefix, port, secret)| Listener {
                addr: SocketAddrV4::new(Ipv4Addr::from(ip), port),
                prefix,
                secret,
            })
    }

    proptest::proptest! {
        // What a peer (or anything that wrote into the modex) publishes: any bytes are
        // read without a panic, and the listeners of what decodes pair without one.
        // PROPTEST_CASES=100000 runs longer.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Some(p) = Published::decode(&bytes) {
                let _ = pairs(&p.listeners, &p.listeners, false);
                proptest::prop_assert!(p.listeners.iter().all(|l| l.prefix <= 32));
            }
        }

        // A blob round-trips; cut short or lengthened by any amount, it is refused.
        #[test]
        fn blobs_round_trip_and_damaged_ones_are_refused(
            module in proptest::prelude::any::<u64>(),
            listeners in proptest::collection::vec(listener(), 0..6),
            cut in 1usize..64,
            extra in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64),
        ) {
            let p = Published { module, listeners };
            let b = p.encode();
            proptest::prop_assert_eq!(Published::decode(&b), Some(p));
            let cut = cut.min(b.len());
            proptest::prop_assert_eq!(Published::decode(&b[..b.len() - cut]), None);
            let mut long = b.clone();
            long.extend_from_slice(&extra);
            proptest::prop_assert_eq!(Published::decode(&long), None);
        }
    }

    #[test]
    fn interfaces_pair_by_network_then_by_order() {
        let a = [l([10, 1, 0, 1], 24), l([10, 2, 0, 1], 24)];
        let b = [l([10, 2, 0, 2], 24), l([10, 1, 0, 2], 24)];
        assert_eq!(pairs(&a, &b, false), vec![(0, 1), (1, 0)], "same networks");
        let c = [l([192, 0, 2, 9], 24)];
        assert_eq!(pairs(&a, &c, false), vec![(0, 0)], "routed, once");
        let lo = [l([127, 0, 0, 1], 8)];
        assert_eq!(pairs(&lo, &lo, true), vec![(0, 0)]);
        assert_eq!(pairs(&lo, &lo, false), vec![], "loopback across nodes");
        assert_eq!(pairs(&lo, &a, true), vec![], "loopback to another address");
    }
}
