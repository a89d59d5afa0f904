//! Making communicators: `dup`, `split`, `split_type`, `create`, `create_group`.
//!
//! Each new communicator gets a context block its members agree on
//! ([`super::context`]). Made from a binding, the agreement lets other threads'
//! calls in while it waits (`inside` a [`crate::global::Held`]); made inside
//! another call (a topology's, a window's), it keeps them out (`inside` the state).

use super::context::{agree_context, Among};
use super::intercomm::{intercomm_dup, intercomm_split, intercomm_subgroup};
use super::{Communicator, Group};
use crate::coll::{basic, run_here, Inside, Loc, Members, Schedule};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::msg::AllgatherAlgorithm;
use std::sync::Arc;

/// Tags of `MPI_Comm_create_group`'s exchange, apart from the collectives' own.
const CREATE_GROUP_TAG: i32 = 1 << 30;

/// An all-gather of `mine` (as [`crate::coll::allgather_here`]) among the members of `group`
/// only (this process is its member `me`), in context `ctx` with `tag`, run in
/// `inside`.
pub(crate) fn allgather_among(
    inside: &mut impl Inside,
    (ctx, tag): (u32, i32),
    group: &Arc<Group>,
    me: u32,
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
    basic::allgatherv(&mut s, &members, &blocks, None, AllgatherAlgorithm::Auto);
    run_here(inside, s)?;
    Ok(all)
}

/// The context and tag `MPI_Comm_create_group`'s exchanges among `group` take over
/// `parent` with the program's `tag`.
pub(super) fn create_group_ctx(mpi: &Mpi, parent: Handle, tag: i32) -> Result<(u32, i32)> {
    let ctx = mpi.comm(parent)?.coll_ctx();
    Ok((ctx, CREATE_GROUP_TAG | (tag & (CREATE_GROUP_TAG - 1))))
}

/// `MPI_Comm_dup`'s duplicate: the same group, a new context, the parent's error
/// handler and topology (the attributes come after, copied outside the library's
/// state: [`crate::attr::copy_attrs`]).
pub fn dup(inside: &mut impl Inside, comm: Handle) -> Result<Handle> {
    if inside.state().comm(comm)?.remote.is_some() {
        return intercomm_dup(inside, comm);
    }
    let h = dup_group(inside, comm)?;
    let mpi = inside.state();
    let topo = mpi.comm(comm)?.topo.clone();
    mpi.comm_mut(h)?.topo = topo;
    Ok(h)
}

/// A duplicate of `comm` for the library's own use (a window's): its group and a new
/// context, nothing else of the parent's.
pub fn dup_bare(inside: &mut impl Inside, comm: Handle) -> Result<Handle> {
    if inside.state().comm(comm)?.remote.is_some() {
        return Err(Error::new(
            MPI_ERR_COMM,
            "a window is made over an intracommunicator (MPI 4.1 §12.2), not an intercommunicator",
        ));
    }
    dup_group(inside, comm)
}

/// A new communicator over intracommunicator `comm`'s group, with a new context.
fn dup_group(inside: &mut impl Inside, comm: Handle) -> Result<Handle> {
    let ctx = agree_context(inside, &Among::Comm(comm), &[])?.0;
    let mpi = inside.state();
    let group = mpi.comm(comm)?.group.clone();
    mpi.keep(ctx, group, comm)
}

/// `MPI_Comm_split`: members of one colour form a communicator, ordered by key then
/// by their rank in `comm`; `MPI_UNDEFINED` gets none.
pub fn split(inside: &mut impl Inside, comm: Handle, color: c_int, key: c_int) -> Result<Handle> {
    if color < 0 && color != MPI_UNDEFINED {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("colour {color} is negative (and not MPI_UNDEFINED)"),
        ));
    }
    if inside.state().comm(comm)?.remote.is_some() {
        return intercomm_split(inside, comm, color, key);
    }
    let (ctx, all) = agree_context(inside, &Among::Comm(comm), &[color, key])?;
    if color == MPI_UNDEFINED {
        return Ok(MPI_COMM_NULL);
    }
    let mpi = inside.state();
    let ranks = of_colour(&all, color, &mpi.comm(comm)?.group);
    mpi.keep(ctx, Arc::new(Group::new(ranks)), comm)
}

/// The job ranks of the members of `g` whose colour is `color`, by key then rank:
/// `said` holds each member's colour and key, in `g`'s order.
pub(super) fn of_colour(said: &[Vec<i32>], color: c_int, g: &Group) -> Vec<u32> {
    let mut members: Vec<(c_int, u32)> = said
        .iter()
        .enumerate()
        .filter(|(_, v)| v[0] == color)
        .map(|(r, v)| (v[1], r as u32))
        .collect();
    members.sort();
    members
        .iter()
        .map(|&(_, r)| g.job_rank(r).expect("a member"))
        .collect()
}

/// The info key that names the hardware a split follows (MPI 4.1, 7.4.2).
const HW_RESOURCE_KEY: &str = "mpi_hw_resource_type";
/// The one resource the standard names: what shares memory, a node here.
const SHARED_MEMORY: &str = "mpi_shared_memory";

/// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` splits by node (the processes that
/// share memory); the hardware-guided types by the resource `info` names
/// (`mpi_hw_resource_type`): `mpi_shared_memory` and hwloc's `machine` are the node,
/// any other (or none) gives `MPI_COMM_NULL`; `MPI_COMM_TYPE_HW_UNGUIDED` splits by
/// node where that makes each part smaller than `comm` (and says so in `info`), else
/// gives `MPI_COMM_NULL`: no finer level than the node is known here.
pub fn split_type(
    inside: &mut impl Inside,
    comm: Handle,
    kind: c_int,
    key: c_int,
    info: Handle,
) -> Result<Handle> {
    let color = match kind {
        MPI_COMM_TYPE_SHARED => inside.state().node_colour(),
        MPI_UNDEFINED => MPI_UNDEFINED,
        MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => {
            match inside.state().value_of(info, HW_RESOURCE_KEY)?.as_deref() {
                Some(SHARED_MEMORY | "machine") => inside.state().node_colour(),
                _ => MPI_UNDEFINED,
            }
        }
        MPI_COMM_TYPE_HW_UNGUIDED => {
            let whole = inside.state().comm(comm)?.group.size();
            let color = inside.state().node_colour();
            let part = split(inside, comm, color, key)?;
            if inside.state().comm(part)?.group.size() == whole {
                // The same processes: not a split (every member sees the same size).
                inside.state().comm_free(part)?;
                return Ok(MPI_COMM_NULL);
            }
            if info != MPI_INFO_NULL {
                crate::info::set_value(info, HW_RESOURCE_KEY, SHARED_MEMORY)?;
            }
            return Ok(part);
        }
        k => {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("split type {k} is not one of the standard's"),
            ))
        }
    };
    split(inside, comm, color, key)
}

/// `MPI_Comm_create`: every member of `comm` calls it; those in `group` get the new
/// communicator.
pub fn create(inside: &mut impl Inside, comm: Handle, group: Arc<Group>) -> Result<Handle> {
    if inside.state().comm(comm)?.remote.is_some() {
        return intercomm_subgroup(inside, comm, &group);
    }
    inside.state().check_subgroup(comm, &group)?;
    let ctx = agree_context(inside, &Among::Comm(comm), &[])?.0;
    if group.rank_of(inside.state().world_rank()).is_none() {
        return Ok(MPI_COMM_NULL);
    }
    inside.state().keep(ctx, group, comm)
}

/// `MPI_Comm_create_group`: only the members of `group` call it.
pub fn create_group(
    inside: &mut impl Inside,
    comm: Handle,
    group: Arc<Group>,
    tag: c_int,
) -> Result<Handle> {
    let mpi = inside.state();
    mpi.check_subgroup(comm, &group)?;
    let Some(me) = group.rank_of(mpi.world_rank()) else {
        return Ok(MPI_COMM_NULL);
    };
    if tag < 0 {
        return Err(Error::new(MPI_ERR_TAG, format!("tag {tag} is negative")));
    }
    let (ctx, tag) = create_group_ctx(mpi, comm, tag)?;
    let among = Among::Group {
        ctx,
        group: &group,
        me,
        tag,
    };
    let ctx = agree_context(inside, &among, &[])?.0;
    inside.state().keep(ctx, group, comm)
}

impl Mpi {
    /// Keep a new communicator over `group` (which holds this process) with context
    /// `ctx` (agreed and taken: [`agree_context`]) and `parent`'s error handler; its
    /// handle. A group without a session takes the parent's.
    pub(crate) fn keep(&mut self, ctx: u32, group: Arc<Group>, parent: Handle) -> Result<Handle> {
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
