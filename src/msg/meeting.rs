//! Where the jobs of one launcher meet: the place their processes leave each other
//! word (a bridge's address, a signal that one side is ready, an answer to a
//! connection request), each word known by the job it is for and a key.
//!
//! A launcher that says it joins the jobs it starts (`rbtlrun`: `rbtl_joins_jobs=1`
//! in its maxes) lets each job read and write the others' key-value spaces, and
//! numbers every process it starts ([`Meeting::Kvs`]). Hydra keeps every job of an
//! `mpiexec` apart, but one name service for all of them, as MPICH's clients use it
//! ([`Meeting::Names`]): each word is a published name, and the jobs number their
//! processes themselves, a spawned job after those before it, by claiming its
//! numbers in that name service (`rbtl-universe-<k>`, taken in turn: only one
//! process can publish a name). Slurm's `pmi2` plugin keeps one name service for a
//! job step and the steps it spawns too, but a name published again is replaced,
//! not refused: no claim can be taken in turn there. Its steps are numbered apart
//! by Slurm itself ([`Meeting::Steps`]): a step's processes from its step number
//! times [`STEP_SPAN`].
//!
//! Where the parents cannot learn the new job's key-value space (or, under Slurm,
//! its numbers) from the launcher, the new job's rank 0 publishes both under the
//! token the spawning root left it ([`Comm::announce_job`]).

use super::spawn_turn::SpawnTurn;
use super::{Comm, Error, Result};
use crate::pmi::{PmiModex, SpawnCommand, Spawned};

/// How the jobs of this process's launcher meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Meeting {
    /// In each other's key-value spaces.
    Kvs,
    /// In the launcher's name service, numbered by claims in it.
    Names,
    /// In the name service of Slurm's `pmi2` plugin, numbered by job step.
    Steps,
}

/// The variable hydra sets for every process it starts (the count of its job's
/// processes on the node), which Slurm's `srun` does not.
const HYDRA_MARK: &str = "MPI_LOCALNRANKS";
/// The variable Slurm sets for every process of a job step: the step's number.
const STEP_MARK: &str = "SLURM_STEP_ID";
/// The most processes of a Slurm job step that meets others, and the numbers
/// between the first processes of two steps.
pub(super) const STEP_SPAN: u32 = 1 << 16;
/// The key under which the spawning root leaves the new job the token it announces
/// itself under.
const TOKEN_KEY: &str = "rbtl_spawn_token";
/// The key under which the spawning root leaves the new job the process count of
/// each of its commands, in order (`2,1`), where the launcher may not number them.
const COUNTS_KEY: &str = "rbtl_spawn_counts";
/// The key under which a launcher, or the parents, tell a spawned job where its
/// ranks start in the numbering of every process of the jobs that meet.
pub(super) const BASE_KEY: &str = "rbtl_universe_base";
/// The most numbers a process claims in turn before it gives up.
const CLAIMS_MAX: u32 = 1 << 16;

/// How the jobs of the launcher under `pmi` meet, or why they cannot.
fn meeting(pmi: &PmiModex) -> Result<Meeting> {
    if pmi.client_ref().joins_jobs() {
        return Ok(Meeting::Kvs);
    }
    if std::env::var_os(HYDRA_MARK).is_some() {
        return Ok(Meeting::Names);
    }
    if std::env::var_os(STEP_MARK).is_some() {
        return Ok(Meeting::Steps);
    }
    Err(crate::pmi::Error::NotOffered {
        what: "a meeting of two jobs",
        why: "the launcher neither says that it joins the jobs it starts (rbtlrun) nor \
              is hydra or Slurm, whose name services serve the jobs they start"
            .into(),
    }
    .into())
}

/// Where this Slurm job step's processes start in the numbering of the steps that
/// meet.
fn step_base() -> Result<u32> {
    let text = std::env::var(STEP_MARK).unwrap_or_default();
    text.trim()
        .parse::<u32>()
        .ok()
        .and_then(|step| step.checked_mul(STEP_SPAN))
        .ok_or_else(|| {
            Error::BadParameter(format!(
                "{STEP_MARK}={text:?} is not a job step this library can number (0 to {})",
                u32::MAX / STEP_SPAN
            ))
        })
}

/// The nodes of this Slurm job, as Slurm names them.
const JOB_NODES: &str = "SLURM_JOB_NODELIST";

/// Under Slurm, whether the nodes a spawn's `host` names (a host list, as srun's
/// `--nodelist`, which Slurm's `pmi2` plugin passes it as) are nodes of this job,
/// `allocated` (`SLURM_JOB_NODELIST`; nothing is checked without it): each by its
/// name there, or by a longer name of it (`n2.cluster`, for `n2`). Slurm waits for a
/// step asked on another node (until the PMI time limit), or ends the whole job, so
/// that is refused here instead. Not checked: a value with a `/` (srun reads a file
/// of that name), and the info of a spawn of several commands (Slurm reads that of
/// one command only).
fn check_placement(commands: &[SpawnCommand], allocated: Option<&str>) -> Result<()> {
    let ([command], Some(allocated)) = (commands, allocated) else {
        return Ok(());
    };
    let Some((_, host)) = command.info.iter().find(|(k, _)| k == "host") else {
        return Ok(());
    };
    if host.contains('/') {
        return Ok(());
    }
    use crate::pmi::hostlist::expand;
    let refused = |why: String| Error::BadParameter(format!("the info key host = {host:?}: {why}"));
    let nodes: std::collections::HashSet<String> = expand(allocated)
        .map_err(|e| refused(format!("{JOB_NODES}: {e}")))?
        .into_iter()
        .collect();
    for asked in expand(host).map_err(refused)? {
        let short = asked.split('.').next().unwrap_or_default();
        if !nodes.contains(&asked) && !nodes.contains(short) {
            return Err(refused(format!(
                "{asked} is not a node of this Slurm job ({JOB_NODES}={allocated}): \
                 Slurm would wait for it, or end the job"
            )));
        }
    }
    Ok(())
}

/// The name of the word `key` for job `kvs` in the name service.
fn word_name(kvs: &str, key: &str) -> String {
    format!("{kvs}.{key}")
}

/// The name of what process `rank` (of the jobs' numbering) published under `key`.
pub(super) fn process_name(rank: u32, key: &str) -> String {
    format!("rbtl-u{rank}-{key}")
}

/// The name under which a spawned job left `token` says its key-value space and
/// numbers.
fn job_name(token: &str) -> String {
    format!("rbtl-job-{token}")
}

/// A token for this process's next spawn, unique among the jobs that meet: its
/// number in them and a count.
fn next_token(me: u32) -> String {
    static SPAWNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let count = SPAWNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{me}.{count}")
}

impl Comm {
    /// How the jobs of this process's launcher meet.
    pub(super) fn meeting(&mut self) -> Result<Meeting> {
        meeting(self.pmi()?)
    }

    /// The word `key` for the job of key-value space `kvs` (this job's or another's).
    pub fn kvs_get(&mut self, kvs: &str, key: &str) -> Result<Option<String>> {
        let meeting = self.meeting()?;
        let client = self.pmi()?.client();
        Ok(match meeting {
            Meeting::Kvs => client.get_in(kvs, key)?,
            Meeting::Names | Meeting::Steps => client.lookup_name(&word_name(kvs, key))?,
        })
    }

    /// Leave `value` as the word `key` for the job of key-value space `kvs`.
    pub fn kvs_put(&mut self, kvs: &str, key: &str, value: &str) -> Result<()> {
        let meeting = self.meeting()?;
        let client = self.pmi()?.client();
        match meeting {
            Meeting::Kvs => client.put_in(kvs, key, value)?,
            Meeting::Names | Meeting::Steps => client.publish_name(&word_name(kvs, key), value)?,
        }
        Ok(())
    }

    /// What the launcher put under `key` in this job's key-value space before it
    /// started (a spawn's pre-put values).
    pub fn preput(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self.pmi()?.client().get(key)?)
    }

    /// Where this job's ranks start in the numbering of the jobs that meet.
    pub fn universe_base(&mut self) -> Result<u32> {
        if let Ok(Meeting::Steps) = self.meeting() {
            if self.size > STEP_SPAN {
                return Err(Error::BadParameter(format!(
                    "a Slurm job step of {} processes meets no other: at most {STEP_SPAN}",
                    self.size
                )));
            }
            return step_base();
        }
        let text = self.preput(BASE_KEY)?;
        Ok(text.and_then(|t| t.parse().ok()).unwrap_or(0))
    }

    /// Ask the launcher to start `commands` as a new job whose key-value space holds
    /// `preput`. Where the launcher does not say the new job's key-value space or
    /// numbers, the new job says them itself once up, under the token returned
    /// ([`Comm::announce_job`], [`Comm::job_at`]).
    pub fn spawn(
        &mut self,
        commands: &[SpawnCommand],
        preput: &[(String, String)],
    ) -> Result<Spawned> {
        let meeting = self.meeting()?;
        if meeting == Meeting::Kvs {
            return Ok(self.pmi()?.client().spawn(commands, preput)?);
        }
        if meeting == Meeting::Steps {
            check_placement(commands, std::env::var(JOB_NODES).ok().as_deref())?;
        }
        let base = self.universe_base()?;
        let me = base + self.rank;
        let token = next_token(me);
        let counts: Vec<String> = commands.iter().map(|c| c.nprocs.to_string()).collect();
        let mut preput = preput.to_vec();
        preput.push((TOKEN_KEY.to_string(), token.clone()));
        preput.push((COUNTS_KEY.to_string(), counts.join(",")));
        if meeting == Meeting::Names {
            let n = commands.iter().map(|c| c.nprocs).sum::<u32>();
            let first = self.claim_numbers(base, n)?;
            preput.push((BASE_KEY.to_string(), first.to_string()));
        }
        let client = self.pmi()?.client();
        let turn = SpawnTurn::take(client, meeting, me)?;
        let spawned = client.spawn(commands, &preput);
        // (Given back whatever the answer.)
        let given_back = turn.give_back(client);
        let mut s = match spawned {
            Err(e @ crate::pmi::Error::Timeout { .. }) if meeting == Meeting::Steps => {
                return Err(Error::StepWaiting(e))
            }
            spawned => spawned?,
        };
        given_back?;
        s.announced_as = Some(token);
        Ok(s)
    }

    /// In a spawned job whose launcher does not number its commands (Slurm): which
    /// command of the spawn this process runs, from the counts its parents left.
    pub(super) fn spawned_appnum(&mut self) -> Result<Option<u32>> {
        let Some(text) = self.preput(COUNTS_KEY)? else {
            return Ok(None);
        };
        let mut end = 0u32;
        for (i, count) in text.split(',').enumerate() {
            let count = count.parse::<u32>().map_err(|_| {
                Error::BadParameter(format!("the spawn's counts {COUNTS_KEY} = {text:?}"))
            })?;
            end = end.saturating_add(count);
            if self.rank < end {
                return Ok(Some(i as u32));
            }
        }
        Ok(None)
    }

    /// In a spawned job, at its rank 0 once every rank's bridge is published: say
    /// the job's key-value space and numbers where its parents could not learn them.
    pub fn announce_job(&mut self) -> Result<()> {
        if self.meeting()? == Meeting::Kvs {
            return Ok(());
        }
        let Some(token) = self.preput(TOKEN_KEY)? else {
            return Err(Error::BadParameter(format!(
                "the spawned job was left no {TOKEN_KEY} to say itself under"
            )));
        };
        let (base, kvs) = (self.universe_base()?, self.kvsname()?);
        let name = job_name(&token);
        Ok(self
            .pmi()?
            .client()
            .publish_name(&name, &format!("{base}/{kvs}"))?)
    }

    /// The key-value space of the spawned job left `token`, and where its numbers
    /// start, once it has said them ([`Comm::announce_job`]).
    pub fn job_at(&mut self, token: &str) -> Result<Option<(String, u32)>> {
        let name = job_name(token);
        let Some(text) = self.pmi()?.client().lookup_name(&name)? else {
            return Ok(None);
        };
        // (The number first: whatever the key-value space's name holds.)
        let said = text
            .split_once('/')
            .and_then(|(base, kvs)| Some((kvs.to_string(), base.parse().ok()?)));
        said.map(Some).ok_or_else(|| {
            Error::BadParameter(format!(
                "the spawned job's word {name} = {text:?} is malformed"
            ))
        })
    }

    /// `n` numbers for a new job, after every number claimed before, in the name
    /// service (this job's start at `base`): the first of them.
    fn claim_numbers(&mut self, base: u32, n: u32) -> Result<u32> {
        // (The first job holds the numbers from 0 unclaimed; every other, a claim.)
        let first_free = base + self.job.size;
        claim(self.pmi()?.client(), first_free, n)
    }
}

/// The name service as claims use it.
trait Names {
    fn lookup(&mut self, name: &str) -> Result<Option<String>>;
    fn publish(&mut self, name: &str, value: &str) -> Result<()>;
}

impl Names for crate::pmi::Client {
    fn lookup(&mut self, name: &str) -> Result<Option<String>> {
        Ok(self.lookup_name(name)?)
    }

    fn publish(&mut self, name: &str, value: &str) -> Result<()> {
        Ok(self.publish_name(name, value)?)
    }
}

/// Claim `n` numbers in `names`, after every number claimed before (and at least
/// from `first_free`): the first of them. Claim `k` (`rbtl-universe-<k>`) holds the
/// end of its numbers; claims are taken in turn, each by one process only.
fn claim(names: &mut impl Names, first_free: u32, n: u32) -> Result<u32> {
    let mut start = first_free;
    let end_of = |name: &str, end: String| {
        end.parse::<u32>()
            .map_err(|_| Error::BadParameter(format!("the claimed numbers {name} = {end:?}")))
    };
    for k in 1..=CLAIMS_MAX {
        let name = format!("rbtl-universe-{k}");
        if let Some(end) = names.lookup(&name)? {
            start = start.max(end_of(&name, end)?);
            continue;
        }
        let end = start
            .checked_add(n)
            .filter(|&e| e <= super::bridge::UNIVERSE_MAX)
            .ok_or_else(|| {
                Error::BadParameter(format!(
                    "{n} more processes would number past {}, the most the jobs that \
                     meet may hold",
                    super::bridge::UNIVERSE_MAX
                ))
            })?;
        match names.publish(&name, &end.to_string()) {
            Ok(()) => return Ok(start),
            // Another process claimed turn `k` first: its end is read, or the
            // refusal was for another reason.
            Err(e) => match names.lookup(&name)? {
                Some(end) => start = start.max(end_of(&name, end)?),
                None => return Err(e),
            },
        }
    }
    Err(Error::BadParameter(format!(
        "{CLAIMS_MAX} jobs claimed numbers before this one"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// A name service in memory, where a rival claims the next turn just before
    /// `rival_at` publishes it, and that refuses everything once `broken`.
    #[derive(Default)]
    struct Service {
        names: BTreeMap<String, String>,
        rival: Option<(u32, u32)>,
        broken: bool,
    }

    impl Names for Service {
        fn lookup(&mut self, name: &str) -> Result<Option<String>> {
            Ok(self.names.get(name).cloned())
        }

        fn publish(&mut self, name: &str, value: &str) -> Result<()> {
            if self.broken {
                return Err(Error::BadParameter("the service is down".into()));
            }
            if let Some((start, n)) = self.rival.take() {
                // (The rival read the same claims and got there first.)
                self.names.insert(name.into(), (start + n).to_string());
            }
            match self.names.contains_key(name) {
                true => Err(Error::BadParameter(format!("{name} is taken"))),
                false => {
                    self.names.insert(name.into(), value.into());
                    Ok(())
                }
            }
        }
    }

    #[test]
    fn claims_follow_each_other_and_lose_no_number_to_a_rival() {
        let mut s = Service::default();
        // The first job holds 0-3; its spawns follow.
        assert_eq!(claim(&mut s, 4, 2).unwrap(), 4);
        assert_eq!(claim(&mut s, 4, 3).unwrap(), 6);
        // A spawned job's process claims after every claim, whatever it knows.
        assert_eq!(claim(&mut s, 6, 1).unwrap(), 9);
        // A rival takes the next turn first (numbers 10-14): this claim takes the
        // turn after, from 15.
        s.rival = Some((10, 5));
        assert_eq!(claim(&mut s, 4, 2).unwrap(), 15);
        assert_eq!(s.names["rbtl-universe-4"], "15");
        assert_eq!(s.names["rbtl-universe-5"], "17");
    }

    #[test]
    fn a_claim_past_the_numbers_or_refused_or_unreadable_fails() {
        let mut s = Service::default();
        let too_many = claim(&mut s, 4, super::super::bridge::UNIVERSE_MAX);
        assert!(matches!(too_many, Err(Error::BadParameter(m)) if m.contains("number past")));
        s.broken = true;
        let refused = claim(&mut s, 4, 2);
        assert!(matches!(refused, Err(Error::BadParameter(m)) if m.contains("down")));
        assert!(s.names.is_empty(), "a refused claim left {:?}", s.names);
        s.broken = false;
        s.names.insert("rbtl-universe-1".into(), "many".into());
        let unreadable = claim(&mut s, 4, 2);
        assert!(matches!(unreadable, Err(Error::BadParameter(m)) if m.contains("\"many\"")));
    }

    #[test]
    fn a_spawn_placed_outside_the_slurm_job_is_refused_before_slurm_hears_of_it() {
        let command = |host: Option<&str>| SpawnCommand {
            program: "p".into(),
            args: Vec::new(),
            nprocs: 1,
            info: host
                .map(|h| ("host".to_string(), h.to_string()))
                .into_iter()
                .collect(),
        };
        let nodes = Some("rbtl-n[1-2]");
        for ok in [
            None,
            Some("rbtl-n2"),
            Some("rbtl-n[1-2]"),
            Some("rbtl-n2.cluster"),
            Some("/a/file/of/nodes"),
        ] {
            check_placement(&[command(ok)], nodes).unwrap();
        }
        let refused = |host, nodes| match check_placement(&[command(Some(host))], nodes) {
            Err(Error::BadParameter(m)) => m,
            other => panic!("{host}: {other:?}"),
        };
        let m = refused("rbtl-n3", nodes);
        assert!(
            m.contains("host = \"rbtl-n3\"") && m.contains("not a node"),
            "{m}"
        );
        assert!(refused("rbtl-n[2-3]", nodes).contains("rbtl-n3 is not"));
        assert!(refused("rbtl-n3.cluster", nodes).contains("rbtl-n3.cluster is not"));
        assert!(refused("rbtl-n[", nodes).contains("without its ']'"));
        assert!(refused("rbtl-n1", Some("rbtl-n[1")).contains("SLURM_JOB_NODELIST"));
        // Without the job's nodes, or for several commands (whose info Slurm does
        // not read), nothing is checked.
        check_placement(&[command(Some("elsewhere"))], None).unwrap();
        check_placement(&[command(Some("elsewhere")), command(None)], nodes).unwrap();
    }
}
