//! What a `tcp` module publishes in the modex: its module id and, per chosen address,
//! the listener's family, interface, address, prefix length, port and secret.
//!
//! ```text
//! version u8 (2) | module u64 | count u8 |
//! count x (family u8 (4 | 6) | interface u8 | address [4 | 16] | prefix u8 | port u16 | secret[16])
//! ```
//!
//! The interface is a number the publisher gives each of its interfaces, so that a
//! peer knows which addresses share one (`pairing`). Format 1 had
//! IPv4 addresses only and no interface numbers: a blob in it (an older build of this
//! library in the same job) is refused with the reason, as is anything else that is
//! not a whole blob of this format.

use crate::family;
use crate::handshake::Secret;
use crate::wire::SECRET;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const VERSION: u8 = 2;
/// Bytes of an entry besides its address: family, interface, prefix, port, secret.
const ENTRY_FIXED: usize = 1 + 1 + 1 + 2 + SECRET;

/// One listener as published.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Its address and port.
    pub addr: SocketAddr,
    /// The prefix length of its interface's network.
    pub prefix: u8,
    /// The publisher's number for the interface the address is on.
    pub iface: u8,
    /// What a connector must send first.
    pub secret: Secret,
}

/// A module's published addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The module's id (its handles carry it).
    pub module: u64,
    /// Its listeners, one per chosen address (at most 255).
    pub listeners: Vec<Listener>,
}

/// Why bytes from the modex are not a peer's addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unreadable(pub &'static str);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl Published {
    /// The most listeners a blob holds.
    pub const MAX_LISTENERS: usize = u8::MAX as usize;

    /// The bytes for the modex (the first [`Published::MAX_LISTENERS`] listeners).
    pub fn encode(&self) -> Vec<u8> {
        let listeners = &self.listeners[..self.listeners.len().min(Self::MAX_LISTENERS)];
        let mut b = vec![VERSION];
        b.extend_from_slice(&self.module.to_le_bytes());
        b.push(listeners.len() as u8);
        for l in listeners {
            match l.addr.ip() {
                IpAddr::V4(ip) => {
                    b.extend_from_slice(&[4, l.iface]);
                    b.extend_from_slice(&ip.octets());
                }
                IpAddr::V6(ip) => {
                    b.extend_from_slice(&[6, l.iface]);
                    b.extend_from_slice(&ip.octets());
                }
            }
            b.push(l.prefix);
            b.extend_from_slice(&l.addr.port().to_le_bytes());
            b.extend_from_slice(&l.secret);
        }
        b
    }

    /// Read what a peer published.
    pub fn decode(b: &[u8]) -> Result<Published, Unreadable> {
        let (&version, rest) = b.split_first().ok_or(Unreadable("empty"))?;
        match version {
            VERSION => {}
            1 => return Err(Unreadable(
                "format 1 (IPv4 only, from an older build of rbtl): run one build on every node",
            )),
            _ => return Err(Unreadable("an unknown format version")),
        }
        if rest.len() < 9 {
            return Err(Unreadable("cut short before its addresses"));
        }
        let module = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let count = usize::from(rest[8]);
        let mut at = &rest[9..];
        let mut listeners = Vec::with_capacity(count);
        for _ in 0..count {
            let (l, used) = entry(at)?;
            listeners.push(l);
            at = &at[used..];
        }
        if !at.is_empty() {
            return Err(Unreadable("bytes after its last address"));
        }
        Ok(Published { module, listeners })
    }
}

/// The entry at the start of `e`, and its length.
fn entry(e: &[u8]) -> Result<(Listener, usize), Unreadable> {
    let cut = Unreadable("cut short in an address");
    let (&fam, rest) = e.split_first().ok_or(cut)?;
    let (&iface, rest) = rest.split_first().ok_or(cut)?;
    let (ip, rest): (IpAddr, &[u8]) = match fam {
        4 if rest.len() >= 4 => {
            let o: [u8; 4] = rest[..4].try_into().expect("4 bytes");
            (Ipv4Addr::from(o).into(), &rest[4..])
        }
        6 if rest.len() >= 16 => {
            let o: [u8; 16] = rest[..16].try_into().expect("16 bytes");
            (Ipv6Addr::from(o).into(), &rest[16..])
        }
        4 | 6 => return Err(cut),
        _ => return Err(Unreadable("an address of an unknown family")),
    };
    if rest.len() < 1 + 2 + SECRET {
        return Err(cut);
    }
    let prefix = rest[0];
    if prefix > family::max_prefix(ip) {
        return Err(Unreadable("a prefix longer than its address"));
    }
    if !family::usable(ip) {
        return Err(Unreadable(
            "a link-local or IPv4-mapped address, which never carries traffic",
        ));
    }
    let port = u16::from_le_bytes([rest[1], rest[2]]);
    let mut secret = [0u8; SECRET];
    secret.copy_from_slice(&rest[3..3 + SECRET]);
    let l = Listener {
        addr: SocketAddr::new(ip, port),
        prefix,
        iface,
        secret,
    };
    Ok((l, ENTRY_FIXED + if ip.is_ipv4() { 4 } else { 16 }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(ip: &str, prefix: u8, iface: u8) -> Listener {
        Listener {
            addr: SocketAddr::new(ip.parse().unwrap(), 1000 + u16::from(iface)),
            prefix,
            iface,
            secret: [iface; SECRET],
        }
    }

    #[test]
    fn the_blob_round_trips_and_refuses_garbage() {
        let p = Published {
            module: 0x1234,
            listeners: vec![
                l("127.0.0.1", 8, 0),
                l("10.1.0.5", 24, 1),
                l("::1", 128, 0),
                l("2001:db8::5", 64, 1),
            ],
        };
        let b = p.encode();
        assert_eq!(
            b.len(),
            1 + 8 + 1 + 2 * (ENTRY_FIXED + 4) + 2 * (ENTRY_FIXED + 16)
        );
        assert_eq!(Published::decode(&b), Ok(p));
        let why = |b: &[u8]| Published::decode(b).unwrap_err().0;
        assert_eq!(why(&b[..b.len() - 1]), "cut short in an address");
        assert_eq!(why(&[]), "empty");
        assert_eq!(why(&[2; 5]), "cut short before its addresses");
        assert!(why(&[1; 40]).starts_with("format 1 (IPv4 only"));
        assert_eq!(why(&[3; 40]), "an unknown format version");
        let mut long = b.clone();
        long.push(0);
        assert_eq!(why(&long), "bytes after its last address");
    }

    #[test]
    fn entries_that_no_peer_of_this_format_publishes_are_refused() {
        let one = |l: Listener| {
            Published {
                module: 1,
                listeners: vec![l],
            }
            .encode()
        };
        let why = |b: &[u8]| Published::decode(b).unwrap_err().0;
        let mut b = one(l("10.0.0.1", 8, 0));
        b[10] = 5;
        assert_eq!(why(&b), "an address of an unknown family");
        // Prefix byte: after version, module, count, family, interface, address.
        let mut b = one(l("10.0.0.1", 8, 0));
        b[10 + 2 + 4] = 33;
        assert_eq!(why(&b), "a prefix longer than its address");
        let mut b = one(l("::1", 128, 0));
        b[10 + 2 + 16] = 129;
        assert_eq!(why(&b), "a prefix longer than its address");
        for never in ["fe80::1", "::ffff:10.0.0.1"] {
            assert!(
                why(&one(l(never, 64, 0))).starts_with("a link-local or IPv4-mapped"),
                "{never}"
            );
        }
        // An IPv4 entry relabelled IPv6 runs past the end.
        let mut b = one(l("10.0.0.1", 8, 0));
        b[10] = 6;
        assert_eq!(why(&b), "cut short in an address");
    }

    /// A blob of format 1, as an older build published it.
    #[test]
    fn a_format_1_blob_is_refused_with_the_reason() {
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&7u64.to_le_bytes());
        v1.push(1);
        v1.extend_from_slice(&[127, 0, 0, 1, 8, 0x10, 0x27]);
        v1.extend_from_slice(&[5; SECRET]);
        let e = Published::decode(&v1).unwrap_err().to_string();
        assert!(
            e.contains("format 1") && e.contains("one build on every node"),
            "{e}"
        );
    }

    fn listener() -> impl proptest::strategy::Strategy<Value = Listener> {
        use proptest::prelude::*;
        let v4 = (any::<[u8; 4]>(), 0u8..=32).prop_map(|(ip, p)| (IpAddr::from(ip), p));
        let v6 = (any::<[u8; 16]>(), 0u8..=128)
            .prop_map(|(ip, p)| (IpAddr::from(ip), p))
            .prop_filter("usable", |(ip, _)| family::usable(*ip));
        (
            prop_oneof![v4, v6],
            any::<u8>(),
            any::<u16>(),
            any::<[u8; SECRET]>(),
        )
            .prop_map(|((ip, prefix), iface, port, secret)| Listener {
                addr: SocketAddr::new(ip, port),
                prefix,
                iface,
                secret,
            })
    }

    proptest::proptest! {
        // What a peer (or anything that wrote into the modex) publishes: any bytes are
        // read without a panic, and the listeners of what decodes pair without one.
        // PROPTEST_CASES=100000 runs longer.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            if let Ok(p) = Published::decode(&bytes) {
                let _ = crate::pairing::pairs(&p.listeners, &p.listeners, false);
                proptest::prop_assert!(p
                    .listeners
                    .iter()
                    .all(|l| l.prefix <= family::max_prefix(l.addr.ip()) && family::usable(l.addr.ip())));
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
            proptest::prop_assert_eq!(Published::decode(&b), Ok(p));
            let cut = cut.min(b.len());
            proptest::prop_assert!(Published::decode(&b[..b.len() - cut]).is_err());
            let mut long = b.clone();
            long.extend_from_slice(&extra);
            proptest::prop_assert!(Published::decode(&long).is_err());
        }
    }
}
