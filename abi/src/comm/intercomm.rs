//! `MPI_Intercomm_create`: an intercommunicator between two disjoint groups of one
//! job, each an intracommunicator's. The two leaders, which both belong to the
//! peer communicator, trade their groups over it with the program's tag (its
//! point-to-point context, as MPICH does), and each tells its own group. The new
//! context is above every one either group uses: each group agrees on its own
//! largest first, and the leaders trade those too.
//!
//! Groups of different jobs (a spawned job and its parents) are refused: their
//! ranks are numbered by each job alone. `MPI_Intercomm_merge` of the spawn's
//! intercommunicator joins them.
//!
//! `MPI_Comm_dup` of an intercommunicator keeps its groups with a new context,
//! agreed the same way: each group's largest, then the two traded across.
//! `MPI_Comm_split` and `MPI_Comm_create` of one make intercommunicators between
//! subsets of its two groups: each member's colour and key go to its own group and
//! to the other, and the members of one colour on both sides form one.

use super::{Communicator, Group};
use crate::coll::{Loc, Schedule, Xfer};
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::sync::Arc;

/// The tags of `MPI_Comm_dup`'s and `MPI_Comm_split`'s agreement within a group
/// (`Mpi::allgather_in_group`).
const DUP_TAG: i32 = 5;
const SPLIT_TAG: i32 = 6;

impl Mpi {
    /// `MPI_Intercomm_create` (see the module's description).
    pub fn intercomm_create(
        &mut self,
        local: Handle,
        local_leader: c_int,
        peer: Handle,
        remote_leader: c_int,
        tag: c_int,
    ) -> Result<Handle> {
        let c = self.comm(local)?;
        if c.remote.is_some() {
            return Err(Error::new(
                MPI_ERR_COMM,
                "the local communicator of MPI_Intercomm_create is an intercommunicator",
            ));
        }
        let (group, rank, errhandler) = (c.group.clone(), c.rank, c.errhandler);
        let leader = u32::try_from(local_leader)
            .ok()
            .filter(|l| *l < group.size())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_RANK,
                    format!(
                        "local leader {local_leader} is not a rank of the local communicator of {}",
                        group.size()
                    ),
                )
            })?;
        let (ctx, _) = self.agree_context(local, &[])?;
        // What the leader tells its group: the error class of its part, the other
        // group's largest context and its size; then the other group's members.
        let mut header = [MPI_SUCCESS, 0, 0];
        let mut theirs = Vec::new();
        let mut failure = None;
        if rank == leader {
            match self.trade_groups(&group, ctx, (peer, remote_leader, tag)) {
                Ok((their_ctx, ranks)) => {
                    header = [MPI_SUCCESS, their_ctx as c_int, ranks.len() as c_int];
                    theirs = ranks;
                }
                Err(e) => {
                    header[0] = e.class;
                    failure = Some(e);
                }
            }
        }
        self.bcast_here(&mut header, local_leader, local)?;
        if let Some(e) = failure {
            return Err(e);
        }
        if header[0] != MPI_SUCCESS {
            return Err(Error::new(
                header[0],
                "the local leader could not make the intercommunicator (its error says why)",
            ));
        }
        theirs.resize(header[2] as usize, 0);
        self.bcast_here(&mut theirs, local_leader, local)?;
        let ctx = ctx.max(header[1] as u32);
        self.use_contexts(ctx)?;
        let mut c = Communicator::new(ctx, group, rank, "");
        c.remote = Some(Arc::new(Group::new(
            theirs.iter().map(|&r| r as u32).collect(),
        )));
        c.errhandler = errhandler;
        self.comms.insert(c)
    }

    /// `MPI_Comm_dup` of intercommunicator `comm` (attributes apart).
    pub fn intercomm_dup(&mut self, comm: Handle) -> Result<Handle> {
        let c = self.comm(comm)?;
        let (group, rank, errhandler) = (c.group.clone(), c.rank, c.errhandler);
        let remote = c.remote.clone();
        let free = [self.contexts_above() as i32];
        let ours = self.allgather_in_group(comm, &group, rank, DUP_TAG, &free)?;
        let ours = ours.iter().copied().max().unwrap_or(0);
        let theirs = self.allgather_of(comm, &[ours])?;
        let ctx = theirs.iter().copied().fold(ours, i32::max) as u32;
        self.use_contexts(ctx)?;
        let mut c = Communicator::new(ctx, group, rank, "");
        c.remote = remote;
        c.errhandler = errhandler;
        self.comms.insert(c)
    }

    /// `MPI_Comm_split` of intercommunicator `comm`: the members of each colour in
    /// both groups, each side ordered by key then rank (`MPI_COMM_NULL` for
    /// `MPI_UNDEFINED`, or a colour the other group lacks).
    pub fn intercomm_split(&mut self, comm: Handle, color: c_int, key: c_int) -> Result<Handle> {
        let c = self.comm(comm)?;
        let (group, rank, errhandler) = (c.group.clone(), c.rank, c.errhandler);
        let remote = c.remote.clone().expect("an intercommunicator");
        let mine = [color, key, self.contexts_above() as i32];
        let ours = self.allgather_in_group(comm, &group, rank, SPLIT_TAG, &mine)?;
        let theirs = self.allgather_of(comm, &mine)?;
        let ctx = ours
            .chunks(3)
            .chain(theirs.chunks(3))
            .map(|v| v[2])
            .max()
            .unwrap_or(0) as u32;
        self.use_contexts(ctx)?;
        // The job ranks of the members of `color` in `g`, by key then rank.
        let members = |all: &[i32], g: &Group| {
            let mut m: Vec<(i32, u32)> = all
                .chunks(3)
                .enumerate()
                .filter(|(_, v)| v[0] == color)
                .map(|(r, v)| (v[1], r as u32))
                .collect();
            m.sort();
            m.iter()
                .map(|&(_, r)| g.job_rank(r).expect("a member"))
                .collect::<Vec<u32>>()
        };
        let (local, other) = (members(&ours, &group), members(&theirs, &remote));
        if color == MPI_UNDEFINED || other.is_empty() {
            return Ok(MPI_COMM_NULL);
        }
        let group = Arc::new(Group::new(local));
        let rank = group
            .rank_of(self.world_rank())
            .expect("a member of its colour");
        let mut c = Communicator::new(ctx, group, rank, "");
        c.remote = Some(Arc::new(Group::new(other)));
        c.errhandler = errhandler;
        self.comms.insert(c)
    }

    /// `MPI_Comm_create` of intercommunicator `comm`: `group`, a subgroup of the
    /// local group, with the subgroup the other side chose (its members in the
    /// groups' orders).
    pub fn intercomm_subgroup(&mut self, comm: Handle, group: &Group) -> Result<Handle> {
        let local = self.comm(comm)?.group.clone();
        if group.ranks().iter().any(|&j| local.rank_of(j).is_none()) {
            return Err(Error::new(
                MPI_ERR_GROUP,
                "the group has processes outside the intercommunicator's local group",
            ));
        }
        let (color, key) = match group.rank_of(self.world_rank()) {
            Some(r) => (0, r as c_int),
            None => (MPI_UNDEFINED, 0),
        };
        self.intercomm_split(comm, color, key)
    }

    /// The leader's part: check the peer communicator's arguments, then trade
    /// (largest context, size) and the members with the other leader. The other
    /// group's largest context and its members.
    fn trade_groups(
        &mut self,
        group: &Group,
        ctx: u32,
        (peer, remote_leader, tag): (Handle, c_int, c_int),
    ) -> Result<(u32, Vec<c_int>)> {
        let p = self.comm(peer)?;
        let other = u32::try_from(remote_leader)
            .ok()
            .and_then(|r| p.peers().job_rank(r))
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_RANK,
                    format!(
                        "remote leader {remote_leader} is not a rank of the peer communicator's {} processes",
                        p.peers().size()
                    ),
                )
            })?;
        if tag < 0 {
            return Err(Error::new(MPI_ERR_TAG, format!("tag {tag} is negative")));
        }
        let jobs = self.world.group.size();
        if other >= jobs || group.ranks().iter().any(|&j| j >= jobs) {
            return Err(Error::new(
                MPI_ERR_COMM,
                "MPI_Intercomm_create between processes of different jobs (spawned ones) \
                 is not implemented by this library: merge the spawn's intercommunicator \
                 (MPI_Intercomm_merge)",
            ));
        }
        if group.rank_of(other).is_some() {
            return Err(Error::new(
                MPI_ERR_COMM,
                "the remote leader is a member of the local group: the groups must be disjoint",
            ));
        }
        let peer_ctx = p.ctx;
        let mine = [ctx as c_int, group.size() as c_int];
        let mut header = [0 as c_int; 2];
        self.exchange_with(peer_ctx, tag, other, &mine, &mut header)?;
        let ranks: Vec<c_int> = group.ranks().iter().map(|&r| r as c_int).collect();
        let mut theirs = vec![0; usize::try_from(header[1]).unwrap_or(0)];
        self.exchange_with(peer_ctx, tag, other, &ranks, &mut theirs)?;
        if theirs.iter().any(|&j| group.rank_of(j as u32).is_some()) {
            return Err(Error::new(
                MPI_ERR_COMM,
                "the two groups of MPI_Intercomm_create share processes: they must be disjoint",
            ));
        }
        Ok((header[0] as u32, theirs))
    }

    /// Send `mine` to job rank `to` and receive `theirs` from it at once, in context
    /// `ctx` with `tag`.
    fn exchange_with(
        &mut self,
        ctx: u32,
        tag: c_int,
        to: u32,
        mine: &[c_int],
        theirs: &mut [c_int],
    ) -> Result<()> {
        let mut s = Box::new(Schedule::new(ctx, tag));
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from: Loc::User(mine.as_ptr().cast::<u8>().cast_mut()),
            len: std::mem::size_of_val(mine),
            to,
        });
        r.xfers.push(Xfer::Recv {
            into: Loc::User(theirs.as_mut_ptr().cast()),
            len: std::mem::size_of_val(theirs),
            from: to,
        });
        self.run(s)
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Intercomm_create(
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Handle,
) -> c_int {
    call("MPI_Intercomm_create", Object::Comm(local_comm), |mpi| {
        if newintercomm.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "newintercomm is null"));
        }
        let h = mpi.intercomm_create(local_comm, local_leader, peer_comm, remote_leader, tag)?;
        // SAFETY: checked not null; writable, the binding's contract.
        unsafe { newintercomm.write(h) };
        Ok(())
    })
}
