//! Making communicators: `dup`, `split`, `split_type`, `create`, `create_group`.
//!
//! Every new communicator needs a context no member uses: the members agree on the
//! largest "next free context" among them (an all-gather over the parent, which
//! also carries a split's colours and keys), and each moves its own past it. Two
//! communicators with the same context never share a process, so their traffic never
//! meets.

use super::{Communicator, Group};
use crate::coll::{basic, Loc, Members, Schedule};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

/// Tags of `MPI_Comm_create_group`'s exchange, apart from the collectives' own.
const CREATE_GROUP_TAG: i32 = 1 << 30;

impl Mpi {
    /// An all-gather of `mine` ([`Mpi::allgather_of`]) among the members of `group`
    /// (job ranks) only, with the collective context of `parent` and `tag`
    /// (`MPI_Comm_create_group`).
    pub(crate) fn allgather_in_group(
        &mut self,
        parent: Handle,
        group: &Arc<Group>,
        me: u32,
        tag: i32,
        mine: &[i32],
    ) -> Result<Vec<i32>> {
        let ctx = self.comm(parent)?.coll_ctx();
        let tag = CREATE_GROUP_TAG | (tag & (CREATE_GROUP_TAG - 1));
        self.allgather_in_ctx(ctx, group, me, tag, mine)
    }

    /// An all-gather of `mine` ([`Mpi::allgather_of`]) among the members of `group`
    /// only (this process is its member `me`), in context `ctx` with `tag`.
    pub(crate) fn allgather_in_ctx(
        &mut self,
        ctx: u32,
        group: &Arc<Group>,
        me: u32,
        tag: i32,
        mine: &[i32],
    ) -> Result<Vec<i32>> {
        let members = Members::of(group.clone(), me);
        let mut all = vec![0i32; group.size() as usize * mine.len()];
        let len = mine.len() * 4;
        let mut s = Box::new(Schedule::new(ctx, tag));
        let base = Loc::User(all.as_mut_ptr().cast());
        let blocks = basic::blocks(base, len, group.size());
        // SAFETY: `mine` and `all` live until the schedule, run here, ends.
        unsafe {
            std::ptr::copy_nonoverlapping(
                mine.as_ptr().cast::<u8>(),
                all.as_mut_ptr().cast::<u8>().add(me as usize * len),
                len,
            )
        };
        basic::allgatherv(&mut s, &members, &blocks);
        self.run(s)?;
        Ok(all)
    }

    /// Keep a new communicator over `group` (which holds this process) with context
    /// `ctx` and `parent`'s error handler; its handle. A group without a session
    /// takes the parent's.
    pub(crate) fn keep(&mut self, ctx: u32, group: Arc<Group>, parent: Handle) -> Result<Handle> {
        self.use_contexts(ctx)?;
        let inherited = self.comm(parent)?.group.session();
        let group = match group.session() {
            None if inherited.is_some() => Arc::new((*group).clone().in_session(inherited)),
            _ => group,
        };
        let me = self.world_rank();
        let rank = group.rank_of(me).expect("a member");
        let mut c = Communicator::new(ctx, group, rank, "");
        c.errhandler = self.comm(parent)?.errhandler;
        self.comms.insert(c)
    }

    /// The duplicate of `MPI_Comm_dup`: the same group, a new context, the
    /// parent's error handler and topology (the attributes come after, copied
    /// outside the library's state: [`crate::attr::copy_attrs`]).
    pub fn comm_dup(&mut self, comm: Handle) -> Result<Handle> {
        if self.comm(comm)?.remote.is_some() {
            return self.intercomm_dup(comm);
        }
        let h = self.dup_group(comm)?;
        let topo = self.comm(comm)?.topo.clone();
        self.comm_mut(h)?.topo = topo;
        Ok(h)
    }

    /// The duplicate of `MPI_Comm_idup`, made at once: its context is the next
    /// reserved with `comm` ([`super::IDUP_SLOTS`]); it has none reserved of its own.
    pub fn comm_idup(&mut self, comm: Handle) -> Result<Handle> {
        let c = self.comm_mut(comm)?;
        if c.idups >= c.idup_slots {
            return Err(Error::new(
                MPI_ERR_UNSUPPORTED_OPERATION,
                match c.idup_slots {
                    0 => "a nonblocking duplicate cannot be duplicated without blocking: use MPI_Comm_dup".to_string(),
                    n => format!("a communicator has contexts for {n} nonblocking duplicates, all taken: use MPI_Comm_dup"),
                },
            ));
        }
        let ctx = c.ctx + 2 + 2 * c.idups;
        c.idups += 1;
        let mut d = Communicator::new(ctx, c.group.clone(), c.rank, "");
        d.remote = c.remote.clone();
        d.errhandler = c.errhandler;
        d.topo = c.topo.clone();
        d.idup_slots = 0;
        self.comms.insert(d)
    }

    /// A duplicate of `comm` for the library's own use (a window's): its group and a
    /// new context, nothing else of the parent's.
    pub fn comm_dup_bare(&mut self, comm: Handle) -> Result<Handle> {
        if self.comm(comm)?.remote.is_some() {
            return Err(Error::new(
                MPI_ERR_COMM,
                "a window is made over an intracommunicator (MPI 4.1 §12.2), not an intercommunicator",
            ));
        }
        self.dup_group(comm)
    }

    /// A new communicator over intracommunicator `comm`'s group, with a new
    /// context.
    fn dup_group(&mut self, comm: Handle) -> Result<Handle> {
        let group = self.comm(comm)?.group.clone();
        let ctx = self.agree_context(comm, &[])?.0;
        self.keep(ctx, group, comm)
    }

    /// Agree on a context over `comm`, gathering `extra` ints of every member too:
    /// the context and what was gathered (each member's `extra` in rank order).
    pub(crate) fn agree_context(
        &mut self,
        comm: Handle,
        extra: &[i32],
    ) -> Result<(u32, Vec<Vec<i32>>)> {
        let mut mine = vec![self.contexts_above() as i32];
        mine.extend_from_slice(extra);
        let all = self.allgather_of(comm, &mine)?;
        let per = mine.len();
        let ctx = all.chunks(per).map(|c| c[0] as u32).max().unwrap_or(0);
        Ok((ctx, all.chunks(per).map(|c| c[1..].to_vec()).collect()))
    }

    /// `MPI_Comm_split`: members of one colour form a communicator, ordered by key
    /// then by their rank in `comm`; `MPI_UNDEFINED` gets none.
    pub fn comm_split(&mut self, comm: Handle, color: c_int, key: c_int) -> Result<Handle> {
        if color < 0 && color != MPI_UNDEFINED {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("colour {color} is negative (and not MPI_UNDEFINED)"),
            ));
        }
        let parent = self.comm(comm)?;
        if parent.remote.is_some() {
            return self.intercomm_split(comm, color, key);
        }
        let pg = parent.group.clone();
        let (ctx, all) = self.agree_context(comm, &[color, key])?;
        if color == MPI_UNDEFINED {
            return Ok(MPI_COMM_NULL);
        }
        let mut members: Vec<(c_int, u32)> = all
            .iter()
            .enumerate()
            .filter(|(_, v)| v[0] == color)
            .map(|(r, v)| (v[1], r as u32))
            .collect();
        members.sort();
        let ranks = members
            .iter()
            .map(|&(_, r)| pg.job_rank(r).expect("a member"))
            .collect();
        self.keep(ctx, Arc::new(Group::new(ranks)), comm)
    }

    /// `MPI_Comm_create`: every member of `comm` calls it; those in `group` get the
    /// new communicator.
    pub fn comm_create(&mut self, comm: Handle, group: Arc<Group>) -> Result<Handle> {
        if self.comm(comm)?.remote.is_some() {
            return self.intercomm_subgroup(comm, &group);
        }
        self.check_subgroup(comm, &group)?;
        let ctx = self.agree_context(comm, &[])?.0;
        if group.rank_of(self.world_rank()).is_none() {
            return Ok(MPI_COMM_NULL);
        }
        self.keep(ctx, group, comm)
    }

    /// `MPI_Comm_create_group`: only the members of `group` call it.
    pub fn comm_create_group(
        &mut self,
        comm: Handle,
        group: Arc<Group>,
        tag: c_int,
    ) -> Result<Handle> {
        self.check_subgroup(comm, &group)?;
        let Some(me) = group.rank_of(self.world_rank()) else {
            return Ok(MPI_COMM_NULL);
        };
        if tag < 0 {
            return Err(Error::new(MPI_ERR_TAG, format!("tag {tag} is negative")));
        }
        let all =
            self.allgather_in_group(comm, &group, me, tag, &[self.contexts_above() as i32])?;
        let ctx = all.iter().map(|&c| c as u32).max().unwrap_or(0);
        self.keep(ctx, group, comm)
    }

    /// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` splits by node (the processes
    /// that share memory); any other type is `MPI_UNDEFINED`'s communicator.
    pub fn comm_split_type(&mut self, comm: Handle, kind: c_int, key: c_int) -> Result<Handle> {
        let color = match kind {
            MPI_COMM_TYPE_SHARED => self.node_colour(),
            MPI_UNDEFINED => MPI_UNDEFINED,
            // Hardware-guided splits: no finer level than the node is known here.
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_HW_UNGUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => {
                self.node_colour()
            }
            k => {
                return Err(Error::new(
                    MPI_ERR_ARG,
                    format!("split type {k} is not one of the standard's"),
                ))
            }
        };
        self.comm_split(comm, color, key)
    }

    /// A colour for this node: a hash of the node's identity (the launcher's
    /// placement, host name and boot id), the same for every process on it.
    fn node_colour(&mut self) -> c_int {
        let node = self.msg.job().node.to_string();
        let h = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        (h & 0x3fff_ffff) as c_int
    }

    /// `group` lies inside `comm`'s group.
    fn check_subgroup(&self, comm: Handle, group: &Group) -> Result<()> {
        let parent = self.comm(comm)?;
        if parent.remote.is_some() {
            return Err(Error::new(
                MPI_ERR_COMM,
                "MPI_Comm_create_group takes an intracommunicator (MPI 4.1 §7.4.2)",
            ));
        }
        if group
            .ranks()
            .iter()
            .any(|&j| parent.group.rank_of(j).is_none())
        {
            return Err(Error::new(
                MPI_ERR_GROUP,
                "the group has processes outside the communicator",
            ));
        }
        Ok(())
    }
}
