//! Collectives on intercommunicators (MPI 4.1 §6.2.2): the data goes from one group
//! to the other. A rooted collective moves it between the root, which passes
//! `MPI_ROOT`, and the other group, which names the root by its rank there; the
//! rest of the root's group passes `MPI_PROC_NULL` and takes no part. Each member
//! of an all-gather or all-to-all exchanges blocks with every member of the other
//! group, and a reduction's result in one group combines the other group's inputs.
//!
//! The algorithms are MPICH's for intercommunicators: a broadcast crosses to the
//! other group's member 0, which broadcasts it in its group; a reduction reduces
//! within a group to member 0, whose result crosses to the root, or, for
//! `MPI_Allreduce` and `MPI_Reduce_scatter`, to the other group's member 0, which
//! broadcasts or scatters it in its group; the barrier is a barrier in each group
//! around a signal between the two members 0. Gathers, scatters, all-gathers and
//! all-to-alls go directly between the members, in one round. Scans and
//! `MPI_IN_PLACE` are not defined on intercommunicators.

use super::args::{self, at, finish, part};
use super::basic::{self, Tree};
use super::reduce;
use super::{Loc, Local, Members, Schedule, Xfer};
use crate::comm::Group;
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use std::sync::Arc;

/// The two groups of an intercommunicator, for one collective.
pub struct Sides {
    /// This process's group and its rank there.
    pub local: Members,
    /// The other group.
    pub remote: Arc<Group>,
}

impl Sides {
    /// The job rank of member `r` of the other group.
    fn peer(&self, r: u32) -> u32 {
        self.remote
            .job_rank(r)
            .expect("a member of the other group")
    }

    /// The other group's size.
    fn peers(&self) -> u32 {
        self.remote.size()
    }

    /// Whether this process is its group's member 0, which talks to the other group.
    fn leads(&self) -> bool {
        self.local.rank == 0
    }
}

/// A member's part in a rooted collective.
enum Role {
    /// The root (`MPI_ROOT`).
    Root,
    /// Another member of the root's group (`MPI_PROC_NULL`).
    Idle,
    /// A member of the other group; the root's rank in the root's group.
    Other(u32),
}

/// The part that root argument `root` gives this process.
fn role(root: c_int, sides: &Sides) -> Result<Role> {
    match root {
        MPI_ROOT => Ok(Role::Root),
        MPI_PROC_NULL => Ok(Role::Idle),
        r => u32::try_from(r)
            .ok()
            .filter(|r| *r < sides.peers())
            .map(Role::Other)
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_ROOT,
                    format!(
                        "root {root} on an intercommunicator is neither MPI_ROOT, \
                         MPI_PROC_NULL nor a rank of the other group of {} processes",
                        sides.peers()
                    ),
                )
            }),
    }
}

/// `MPI_IN_PLACE` refused.
fn not_in_place(buf: *const c_void) -> Result<()> {
    if super::args::in_place(buf) {
        return Err(Error::new(
            MPI_ERR_ARG,
            "MPI_IN_PLACE is not defined on intercommunicators",
        ));
    }
    Ok(())
}

/// Broadcast `len` bytes at `buf` from member 0 within this group.
fn bcast_from_leader(s: &mut Schedule, m: &Members, (buf, len): (Loc, usize)) {
    let piece = basic::bcast_piece(len, m.size, Tree::Binomial, false);
    basic::bcast(s, m, (buf, len), 0, Tree::Binomial, piece);
}

impl Mpi {
    /// `MPI_Barrier` on an intercommunicator.
    pub fn inter_barrier(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        let (c, local) = (self.comm(comm)?, &sides.local);
        let chosen = self.msg.coll_algorithms().barrier;
        basic::barrier(&mut s, local, chosen, || self.node_leaders(c, local));
        if sides.leads() {
            let nothing = Loc::User(std::ptr::NonNull::<u8>::dangling().as_ptr());
            reduce::exchange(&mut s, nothing, nothing, 0, sides.peer(0));
        }
        basic::barrier(&mut s, local, chosen, || self.node_leaders(c, local));
        Ok(s)
    }

    /// `MPI_Bcast` on an intercommunicator.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn inter_bcast(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        (buf, count, ty): (*mut c_void, c_int, Handle),
        root: c_int,
    ) -> Result<Box<Schedule>> {
        let role = role(root, sides)?;
        if let Role::Idle = role {
            // No argument but the root is significant here (MPI 4.1 §6.4).
            return Ok(s);
        }
        let n = check_count(count)?;
        let t = self.dtype(ty)?;
        match role {
            Role::Idle => {}
            Role::Root => {
                // SAFETY: the caller's contract.
                let (from, len) = unsafe { args::input(&mut s, buf, n, t) }?;
                let to = sides.peer(0);
                s.round().xfers.push(Xfer::Send { from, len, to });
            }
            Role::Other(root) => {
                // SAFETY: the caller's contract.
                let (into, len, unpack) = unsafe { args::output(&mut s, buf, n, t) }?;
                if sides.leads() {
                    let from = sides.peer(root);
                    s.round().xfers.push(Xfer::Recv { into, len, from });
                }
                bcast_from_leader(&mut s, &sides.local, (into, len));
                finish(&mut s, [unpack]);
            }
        }
        Ok(s)
    }

    /// `MPI_Reduce` on an intercommunicator.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn inter_reduce(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        (sendbuf, recvbuf): (*const c_void, *mut c_void),
        (count, ty, op): (c_int, Handle, Handle),
        root: c_int,
    ) -> Result<Box<Schedule>> {
        let role = role(root, sides)?;
        if let Role::Idle = role {
            // No argument but the root is significant here (MPI 4.1 §6.9.1).
            return Ok(s);
        }
        let n = check_count(count)?;
        let c = self.combine(self.reduction(op, ty)?, ty, n)?;
        match role {
            Role::Idle => {}
            Role::Root => {
                // SAFETY: the caller's contract.
                let (into, len, unpack) = unsafe { args::output(&mut s, recvbuf, n, c.ty) }?;
                let from = sides.peer(0);
                s.round().xfers.push(Xfer::Recv { into, len, from });
                finish(&mut s, [unpack]);
            }
            Role::Other(root) => {
                not_in_place(sendbuf)?;
                // SAFETY: the caller's contract.
                let (acc, len) = unsafe { args::input_copy(&mut s, sendbuf, n, c.ty) }?;
                reduce::reduce(&mut s, &sides.local, &c, (acc, acc), 0);
                if sides.leads() {
                    let to = sides.peer(root);
                    s.round().xfers.push(Xfer::Send { from: acc, len, to });
                }
            }
        }
        Ok(s)
    }

    /// `MPI_Allreduce` (`counts` `None`) and `MPI_Reduce_scatter` (this group's
    /// counts) on an intercommunicator: each group's inputs reduced to its member
    /// 0, the two results traded, each then broadcast or scattered in its group.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn inter_allreduce(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        (sendbuf, recvbuf): (*const c_void, *mut c_void),
        (count, ty, op): (c_int, Handle, Handle),
        counts: Option<&[usize]>,
    ) -> Result<Box<Schedule>> {
        not_in_place(sendbuf)?;
        let total = match counts {
            Some(counts) => counts.iter().sum(),
            None => check_count(count)?,
        };
        let c = self.combine(self.reduction(op, ty)?, ty, total)?;
        let t = c.ty;
        // SAFETY: the caller's contract.
        let (acc, len) = unsafe { args::input_copy(&mut s, sendbuf, total, t) }?;
        reduce::reduce(&mut s, &sides.local, &c, (acc, acc), 0);
        let Some(counts) = counts else {
            // SAFETY: the caller's contract.
            let (out, _, unpack) = unsafe { args::output(&mut s, recvbuf, total, t) }?;
            if sides.leads() {
                reduce::exchange(&mut s, acc, out, len, sides.peer(0));
            }
            bcast_from_leader(&mut s, &sides.local, (out, len));
            finish(&mut s, [unpack]);
            return Ok(s);
        };
        let mut blocks = Vec::new();
        if sides.leads() {
            let theirs = s.scratch(len);
            reduce::exchange(&mut s, acc, theirs, len, sides.peer(0));
            let mut off = 0;
            for &k in counts {
                blocks.push((theirs.offset(off), k * t.size));
                off += k * t.size;
            }
        }
        let mine = counts.get(sides.local.rank as usize).copied().unwrap_or(0);
        // SAFETY: the caller's contract.
        let (out, olen, unpack) = unsafe { args::output(&mut s, recvbuf, mine, t) }?;
        basic::scatterv(&mut s, &sides.local, &blocks, Some((out, olen)), 0);
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Gather(v)` (`to_root`) and `MPI_Scatter(v)` on an intercommunicator:
    /// one round between the root and every member of the other group. `own` is
    /// the block a member of the other group sends or receives (buffer, count,
    /// type), `blocks` the root's (buffer, a vector argument of the other group's
    /// size, type).
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_gather`].
    pub unsafe fn inter_rooted(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        own: (*mut c_void, c_int, Handle),
        blocks: (*mut c_void, (c_int, *const c_int, *const c_int), Handle),
        (root, to_root): (c_int, bool),
    ) -> Result<Box<Schedule>> {
        let mut unpacks = Vec::new();
        match role(root, sides)? {
            Role::Idle => {}
            Role::Root => {
                let (buf, v, ty) = blocks;
                let mut xfers = Vec::with_capacity(sides.peers() as usize);
                let t = self.dtype(ty)?.clone();
                for i in 0..sides.peers() {
                    // SAFETY: the caller's contract.
                    let (k, displ) = unsafe { part(v, i, sides.peers()) }?;
                    let (k, buf) = (check_count(k)?, at(buf, displ as isize, &t, false));
                    let peer = sides.peer(i);
                    // SAFETY: the caller's contract.
                    let xfer = unsafe {
                        if to_root {
                            let (into, len, u) = args::output(&mut s, buf, k, &t)?;
                            unpacks.push(u);
                            Xfer::Recv {
                                into,
                                len,
                                from: peer,
                            }
                        } else {
                            let (from, len) = args::input(&mut s, buf, k, &t)?;
                            Xfer::Send {
                                from,
                                len,
                                to: peer,
                            }
                        }
                    };
                    xfers.push(xfer);
                }
                s.round().xfers.extend(xfers);
            }
            Role::Other(root) => {
                let (buf, k, ty) = own;
                let (t, k, peer) = (self.dtype(ty)?.clone(), check_count(k)?, sides.peer(root));
                // SAFETY: the caller's contract.
                let xfer = unsafe {
                    if to_root {
                        let (from, len) = args::input(&mut s, buf, k, &t)?;
                        Xfer::Send {
                            from,
                            len,
                            to: peer,
                        }
                    } else {
                        let (into, len, u) = args::output(&mut s, buf, k, &t)?;
                        unpacks.push(u);
                        Xfer::Recv {
                            into,
                            len,
                            from: peer,
                        }
                    }
                };
                s.round().xfers.push(xfer);
            }
        }
        finish(&mut s, unpacks);
        Ok(s)
    }

    /// `MPI_Allgather(v)` on an intercommunicator: this process's block to every
    /// member of the other group, and a block from each (`recv` a vector argument of
    /// the other group's size).
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_gather`], on every member.
    pub unsafe fn inter_allgather(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        (sendbuf, sendcount, sendtype): (*const c_void, c_int, Handle),
        (recvbuf, recv, recvtype): (*mut c_void, (c_int, *const c_int, *const c_int), Handle),
    ) -> Result<Box<Schedule>> {
        not_in_place(sendbuf)?;
        let st = self.dtype(sendtype)?.clone();
        // SAFETY: the caller's contract.
        let mine = unsafe { args::input(&mut s, sendbuf, check_count(sendcount)?, &st) }?;
        let rt = self.dtype(recvtype)?.clone();
        let (mut recvs, mut unpacks) = (Vec::new(), Vec::new());
        for i in 0..sides.peers() {
            // SAFETY: the caller's contract.
            let (k, displ) = unsafe { part(recv, i, sides.peers()) }?;
            let buf = at(recvbuf, displ as isize, &rt, false);
            // SAFETY: the caller's contract.
            let (into, len, u) = unsafe { args::output(&mut s, buf, check_count(k)?, &rt) }?;
            recvs.push((into, len));
            unpacks.push(u);
        }
        let sends = vec![mine; recvs.len()];
        Ok(exchange(s, sides, &sends, &recvs, unpacks))
    }

    /// `MPI_Alltoall(v, w)` on an intercommunicator: block `i` to and from member
    /// `i` of the other group (`w`: a type per member, displacements in bytes).
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_alltoall`].
    pub unsafe fn inter_alltoall(
        &mut self,
        mut s: Box<Schedule>,
        sides: &Sides,
        (sendbuf, send, sendtypes): (
            *const c_void,
            (c_int, *const c_int, *const c_int),
            &[Handle],
        ),
        (recvbuf, recv, recvtypes): (*mut c_void, (c_int, *const c_int, *const c_int), &[Handle]),
        w: bool,
    ) -> Result<Box<Schedule>> {
        not_in_place(sendbuf)?;
        let n = sides.peers();
        let type_of = |types: &[Handle], i: u32| if w { types[i as usize] } else { types[0] };
        let (mut sends, mut recvs, mut unpacks) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let st = self.dtype(type_of(sendtypes, i))?.clone();
            // SAFETY: the caller's contract.
            let (k, displ) = unsafe { part(send, i, n) }?;
            let buf = at(sendbuf, displ as isize, &st, w);
            // SAFETY: the caller's contract.
            sends.push(unsafe { args::input(&mut s, buf, check_count(k)?, &st) }?);
            let rt = self.dtype(type_of(recvtypes, i))?.clone();
            // SAFETY: the caller's contract.
            let (k, displ) = unsafe { part(recv, i, n) }?;
            let buf = at(recvbuf, displ as isize, &rt, w);
            // SAFETY: the caller's contract.
            let (into, len, u) = unsafe { args::output(&mut s, buf, check_count(k)?, &rt) }?;
            recvs.push((into, len));
            unpacks.push(u);
        }
        Ok(exchange(s, sides, &sends, &recvs, unpacks))
    }
}

/// One round in which this process sends `sends[i]` to and receives `recvs[i]` from
/// member `i` of the other group; then the unpacking of what was received.
fn exchange(
    mut s: Box<Schedule>,
    sides: &Sides,
    sends: &[(Loc, usize)],
    recvs: &[(Loc, usize)],
    unpacks: Vec<Option<Local>>,
) -> Box<Schedule> {
    let r = s.round();
    for (i, (&(from, slen), &(into, rlen))) in sends.iter().zip(recvs).enumerate() {
        let peer = sides.peer(i as u32);
        r.xfers.push(Xfer::Recv {
            into,
            len: rlen,
            from: peer,
        });
        r.xfers.push(Xfer::Send {
            from,
            len: slen,
            to: peer,
        });
    }
    finish(&mut s, unpacks);
    s
}
