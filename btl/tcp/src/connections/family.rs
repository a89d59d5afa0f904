//! The two IP families of the `tcp` transport: which of them a module uses
//! (`btl_tcp_disable_family`, as in Open MPI: 0 both, 4 no IPv4, 6 no IPv6), the
//! addresses that never carry its traffic, and networks (`10.1.0.0/16`,
//! `2001:db8::/32`): what an include or exclude item names, and whether two addresses
//! share one.

use rbtl_btl::{Error, Result};
use std::net::IpAddr;

/// The parameter of [`Families`].
pub const DISABLE_FAMILY_PARAM: &str = "btl_tcp_disable_family";

/// The families a module uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Families {
    /// IPv4 and IPv6 (`btl_tcp_disable_family = 0`): each pair of interfaces uses IPv4
    /// where both of its ends have it, IPv6 otherwise.
    Both,
    /// IPv6 only (`btl_tcp_disable_family = 4`).
    V6Only,
    /// IPv4 only (`btl_tcp_disable_family = 6`).
    V4Only,
}

impl Families {
    /// The families `btl_tcp_disable_family = value` leaves.
    pub fn from_param(value: i64) -> Result<Families> {
        match value {
            0 => Ok(Families::Both),
            4 => Ok(Families::V6Only),
            6 => Ok(Families::V4Only),
            other => Err(Error::NotAvailable(format!(
                "{DISABLE_FAMILY_PARAM} = {other}: give 0 (IPv4 and IPv6), \
                 4 (no IPv4: IPv6 only) or 6 (no IPv6: IPv4 only)"
            ))),
        }
    }

    /// The families `config` asks for.
    pub fn of(config: &rbtl_config::Config) -> Result<Families> {
        Families::from_param(config.int(DISABLE_FAMILY_PARAM)?)
    }

    /// The value of `btl_tcp_disable_family` that gives these families.
    pub fn param_value(self) -> i64 {
        match self {
            Families::Both => 0,
            Families::V6Only => 4,
            Families::V4Only => 6,
        }
    }

    /// Whether `ip`'s family is used.
    pub fn admits(self, ip: IpAddr) -> bool {
        match self {
            Families::Both => true,
            Families::V6Only => ip.is_ipv6(),
            Families::V4Only => ip.is_ipv4(),
        }
    }
}

/// Whether `ip` may carry the transport's traffic: not an IPv6 link-local address
/// (`fe80::/10`, which means something only with the interface it is on, and which
/// every IPv6 link has, wanted or not) nor an IPv4-mapped one (`::ffff:a.b.c.d`, an
/// IPv4 address that belongs to the IPv4 side). Open MPI skips link-local addresses too.
pub fn usable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(v6) => !v6.is_unicast_link_local() && v6.to_ipv4_mapped().is_none(),
    }
}

/// The longest prefix of `ip`'s family: 32 or 128.
pub fn max_prefix(ip: IpAddr) -> u8 {
    match ip {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// Whether `a` and `b` are in one network of `prefix` bits; never across families.
pub fn same_network(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// A network, as an include or exclude list names one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    /// An address in it.
    pub addr: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl Net {
    /// `s` as `address/prefix` of either family; `None` if it is not one (a prefix
    /// longer than the family's addresses, an address with a zone, ...).
    pub fn parse(s: &str) -> Option<Net> {
        let (ip, prefix) = s.split_once('/')?;
        let addr: IpAddr = ip.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        (prefix <= max_prefix(addr)).then_some(Net { addr, prefix })
    }

    /// Whether `ip` is in it (never across families).
    pub fn contains(&self, ip: IpAddr) -> bool {
        same_network(self.addr, ip, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_parameter_takes_0_4_or_6_and_names_them_otherwise() {
        assert_eq!(Families::from_param(0).unwrap(), Families::Both);
        assert_eq!(Families::from_param(4).unwrap(), Families::V6Only);
        assert_eq!(Families::from_param(6).unwrap(), Families::V4Only);
        for bad in [-1, 1, 5, 46, i64::MAX] {
            let e = Families::from_param(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("btl_tcp_disable_family = {bad}"))
                    && e.contains("0 (IPv4 and IPv6)")
                    && e.contains("4 (no IPv4")
                    && e.contains("6 (no IPv6"),
                "{e}"
            );
        }
        assert!(Families::V6Only.admits(ip("::1")) && !Families::V6Only.admits(ip("127.0.0.1")));
        assert!(Families::V4Only.admits(ip("127.0.0.1")) && !Families::V4Only.admits(ip("::1")));
        assert!(Families::Both.admits(ip("::1")) && Families::Both.admits(ip("10.0.0.1")));
    }

    #[test]
    fn link_local_and_mapped_addresses_never_carry_traffic() {
        for bad in [
            "fe80::1",
            "fe80::fc:ff:fe00:1",
            "febf::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!usable(ip(bad)), "{bad}");
        }
        for good in [
            "::1",
            "fd00::2",
            "2001:db8::5",
            "fec0::1",
            "127.0.0.1",
            "169.254.0.1",
        ] {
            assert!(usable(ip(good)), "{good}");
        }
    }

    #[test]
    fn networks_of_both_families_parse_and_match_within_their_family() {
        let n = Net::parse("2001:db8::/32").unwrap();
        assert!(n.contains(ip("2001:db8:1::5")));
        assert!(!n.contains(ip("2001:db9::5")));
        assert!(!n.contains(ip("32.1.13.184")), "never across families");
        let lo = Net::parse("::1/128").unwrap();
        assert!(lo.contains(ip("::1")) && !lo.contains(ip("::2")));
        let all = Net::parse("::/0").unwrap();
        assert!(all.contains(ip("fd00::2")) && !all.contains(ip("10.0.0.1")));
        let v4 = Net::parse("10.1.0.0/16").unwrap();
        assert!(v4.contains(ip("10.1.7.7")) && !v4.contains(ip("::ffff:10.1.7.7")));
        assert!(Net::parse("0.0.0.0/0").unwrap().contains(ip("192.0.2.1")));
        for bad in [
            "::1/129",
            "10.0.0.0/33",
            "2001:db8::/x",
            "2001:db8::",
            "fe80::1%lo/64",
            "1::2::3/64",
            "10.0.0/8",
            "/64",
            "::1/-1",
        ] {
            assert_eq!(Net::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn same_network_by_the_shorter_prefix_bits() {
        assert!(same_network(ip("fd00::2"), ip("fd00::3"), 64));
        assert!(!same_network(ip("fd00::2"), ip("fd00:0:0:1::3"), 64));
        assert!(same_network(ip("fd00::2"), ip("fd00:0:0:1::3"), 48));
        assert!(same_network(ip("10.1.0.1"), ip("10.1.9.9"), 16));
        assert!(!same_network(ip("10.1.0.1"), ip("10.2.0.1"), 16));
        assert!(
            !same_network(ip("::"), ip("0.0.0.0"), 0),
            "never across families"
        );
    }
}
