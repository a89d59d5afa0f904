//! Communicators and groups.
//!
//! A group is a list of processes, named by their rank in the job (the message
//! layer's world). A communicator is a group (two, for an intercommunicator) and a
//! context: a number that every message on it carries, so that traffic on two
//! communicators never matches. Its collectives use the next number, so that they
//! never match its point-to-point messages either.

pub mod api;
pub mod attr;
pub mod context;
pub mod create;
pub mod graph;
pub mod group;
pub mod idup;
pub mod intercomm;
pub mod job_ports;
pub mod join;
pub mod members;
pub mod names;
pub mod ports;
pub mod spawn;
pub mod topo;

use crate::ffi::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A group of processes, by their ranks in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    ranks: Vec<u32>,
    /// Job rank to group rank (empty when the group is the job in order).
    index: HashMap<u32, u32>,
    identity: bool,
    /// The session it derives from (from `MPI_Group_from_session_pset`; kept by the
    /// groups and communicators made from it).
    session: Option<Handle>,
}

impl Group {
    /// The group of these job ranks, in this order (they are distinct).
    pub fn new(ranks: Vec<u32>) -> Group {
        let identity = ranks.iter().enumerate().all(|(i, &r)| i as u32 == r);
        let index = if identity {
            HashMap::new()
        } else {
            ranks
                .iter()
                .enumerate()
                .map(|(i, &r)| (r, i as u32))
                .collect()
        };
        Group {
            ranks,
            index,
            identity,
            session: None,
        }
    }

    /// The same members, derived from `session`.
    pub fn in_session(mut self, session: Option<Handle>) -> Group {
        self.session = session;
        self
    }

    /// The session it derives from, if any.
    pub fn session(&self) -> Option<Handle> {
        self.session
    }

    /// Its size.
    #[inline(always)]
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The job rank of group rank `r`.
    #[inline(always)]
    pub fn job_rank(&self, r: u32) -> Option<u32> {
        self.ranks.get(r as usize).copied()
    }

    /// The group rank of job rank `j`, if it is a member.
    #[inline(always)]
    pub fn rank_of(&self, j: u32) -> Option<u32> {
        if self.identity {
            (j < self.size()).then_some(j)
        } else {
            self.index.get(&j).copied()
        }
    }

    /// Its members' job ranks, in order.
    pub fn ranks(&self) -> &[u32] {
        &self.ranks
    }
}

/// The context numbers of a communicator: point-to-point on `ctx`, collectives on
/// `ctx + 1`.
pub const CONTEXTS_PER_COMM: u32 = 2;

/// A communicator.
pub struct Communicator {
    /// Its point-to-point context; its collectives use the next.
    pub ctx: u32,
    /// Its (local) group.
    pub group: Arc<Group>,
    /// The remote group of an intercommunicator.
    pub remote: Option<Arc<Group>>,
    /// This process's rank in its group.
    pub rank: u32,
    pub name: String,
    pub errhandler: Handle,
    /// Attributes.
    pub attrs: crate::attr::Attrs,
    pub topo: Option<topo::Topology>,
    /// Blocking collectives started so far, and nonblocking and persistent ones
    /// (each uses its own tag).
    pub coll_seq: u32,
    pub nonblocking_seq: u32,
    /// Each member of its (local) group's leader on its node
    /// ([`Mpi::node_leaders`](crate::state::Mpi::node_leaders)), found at its first
    /// barrier that needs it.
    pub node_leaders: std::sync::OnceLock<Box<[u32]>>,
}

impl Communicator {
    /// A communicator over `group`, with this process at `rank`.
    pub fn new(ctx: u32, group: Arc<Group>, rank: u32, name: &str) -> Communicator {
        Communicator {
            ctx,
            group,
            remote: None,
            rank,
            name: name.to_string(),
            errhandler: MPI_ERRORS_ARE_FATAL,
            attrs: BTreeMap::new(),
            topo: None,
            coll_seq: 0,
            nonblocking_seq: 0,
            node_leaders: std::sync::OnceLock::new(),
        }
    }

    /// An intercommunicator between `group` (this process at `rank`) and `remote`,
    /// with `errhandler`.
    pub fn inter(
        ctx: u32,
        (group, rank): (Arc<Group>, u32),
        remote: Arc<Group>,
        errhandler: Handle,
    ) -> Communicator {
        let mut c = Communicator::new(ctx, group, rank, "");
        c.remote = Some(remote);
        c.errhandler = errhandler;
        c
    }

    /// Its size (the local group's).
    #[inline(always)]
    pub fn size(&self) -> u32 {
        self.group.size()
    }

    /// The group whose ranks name peers: the remote one of an intercommunicator.
    #[inline(always)]
    pub fn peers(&self) -> &Arc<Group> {
        self.remote.as_ref().unwrap_or(&self.group)
    }

    /// The context of its collectives.
    pub fn coll_ctx(&self) -> u32 {
        self.ctx + 1
    }

    /// The tag of the next blocking collective (`blocking`), or of the next
    /// nonblocking or persistent one: two sequences, in two halves of the tags.
    pub fn next_coll_tag(&mut self, blocking: bool) -> i32 {
        let (seq, half) = match blocking {
            true => (&mut self.coll_seq, 0),
            false => (&mut self.nonblocking_seq, 0x2000_0000),
        };
        *seq = seq.wrapping_add(1);
        (half | (*seq & 0x1fff_ffff)) as i32
    }

    /// Give back the tag [`Communicator::next_coll_tag`] gave last, of a collective
    /// refused before it began.
    pub fn give_back_coll_tag(&mut self, blocking: bool) {
        let seq = match blocking {
            true => &mut self.coll_seq,
            false => &mut self.nonblocking_seq,
        };
        *seq = seq.wrapping_sub(1);
    }
}
