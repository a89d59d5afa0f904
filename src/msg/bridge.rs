//! Reaching processes of other jobs of the same launcher: those this job spawned, or
//! the job that spawned it (an MPI library's dynamic processes).
//!
//! Every process of the jobs that meet has a number in one sequence (a spawned job's
//! ranks after those started before it: its *base*, in its key-value space as
//! `rbtl_universe_base`), given by the launcher or claimed by the parents
//! ([`super::meeting`]). The bridge is a `tcp` module of its own whose ranks are
//! these numbers, opened when first needed; it publishes its address where the jobs
//! meet (this job's key-value space under its own keys, or the launcher's names; no
//! barrier: the processes that read it are told when to), and reads other jobs'
//! addresses there. Their processes get ranks of this communicator after its own
//! job's, in the order they were connected.

use super::callbacks::register_callbacks;
use super::meeting::{process_name, Meeting};
use super::{Comm, Error, Result};
use crate::pmi::{base64_decode, base64_encode, PmiModex};
use rbtl_btl::{Modex, Proc};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The most processes the jobs that meet may number where a launcher or claims
/// number them in turn (Slurm's job steps are numbered apart, each from its step
/// number times [`super::meeting::STEP_SPAN`]).
pub const UNIVERSE_MAX: u32 = 1 << 16;

/// A job the bridge reaches: its key-value space and where its ranks start.
#[derive(Clone, Debug)]
struct KnownJob {
    kvsname: String,
    base: u32,
    size: u32,
}

/// The bridge of a communicator.
pub(super) struct Bridge {
    /// Its module, among the communicator's.
    module: usize,
    /// This process's rank in the launcher's numbering.
    universe_rank: u32,
    /// Where the jobs meet.
    meeting: Meeting,
    jobs: Vec<KnownJob>,
    /// Per endpoint of the bridge: the communicator's rank of its process.
    ranks: Vec<Option<u32>>,
    /// The communicator's rank of each process connected (by its launcher rank): a
    /// process met again (a reconnection) keeps its rank and its connection.
    met: BTreeMap<u32, u32>,
}

/// The bridge's modex: this process as its universe rank, publishing in its own
/// job's key-value space, reading other jobs' by name.
struct BridgeModex<'a> {
    pmi: &'a mut PmiModex,
    me: u32,
    jobs: &'a [KnownJob],
    meeting: Meeting,
}

/// The key of a process's node (the job's own modex has it too).
const NODE_KEY: &str = "node";

/// The bridge's keys, apart from the job's own transports'.
fn bridge_key(key: &str) -> String {
    format!("u{key}")
}

impl Modex for BridgeModex<'_> {
    fn rank(&self) -> u32 {
        self.me
    }

    fn size(&self) -> u32 {
        u32::MAX
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> rbtl_btl::Result<()> {
        if self.meeting != Meeting::Kvs {
            let name = process_name(self.me, key);
            return self
                .pmi
                .client()
                .publish_name(&name, &base64_encode(value))
                .map_err(|e| rbtl_btl::Error::Modex(format!("publishing {name}: {e}")));
        }
        self.pmi.publish_as(self.me, &bridge_key(key), value)
    }

    fn fence(&mut self) -> rbtl_btl::Result<()> {
        Ok(())
    }

    fn lookup(&mut self, rank: u32, key: &str) -> rbtl_btl::Result<Option<Vec<u8>>> {
        if self.meeting != Meeting::Kvs {
            return lookup_named(self.pmi, rank, key);
        }
        let job = self
            .jobs
            .iter()
            .find(|j| (j.base..j.base + j.size).contains(&rank))
            .ok_or_else(|| {
                rbtl_btl::Error::Modex(format!("no known job holds process {rank} of the launcher"))
            })?;
        self.pmi
            .lookup_in(Some(&job.kvsname), rank, &bridge_key(key))
    }
}

/// What process `rank` (of the jobs' numbering) published under `key` in the
/// launcher's names.
fn lookup_named(pmi: &mut PmiModex, rank: u32, key: &str) -> rbtl_btl::Result<Option<Vec<u8>>> {
    let name = process_name(rank, key);
    let text = pmi
        .client()
        .lookup_name(&name)
        .map_err(|e| rbtl_btl::Error::Modex(format!("looking up {name}: {e}")))?;
    text.map(|t| {
        base64_decode(&t)
            .ok_or_else(|| rbtl_btl::Error::Modex(format!("{name} is not this library's: {t:?}")))
    })
    .transpose()
}

/// The PMI modex of `job`, where it has a launcher.
fn pmi_of(job: &mut crate::pmi::Job) -> Result<&mut PmiModex> {
    job.modex
        .as_any_mut()
        .and_then(|a| a.downcast_mut::<PmiModex>())
        .ok_or_else(|| {
            Error::BadParameter(
                "this process has no launcher (PMI) to reach other jobs through".into(),
            )
        })
}

impl Comm {
    /// The PMI modex under this communicator, where the job has a launcher.
    pub(super) fn pmi(&mut self) -> Result<&mut PmiModex> {
        pmi_of(&mut self.job)
    }

    /// This job's key-value space.
    pub fn kvsname(&mut self) -> Result<String> {
        Ok(self.pmi()?.client().kvsname().to_string())
    }

    /// Which executable of a multi-executable launch (or spawn) this process runs:
    /// 0 for the first or only one, or without a launcher; `None` where the
    /// launcher does not number them (but for a spawn's processes, which know the
    /// commands' counts from their parents).
    pub fn appnum(&mut self) -> Result<Option<u32>> {
        match self.pmi() {
            Ok(p) => match p.client().appnum()? {
                Some(n) => Ok(Some(n)),
                None => self.spawned_appnum(),
            },
            Err(_) => Ok(Some(0)),
        }
    }

    /// How many processes this job and those it spawns may number, as the launcher
    /// says (`None`: no bound, or no launcher).
    pub fn universe_size(&mut self) -> Option<u32> {
        self.pmi().ok()?.client().universe_size().ok().flatten()
    }

    /// Publish `port` under `service` with the launcher (refused when the service has
    /// one).
    pub fn publish_name(&mut self, service: &str, port: &str) -> Result<()> {
        Ok(self.pmi()?.client().publish_name(service, port)?)
    }

    /// Withdraw `service` (refused when it is not published).
    pub fn unpublish_name(&mut self, service: &str) -> Result<()> {
        Ok(self.pmi()?.client().unpublish_name(service)?)
    }

    /// The port published under `service`.
    pub fn lookup_name(&mut self, service: &str) -> Result<Option<String>> {
        Ok(self.pmi()?.client().lookup_name(service)?)
    }

    /// Open the bridge (once) and publish its address; this process's rank in the
    /// launcher's numbering.
    pub fn open_bridge(&mut self) -> Result<u32> {
        if let Some(b) = &self.bridge {
            return Ok(b.universe_rank);
        }
        // (Where jobs cannot meet, only this job's processes read its addresses.)
        let meeting = self.meeting().unwrap_or(Meeting::Kvs);
        let me = self.universe_base()? + self.rank;
        let config = crate::configure(&[])?;
        let node = self.job.node.to_string();
        let pmi = self.pmi()?;
        let mut modex = BridgeModex {
            pmi,
            me,
            jobs: &[],
            meeting,
        };
        // (In a key-value space, the job's own modex has it.)
        if meeting != Meeting::Kvs {
            modex.publish(NODE_KEY, node.as_bytes())?;
        }
        let module = rbtl_tcp::TcpComponent::open(&config, &mut modex)?.ok_or_else(|| {
            Error::BadParameter(
                "tcp found no interface to reach other jobs through: see btl_tcp_if_include".into(),
            )
        })?;
        self.modules.push(Box::new(module));
        self.remote.push(true);
        self.dirty.push(true);
        let eager = self
            .modules
            .last()
            .map_or(0, |m| m.attributes().eager_limit);
        self.eager.push(eager);
        self.bridge = Some(Bridge {
            module: self.modules.len() - 1,
            universe_rank: me,
            meeting,
            jobs: Vec::new(),
            ranks: Vec::new(),
            met: BTreeMap::new(),
        });
        Ok(me)
    }

    /// Where process `rank` of this communicator, of another job, is: its job's
    /// key-value space, the job's base in the launcher's numbering and its rank in
    /// the job (`None` for a rank of this job or of no process met).
    pub fn whereabouts(&self, rank: u32) -> Option<(String, u32, u32)> {
        let b = self.bridge.as_ref()?;
        let universe = b.met.iter().find(|(_, &r)| r == rank).map(|(&u, _)| u)?;
        b.jobs
            .iter()
            .find(|j| (j.base..j.base.saturating_add(j.size)).contains(&universe))
            .map(|j| (j.kvsname.clone(), j.base, universe - j.base))
    }

    /// Connect to processes `ranks` of the job of key-value space `kvsname`, whose
    /// ranks start at `base` in the launcher's numbering (their bridges are open and
    /// published): their ranks in this communicator, after its own job's.
    pub fn connect_job(&mut self, kvsname: &str, base: u32, ranks: &[u32]) -> Result<Vec<u32>> {
        self.open_bridge()?;
        // Those met before keep their ranks; the others are connected.
        let met = |c: &Comm, r: u32| {
            c.bridge
                .as_ref()
                .and_then(|b| b.met.get(&(base + r)).copied())
        };
        let new: Vec<u32> = ranks
            .iter()
            .copied()
            .filter(|&r| met(self, r).is_none())
            .collect();
        self.connect_new(kvsname, base, &new)?;
        let here = ranks
            .iter()
            .map(|&r| {
                met(self, r).ok_or_else(|| Error::Unreachable {
                    rank: base + r,
                    tried: "tcp (the bridge to other jobs)".into(),
                    closed: String::new(),
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        // Those disconnected from before are connected again.
        self.reconnect(&here);
        Ok(here)
    }

    /// Disconnect from processes of other jobs, as `MPI_Comm_disconnect` does once
    /// nothing connects this process to them any more: `ranks` are this
    /// communicator's (those of its own job are left as they are). Their end, from
    /// now on, is no failure here, and an end already seen (right after the last
    /// message they sent) no longer counts as one. One with operations still under
    /// way (a buffered send, a request freed before it completed) stays connected:
    /// its end fails them. Met again ([`Comm::connect_job`], [`Comm::reconnect`]),
    /// they are connected again.
    pub fn disconnect_from(&mut self, ranks: &[u32]) {
        let mut s = super::state::lock(&self.state);
        for &r in ranks.iter().filter(|&&r| r >= self.size) {
            if !s.involves(r) {
                s.departed.insert(r);
                s.failed.remove(&r);
            }
        }
        s.count_failed();
    }

    /// Connect again to those of `ranks` this process disconnected from (a
    /// communicator that holds them is kept).
    pub fn reconnect(&mut self, ranks: &[u32]) {
        let mut s = super::state::lock(&self.state);
        for r in ranks {
            s.departed.remove(r);
        }
    }

    /// Connect to processes `ranks` (never met) of the job of `kvsname`, as
    /// [`Comm::connect_job`]: each is recorded as met, with its rank here.
    fn connect_new(&mut self, kvsname: &str, base: u32, ranks: &[u32]) -> Result<()> {
        if ranks.is_empty() {
            return Ok(());
        }
        let size = ranks.iter().max().map_or(0, |m| m + 1);
        let meeting = self.bridge.as_ref().map_or(Meeting::Kvs, |b| b.meeting);
        let mut nodes = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let pmi = self.pmi()?;
            let node = match meeting {
                Meeting::Kvs => pmi.lookup_in(Some(kvsname), r, NODE_KEY)?,
                Meeting::Names | Meeting::Steps => lookup_named(pmi, base + r, NODE_KEY)?,
            };
            nodes.push(String::from_utf8_lossy(&node.unwrap_or_default()).into_owned());
        }
        let mut bridge = self.bridge.take().expect("opened above");
        if !bridge.jobs.iter().any(|j| j.kvsname == kvsname) {
            bridge.jobs.push(KnownJob {
                kvsname: kvsname.to_string(),
                base,
                size,
            });
        } else if let Some(j) = bridge.jobs.iter_mut().find(|j| j.kvsname == kvsname) {
            j.size = j.size.max(size);
        }
        let procs: Vec<Proc> = ranks
            .iter()
            .zip(nodes)
            .map(|(&r, node)| Proc {
                rank: base + r,
                node,
            })
            .collect();
        let added = match pmi_of(&mut self.job) {
            Ok(pmi) => {
                let mut modex = BridgeModex {
                    pmi,
                    me: bridge.universe_rank,
                    jobs: &bridge.jobs,
                    meeting: bridge.meeting,
                };
                self.modules[bridge.module]
                    .add_procs(&procs, &mut modex)
                    .map_err(Error::from)
            }
            Err(e) => Err(e),
        };
        let endpoints = match added {
            Ok(e) => e,
            Err(e) => {
                self.bridge = Some(bridge);
                return Err(e);
            }
        };
        let mut s = super::state::lock(&self.state);
        for (p, ep) in procs.iter().zip(endpoints) {
            let Some(ep) = ep else {
                drop(s);
                self.bridge = Some(bridge);
                return Err(Error::Unreachable {
                    rank: p.rank,
                    tried: "tcp (the bridge to other jobs)".into(),
                    closed: String::new(),
                });
            };
            let rank = self.routes.len() as u32;
            self.routes.push((bridge.module, ep));
            s.route.push(Some((bridge.module, ep)));
            *super::state::slot(&mut bridge.ranks, ep.0 as usize) = Some(rank);
            bridge.met.insert(p.rank, rank);
        }
        drop(s);
        let ranks: Arc<[Option<u32>]> = Arc::from(bridge.ranks.clone());
        let mi = bridge.module;
        self.bridge = Some(bridge);
        register_callbacks(self.modules[mi].as_mut(), mi, &ranks, &self.state)
    }
}
