//! Building each collective's schedule from its arguments (shared by the blocking
//! and nonblocking bindings of `api`).

use super::aliased::{self, holds};
use super::allreduce;
use super::args::{self, at, check_root, finish, in_place, part, reduction_input};
use super::basic::{self, Tree};
use super::reduce::{self, Combine};
use super::{Loc, Local, Members, Schedule};
use crate::error::Result;
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use rbtl::msg::BcastAlgorithm;

impl Mpi {
    /// Operation `op`, checked to apply to type `ty`.
    pub(super) fn reduction(&self, op: Handle, ty: Handle) -> Result<crate::op::Op> {
        let o = self.op(op)?;
        crate::op::check(o, self.dtype(ty)?)?;
        Ok(o)
    }

    /// A reduction's schedule on `comm` and its members, its operation `op` (checked
    /// to apply to `ty`) and its count of elements (checked).
    fn start_reduction(
        &mut self,
        count: c_int,
        ty: Handle,
        op: Handle,
        comm: Handle,
    ) -> Result<(Box<Schedule>, Members, crate::op::Op, usize)> {
        let n = check_count(count)?;
        let o = self.reduction(op, ty)?;
        let (s, m) = self.collective(comm)?;
        Ok((s, m, o, n))
    }

    /// How `op` combines `count` elements of `ty` (checked by the caller): the type
    /// borrowed, not copied (as in `build_bcast`).
    pub(super) fn combine(
        &self,
        op: crate::op::Op,
        ty: Handle,
        count: usize,
    ) -> Result<Combine<'_>> {
        Ok(Combine {
            op,
            ty: self.dtype(ty)?,
            handle: ty,
            count,
        })
    }

    /// `MPI_Barrier`.
    pub fn build_barrier(&mut self, comm: Handle) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            return self.inter_barrier(s, &sides, comm);
        }
        let (mut s, m) = self.collective(comm)?;
        let c = self.comm(comm)?;
        let chosen = self.msg.coll_algorithms().barrier;
        basic::barrier(&mut s, &m, chosen, || self.node_leaders(c, &m));
        Ok(s)
    }

    /// `MPI_Bcast`.
    ///
    /// # Safety
    ///
    /// The collective's buffer contract (here and below): each buffer holds its
    /// elements until the collective ends.
    pub unsafe fn build_bcast(
        &mut self,
        buf: *mut c_void,
        count: c_int,
        ty: Handle,
        root: c_int,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            // SAFETY: the caller's contract.
            return unsafe { self.inter_bcast(s, &sides, (buf, count, ty), root) };
        }
        let n = check_count(count)?;
        self.dtype(ty)?;
        let (mut s, m) = self.collective(comm)?;
        let root = check_root(root, &m)?;
        // Borrowed, not copied (a copy costs atomic counts): checked above.
        let t = self.dtype(ty)?;
        // SAFETY: the caller's contract.
        let (loc, len, unpack) = unsafe {
            if m.rank == root {
                let (l, n) = args::input(&mut s, buf, n, t)?;
                (l, n, None)
            } else {
                args::output(&mut s, buf, n, t)?
            }
        };
        let over = self.msg.node_oversubscribed();
        let one_node = || self.one_node(m.size, |v| m.job(v));
        let tree = match self.msg.coll_algorithms().bcast {
            BcastAlgorithm::Auto => basic::bcast_tree(m.size, len, one_node, over),
            BcastAlgorithm::Binomial => Tree::Binomial,
            BcastAlgorithm::InOrder => Tree::InOrder,
            BcastAlgorithm::Flat => Tree::Flat,
        };
        // Between two members on one node, in pieces where reads by address run slow
        // there: what the node's first rank measured, alike at both.
        let two_in_pieces = m.size == 2 && self.msg.node_reads_slow() && one_node();
        let piece = basic::bcast_piece(len, m.size, tree, two_in_pieces);
        basic::bcast(&mut s, &m, (loc, len), root, tree, piece);
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Reduce`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn build_reduce(
        &mut self,
        (sendbuf, recvbuf): (*const c_void, *mut c_void),
        count: c_int,
        ty: Handle,
        op: Handle,
        root: c_int,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let bufs = (sendbuf, recvbuf);
            // SAFETY: the caller's contract.
            return unsafe { self.inter_reduce(s, &sides, bufs, (count, ty, op), root) };
        }
        let (mut s, m, o, n) = self.start_reduction(count, ty, op, comm)?;
        let c = self.combine(o, ty, n)?;
        let t = c.ty;
        let root = check_root(root, &m)?;
        let is_root = m.rank == root;
        if is_root {
            aliased::reduction(sendbuf, recvbuf, n, t)?;
        }
        let input = if is_root {
            reduction_input(sendbuf, recvbuf)
        } else {
            sendbuf
        };
        // SAFETY: the caller's contract.
        let (from, len) = unsafe { args::input(&mut s, input, n, t) }?;
        if !is_root {
            let acc = match reduce::reduce_combines(&m, &c, root) {
                true => s.scratch_to_fill(len),
                false => from,
            };
            reduce::reduce(&mut s, &m, &c, (from, acc), root);
            return Ok(s);
        }
        // SAFETY: the caller's contract.
        let (out, _, unpack) = unsafe { args::output(&mut s, recvbuf, n, t) }?;
        reduce::reduce(&mut s, &m, &c, (from, out), root);
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Allreduce`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn build_allreduce(
        &mut self,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        count: c_int,
        ty: Handle,
        op: Handle,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let bufs = (sendbuf, recvbuf);
            // SAFETY: the caller's contract.
            return unsafe { self.inter_allreduce(s, &sides, bufs, (count, ty, op), None) };
        }
        let (mut s, m, o, n) = self.start_reduction(count, ty, op, comm)?;
        let c = self.combine(o, ty, n)?;
        let t = c.ty;
        aliased::reduction(sendbuf, recvbuf, n, t)?;
        // SAFETY: the caller's contract.
        let (input, acc, unpack) = unsafe {
            if in_place(sendbuf) {
                let (acc, _, unpack) = args::inout(&mut s, recvbuf, n, t)?;
                (acc, acc, unpack)
            } else {
                let (input, _) = args::input(&mut s, sendbuf, n, t)?;
                let (acc, _, unpack) = args::output(&mut s, recvbuf, n, t)?;
                (input, acc, unpack)
            }
        };
        let at = self.placement(m.size, c.bytes() >= allreduce::RING_FROM, |v| m.job(v));
        let chosen = self.msg.coll_algorithms().allreduce;
        allreduce::allreduce(&mut s, &m, &c, (input, acc), (at, chosen));
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Scan` and `MPI_Exscan`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`].
    pub unsafe fn build_scan(
        &mut self,
        (sendbuf, recvbuf): (*const c_void, *mut c_void),
        count: c_int,
        ty: Handle,
        op: Handle,
        comm: Handle,
        exclusive: bool,
    ) -> Result<Box<Schedule>> {
        let (mut s, m, o, n) = self.start_reduction(count, ty, op, comm)?;
        let c = self.combine(o, ty, n)?;
        let t = c.ty;
        aliased::reduction(sendbuf, recvbuf, n, t)?;
        // SAFETY: the caller's contract.
        let (mine, out, unpack) = unsafe {
            // The operand is copied in the first step, before anything is received
            // (where in place, into a scratch buffer for the exclusive scan).
            let (mine, _) = args::input(&mut s, reduction_input(sendbuf, recvbuf), n, t)?;
            let (out, _, unpack) = args::output(&mut s, recvbuf, n, t)?;
            (mine, out, unpack)
        };
        reduce::scan(&mut s, &m, &c, mine, out, exclusive);
        // The exclusive scan leaves rank 0's output as it was.
        if !(exclusive && m.rank == 0) {
            finish(&mut s, [unpack]);
        }
        Ok(s)
    }

    /// `MPI_Reduce_scatter` (`counts` per member) and `MPI_Reduce_scatter_block`
    /// ([`reduce::reduce_scatter`]).
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`]; `counts` holds the communicator's size of ints.
    pub unsafe fn build_reduce_scatter(
        &mut self,
        sendbuf: *const c_void,
        recvbuf: *mut c_void,
        counts: &[usize],
        ty: Handle,
        op: Handle,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let (bufs, counts) = ((sendbuf, recvbuf), Some(counts));
            // SAFETY: the caller's contract.
            return unsafe { self.inter_allreduce(s, &sides, bufs, (0, ty, op), counts) };
        }
        let o = self.reduction(op, ty)?;
        let (mut s, m) = self.collective(comm)?;
        let total: usize = counts.iter().sum();
        let c = self.combine(o, ty, total)?;
        let t = c.ty;
        aliased::reduction(sendbuf, recvbuf, total, t)?;
        let mine = counts.get(m.rank as usize).copied().unwrap_or(0);
        let input = reduction_input(sendbuf, recvbuf);
        // Pairwise, the operand is only read, unless this member's result goes over it.
        let read_only =
            !in_place(sendbuf) && reduce::reduce_scatters_pairwise(&c, m.size, c.bytes());
        let (acc, _) = match read_only {
            // SAFETY: the caller's contract.
            true => unsafe { args::input(&mut s, input, total, t) },
            // SAFETY: the caller's contract.
            false => unsafe { args::input_copy(&mut s, input, total, t) },
        }?;
        // SAFETY: the caller's contract.
        let (out, olen, unpack) = unsafe { args::output(&mut s, recvbuf, mine, t) }?;
        reduce::reduce_scatter(&mut s, &m, &c, acc, counts, (out, olen));
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Gather` (`recvcounts` `None`, equal blocks) and `MPI_Gatherv`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_bcast`]; at the root, `recvcounts` and `displs` hold the
    /// communicator's size of ints.
    pub unsafe fn build_gather(
        &mut self,
        (sendbuf, sendcount, sendtype): (*const c_void, c_int, Handle),
        recvbuf: *mut c_void,
        recv: (c_int, *const c_int, *const c_int),
        recvtype: Handle,
        root: c_int,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let own = (sendbuf.cast_mut(), sendcount, sendtype);
            // SAFETY: the caller's contract.
            return unsafe {
                self.inter_rooted(s, &sides, own, (recvbuf, recv, recvtype), (root, true))
            };
        }
        let (mut s, m) = self.collective(comm)?;
        let root = check_root(root, &m)?;
        let is_root = m.rank == root;
        let mut unpacks = Vec::new();
        let mut blocks = Vec::new();
        if is_root {
            let rt = self.dtype(recvtype)?.clone();
            for i in 0..m.size {
                // SAFETY: the caller's contract.
                let (count, displ) = unsafe { part(recv, i, m.size) }?;
                let k = check_count(count)?;
                // SAFETY: the caller's contract.
                let (l, len, u) = unsafe {
                    args::output(&mut s, at(recvbuf, displ as isize, &rt, false), k, &rt)
                }?;
                blocks.push((l, len));
                unpacks.push(u);
            }
        }
        let send = if is_root && in_place(sendbuf) {
            None
        } else {
            let st = self.dtype(sendtype)?.clone();
            let n = check_count(sendcount)?;
            if is_root {
                let whole = (recvbuf.cast_const(), recv, self.dtype(recvtype)?);
                // SAFETY: the caller's contract.
                unsafe {
                    aliased::own_block((sendbuf, holds(n, &st)), whole, (root, m.size), true)
                }?;
            }
            // SAFETY: the caller's contract.
            Some(unsafe { args::input(&mut s, sendbuf, n, &st) }?)
        };
        basic::gatherv(&mut s, &m, send, &blocks, root);
        finish(&mut s, unpacks);
        Ok(s)
    }

    /// `MPI_Scatter` (`sendcounts` `None`) and `MPI_Scatterv`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_gather`].
    pub unsafe fn build_scatter(
        &mut self,
        sendbuf: *const c_void,
        send: (c_int, *const c_int, *const c_int),
        sendtype: Handle,
        (recvbuf, recvcount, recvtype): (*mut c_void, c_int, Handle),
        root: c_int,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let blocks = (sendbuf.cast_mut(), send, sendtype);
            let own = (recvbuf, recvcount, recvtype);
            // SAFETY: the caller's contract.
            return unsafe { self.inter_rooted(s, &sides, own, blocks, (root, false)) };
        }
        let (mut s, m) = self.collective(comm)?;
        let root = check_root(root, &m)?;
        let is_root = m.rank == root;
        let mut blocks = Vec::new();
        if is_root {
            let st = self.dtype(sendtype)?.clone();
            for i in 0..m.size {
                // SAFETY: the caller's contract.
                let (count, displ) = unsafe { part(send, i, m.size) }?;
                let k = check_count(count)?;
                // SAFETY: the caller's contract.
                blocks.push(unsafe {
                    args::input(&mut s, at(sendbuf, displ as isize, &st, false), k, &st)
                }?);
            }
        }
        let (recv, unpack) = if is_root && in_place(recvbuf) {
            (None, None)
        } else {
            let rt = self.dtype(recvtype)?.clone();
            let n = check_count(recvcount)?;
            if is_root {
                let whole = (sendbuf, send, self.dtype(sendtype)?);
                let own = (recvbuf.cast_const(), holds(n, &rt));
                // SAFETY: the caller's contract.
                unsafe { aliased::own_block(own, whole, (root, m.size), false) }?;
            }
            // SAFETY: the caller's contract.
            let (l, len, u) = unsafe { args::output(&mut s, recvbuf, n, &rt) }?;
            (Some((l, len)), u)
        };
        basic::scatterv(&mut s, &m, &blocks, recv, root);
        finish(&mut s, [unpack]);
        Ok(s)
    }

    /// `MPI_Allgather` (`recvcounts` `None`) and `MPI_Allgatherv`.
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_gather`], on every member.
    pub unsafe fn build_allgather(
        &mut self,
        (sendbuf, sendcount, sendtype): (*const c_void, c_int, Handle),
        recvbuf: *mut c_void,
        recv: (c_int, *const c_int, *const c_int),
        recvtype: Handle,
        comm: Handle,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let send = (sendbuf, sendcount, sendtype);
            // SAFETY: the caller's contract.
            return unsafe { self.inter_allgather(s, &sides, send, (recvbuf, recv, recvtype)) };
        }
        let (mut s, m) = self.collective(comm)?;
        let rt = self.dtype(recvtype)?.clone();
        let mut blocks = Vec::new();
        let mut unpacks = Vec::new();
        if recv.1.is_null() && rt.contiguous {
            // Equal blocks in one buffer: one place, cut in blocks.
            let k = check_count(recv.0)?;
            let len = args::bytes(&rt, k)?;
            let base = Loc::User(
                at(recvbuf, 0, &rt, false)
                    .cast::<u8>()
                    .wrapping_offset(rt.lb),
            );
            blocks = basic::blocks(base, len, m.size);
        } else {
            for i in 0..m.size {
                // SAFETY: the caller's contract.
                let (count, displ) = unsafe { part(recv, i, m.size) }?;
                // SAFETY: the caller's contract.
                let (l, len, u) = unsafe {
                    args::output(
                        &mut s,
                        at(recvbuf, displ as isize, &rt, false),
                        check_count(count)?,
                        &rt,
                    )
                }?;
                blocks.push((l, len));
                unpacks.push(u);
            }
        }
        let me = m.rank as usize;
        let mut own_at = None;
        if !in_place(sendbuf) {
            let st = self.dtype(sendtype)?.clone();
            let n = check_count(sendcount)?;
            let (own, whole) = ((sendbuf, holds(n, &st)), (recvbuf.cast_const(), recv, &rt));
            // SAFETY: the caller's contract.
            unsafe { aliased::own_block(own, whole, (m.rank, m.size), true) }?;
            // SAFETY: the caller's contract.
            let (l, len) = unsafe { args::input(&mut s, sendbuf, n, &st) }?;
            s.own_block(len, blocks[me].1);
            if len == blocks[me].1 {
                // Sent from where it is, and copied into its place after.
                own_at = Some(l);
            } else {
                s.round().then.push(Local::Copy {
                    from: l,
                    to: blocks[me].0,
                    len: len.min(blocks[me].1),
                });
            }
        } else if !rt.contiguous {
            // The own block is in the user's buffer: packed into its place now.
            // SAFETY: the caller's contract.
            let (count, displ) = unsafe { part(recv, m.rank, m.size) }?;
            // SAFETY: the caller's contract.
            let (l, len) = unsafe {
                args::input(
                    &mut s,
                    at(recvbuf, displ as isize, &rt, false),
                    check_count(count)?,
                    &rt,
                )
            }?;
            s.round().then.push(Local::Copy {
                from: l,
                to: blocks[me].0,
                len,
            });
        }
        basic::allgatherv(
            &mut s,
            &m,
            &blocks,
            own_at,
            self.msg.coll_algorithms().allgather,
        );
        finish(&mut s, unpacks);
        Ok(s)
    }

    /// `MPI_Alltoall` (`counts` and `displs` null), `MPI_Alltoallv` and
    /// `MPI_Alltoallw` (per-peer types, displacements in bytes).
    ///
    /// # Safety
    ///
    /// As [`Mpi::build_gather`], on every member; `types` hold the size's handles.
    pub unsafe fn build_alltoall(
        &mut self,
        (sendbuf, send, sendtypes): (
            *const c_void,
            (c_int, *const c_int, *const c_int),
            &[Handle],
        ),
        (recvbuf, recv, recvtypes): (*mut c_void, (c_int, *const c_int, *const c_int), &[Handle]),
        comm: Handle,
        w: bool,
    ) -> Result<Box<Schedule>> {
        if let Some((s, sides)) = self.inter_collective(comm)? {
            let (send, recv) = ((sendbuf, send, sendtypes), (recvbuf, recv, recvtypes));
            // SAFETY: the caller's contract.
            return unsafe { self.inter_alltoall(s, &sides, send, recv, w) };
        }
        let (mut s, m) = self.collective(comm)?;
        aliased::alltoall(
            (sendbuf, send, sendtypes),
            (recvbuf.cast_const(), recv, recvtypes),
        )?;
        // Alltoallw: a type per peer, displacements in bytes.
        let bytes = w;
        let type_of = |types: &[Handle], i: usize| if w { types[i] } else { types[0] };
        let place = in_place(sendbuf);
        let mut recvs = Vec::new();
        let mut unpacks = Vec::new();
        let mut sends = Vec::new();
        for i in 0..m.size {
            let rt = self.dtype(type_of(recvtypes, i as usize))?.clone();
            // SAFETY: the caller's contract.
            let (count, displ) = unsafe { part(recv, i, m.size) }?;
            let k = check_count(count)?;
            let buf = at(recvbuf, displ as isize, &rt, bytes);
            if place {
                // In place: what is sent is the receive buffer's block, read now.
                // SAFETY: the caller's contract.
                sends.push(unsafe { args::input_copy(&mut s, buf, k, &rt) }?);
            }
            // SAFETY: the caller's contract.
            let (l, len, u) = unsafe { args::output(&mut s, buf, k, &rt) }?;
            recvs.push((l, len));
            unpacks.push(u);
        }
        if !place {
            for i in 0..m.size {
                let st = self.dtype(type_of(sendtypes, i as usize))?.clone();
                // SAFETY: the caller's contract.
                let (count, displ) = unsafe { part(send, i, m.size) }?;
                // SAFETY: the caller's contract.
                sends.push(unsafe {
                    args::input(
                        &mut s,
                        at(sendbuf, displ as isize, &st, bytes),
                        check_count(count)?,
                        &st,
                    )
                }?);
            }
        }
        basic::alltoallv(&mut s, &m, &sends, &recvs);
        finish(&mut s, unpacks);
        Ok(s)
    }
}
