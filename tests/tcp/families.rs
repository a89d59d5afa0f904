//! The `tcp` transport's two IP families, in this process on loopback: where a module
//! listens under `btl_tcp_disable_family` and `btl_tcp_if_include`, a module against
//! a raw peer on `::1` (its HELLO, its first message), a peer of a family the module
//! does not use (unreachable), a peer's addresses in an older format or damaged (a
//! modex error naming it), and mistakes in the parameters (errors that say what to
//! give).

use super::{
    accept_hello, answer_and_take_the_message, module_facing_a_raw_peer_at, procs, raw_peer,
};
use super::{Published, TwoRanks};
use rbtl::btl::{Error, Module};
use rbtl::tcp::{wire, TcpComponent, TcpModule};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// Rank 0's module under `params`, in a job whose rank 1 published `theirs`.
fn open(params: &[(&str, &str)], theirs: Vec<u8>) -> (TcpModule, TwoRanks) {
    let config = rbtl::configure(params).unwrap();
    let mut modex = TwoRanks { ours: None, theirs };
    let m = TcpComponent::open(&config, &mut modex)
        .unwrap()
        .expect("loopback is chosen");
    (m, modex)
}

#[test]
fn a_module_listens_on_the_families_and_addresses_chosen() {
    for (params, want) in [
        (vec![("btl_tcp_if_include", "lo")], vec![V4, V6]),
        (
            vec![
                ("btl_tcp_if_include", "lo"),
                ("btl_tcp_disable_family", "0"),
            ],
            vec![V4, V6],
        ),
        (
            vec![
                ("btl_tcp_if_include", "lo"),
                ("btl_tcp_disable_family", "4"),
            ],
            vec![V6],
        ),
        (
            vec![
                ("btl_tcp_if_include", "lo"),
                ("btl_tcp_disable_family", "6"),
            ],
            vec![V4],
        ),
        (vec![("btl_tcp_if_include", "::1/128")], vec![V6]),
        (
            vec![("btl_tcp_if_include", "127.0.0.1/32,::1/128")],
            vec![V4, V6],
        ),
    ] {
        let (m, _) = open(&params, Vec::new());
        let ips: Vec<IpAddr> = m.listening().iter().map(|a| a.ip()).collect();
        assert_eq!(ips, want, "{params:?}");
    }
}

#[test]
fn a_raw_ipv6_peer_gets_the_hello_and_the_first_message() {
    let (mut m, ep, listener, seen) = module_facing_a_raw_peer_at("[::1]:0", &[]);
    let mut s = accept_hello(&mut m, &listener);
    assert_eq!(
        s.peer_addr().unwrap().ip(),
        V6,
        "rank 0 connects from its IPv6 address"
    );
    answer_and_take_the_message(&mut m, &mut s, ep, &seen);
}

#[test]
fn a_peer_that_publishes_only_a_family_this_module_does_not_use_is_unreachable() {
    for (bind, disable) in [("[::1]:0", "6"), ("127.0.0.1:0", "4")] {
        let (_listener, theirs) = raw_peer(bind);
        let params = [
            ("btl_tcp_if_include", "lo"),
            ("btl_tcp_disable_family", disable),
        ];
        let (mut m, mut modex) = open(&params, theirs.encode());
        let eps = m.add_procs(&procs(2), &mut modex).unwrap();
        assert_eq!(
            eps,
            [None, None],
            "{bind} with btl_tcp_disable_family={disable}"
        );
    }
}

#[test]
fn addresses_in_an_old_format_or_damaged_are_a_modex_error_naming_the_rank() {
    // Format 1: IPv4 only, no family or interface (127.0.0.1:10000, prefix 8).
    let mut v1 = vec![1u8];
    v1.extend_from_slice(&77u64.to_le_bytes());
    v1.push(1);
    v1.extend_from_slice(&[127, 0, 0, 1, 8, 0x10, 0x27]);
    v1.extend_from_slice(&[9; wire::SECRET]);
    let (_listener, theirs) = raw_peer("[::1]:0");
    let mut long = theirs.encode();
    long.push(0);
    let mut short = theirs.encode();
    short.pop();
    for (blob, says) in [
        (
            v1,
            "format 1 (IPv4 only, from an older build of rbtl): run one build on every node",
        ),
        (long, "bytes after its last address"),
        (short, "cut short in an address"),
    ] {
        let (mut m, mut modex) = open(&[("btl_tcp_if_include", "lo")], blob);
        match m.add_procs(&procs(2), &mut modex) {
            Err(Error::Modex(why)) => assert!(
                why.starts_with("the tcp addresses rank 1 published (") && why.ends_with(says),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
    }
    // What this module itself published reads back.
    let (_, modex) = open(&[("btl_tcp_if_include", "lo")], Vec::new());
    let ours = Published::decode(modex.ours.as_deref().unwrap()).unwrap();
    assert_eq!(ours.listeners.len(), 2);
}

#[test]
fn family_and_network_mistakes_are_refused_with_what_to_give() {
    for (params, says) in [
        (
            vec![
                ("btl_tcp_if_include", "lo"),
                ("btl_tcp_disable_family", "5"),
            ],
            "btl_tcp_disable_family = 5: give 0 (IPv4 and IPv6), 4 (no IPv4: IPv6 only) \
             or 6 (no IPv6: IPv4 only)",
        ),
        (
            vec![("btl_tcp_disable_family", "-6")],
            "btl_tcp_disable_family = -6: give 0",
        ),
        (
            vec![("btl_tcp_if_include", "::1/129")],
            "btl_tcp_if_include: `::1/129` is neither an interface name nor a network \
             such as 10.1.0.0/16 or 2001:db8::/32",
        ),
        (
            // (The environment of these tests names an include list: none here.)
            vec![
                ("btl_tcp_if_include", ""),
                ("btl_tcp_if_exclude", "2001:db8::/x"),
            ],
            "btl_tcp_if_exclude: `2001:db8::/x` is neither",
        ),
        (
            vec![("btl_tcp_if_include", "fe80::1%lo/64")],
            "`fe80::1%lo/64` is neither",
        ),
    ] {
        let config = rbtl::configure(&params).unwrap();
        let mut modex = TwoRanks {
            ours: None,
            theirs: Vec::new(),
        };
        match TcpComponent::open(&config, &mut modex) {
            Err(Error::NotAvailable(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{params:?}: {:?}", other.map(|m| m.is_some())),
        }
        assert!(modex.ours.is_none(), "nothing published");
    }
    let e = rbtl::configure(&[("btl_tcp_disable_family", "six")]).unwrap_err();
    assert!(e.to_string().contains("btl_tcp_disable_family"), "{e}");
}
