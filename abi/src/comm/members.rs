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
    /// As text: `kvs,base,runs` per segment, joined by `;`; the runs joined by dots,
    /// each a rank, `first-last` (consecutive ranks) or `first-last:step` (every
    /// step-th): a group of consecutive ranks, or of every k-th (a split by rank
    /// modulo k, a column of a grid), takes a few bytes. Ranks in increasing order
    /// whose runs would take more room go as one bitmap instead, `*first*bits`
    /// (a bit per rank from `first`, in base64): six ranks a character, whatever
    /// their pattern.
    pub fn encode(&self) -> String {
        let segments: Vec<String> = self
            .0
            .iter()
            .map(|s| {
                let runs = runs(&s.ranks);
                let runs = match bitmap(&s.ranks) {
                    Some(b) if b.len() < runs.len() => b,
                    _ => runs,
                };
                format!("{},{},{}", s.kvs, s.base, runs)
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
            let ranks = match runs.strip_prefix('*') {
                Some(bits) => from_bitmap(bits),
                None => from_runs(runs),
            }
            .ok_or_else(bad)?;
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

/// `ranks` as runs ([`Members::encode`]).
fn runs(ranks: &[u32]) -> String {
    let mut runs: Vec<String> = Vec::new();
    let mut rest = ranks;
    while let [first, ..] = rest {
        let step = match rest.get(1) {
            Some(&next) if next > *first => next - first,
            _ => 0,
        };
        let mut len = 1 + rest
            .windows(2)
            .take_while(|w| step > 0 && w[1].checked_sub(w[0]) == Some(step))
            .count();
        if len == 2 && step > 1 {
            len = 1; // two ranks apart: as short one by one
        }
        let last = rest[len - 1];
        runs.push(match (len, step) {
            (1, _) => format!("{first}"),
            (_, 1) => format!("{first}-{last}"),
            _ => format!("{first}-{last}:{step}"),
        });
        rest = &rest[len..];
    }
    runs.join(".")
}

/// The ranks of [`runs`]'s text; `None` if it is not such.
fn from_runs(text: &str) -> Option<Vec<u32>> {
    let mut ranks = Vec::new();
    for run in text.split('.') {
        let (range, step) = match run.split_once(':') {
            Some((range, step)) => (range, step.parse::<u32>().ok()?),
            None => (run, 1),
        };
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
        if b < a || b >= PROCESSES_MAX || step == 0 || (b - a) % step != 0 {
            return None;
        }
        ranks.extend((a..=b).step_by(step as usize));
    }
    Some(ranks)
}

/// `ranks` as a bitmap ([`Members::encode`]), if they increase.
fn bitmap(ranks: &[u32]) -> Option<String> {
    let (&first, &last) = ranks.first().zip(ranks.last())?;
    if ranks.windows(2).any(|w| w[1] <= w[0]) {
        return None;
    }
    let mut bits = vec![0u8; ((last - first) / 8 + 1) as usize];
    for r in ranks {
        let i = (r - first) as usize;
        bits[i / 8] |= 1 << (i % 8);
    }
    Some(format!("*{first}*{}", rbtl::pmi::base64_encode(&bits)))
}

/// The ranks of [`bitmap`]'s text after its first `*`; `None` if it is not such.
fn from_bitmap(text: &str) -> Option<Vec<u32>> {
    let (first, bits) = text.split_once('*')?;
    let first: u32 = first.parse().ok()?;
    let bits = rbtl::pmi::base64_decode(bits)?;
    let mut ranks = Vec::new();
    for (i, byte) in bits.iter().enumerate() {
        for b in (0..8).filter(|b| byte & (1 << b) != 0) {
            let r = u32::try_from(i * 8 + b).ok()?.checked_add(first)?;
            if r >= PROCESSES_MAX {
                return None;
            }
            ranks.push(r);
        }
    }
    (!ranks.is_empty()).then_some(ranks)
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
                ranks: vec![0, 1, 2, 3, 7, 9, 10, 20, 25, 30, 35, 36],
            },
            Segment {
                kvs: "kvs_2".into(),
                base: 4,
                ranks: vec![1, 0, 5],
            },
        ]);
        assert_eq!(runs(&m.0[0].ranks), "0-3.7.9-10.20-35:5.36");
        // (Its bitmap is shorter; ranks not in increasing order go as runs.)
        let text = m.encode();
        assert_eq!(text, "kvs_1,0,*0*jwYQQhg;kvs_2,4,1.0.5");
        assert_eq!(
            Members::decode("kvs_1,0,0-3.7.9-10.20-35:5.36", MPI_ERR_PORT)
                .unwrap()
                .0[0],
            m.0[0]
        );
        assert_eq!(Members::decode(&text, MPI_ERR_PORT).unwrap(), m);
        assert_eq!(m.jobs().len(), 2);
        // Every other rank of a large job: one run.
        let odd = Members(vec![Segment {
            kvs: "kvs_1".into(),
            base: 0,
            ranks: (1..4096).step_by(2).collect(),
        }]);
        assert_eq!(odd.encode(), "kvs_1,0,1-4095:2");
        assert_eq!(Members::decode(&odd.encode(), MPI_ERR_PORT).unwrap(), odd);
        // A third of a job's ranks picked irregularly: a bitmap, six ranks a
        // character, within one PMI value (1,024 bytes) where runs were not.
        let picked: Vec<u32> = (0..3000u32)
            .filter(|r| r.wrapping_mul(2_654_435_761) % 3 == 0)
            .collect();
        let irregular = Members(vec![Segment {
            kvs: "kvs_1".into(),
            base: 0,
            ranks: picked.clone(),
        }]);
        let text = irregular.encode();
        assert!(text.starts_with("kvs_1,0,*0*"), "{text}");
        let (bitmap, runs) = (text.len(), runs(&picked).len());
        assert!(bitmap < 1024 && runs > 2048, "{bitmap} {runs}");
        assert_eq!(Members::decode(&text, MPI_ERR_PORT).unwrap(), irregular);
        for bad in [
            "kvs,4",
            "kvs,4,*5*!!",
            "kvs,4,*x*AA",
            "kvs,4,*65535*BA",
            "kvs,4,*0*AA",
            "kvs,4,*5",
            "kvs,x,0-1",
            "kvs,4,3-1",
            "kvs,4,0-70000",
            "kvs,4,5-",
            "kvs,4,0-9:0",
            "kvs,4,0-9:2",
            "kvs,4,0-8:x",
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
