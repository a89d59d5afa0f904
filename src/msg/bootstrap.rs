//! Making a communicator: the job from the process manager, the transports the
//! configuration selects, their addresses through the modex, and a route to every rank.

use super::callbacks::register_callbacks;
use super::coll_choice;
use super::liveness;
use super::placement;
use super::responder;
use super::state::{self, Shared, State};
use super::{Comm, Error, Result};
use crate::pmi::Job;
use rbtl_btl::{BtlFlags, Endpoint, Proc};
use rbtl_config::Config;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The modex key of [`Comm::node_reads_slow`]: one byte, 1 where this rank's
/// transports found reads by address slow.
const READS_SLOW_KEY: &str = "reads_slow";

impl Comm {
    /// The job from the environment (PMI under a launcher, else alone) with the
    /// configuration from `RBTL_*` variables, `RBTL_CONFIG_FILE` and `settings`.
    pub fn init(settings: &[(&str, &str)]) -> Result<Comm> {
        let job = crate::pmi::job()?;
        let config = crate::configure(settings)?;
        Comm::with(job, &config)
    }

    /// Open the configured transports for `job` and connect every rank.
    pub fn with(mut job: Job, config: &Config) -> Result<Comm> {
        let peer_timeout = liveness::peer_timeout(config)?;
        let progress_thread = super::background::interval(config)?;
        let coll_algorithms = coll_choice::chosen(config)?;
        let node = job.node.to_string();
        let modex = job.modex.as_mut();
        modex.publish("node", node.as_bytes())?;
        if job.rank == 0 {
            modex.publish(
                coll_choice::CHOSEN_KEY,
                coll_algorithms.described().as_bytes(),
            )?;
        }
        if let Some(mask) = placement::cpu_mask() {
            modex.publish(placement::CPUS_KEY, &mask)?;
        }
        if let Some(card) = responder::card(config) {
            modex.publish(responder::CARD_KEY, &card.encode())?;
        }
        let mut framework = crate::framework();
        let mut modules = framework.open(config, modex)?;
        let reads_slow = modules.iter().any(|m| {
            let a = m.attributes();
            a.flags.contains(BtlFlags::UNREGISTERED_REMOTE) && a.unregistered_remote_below == 0
        });
        modex.publish(READS_SLOW_KEY, &[u8::from(reads_slow)])?;
        modex.fence()?;
        if job.rank != 0 {
            let first = modex.lookup(0, coll_choice::CHOSEN_KEY)?;
            coll_choice::same_as_first(&coll_algorithms, job.rank, first.as_deref())?;
        }
        let procs: Vec<Proc> = (0..job.size)
            .map(|rank| {
                let node = modex.lookup(rank, "node")?.unwrap_or_default();
                Ok(Proc {
                    rank,
                    node: String::from_utf8_lossy(&node).into_owned(),
                })
            })
            .collect::<Result<_, rbtl_btl::Error>>()?;
        let here: Vec<u32> = procs
            .iter()
            .filter(|p| p.node == node)
            .map(|p| p.rank)
            .collect();
        let masks = here
            .iter()
            .map(|&rank| modex.lookup(rank, placement::CPUS_KEY))
            .collect::<Result<Vec<_>, rbtl_btl::Error>>()?;
        let oversubscribed = placement::oversubscribed(here.len(), placement::processors_of(masks));
        // The node's first rank's answer: one every rank of the node reads alike.
        let node_reads_slow = match here.first() {
            Some(&first) if first != job.rank => {
                modex.lookup(first, READS_SLOW_KEY)?.as_deref() == Some(&[1][..])
            }
            _ => reads_slow,
        };
        liveness::set_yield(config, oversubscribed)?;
        if placement::bind_chosen(config, oversubscribed)? {
            // Before the transports wire up: what they first touch from here on is
            // touched from this processor.
            let index = procs[..job.rank as usize]
                .iter()
                .filter(|p| p.node == node)
                .count();
            if let Err(e) = placement::bind_to_share(index) {
                tracing::warn!(%e, "could not bind to this rank's share of the processors");
            }
        }
        let mut numbers = std::collections::HashMap::new();
        let nodes = procs
            .iter()
            .map(|p| {
                let next = numbers.len() as u32;
                *numbers.entry(p.node.as_str()).or_insert(next)
            })
            .collect();
        let mut state = State {
            route: vec![None; job.size as usize],
            split_from: super::split::split_from(config)?,
            ..State::default()
        };
        // Per module: endpoint -> rank (for its receive callbacks).
        let mut rank_of = Vec::new();
        for (mi, m) in modules.iter_mut().enumerate() {
            let eps = m.add_procs(&procs, modex)?;
            let mut map = Vec::new();
            for (rank, ep) in eps.into_iter().enumerate() {
                if let Some(ep) = ep {
                    *super::state::slot(&mut map, ep.0 as usize) = Some(rank as u32);
                    state.route[rank].get_or_insert((mi, ep));
                }
            }
            rank_of.push(Arc::<[Option<u32>]>::from(map));
        }
        let tried = || {
            modules
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(",")
        };
        // A rank reaches itself only through `self`: said first, as what is missing.
        if state.route[job.rank as usize].is_none() {
            return Err(Error::SelfUnreachable {
                rank: job.rank,
                tried: tried(),
            });
        }
        if let Some(rank) = state.route.iter().position(Option::is_none) {
            return Err(Error::Unreachable {
                rank: rank as u32,
                tried: tried(),
                closed: framework
                    .closed()
                    .iter()
                    .map(|why| format!("; {why}"))
                    .collect(),
            });
        }
        let mut remote = vec![false; modules.len()];
        for (rank, r) in state.route.iter().enumerate() {
            if let Some((mi, _)) = r {
                remote[*mi] |= rank as u32 != job.rank;
            }
        }
        let dirty = vec![true; modules.len()];
        let eager = modules.iter().map(|m| m.attributes().eager_limit).collect();
        let routes: Vec<(usize, Endpoint)> = state
            .route
            .iter()
            .map(|r| r.expect("checked above"))
            .collect();
        let signals = state.signals.clone();
        let state: Shared = state::shared(state);
        for ((mi, m), ranks) in modules.iter_mut().enumerate().zip(rank_of) {
            register_callbacks(m.as_mut(), mi, &ranks, &state)?;
        }
        // Everyone has its callbacks in place before anyone sends.
        job.modex.fence()?;
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(Comm {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rank: job.rank,
            size: job.size,
            modules,
            state,
            signals,
            routes,
            remote,
            dirty,
            eager,
            offload: None,
            peer_timeout,
            job,
            nodes,
            node_oversubscribed: oversubscribed,
            node_reads_slow,
            progress_thread,
            coll_algorithms,
            bridge: None,
            cards: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::msg::{Comm, Error};

    #[test]
    fn without_self_a_rank_is_told_to_add_it() {
        match Comm::init(&[("btl", "sm")]) {
            Err(e @ Error::SelfUnreachable { rank: 0, .. }) => {
                assert!(e.to_string().contains("add `self`"), "{e}")
            }
            Err(e) => panic!("expected SelfUnreachable, got {e}"),
            Ok(_) => panic!("expected SelfUnreachable, got a communicator"),
        }
    }

    #[test]
    fn the_split_size_is_a_size_and_zero_means_never() {
        let split_from = |v: &str| {
            let config = crate::configure(&[("msg_split_from", v)])?;
            crate::msg::split::split_from(&config)
        };
        assert_eq!(split_from("64k").unwrap(), 64 << 10);
        assert_eq!(split_from("0").unwrap(), usize::MAX);
        assert!(split_from("lots").is_err());
    }

    /// The node's answer follows what `sm` says of reads by address: slow at every size
    /// where `btl_sm_by_address_below` is 0, worth it below 1 MiB where it says so, and
    /// no answer where its reads by address are off (`btl_sm_rdma=copy`).
    #[test]
    fn the_node_reads_slow_where_sm_says_so() {
        let reads_slow = |below: &str, rdma: &str| {
            let settings = [
                ("btl", "self,sm"),
                ("btl_sm_by_address_below", below),
                ("btl_sm_rdma", rdma),
            ];
            Comm::init(&settings).unwrap().node_reads_slow()
        };
        if !reads_slow("0", "auto") {
            // Cross-memory attach refused here: `sm` offers no reads by address.
            rbtl_testkit::cannot_run(
                "the node's reads by address",
                "cross-memory attach is refused",
            );
            return;
        }
        assert!(!reads_slow("1m", "auto"));
        assert!(!reads_slow("0", "copy"));
    }

    #[test]
    fn a_rank_alone_shares_its_node_with_itself_only() {
        let comm = Comm::init(&[("btl", "self")]).unwrap();
        assert!(comm.same_node(0, 0));
        assert!(!comm.same_node(0, 1));
        assert!(!comm.same_node(1, 1));
    }

    #[test]
    fn the_peer_timeout_is_a_number_of_seconds() {
        assert!(Comm::init(&[("btl", "self"), ("msg_peer_timeout", "0")]).is_ok());
        assert!(Comm::init(&[("btl", "self"), ("msg_peer_timeout", "5")]).is_ok());
        match Comm::init(&[("btl", "self"), ("msg_peer_timeout", "-1")]) {
            Err(e @ Error::BadParameter(_)) => assert!(e.to_string().contains("0 to wait forever")),
            Err(e) => panic!("expected BadParameter, got {e}"),
            Ok(_) => panic!("a negative timeout was taken"),
        }
        assert!(matches!(
            Comm::init(&[("btl", "self"), ("msg_peer_timeout", "soon")]),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn a_rank_binds_itself_to_its_share_of_the_processors_only_when_asked() {
        use crate::msg::placement::{affinity, cpus_of};
        let cpus = cpus_of(&affinity().unwrap());
        // On threads of their own: the harness's threads keep their affinity.
        let after_init = |v: &'static str| {
            std::thread::spawn(move || {
                let _comm = Comm::init(&[("btl", "self"), ("msg_bind_to", v)]).unwrap();
                cpus_of(&affinity().unwrap())
            })
            .join()
            .unwrap()
        };
        assert_eq!(after_init("none"), cpus);
        // By default not where the rank has a processor of its own.
        assert_eq!(after_init("auto"), cpus);
        // The first rank of its node binds to the first processor it may run on.
        assert_eq!(after_init("core"), [cpus[0]]);
    }

    #[test]
    fn waits_yield_early_where_ranks_outnumber_processors() {
        let config = |v: &str| crate::configure(&[("msg_yield_when_idle", v)]).unwrap();
        assert!(!crate::msg::liveness::set_yield(&config("auto"), false).unwrap());
        assert!(crate::msg::liveness::set_yield(&config("auto"), true).unwrap());
        assert!(crate::msg::liveness::set_yield(&config("always"), false).unwrap());
        assert!(!crate::msg::liveness::set_yield(&config("never"), true).unwrap());
        match Comm::init(&[("btl", "self"), ("msg_yield_when_idle", "sometimes")]) {
            Err(e @ Error::BadParameter(_)) => {
                assert!(e.to_string().contains("msg_yield_when_idle"), "{e}")
            }
            Err(e) => panic!("expected BadParameter, got {e}"),
            Ok(_) => panic!("an unknown choice was taken"),
        }
        crate::msg::liveness::set_yield(&config("never"), false).unwrap();
    }
}
