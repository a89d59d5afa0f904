//! Which node a process runs on, as the ranks of a job compare it. Ranks with equal
//! identities share a node (memory, loopback, `/proc`), so `sm` may connect them and
//! `tcp` may pair their loopback addresses; ranks with different ones never do.
//!
//! The identity follows the host name the launcher gives the process (hydra's and
//! Slurm's node names, the UTS namespace of a simulated node), joined with what tells
//! apart processes that share a host name but not a node: the kernel's boot id (two
//! machines both called `localhost`), the network namespace (whose loopback and
//! interfaces are its own) and the PID namespace (`sm` reaches a peer's memory through
//! its pid). When the launcher states where it placed each rank (the
//! `PMI_process_mapping` job attribute, which hydra and Slurm serve over PMI-1), its
//! node index is part of the identity too, so two ranks are on one node only when
//! the launcher and the kernel agree.

use super::Error;
use std::fmt;
use std::os::unix::fs::MetadataExt;

/// The node a process runs on. Two processes are on one node when their identities
/// are equal; [`Display`](fmt::Display) gives the text the modex carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeId {
    /// The host name (of the process's UTS namespace).
    pub host: String,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), empty when unreadable.
    pub boot: String,
    /// The inode of the process's network namespace (0 when unreadable).
    pub netns: u64,
    /// The inode of the process's PID namespace (0 when unreadable).
    pub pidns: u64,
    /// The launcher's index of the node it placed this rank on, when it says.
    pub launcher_node: Option<u32>,
}

impl NodeId {
    /// This process's node; `launcher_node` is the launcher's index for it, if any.
    pub fn this(launcher_node: Option<u32>) -> NodeId {
        let namespace =
            |kind: &str| std::fs::metadata(format!("/proc/self/ns/{kind}")).map_or(0, |m| m.ino());
        NodeId {
            host: host_name(),
            boot: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            netns: namespace("net"),
            pidns: namespace("pid"),
            launcher_node,
        }
    }
}

impl fmt::Display for NodeId {
    /// `host/boot/net:N/pid:N[/launcher:K]`: the host name first, for people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/net:{}/pid:{}",
            self.host, self.boot, self.netns, self.pidns
        )?;
        if let Some(k) = self.launcher_node {
            write!(f, "/launcher:{k}")?;
        }
        Ok(())
    }
}

/// The host name of this process's UTS namespace (`localhost` when it has none).
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match rc {
        0 if end > 0 => String::from_utf8_lossy(&buf[..end]).into_owned(),
        _ => "localhost".into(),
    }
}

/// The PMI key under which hydra and Slurm publish where they placed each rank.
pub const PROCESS_MAPPING_KEY: &str = "PMI_process_mapping";

/// The node index of every rank of a job of `size` from MPICH's process mapping
/// text: `(vector,(start,nodes,ranks),...)`, where each block puts `ranks`
/// consecutive ranks on each of the nodes `start..start+nodes`, and the blocks repeat
/// until every rank is placed. `(vector,(0,2,1))` alternates two nodes;
/// `(vector,(0,1,2),(1,1,1))` puts ranks 0 and 1 on node 0 and rank 2 on node 1.
pub fn parse_process_mapping(text: &str, size: u32) -> Result<Vec<u32>, Error> {
    let bad = |why: &str| Error::ProcessMapping {
        value: text.chars().take(200).collect(),
        why: why.to_string(),
    };
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let body = compact
        .strip_prefix("(vector,")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad("not of the form (vector,(start,nodes,ranks),...)"))?;
    let mut blocks = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let inner = rest
            .strip_prefix('(')
            .ok_or_else(|| bad("a block does not start with '('"))?;
        let close = inner
            .find(')')
            .ok_or_else(|| bad("a block is not closed"))?;
        let numbers: Vec<u32> = inner[..close]
            .split(',')
            .map(|n| n.parse::<u32>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad("a block holds something other than three whole numbers"))?;
        let [start, nodes, ranks] = numbers[..] else {
            return Err(bad("a block holds other than three numbers"));
        };
        if nodes == 0 || ranks == 0 {
            return Err(bad("a block places no ranks (0 nodes or 0 ranks per node)"));
        }
        if start.checked_add(nodes).is_none() {
            return Err(bad("a block's node indices overflow"));
        }
        blocks.push((start, nodes, ranks));
        rest = &inner[close + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    if blocks.is_empty() {
        return Err(bad("no blocks"));
    }
    let size = size as usize;
    let mut out = Vec::with_capacity(size);
    'fill: loop {
        for &(start, nodes, ranks) in &blocks {
            for node in start..start + nodes {
                for _ in 0..ranks {
                    if out.len() == size {
                        break 'fill;
                    }
                    out.push(node);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mappings_of_hydra_and_slurm_place_ranks_as_they_did() {
        // hydra, 2 ranks, one per node; 4 ranks, two per node.
        assert_eq!(
            parse_process_mapping("(vector,(0,2,1))", 2).unwrap(),
            [0, 1]
        );
        assert_eq!(
            parse_process_mapping("(vector,(0,2,2))", 4).unwrap(),
            [0, 0, 1, 1]
        );
        // hydra, 2 ranks on one host: the block repeats.
        assert_eq!(
            parse_process_mapping("(vector,(0,1,1))", 2).unwrap(),
            [0, 0]
        );
        // Slurm, srun -N 2 -n 3 (block distribution).
        assert_eq!(
            parse_process_mapping("(vector,(0,1,2),(1,1,1))", 3).unwrap(),
            [0, 0, 1]
        );
        // Cyclic over three nodes, with spaces.
        assert_eq!(
            parse_process_mapping(" (vector, (0,3,1)) ", 5).unwrap(),
            [0, 1, 2, 0, 1]
        );
        assert!(parse_process_mapping("(vector,(0,2,1))", 0)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn malformed_mappings_are_errors_that_quote_them() {
        for text in [
            "",
            "(vector)",
            "(vector,)",
            "(hybrid,(0,2,1))",
            "(vector,(0,2))",
            "(vector,(0,2,1,4))",
            "(vector,(0,0,1))",
            "(vector,(0,2,0))",
            "(vector,(0,2,1)",
            "(vector,(0,-2,1))",
            "(vector,(4294967295,2,1))",
            "(vector,(0,2,1)x)",
        ] {
            match parse_process_mapping(text, 4) {
                Err(e @ Error::ProcessMapping { .. }) => {
                    assert!(e.to_string().contains("PMI_process_mapping"), "{e}");
                }
                other => panic!("{text:?}: expected ProcessMapping, got {other:?}"),
            }
        }
    }

    #[test]
    fn this_node_names_the_host_and_namespaces() {
        let me = NodeId::this(Some(3));
        assert_eq!(me.host, host_name());
        assert!(me.netns != 0 && me.pidns != 0, "{me:?}");
        assert_eq!(me.boot.len(), 36, "a boot id is a UUID: {me:?}");
        let text = me.to_string();
        assert!(text.starts_with(&format!("{}/", me.host)), "{text}");
        assert!(text.ends_with("/launcher:3"), "{text}");
        assert_eq!(NodeId::this(Some(3)), me);
        assert_ne!(NodeId::this(Some(4)), me);
        assert_ne!(NodeId::this(None).to_string(), text);
    }

    /// A UTS namespace of its own (a simulated node's host name) gives another
    /// identity on the same machine. Namespaces belong to threads: a thread of its
    /// own unshares it, leaving the other tests' host name alone. Needs root
    /// (CAP_SYS_ADMIN), else says so.
    #[test]
    fn another_host_name_is_another_node() {
        let here = NodeId::this(None);
        let there = std::thread::spawn(|| {
            // SAFETY: unshare takes no pointers; it gives this thread alone a copy of
            // the UTS namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWUTS) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let name = b"rbtl-node-id-test";
            // SAFETY: the name is valid for its length during the call.
            if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(NodeId::this(None))
        })
        .join()
        .expect("the thread ran");
        match there {
            Ok(there) => {
                assert_eq!(there.host, "rbtl-node-id-test");
                assert_eq!((&there.boot, there.netns), (&here.boot, here.netns));
                assert_ne!(there, here);
                assert_ne!(there.to_string(), here.to_string());
            }
            // SAFETY: geteuid has no arguments and cannot fail.
            Err(e) if unsafe { libc::geteuid() } != 0 => {
                eprintln!("SKIP: a UTS namespace of its own needs root ({e})");
            }
            Err(e) => panic!("root could not make a UTS namespace: {e}"),
        }
        assert_eq!(
            host_name(),
            here.host,
            "the other threads keep their host name"
        );
    }

    proptest! {
        #[test]
        fn any_text_parses_or_is_refused(text in ".{0,80}", size in 0u32..64) {
            if let Ok(map) = parse_process_mapping(&text, size) {
                prop_assert_eq!(map.len(), size as usize);
            }
        }

        #[test]
        fn mappings_round_trip(
            blocks in proptest::collection::vec((0u32..8, 1u32..4, 1u32..4), 1..4),
            size in 0u32..40,
        ) {
            let text: Vec<String> = blocks
                .iter()
                .map(|(s, n, r)| format!("({s},{n},{r})"))
                .collect();
            let map = parse_process_mapping(&format!("(vector,{})", text.join(",")), size)
                .unwrap();
            prop_assert_eq!(map.len(), size as usize);
            // One pass over the blocks, which the ranks repeat.
            let pass: Vec<u32> = blocks
                .iter()
                .flat_map(|&(s, n, r)| (s..s + n).flat_map(move |k| std::iter::repeat_n(k, r as usize)))
                .collect();
            for (rank, node) in map.iter().enumerate() {
                prop_assert_eq!(*node, pass[rank % pass.len()]);
            }
        }
    }
}
