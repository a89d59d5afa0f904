//! Where a communicator's members run, as the collectives ask it: on one node or
//! not, with more ranks than processors or not, and each member's leader on its node.

use super::allreduce;
use super::Members;
use crate::comm::Communicator;
use crate::state::Mpi;

impl Mpi {
    /// Whether the `size` members of a communicator (`job` gives a member's rank in the
    /// job) all run on one node, as every one of them sees it.
    pub fn one_node(&self, size: u32, job: impl Fn(u32) -> u32) -> bool {
        (1..size).all(|v| self.msg.same_node(job(0), job(v)))
    }

    /// Where the `size` members of a communicator run (`job` gives a member's rank in
    /// the job), asked only where an all-reduce's choice depends on it
    /// ([`allreduce::allreduce`]): two members, a vector of at least
    /// [`allreduce::RING_FROM`] bytes (`long`), or up to
    /// [`allreduce::GATHERED_ALLREDUCE_MAX`] on a node with more ranks than processors.
    pub fn placement(
        &self,
        size: u32,
        long: bool,
        job: impl Fn(u32) -> u32,
    ) -> allreduce::Placement {
        let oversubscribed = self.msg.node_oversubscribed();
        let asked =
            size == 2 || long || (oversubscribed && size <= allreduce::GATHERED_ALLREDUCE_MAX);
        let one_node = asked && self.one_node(size, job);
        allreduce::Placement {
            one_node,
            oversubscribed: one_node && oversubscribed,
        }
    }

    /// Each member's leader on its node: the lowest member of `m`, the (local) group
    /// of `c`, there, as every member sees it alike; found once per communicator.
    /// Where this process does not know where some member runs (one of another job:
    /// a process knows the nodes of its own job's ranks only), neither do all the
    /// others, and each member leads itself.
    pub fn node_leaders<'a>(&self, c: &'a Communicator, m: &Members) -> &'a [u32] {
        c.node_leaders.get_or_init(|| {
            let jobs: Vec<u32> = (0..m.size).map(|v| m.job(v)).collect();
            let known = jobs.iter().all(|&j| self.msg.same_node(j, j));
            let leader = |v: usize| match known {
                true => (0..v)
                    .find(|&u| self.msg.same_node(jobs[u], jobs[v]))
                    .unwrap_or(v),
                false => v,
            };
            (0..jobs.len()).map(|v| leader(v) as u32).collect()
        })
    }
}
