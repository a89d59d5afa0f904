//! Several interfaces per rank, in a network namespace the test makes (veth pairs, one
//! end of each with an address of 198.18.0.0/15; both ranks in the namespace, so their
//! traffic crosses its loopback): one link per pair of interfaces, the contract suite
//! striped over them in small chunks, every link carrying data (the kernel's own
//! counts, `TCP_INFO`), and with one link slowed (a token bucket on that address) the
//! striped transfers still arriving whole; and three links per peer on loopback
//! (`btl_tcp_links`), each carrying data. Ranks of `tcp.rs`'s launcher.

use super::{contract, expect_all_ok, procs, report_ok, tcp_module};
use rbtl::btl::{Endpoint, Module};
use rbtl::tcp::published::Published;
use rbtl::tcp::{LinkBytes, TcpComponent, TcpModule};

/// The interfaces' addresses, one network each.
const ADDRS: [&str; 3] = ["198.18.10.1", "198.18.11.1", "198.18.12.1"];
/// Bytes each link must have carried, both ways, after the contract suite: data, not
/// only its handshake.
const LINK_CARRIES: u64 = 64 * 1024;

/// With `TCP_TEST_IFACES` interfaces chosen: each rank publishes a listener on each,
/// its links to its partner are one per pair of interfaces, the contract suite passes
/// over them with put and get data striped in small chunks, every link is up and has
/// carried at least [`LINK_CARRIES`] bytes, from the interface it belongs to.
pub fn role_interfaces() {
    let n: usize = std::env::var("TCP_TEST_IFACES").unwrap().parse().unwrap();
    let mut job = rbtl::pmi::job().unwrap();
    let config = rbtl::configure(&[]).unwrap();
    let mut m = TcpComponent::open(&config, job.modex.as_mut())
        .unwrap()
        .expect("the interfaces are chosen");
    job.modex.fence().unwrap();
    let eps = m.add_procs(&procs(job.size), job.modex.as_mut()).unwrap();
    let partner = job.rank ^ 1;
    let blob = job.modex.lookup(partner, "btl.tcp").unwrap().unwrap();
    let listeners = Published::decode(&blob).unwrap().listeners;
    let mut addrs: Vec<String> = listeners.iter().map(|l| l.addr.ip().to_string()).collect();
    addrs.sort();
    assert_eq!(addrs, ADDRS[..n], "rank {partner}'s listeners");
    let mut ifaces: Vec<_> = listeners.iter().map(|l| l.iface).collect();
    ifaces.dedup();
    assert_eq!(ifaces.len(), n, "on {n} interfaces");
    let ep = eps[partner as usize].expect("tcp reaches the partner");
    contract::run_all(&mut m, ep);
    assert_eq!(
        m.links(ep),
        Some((n, n)),
        "links to rank {partner} (all, up): one per pair of interfaces"
    );
    let links = every_link_carried_data(&m, ep, job.rank);
    let mut local: Vec<String> = links.iter().map(|l| l.local.ip().to_string()).collect();
    local.sort();
    assert_eq!(local, ADDRS[..n], "one link from each interface");
    job.modex.fence().unwrap();
    report_ok(job.rank, "ok");
}

/// The links to `ep` (of rank `rank`'s module), each checked to have carried at least
/// [`LINK_CARRIES`] bytes by the kernel's count.
fn every_link_carried_data(m: &TcpModule, ep: Endpoint, rank: u32) -> Vec<LinkBytes> {
    let links: Vec<LinkBytes> = m
        .link_bytes(ep)
        .unwrap()
        .into_iter()
        .map(|l| l.expect("TCP_INFO of a link"))
        .collect();
    eprintln!("rank {rank}: links {links:?}");
    for l in &links {
        assert!(
            l.sent + l.received >= LINK_CARRIES,
            "the link {} -> {} carried {} bytes out and {} in: striping leaves it idle",
            l.local,
            l.peer,
            l.sent,
            l.received
        );
    }
    links
}

/// `btl_tcp_links` 3 on loopback: the contract suite, with put and get data striped in
/// small chunks, over three links to the partner, each of which carries data.
pub fn role_links() {
    let (mut m, eps, mut job) = tcp_module();
    let ep = eps[(job.rank ^ 1) as usize].expect("tcp reaches the partner");
    contract::run_all(&mut m, ep);
    assert_eq!(m.links(ep), Some((3, 3)), "three links, all up");
    every_link_carried_data(&m, ep, job.rank);
    job.modex.fence().unwrap();
    report_ok(job.rank, "ok");
}

#[test]
fn three_links_per_peer_each_carry_data() {
    expect_all_ok(
        "links",
        2,
        &[
            ("RBTL_BTL_TCP_LINKS", "3"),
            ("RBTL_BTL_TCP_RDMA_CHUNK", "1000"),
        ],
    );
}

/// A network namespace of this test's with `n` interfaces (veth pairs, one end of
/// each with one of [`ADDRS`]), deleted on drop.
struct Interfaces {
    name: String,
}

/// Run `ip` (or `tc`) with `args`; why not, if it fails.
fn run(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| format!("{tool}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{tool} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

impl Interfaces {
    /// Made, or why it cannot be here (not root, no `ip`).
    fn make(n: usize) -> Result<Interfaces, String> {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("a network namespace needs root".into());
        }
        let ns = Interfaces {
            name: format!("rbtl-links-{}-{n}", std::process::id()),
        };
        run("ip", &["netns", "add", &ns.name])?;
        let name = ns.name.as_str();
        run("ip", &["-n", name, "link", "set", "lo", "up"])?;
        for (i, addr) in ADDRS[..n].iter().enumerate() {
            let dev = format!("rbtl-{i}");
            let peer = format!("{dev}-peer");
            run(
                "ip",
                &[
                    "-n", name, "link", "add", &dev, "type", "veth", "peer", "name", &peer,
                ],
            )?;
            run(
                "ip",
                &[
                    "-n",
                    name,
                    "addr",
                    "add",
                    &format!("{addr}/24"),
                    "dev",
                    &dev,
                ],
            )?;
            run("ip", &["-n", name, "link", "set", &dev, "up"])?;
            run("ip", &["-n", name, "link", "set", &peer, "up"])?;
        }
        Ok(ns)
    }

    /// Slow the traffic to `addr` (both ends of its link are there) to `rate` with a
    /// token bucket on the namespace's loopback, leaving the rest unlimited.
    fn slow(&self, addr: &str, rate: &str) -> Result<(), String> {
        let tc = |args: &[&str]| {
            let mut all = vec!["netns", "exec", self.name.as_str(), "tc"];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        tc(&[
            "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10",
        ])?;
        tc(&[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb", "rate",
            "100gbit",
        ])?;
        tc(&[
            "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb", "rate", rate,
        ])?;
        let dst = format!("{addr}/32");
        tc(&[
            "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "u32", "match", "ip",
            "dst", &dst, "flowid", "1:20",
        ])
    }

    /// Run `f` on a thread of its own inside the namespace (processes it starts are
    /// inside too).
    fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::scope(|s| {
            s.spawn(|| {
                let ns = std::fs::File::open(&path).unwrap();
                use std::os::fd::AsRawFd;
                // SAFETY: a namespace file we opened; only this thread moves into it.
                let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
                f()
            })
            .join()
            .unwrap()
        })
    }
}

impl Drop for Interfaces {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// The job over `n` interfaces of a namespace, the last slowed to `slow` if given.
/// Needs root, `ip` and `tc`; says SKIP without them, unless `NODES_REQUIRED=1` (as
/// `.ci/run` sets), which makes that a failure.
fn over_interfaces(test: &str, n: usize, slow: Option<&str>) {
    let made = Interfaces::make(n).and_then(|ns| {
        slow.map_or(Ok(()), |rate| ns.slow(ADDRS[n - 1], rate))?;
        Ok(ns)
    });
    let ns = match made {
        Ok(ns) => ns,
        Err(why) => return rbtl_testkit::cannot_run(test, &why),
    };
    let include: Vec<String> = ADDRS[..n].iter().map(|a| format!("{a}/24")).collect();
    let n = n.to_string();
    ns.run(|| {
        expect_all_ok(
            "interfaces",
            2,
            &[
                ("RBTL_BTL_TCP_IF_INCLUDE", include.join(",").as_str()),
                ("RBTL_BTL_TCP_RDMA_CHUNK", "1000"),
                ("TCP_TEST_IFACES", n.as_str()),
            ],
        )
    });
}

#[test]
fn two_interfaces_per_rank_give_a_link_per_pair_each_carrying_data() {
    over_interfaces("two_interfaces_per_rank", 2, None);
}

#[test]
fn three_links_one_slowed_carry_striped_transfers_whole() {
    over_interfaces("three_links_one_slowed", 3, Some("8mbit"));
}
