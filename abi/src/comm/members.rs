//! Processes named across jobs. A group's ranks are this process's numbering (the
//! message layer's: its own job's ranks, then the processes of other jobs in the
//! order it met them), which a process of another job does not share. To tell a
//! group to another process, its members are named by their job instead: the job's
//! key-value space, its base in the launcher's numbering, and their ranks in it, in
//! the group's order ([`Members`]); the receiver finds them in its own numbering,
//! connecting to those of other jobs it has not met (`Mpi::resolve`).

use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::collections::BTreeSet;

/// A rank of a job is below this (a launcher numbers at most as many processes).
const PROCESSES_MAX: u32 = 1 << 16;

/// Consecutive members of one job: its key-value space, its base, their ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub kvs: String,
    pub base: u32,
    pub ranks: Vec<u32>,
}

/// A group's members, named by job, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members(pub Vec<Segment>);

impl Members {
    /// As text: `kvs,base,runs` per segment, joined by `;`; the runs `first-last`
    /// joined by dots (a group of consecutive ranks takes a few bytes).
    pub fn encode(&self) -> String {
        let segments: Vec<String> = self
            .0
            .iter()
            .map(|s| {
                let mut runs: Vec<(u32, u32)> = Vec::new();
                for &r in &s.ranks {
                    match runs.last_mut() {
                        Some(last) if last.1.checked_add(1) == Some(r) => last.1 = r,
                        _ => runs.push((r, r)),
                    }
                }
                let runs: Vec<String> = runs.iter().map(|(a, b)| format!("{a}-{b}")).collect();
                format!("{},{},{}", s.kvs, s.base, runs.join("."))
            })
            .collect();
        segments.join(";")
    }

    /// From [`Members::encode`]'s text; a malformed one is an error of `class`.
    pub fn decode(text: &str, class: c_int) -> Result<Members> {
        let bad = || {
            Error::new(
                class,
                format!("a malformed description of processes {text:?}"),
            )
        };
        let mut segments = Vec::new();
        for segment in text.split(';') {
            let [kvs, base, runs] = segment.splitn(3, ',').collect::<Vec<_>>()[..] else {
                return Err(bad());
            };
            let mut ranks = Vec::new();
            for run in runs.split('.') {
                let (a, b) = run.split_once('-').ok_or_else(bad)?;
                let (a, b): (u32, u32) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if b < a || b >= PROCESSES_MAX {
                    return Err(bad());
                }
                ranks.extend(a..=b);
            }
            let base = base.parse().map_err(|_| bad())?;
            segments.push(Segment {
                kvs: kvs.to_string(),
                base,
                ranks,
            });
        }
        Ok(Members(segments))
    }

    /// The key-value spaces of the jobs its members belong to.
    pub fn jobs(&self) -> BTreeSet<&str> {
        self.0.iter().map(|s| s.kvs.as_str()).collect()
    }
}

impl Mpi {
    /// This job's key-value space and base in the launcher's numbering, asked of
    /// the launcher once (empty and 0 without one: then there is no other job).
    pub(crate) fn own_job(&mut self) -> (String, u32) {
        if self.own_job.is_none() {
            let kvs = self.msg.kvsname().unwrap_or_default();
            let base = match kvs.is_empty() {
                true => 0,
                false => self.msg.universe_base().unwrap_or(0),
            };
            self.own_job = Some((kvs, base));
        }
        self.own_job.clone().unwrap_or_default()
    }

    /// Processes `ranks` (this process's numbering), named by job.
    pub(crate) fn named_by_job(&mut self, ranks: &[u32]) -> Result<Members> {
        let (own, own_base) = self.own_job();
        let world = self.world.size();
        let mut segments: Vec<Segment> = Vec::new();
        for &r in ranks {
            let (kvs, base, rank) = match r < world {
                true => (own.clone(), own_base, r),
                false => self.msg.whereabouts(r).ok_or_else(|| {
                    Error::new(
                        MPI_ERR_INTERN,
                        format!("process {r} is of no job this process knows"),
                    )
                })?,
            };
            match segments.last_mut() {
                Some(s) if s.kvs == kvs => s.ranks.push(rank),
                _ => segments.push(Segment {
                    kvs,
                    base,
                    ranks: vec![rank],
                }),
            }
        }
        Ok(Members(segments))
    }

    /// `members` in this process's numbering: those of other jobs connected when
    /// not met before (their bridges are published).
    pub(crate) fn resolve(&mut self, members: &Members) -> Result<Vec<u32>> {
        let (own, _) = self.own_job();
        let world = self.world.size();
        let mut out = Vec::new();
        for s in &members.0 {
            if s.kvs == own {
                if let Some(r) = s.ranks.iter().find(|&&r| r >= world) {
                    return Err(Error::new(
                        MPI_ERR_INTERN,
                        format!("rank {r} of this job, of {world} processes"),
                    ));
                }
                out.extend(&s.ranks);
            } else {
                out.extend(self.msg.connect_job(&s.kvs, s.base, &s.ranks)?);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_travel_as_runs_of_ranks_per_job() {
        let m = Members(vec![
            Segment {
                kvs: "kvs_1".into(),
                base: 0,
                ranks: vec![0, 1, 2, 3, 7, 9, 10],
            },
            Segment {
                kvs: "kvs_2".into(),
                base: 4,
                ranks: vec![1, 0],
            },
        ]);
        let text = m.encode();
        assert_eq!(text, "kvs_1,0,0-3.7-7.9-10;kvs_2,4,1-1.0-0");
        assert_eq!(Members::decode(&text, MPI_ERR_PORT).unwrap(), m);
        assert_eq!(m.jobs().len(), 2);
        for bad in [
            "kvs,4",
            "kvs,x,0-1",
            "kvs,4,3-1",
            "kvs,4,0-70000",
            "kvs,4,5",
            "a,0,0-0;b",
        ] {
            assert_eq!(
                Members::decode(bad, MPI_ERR_PORT).err().map(|e| e.class),
                Some(MPI_ERR_PORT),
                "{bad}"
            );
        }
    }
}
