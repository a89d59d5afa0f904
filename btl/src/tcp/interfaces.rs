//! The interfaces a `tcp` module listens on: this host's IPv4 interfaces from
//! `getifaddrs`, chosen by `btl_tcp_if_include` or `btl_tcp_if_exclude` (names such
//! as `eth0`, or networks such as `10.1.0.0/16`). As in Open MPI, by default every up
//! interface but loopback, and loopback only when nothing else is up.

use crate::{Error, Result};
use std::ffi::CStr;
use std::net::Ipv4Addr;

/// One IPv4 address of an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its name (`eth0`, `lo`).
    pub name: String,
    /// The address.
    pub addr: Ipv4Addr,
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

/// This host's interfaces: every IPv4 address, and the names of all interfaces
/// (including those without IPv4), for error messages.
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
        if let Some(addr) = unsafe { ipv4(ifa.ifa_addr) } {
            // SAFETY: as above.
            let mask = unsafe { ipv4(ifa.ifa_netmask) };
            let prefix = mask.map_or(32, |m| u32::from(m).count_ones() as u8);
            out.push(Interface {
                name: name.clone(),
                addr,
                prefix,
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

/// The IPv4 address at `sa`, if it is one.
///
/// # Safety
///
/// `sa` is null or points to a socket address valid for its family's size.
unsafe fn ipv4(sa: *const libc::sockaddr) -> Option<Ipv4Addr> {
    // SAFETY: non-null, and every socket address starts with its family.
    if sa.is_null() || i32::from(unsafe { (*sa).sa_family }) != libc::AF_INET {
        return None;
    }
    // SAFETY: an AF_INET address is a sockaddr_in (the caller's contract).
    let sin = unsafe { *(sa as *const libc::sockaddr_in) };
    Some(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)))
}

/// One item of an include or exclude list.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Filter {
    Name(String),
    Net(Ipv4Addr, u8),
}

impl Filter {
    fn parse(s: &str, param: &str) -> Result<Filter> {
        let Some((ip, prefix)) = s.split_once('/') else {
            return Ok(Filter::Name(s.to_string()));
        };
        let bad = || {
            Error::NotAvailable(format!(
                "{param}: `{s}` is neither an interface name nor a network such as 10.1.0.0/16"
            ))
        };
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let prefix: u8 = prefix.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Filter::Net(ip, prefix))
    }

    fn matches(&self, i: &Interface) -> bool {
        match self {
            Filter::Name(n) => *n == i.name,
            Filter::Net(net, prefix) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(*prefix)).unwrap_or(0);
                u32::from(i.addr) & mask == u32::from(*net) & mask
            }
        }
    }
}

/// The interfaces this host's `tcp` module would listen on under `config`
/// (`btl_tcp_if_include` / `btl_tcp_if_exclude`).
pub fn chosen(config: &rbtl_config::Config) -> Result<Vec<Interface>> {
    let (all, names) = list()?;
    select(
        &all,
        &names,
        config.list("btl_tcp_if_include")?,
        config.list("btl_tcp_if_exclude")?,
    )
}

/// The interfaces to use among `all` (whose interface names are `names`), by the
/// include and exclude lists (at most one of them set).
pub fn select(
    all: &[Interface],
    names: &[String],
    include: &[String],
    exclude: &[String],
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
    let up = all.iter().filter(|i| i.up);
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

    fn host() -> (Vec<Interface>, Vec<String>) {
        let i = |name: &str, addr: [u8; 4], prefix, up| Interface {
            name: name.into(),
            addr: addr.into(),
            prefix,
            up,
        };
        (
            vec![
                i("lo", [127, 0, 0, 1], 8, true),
                i("eth0", [10, 1, 0, 5], 16, true),
                i("eth1", [192, 168, 7, 2], 24, true),
                i("eth2", [172, 16, 0, 1], 12, false),
            ],
            vec!["lo", "eth0", "eth1", "eth2", "ib0"]
                .into_iter()
                .map(String::from)
                .collect(),
        )
    }

    fn names(r: Result<Vec<Interface>>) -> Vec<String> {
        r.unwrap().into_iter().map(|i| i.name).collect()
    }

    fn strs(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn by_default_every_up_interface_but_loopback() {
        let (all, n) = host();
        assert_eq!(names(select(&all, &n, &[], &[])), ["eth0", "eth1"]);
        let only_lo = &all[..1];
        assert_eq!(
            names(select(only_lo, &n, &[], &[])),
            ["lo"],
            "loopback alone"
        );
    }

    #[test]
    fn include_and_exclude_by_name_or_network() {
        let (all, n) = host();
        assert_eq!(names(select(&all, &n, &strs(&["lo"]), &[])), ["lo"]);
        assert_eq!(
            names(select(&all, &n, &strs(&["10.1.0.0/16", "lo"]), &[])),
            ["lo", "eth0"]
        );
        assert_eq!(names(select(&all, &n, &[], &strs(&["eth0"]))), ["eth1"]);
        assert_eq!(
            names(select(&all, &n, &[], &strs(&["192.168.0.0/16", "eth0"]))),
            ["lo"]
        );
        assert_eq!(
            names(select(&all, &n, &strs(&["eth2"]), &[])),
            Vec::<String>::new(),
            "down"
        );
        assert_eq!(
            names(select(&all, &n, &strs(&["ib0"]), &[])),
            Vec::<String>::new(),
            "no IPv4"
        );
    }

    #[test]
    fn mistakes_are_errors_that_say_what_exists() {
        let (all, n) = host();
        let e = select(&all, &n, &strs(&["lo"]), &strs(&["eth0"])).unwrap_err();
        assert!(e.to_string().contains("both set"), "{e}");
        let e = select(&all, &n, &strs(&["eth9"]), &[])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("eth9") && e.contains("lo, eth0, eth1, eth2, ib0"),
            "{e}"
        );
        for bad in ["10.0.0.0/33", "10.0.0/8", "x/8"] {
            assert!(select(&all, &n, &strs(&[bad]), &[]).is_err(), "{bad}");
        }
    }

    #[test]
    fn this_host_has_loopback() {
        let (all, names) = list().unwrap();
        assert!(names.iter().any(|n| n == "lo"), "{names:?}");
        assert!(all
            .iter()
            .any(|i| i.addr == Ipv4Addr::LOCALHOST && i.prefix == 8));
    }
}
