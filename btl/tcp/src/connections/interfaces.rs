//! The interfaces a `tcp` module listens on: this host's IPv4 and IPv6 addresses from
//! `getifaddrs`, chosen by `btl_tcp_if_include` or `btl_tcp_if_exclude` (names such
//! as `eth0`, or networks such as `10.1.0.0/16` or `2001:db8::/32`) and
//! `btl_tcp_disable_family` ([`family`]). As in Open MPI, by default every up
//! interface but loopback, loopback only when nothing else is up, and never an IPv6
//! link-local or IPv4-mapped address.
//!
//! `getifaddrs` is called through `libc`: `rustix` (in the workspace already) has no
//! binding for it, and `nix`, which has one, would come in for this one call.

use crate::family::{self, Families, Net, DISABLE_FAMILY_PARAM};
use rbtl_btl::{Error, Result};
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One address of an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`, `lo`).
    pub name: String,
    /// The address.
    pub addr: IpAddr,
    /// The prefix length of its network.
    pub prefix: u8,
    /// Whether the interface is up.
    pub up: bool,
}

impl Interface {
    /// Whether it is a loopback address.
    pub fn is_loopback(&self) -> bool {
        self.addr.is_loopback()
    }
}

/// This host's interfaces: every IPv4 and IPv6 address (link-local ones too: the
/// choice leaves them out), and the names of all interfaces (including those without
/// an address), for error messages.
pub fn list() -> Result<(Vec<Interface>, Vec<String>)> {
    let mut ifs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list that is freed below.
    if unsafe { libc::getifaddrs(&mut ifs) } != 0 {
        return Err(Error::Os {
            call: "getifaddrs",
            source: std::io::Error::last_os_error(),
        });
    }
    let (mut out, mut names) = (Vec::new(), Vec::new());
    let mut p = ifs;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned, not freed yet.
        let ifa = unsafe { &*p };
        // SAFETY: every node has a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the addresses of a node of the list, not freed yet.
        if let Some(addr) = unsafe { ip(ifa.ifa_addr) } {
            // SAFETY: as above.
            let mask = unsafe { ip(ifa.ifa_netmask) };
            let prefix = match mask {
                Some(IpAddr::V4(m)) => u32::from(m).count_ones() as u8,
                Some(IpAddr::V6(m)) => u128::from(m).count_ones() as u8,
                None => family::max_prefix(addr),
            };
            out.push(Interface {
                name: name.clone(),
                addr,
                prefix: prefix.min(family::max_prefix(addr)),
                up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
            });
        }
        if !names.contains(&name) {
            names.push(name);
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifs) };
    Ok((out, names))
}

/// The IPv4 or IPv6 address at `sa`, if it is one.
///
/// # Safety
///
/// `sa` is null or points to a socket address valid for its family's size.
unsafe fn ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-null, and every socket address starts with its family.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in (the caller's contract).
            let sin = unsafe { *(sa as *const libc::sockaddr_in) };
            Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)).into())
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6 (the caller's contract).
            let sin6 = unsafe { *(sa as *const libc::sockaddr_in6) };
            Some(Ipv6Addr::from(sin6.sin6_addr.s6_addr).into())
        }
        _ => None,
    }
}

/// One item of an include or exclude list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Filter {
    Name(String),
    Net(Net),
}

impl Filter {
    fn parse(s: &str, param: &str) -> Result<Filter> {
        if !s.contains('/') {
            return Ok(Filter::Name(s.to_string()));
        }
        Net::parse(s).map(Filter::Net).ok_or_else(|| {
            Error::NotAvailable(format!(
                "{param}: `{s}` is neither an interface name nor a network such as \
                 10.1.0.0/16 or 2001:db8::/32"
            ))
        })
    }

    fn matches(&self, i: &Interface) -> bool {
        match self {
            Filter::Name(n) => *n == i.name,
            Filter::Net(net) => net.contains(i.addr),
        }
    }
}

/// The interfaces this host's `tcp` module would listen on under `config`
/// (`btl_tcp_if_include` / `btl_tcp_if_exclude`, `btl_tcp_disable_family`).
pub fn chosen(config: &rbtl_config::Config) -> Result<Vec<Interface>> {
    Ok(chosen_or_why(config)?.0)
}

/// [`chosen`], and when it is empty, why: the setting that left nothing, and the
/// host's up interfaces.
pub fn chosen_or_why(config: &rbtl_config::Config) -> Result<(Vec<Interface>, Option<String>)> {
    let families = Families::of(config)?;
    let (all, names) = list()?;
    let (include, exclude) = (
        config.list("btl_tcp_if_include")?,
        config.list("btl_tcp_if_exclude")?,
    );
    let chosen = select(&all, &names, include, exclude, families)?;
    if !chosen.is_empty() {
        return Ok((chosen, None));
    }
    let up: Vec<String> = all
        .iter()
        .filter(|i| i.up)
        .map(|i| format!("{} {}/{}", i.name, i.addr, i.prefix))
        .collect();
    let setting = match (include.is_empty(), exclude.is_empty()) {
        (false, _) => format!("btl_tcp_if_include = {}", include.join(",")),
        (_, false) => format!("btl_tcp_if_exclude = {}", exclude.join(",")),
        _ => "no interface is up".to_string(),
    };
    let family = match families {
        Families::Both => String::new(),
        _ => format!(" with {DISABLE_FAMILY_PARAM} = {}", families.param_value()),
    };
    let up = if up.is_empty() {
        "none".to_string()
    } else {
        up.join(", ")
    };
    Ok((
        chosen,
        Some(format!("found no address to use: {setting}{family} leaves none of this host's up interfaces ({up})")),
    ))
}

/// The interfaces to use among `all` (whose interface names are `names`), by the
/// include and exclude lists (at most one of them set) and the families in use:
/// IPv4 addresses first, then IPv6, each address once.
pub fn select(
    all: &[Interface],
    names: &[String],
    include: &[String],
    exclude: &[String],
    families: Families,
) -> Result<Vec<Interface>> {
    if !include.is_empty() && !exclude.is_empty() {
        return Err(Error::NotAvailable(
            "btl_tcp_if_include and btl_tcp_if_exclude are both set: set one of them".into(),
        ));
    }
    let (param, items) = if include.is_empty() {
        ("btl_tcp_if_exclude", exclude)
    } else {
        ("btl_tcp_if_include", include)
    };
    let filters = items
        .iter()
        .map(|s| Filter::parse(s, param))
        .collect::<Result<Vec<_>>>()?;
    for f in &filters {
        if let Filter::Name(n) = f {
            if !names.contains(n) {
                return Err(Error::NotAvailable(format!(
                    "{param}: no interface `{n}` on this host; it has: {}",
                    names.join(", ")
                )));
            }
        }
    }
    let up = all
        .iter()
        .filter(|i| i.up && family::usable(i.addr) && families.admits(i.addr));
    let mut chosen: Vec<Interface> = if include.is_empty() {
        let kept: Vec<Interface> = up
            .filter(|i| !filters.iter().any(|f| f.matches(i)))
            .cloned()
            .collect();
        // Loopback only when nothing else is left.
        if kept.iter().any(|i| !i.is_loopback()) {
            kept.into_iter().filter(|i| !i.is_loopback()).collect()
        } else {
            kept
        }
    } else {
        up.filter(|i| filters.iter().any(|f| f.matches(i)))
            .cloned()
            .collect()
    };
    chosen.sort_by_key(|i| i.addr.is_ipv6());
    let mut seen = Vec::new();
    chosen.retain(|i| {
        let new = !seen.contains(&i.addr);
        seen.push(i.addr);
        new
    });
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(name: &str, addr: &str, prefix: u8, up: bool) -> Interface {
        Interface {
            name: name.into(),
            addr: addr.parse().unwrap(),
            prefix,
            up,
        }
    }

    /// A host as `getifaddrs` lists it: IPv6 after IPv4, link-local addresses on
    /// every IPv6 link.
    fn host() -> (Vec<Interface>, Vec<String>) {
        (
            vec![
                i("lo", "127.0.0.1", 8, true),
                i("eth0", "10.1.0.5", 16, true),
                i("eth1", "192.168.7.2", 24, true),
                i("eth2", "172.16.0.1", 12, false),
                i("lo", "::1", 128, true),
                i("eth0", "2001:db8:1::5", 64, true),
                i("eth0", "fe80::1", 64, true),
                i("eth1", "fe80::2", 64, true),
                i("eth3", "fd00:7::2", 64, true),
                i("eth3", "fe80::3", 64, true),
                i("eth3", "::ffff:10.9.0.1", 128, true),
            ],
            vec!["lo", "eth0", "eth1", "eth2", "eth3", "ib0"]
                .into_iter()
                .map(String::from)
                .collect(),
        )
    }

    fn both(all: &[Interface], n: &[String], inc: &[&str], exc: &[&str]) -> Vec<String> {
        picked(select(all, n, &strs(inc), &strs(exc), Families::Both))
    }

    fn picked(r: Result<Vec<Interface>>) -> Vec<String> {
        r.unwrap()
            .into_iter()
            .map(|i| format!("{} {}", i.name, i.addr))
            .collect()
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn by_default_every_up_address_but_loopback_link_local_and_mapped() {
        let (all, n) = host();
        assert_eq!(
            both(&all, &n, &[], &[]),
            [
                "eth0 10.1.0.5",
                "eth1 192.168.7.2",
                "eth0 2001:db8:1::5",
                "eth3 fd00:7::2"
            ]
        );
        let only_lo: Vec<Interface> = all.iter().filter(|i| i.name == "lo").cloned().collect();
        assert_eq!(
            both(&only_lo, &n, &[], &[]),
            ["lo 127.0.0.1", "lo ::1"],
            "loopback alone"
        );
        // A link whose only IPv6 address is link-local (as on the simulated nodes'
        // veths) leaves loopback out, and carries IPv4 only.
        let node = vec![
            i("lo", "127.0.0.1", 8, true),
            i("lo", "::1", 128, true),
            i("veth0", "198.18.1.2", 24, true),
            i("veth0", "fe80::9", 64, true),
        ];
        assert_eq!(both(&node, &n, &[], &[]), ["veth0 198.18.1.2"]);
        let lo_and_link_local = vec![i("lo", "::1", 128, true), i("veth0", "fe80::9", 64, true)];
        assert_eq!(both(&lo_and_link_local, &n, &[], &[]), ["lo ::1"]);
    }

    #[test]
    fn include_and_exclude_by_name_or_network_of_either_family() {
        let (all, n) = host();
        assert_eq!(both(&all, &n, &["lo"], &[]), ["lo 127.0.0.1", "lo ::1"]);
        assert_eq!(both(&all, &n, &["::1/128"], &[]), ["lo ::1"]);
        assert_eq!(both(&all, &n, &["127.0.0.0/8"], &[]), ["lo 127.0.0.1"]);
        assert_eq!(
            both(&all, &n, &["2001:db8::/32", "lo"], &[]),
            ["lo 127.0.0.1", "lo ::1", "eth0 2001:db8:1::5"]
        );
        assert_eq!(
            both(&all, &n, &["10.1.0.0/16", "lo"], &[]),
            ["lo 127.0.0.1", "eth0 10.1.0.5", "lo ::1"],
            "IPv4 first"
        );
        assert_eq!(
            both(&all, &n, &["eth0"], &[]),
            ["eth0 10.1.0.5", "eth0 2001:db8:1::5"],
            "never its link-local address"
        );
        assert_eq!(both(&all, &n, &["fe80::/10"], &[]), Vec::<String>::new());
        assert_eq!(
            both(&all, &n, &["::ffff:0:0/96"], &[]),
            Vec::<String>::new()
        );
        assert_eq!(
            both(&all, &n, &[], &["eth0", "fd00::/8"]),
            ["eth1 192.168.7.2"]
        );
        assert_eq!(
            both(&all, &n, &[], &["192.168.0.0/16", "eth0", "::/0"]),
            ["lo 127.0.0.1"],
            "loopback when nothing else is left"
        );
        assert_eq!(both(&all, &n, &["eth2"], &[]), Vec::<String>::new(), "down");
        assert_eq!(
            both(&all, &n, &["ib0"], &[]),
            Vec::<String>::new(),
            "no address"
        );
    }

    #[test]
    fn disabled_families_are_never_chosen() {
        let (all, n) = host();
        let six = |inc: &[&str]| picked(select(&all, &n, &strs(inc), &[], Families::V6Only));
        let four = |inc: &[&str]| picked(select(&all, &n, &strs(inc), &[], Families::V4Only));
        assert_eq!(six(&[]), ["eth0 2001:db8:1::5", "eth3 fd00:7::2"]);
        assert_eq!(six(&["lo"]), ["lo ::1"]);
        assert_eq!(six(&["10.1.0.0/16"]), Vec::<String>::new());
        assert_eq!(four(&[]), ["eth0 10.1.0.5", "eth1 192.168.7.2"]);
        assert_eq!(four(&["lo"]), ["lo 127.0.0.1"]);
        assert_eq!(four(&["::1/128"]), Vec::<String>::new());
        // IPv6 only, where the only IPv6 beside loopback is link-local: loopback.
        let node = vec![
            i("lo", "127.0.0.1", 8, true),
            i("lo", "::1", 128, true),
            i("veth0", "198.18.1.2", 24, true),
            i("veth0", "fe80::9", 64, true),
        ];
        assert_eq!(
            picked(select(&node, &n, &[], &[], Families::V6Only)),
            ["lo ::1"]
        );
    }

    #[test]
    fn mistakes_are_errors_that_say_what_exists() {
        let (all, n) = host();
        let e = select(&all, &n, &strs(&["lo"]), &strs(&["eth0"]), Families::Both).unwrap_err();
        assert!(e.to_string().contains("both set"), "{e}");
        let e = select(&all, &n, &strs(&["eth9"]), &[], Families::Both)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("eth9") && e.contains("lo, eth0, eth1, eth2, eth3, ib0"),
            "{e}"
        );
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "x/8",
            "::1/129",
            "2001:db8::/x",
            "fe80::1%lo/64",
            "1::2::3/64",
        ] {
            for (inc, exc) in [(strs(&[bad]), vec![]), (vec![], strs(&[bad]))] {
                let e = select(&all, &n, &inc, &exc, Families::Both)
                    .unwrap_err()
                    .to_string();
                assert!(
                    e.contains(&format!(
                        "`{bad}` is neither an interface name nor a network"
                    )) && e.contains("2001:db8::/32"),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn this_host_has_loopback_of_both_families() {
        let (all, names) = list().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
        let lo = |addr: IpAddr, prefix| {
            all.iter()
                .any(|i| i.name == "lo" && i.addr == addr && i.prefix == prefix && i.up)
        };
        assert!(lo(Ipv4Addr::LOCALHOST.into(), 8), "{all:?}");
        assert!(lo(Ipv6Addr::LOCALHOST.into(), 128), "{all:?}");
    }
}
