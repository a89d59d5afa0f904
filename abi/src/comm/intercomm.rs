//! Intercommunicators. `MPI_Intercomm_create`: between two disjoint groups of one
//! job, each an intracommunicator's. The two leaders, which both belong to the peer
//! communicator, trade their groups over it with the program's tag (its
//! point-to-point context, as MPICH does), and each tells its own group.
//!
//! The groups may hold processes of several jobs (a spawned job and its parents):
//! the leaders trade them named by job ([`super::members`]), and each member finds
//! them in its own numbering, connecting to those it has not met; then every
//! member of both groups has its bridge to other jobs open before any connects,
//! and has connected before the intercommunicator is used.
//!
//! `MPI_Comm_dup` of an intercommunicator keeps its groups with a new context.
//! `MPI_Comm_split` and `MPI_Comm_create` of one make intercommunicators between
//! subsets of its two groups: each member's colour and key go to its own group and
//! to the other, and the members of one colour on both sides form one.
//! `MPI_Intercomm_merge` makes one intracommunicator of both groups.
//!
//! Every new context is agreed by the members of both groups ([`agree_context`]):
//! each group gathers its members' proposals, and the groups trade them (through the
//! leaders while the intercommunicator is being made, over it afterwards). Made from
//! a binding, the agreement lets other threads' calls in while it waits.

use super::context::{agree_context, Among};
use super::create::{create_group_ctx, of_colour};
use super::members::Members;
use super::{Communicator, Group};
use crate::coll::{bcast_in, bcast_outcome, run_here, Basic, Inside, Loc, Schedule, Xfer};
use crate::entry::call_held;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use std::sync::Arc;

/// The tags of the agreements within a group (`MPI_Comm_create_group`'s exchange
/// over the intercommunicator).
const DUP_TAG: i32 = 5;
const SPLIT_TAG: i32 = 6;
const MERGE_TAG: i32 = 7;

/// `MPI_Intercomm_create` (see the module's description), run in `inside`.
pub fn intercomm_create(
    inside: &mut impl Inside,
    local: Handle,
    local_leader: c_int,
    peer: Handle,
    remote_leader: c_int,
    tag: c_int,
) -> Result<Handle> {
    let c = inside.state().comm(local)?;
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
    // What the leader tells its group: the error class of its part and the length
    // of the other group's description; then the description.
    let mut header = [MPI_SUCCESS, 0];
    let mut theirs = Vec::new();
    let mut across = None;
    let part = (rank == leader).then(|| {
        trade_groups(inside, &group, (peer, remote_leader, tag)).map(|(text, with)| {
            header[1] = text.len() as c_int;
            theirs = text.into_bytes();
            across = Some(with);
        })
    });
    let failed = "the local leader could not make the intercommunicator";
    bcast_outcome(inside, part, &mut header, (local_leader, local), failed)?;
    theirs.resize(header[1] as usize, 0);
    bcast_in(inside, &mut theirs, local_leader, local)?;
    let theirs = Members::decode(&String::from_utf8_lossy(&theirs), MPI_ERR_INTERN)?;
    let mine = inside.state().named_by_job(group.ranks())?;
    // Groups of several jobs: every member's bridge is open before any looks for
    // another's, and every member has met the other group before it is used.
    let mixed = mine.jobs().union(&theirs.jobs()).count() > 1;
    if mixed {
        meet(inside, (local, local_leader), across)?;
    }
    let remote = inside.state().resolve(&theirs)?;
    if mixed {
        meet(inside, (local, local_leader), across)?;
    }
    if remote.iter().any(|&r| group.rank_of(r).is_some()) {
        return Err(Error::new(
            MPI_ERR_COMM,
            "the two groups of MPI_Intercomm_create share processes: they must be disjoint",
        ));
    }
    let among = Among::Leaders {
        local,
        leader: local_leader,
        across,
        theirs: remote.len(),
    };
    let (ctx, _) = agree_context(inside, &among, &[])?;
    keep_inter(
        inside,
        ctx,
        (group, rank),
        Arc::new(Group::new(remote)),
        errhandler,
    )
}

/// Wait until every member of both groups of an intercommunicator being made has
/// come here, its bridge to other jobs open: each group's barrier around the
/// leaders' exchange (`across`, at the local leader only).
fn meet(
    inside: &mut impl Inside,
    (local, leader): (Handle, c_int),
    across: Option<(u32, i32, u32)>,
) -> Result<()> {
    inside.state().msg.open_bridge()?;
    let s = inside.state().build_barrier(local)?;
    run_here(inside, s)?;
    if let Some(with) = across {
        exchange(inside, with, &[0], &mut [0])?;
    }
    bcast_in(inside, &mut [0u8], leader, local)
}

/// Agree on a new context among both groups of intercommunicator `comm`, its
/// members' `extra` gathered too (this process's group first, see [`Among::Both`]);
/// the agreement's own exchanges within each group use `tag`.
fn agree_across(
    inside: &mut impl Inside,
    comm: Handle,
    tag: i32,
    extra: &[i32],
) -> Result<(u32, Vec<Vec<i32>>)> {
    let mpi = inside.state();
    let c = mpi.comm(comm)?;
    let (group, me) = (c.group.clone(), c.rank);
    let (ctx, tag) = create_group_ctx(mpi, comm, tag)?;
    let local = Among::Group {
        ctx,
        group: &group,
        me,
        tag,
    };
    agree_context(
        inside,
        &Among::Both {
            inter: comm,
            local: &local,
        },
        extra,
    )
}

/// A new intercommunicator of context `ctx` between `group` and `remote` (this
/// process `group`'s member `rank`) with `errhandler`.
fn keep_inter(
    inside: &mut impl Inside,
    ctx: u32,
    (group, rank): (Arc<Group>, u32),
    remote: Arc<Group>,
    errhandler: Handle,
) -> Result<Handle> {
    // (Processes of other jobs met before it was kept, and disconnected from
    // meanwhile by another thread, are connected again.)
    let others: Vec<u32> = group
        .ranks()
        .iter()
        .chain(remote.ranks())
        .copied()
        .collect();
    let c = Communicator::inter(ctx, (group, rank), remote, errhandler);
    let h = inside.state().comms.insert(c)?;
    inside.state().msg.reconnect(&others);
    Ok(h)
}

/// `MPI_Comm_dup` of intercommunicator `comm` (attributes apart).
pub fn intercomm_dup(inside: &mut impl Inside, comm: Handle) -> Result<Handle> {
    let c = inside.state().comm(comm)?;
    let (group, rank, errhandler) = (c.group.clone(), c.rank, c.errhandler);
    let remote = c.remote.clone().expect("an intercommunicator");
    let (ctx, _) = agree_across(inside, comm, DUP_TAG, &[])?;
    keep_inter(inside, ctx, (group, rank), remote, errhandler)
}

/// `MPI_Comm_split` of intercommunicator `comm`: the members of each colour in
/// both groups, each side ordered by key then rank (`MPI_COMM_NULL` for
/// `MPI_UNDEFINED`, or a colour the other group lacks).
pub fn intercomm_split(
    inside: &mut impl Inside,
    comm: Handle,
    color: c_int,
    key: c_int,
) -> Result<Handle> {
    let c = inside.state().comm(comm)?;
    let (group, errhandler) = (c.group.clone(), c.errhandler);
    let remote = c.remote.clone().expect("an intercommunicator");
    let (ctx, all) = agree_across(inside, comm, SPLIT_TAG, &[color, key])?;
    let (ours, theirs) = all.split_at(group.size() as usize);
    let (local, other) = (
        of_colour(ours, color, &group),
        of_colour(theirs, color, &remote),
    );
    if color == MPI_UNDEFINED || other.is_empty() {
        return Ok(MPI_COMM_NULL);
    }
    let group = Arc::new(Group::new(local));
    let rank = group
        .rank_of(inside.state().world_rank())
        .expect("a member of its colour");
    let remote = Arc::new(Group::new(other));
    keep_inter(inside, ctx, (group, rank), remote, errhandler)
}

/// `MPI_Comm_create` of intercommunicator `comm`: `group`, a subgroup of the local
/// group, with the subgroup the other side chose (its members in the groups'
/// orders).
pub fn intercomm_subgroup(inside: &mut impl Inside, comm: Handle, group: &Group) -> Result<Handle> {
    let mpi = inside.state();
    let local = mpi.comm(comm)?.group.clone();
    if group.ranks().iter().any(|&j| local.rank_of(j).is_none()) {
        return Err(Error::new(
            MPI_ERR_GROUP,
            "the group has processes outside the intercommunicator's local group",
        ));
    }
    let (color, key) = match group.rank_of(mpi.world_rank()) {
        Some(r) => (0, r as c_int),
        None => (MPI_UNDEFINED, 0),
    };
    intercomm_split(inside, comm, color, key)
}

/// `MPI_Intercomm_merge`: one intracommunicator of both groups, the group whose
/// members said `high` last (the lower side in the launcher's numbering first when
/// both said the same).
fn intercomm_merge(inside: &mut impl Inside, inter: Handle, high: bool) -> Result<Handle> {
    let mpi = inside.state();
    let c = mpi.comm(inter)?;
    let Some(remote) = c.remote.clone() else {
        return Err(Error::new(
            MPI_ERR_COMM,
            "MPI_Intercomm_merge takes an intercommunicator",
        ));
    };
    let (local, errhandler) = (c.group.clone(), c.errhandler);
    // Where each group's first member is in the launcher's numbering (the groups
    // may be of two jobs).
    let leader = mpi.msg.universe_base()? + local.job_rank(0).expect("a member");
    let mine = [i32::from(high), leader as i32];
    let (ctx, all) = agree_across(inside, inter, MERGE_TAG, &mine)?;
    let theirs = &all[local.size() as usize];
    let (their_high, their_leader) = (theirs[0] != 0, theirs[1] as u32);
    let we_first = match (high, their_high) {
        (false, true) => true,
        (true, false) => false,
        _ => leader < their_leader,
    };
    let (a, b) = if we_first {
        (&local, &remote)
    } else {
        (&remote, &local)
    };
    let ranks: Vec<u32> = a.ranks().iter().chain(b.ranks()).copied().collect();
    let group = Arc::new(Group::new(ranks));
    let rank = group
        .rank_of(inside.state().world_rank())
        .expect("a member");
    let mut merged = Communicator::new(ctx, group, rank, "");
    merged.errhandler = errhandler;
    inside.state().comms.insert(merged)
}

/// The leader's part of `MPI_Intercomm_create`: check the peer communicator's
/// arguments, then trade the groups' members, named by job ([`Members`]), with the
/// other leader. The other group's description, and what to trade further with its
/// leader (context, tag, rank).
fn trade_groups(
    inside: &mut impl Inside,
    group: &Group,
    (peer, remote_leader, tag): (Handle, c_int, c_int),
) -> Result<(String, (u32, i32, u32))> {
    let mpi = inside.state();
    let p = mpi.comm(peer)?;
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
    if group.rank_of(other).is_some() {
        return Err(Error::new(
            MPI_ERR_COMM,
            "the remote leader is a member of the local group: the groups must be disjoint",
        ));
    }
    let with = (p.ctx, tag, other);
    let mine = mpi.named_by_job(group.ranks())?.encode().into_bytes();
    let mut size = [0 as c_int];
    exchange(inside, with, &[mine.len() as c_int], &mut size)?;
    let mut theirs = vec![0u8; usize::try_from(size[0]).unwrap_or(0)];
    exchange(inside, with, &mine, &mut theirs)?;
    Ok((String::from_utf8_lossy(&theirs).into_owned(), with))
}

/// Send `mine` to job rank `to` and receive `theirs` from it at once, in context
/// `ctx` with `tag`, run in `inside`.
pub(super) fn exchange<T: Basic>(
    inside: &mut impl Inside,
    (ctx, tag, to): (u32, i32, u32),
    mine: &[T],
    theirs: &mut [T],
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
    run_here(inside, s)
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
    call_held("MPI_Intercomm_create", Object::Comm(local_comm), |mpi| {
        if newintercomm.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "newintercomm is null"));
        }
        let h = intercomm_create(mpi, local_comm, local_leader, peer_comm, remote_leader, tag)?;
        // SAFETY: checked not null; writable, the binding's contract.
        unsafe { newintercomm.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Intercomm_merge(
    intercomm: Handle,
    high: c_int,
    newintracomm: *mut Handle,
) -> c_int {
    call_held("MPI_Intercomm_merge", Object::Comm(intercomm), |mpi| {
        let h = intercomm_merge(mpi, intercomm, high != 0)?;
        // SAFETY: null or writable.
        unsafe { super::api::hand_out(Ok(h), newintracomm, |h| mpi.comm_free(h)) }
    })
}
