//! Small all-to-alls, all-gathers, gathers and scatters without a schedule, as
//! [`super::small`] runs small all-reductions, broadcasts and barriers: on the
//! message layer's blocking send and receive, with nothing built. Where no
//! nonblocking collective is in flight, on an intracommunicator of at most 32
//! members, both sides contiguous and of the same bytes, every message sent one
//! eager message:
//!
//! * `MPI_Alltoall` (not in place), as [`super::basic::alltoallv`] posts it all at
//!   once: each block sent, then each received;
//! * `MPI_Allgather` of at most 64 KiB in all, by recursive doubling on a
//!   power-of-two communicator, else around the ring, as
//!   [`super::basic::allgatherv`] (unless the user chose the algorithm,
//!   `msg_allgather_algorithm`: then its schedule);
//! * `MPI_Gather` and `MPI_Scatter`, the root receiving or sending each member's
//!   block in the members' order, as [`super::basic::gatherv`] and
//!   [`super::basic::scatterv`].
//!
//! Each sends exactly the messages of its schedule (the same context, tag, peers,
//! lengths and order per peer), so members that take different ways still meet.
//! Anything else, errors included, is left to the schedule's builder (`None`).

use super::args::in_place;
use super::basic::{ALL_AT_ONCE_MAX, DOUBLING_MAX};
use super::small::{ended, received};
use crate::comm::Communicator;
use crate::error::Result;
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use rbtl::btl::{slice_at, slice_at_mut};
use rbtl::msg::AllgatherAlgorithm;

/// The most members of a communicator whose collectives run here.
const MAX_MEMBERS: usize = 32;

/// The arguments of `MPI_Alltoall` and `MPI_Allgather`: send buffer, count and type,
/// receive buffer, count and type, communicator.
pub type Blocks = (
    *const c_void,
    c_int,
    Handle,
    *mut c_void,
    c_int,
    Handle,
    Handle,
);

/// The arguments of `MPI_Gather` and `MPI_Scatter`: send buffer, count and type,
/// receive buffer, count and type, root, communicator.
pub type Rooted = (
    *const c_void,
    c_int,
    Handle,
    *mut c_void,
    c_int,
    Handle,
    c_int,
    Handle,
);

/// What a member sends of the `len` bytes at `data` ([`super::small::told`]), as a
/// slice.
///
/// # Safety
///
/// `data` holds `len` bytes while the slice is used.
unsafe fn told<'a>(data: *const u8, len: usize, failing: bool) -> &'a [u8] {
    let (p, n) = super::small::told(data, len, failing);
    // SAFETY: the caller's contract (or `told`'s static byte).
    unsafe { slice_at(p, n) }
}

/// Each member's job rank, on a communicator of at most [`MAX_MEMBERS`].
pub(super) fn job_ranks(c: &Communicator) -> Option<[u32; MAX_MEMBERS]> {
    let mut jobs = [0u32; MAX_MEMBERS];
    let n = c.size() as usize;
    for (v, j) in jobs.get_mut(..n)?.iter_mut().enumerate() {
        *j = c.group.job_rank(v as u32)?;
    }
    Some(jobs)
}

/// Whether the bytes `a` and `b` name (where, how many) share none.
fn apart(a: (*const u8, usize), b: (*const u8, usize)) -> bool {
    a.0.wrapping_add(a.1) <= b.0 || b.0.wrapping_add(b.1) <= a.0
}

/// The blocks' common facts: the start of the send side's (`None` in place) and the
/// receive side's bytes, one block's bytes, the members and this one's rank.
struct Layout {
    send: Option<*const u8>,
    recv: *mut u8,
    len: usize,
    n: u32,
    me: u32,
}

impl Mpi {
    /// Whether one eager message of `len` bytes reaches each of the `jobs` but
    /// member `me`'s.
    fn eager_to_all(&self, jobs: &[u32], me: u32, len: usize) -> bool {
        let reaches = |(v, &j): (usize, &u32)| v as u32 == me || self.one_eager_message(j, len);
        jobs.iter().enumerate().all(reaches)
    }

    /// The [`Layout`] of a small block exchange on `comm`, and each member's job
    /// rank; `None` where the schedule runs it.
    fn small_blocks(
        &self,
        (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm): Blocks,
    ) -> Option<(Layout, [u32; MAX_MEMBERS])> {
        let c = self.comm(comm).ok()?;
        let (n, me) = (c.size(), c.rank);
        if c.remote.is_some() || n < 2 || n as usize > MAX_MEMBERS || recvbuf.is_null() {
            return None;
        }
        let rt = self.dtype(recvtype).ok()?;
        let len = rt.bytes(check_count(recvcount).ok()?)?;
        if !rt.contiguous || len == 0 {
            return None;
        }
        let recv = recvbuf.cast::<u8>().wrapping_offset(rt.lb);
        let send = match in_place(sendbuf) {
            true => None,
            false => {
                let st = self.dtype(sendtype).ok()?;
                if sendbuf.is_null() || !st.contiguous {
                    return None;
                }
                if st.bytes(check_count(sendcount).ok()?)? != len {
                    return None;
                }
                Some(sendbuf.cast::<u8>().wrapping_offset(st.lb))
            }
        };
        let jobs = job_ranks(c)?;
        Some((
            Layout {
                send,
                recv,
                len,
                n,
                me,
            },
            jobs,
        ))
    }

    /// `MPI_Alltoall` without a schedule (see the module's documentation): `None`
    /// where it does not apply.
    ///
    /// # Safety
    ///
    /// The binding's contract: the buffers hold a block for every member.
    pub unsafe fn alltoall_small(&mut self, args: Blocks) -> Option<Result<()>> {
        let (l, jobs) = self.small_blocks(args)?;
        let (Some(send), n, me, len) = (l.send, l.n, l.me, l.len) else {
            return None;
        };
        let total = len * n as usize;
        // The schedule's one round (two members, or a short exchange).
        if n > 2 && total > ALL_AT_ONCE_MAX {
            return None;
        }
        // The buffers apart (the builder refuses one buffer on both sides).
        if !apart((send, total), (l.recv.cast_const(), total)) {
            return None;
        }
        if !self.eager_to_all(&jobs[..n as usize], me, len) {
            return None;
        }
        let (ctx, tag) = self.begin_small(args.6)?;
        let block = |i: u32| len * i as usize;
        let mut mismatch = None;
        let msg = &mut self.msg;
        let done = (|| -> Result<()> {
            for k in 1..n {
                let to = (me + k) % n;
                // SAFETY: the caller's contract: block `to` of the send side. (Sent
                // before anything is received: no mismatch to tell yet.)
                let data = unsafe { slice_at(send.add(block(to)), len) };
                msg.send_in(ctx, data, jobs[to as usize], tag)?;
            }
            for k in 1..n {
                let from = (me + n - k) % n;
                // SAFETY: the caller's contract: room for block `from`.
                let into = unsafe { slice_at_mut(l.recv.add(block(from)), len) };
                let r = msg.recv_in(ctx, into, Some(jobs[from as usize]), Some(tag));
                received(r, len, "MPI_Alltoall", &mut mismatch)?;
            }
            // SAFETY: the caller's contract: this member's block on both sides, apart.
            unsafe { rbtl::btl::move_bytes(send.add(block(me)), l.recv.add(block(me)), len) };
            Ok(())
        })();
        Some(ended(done, mismatch))
    }

    /// `MPI_Allgather` without a schedule (see the module's documentation): `None`
    /// where it does not apply.
    ///
    /// # Safety
    ///
    /// The binding's contract: the send buffer holds a block (unless in place), the
    /// receive buffer a block for every member.
    pub unsafe fn allgather_small(&mut self, args: Blocks) -> Option<Result<()>> {
        if self.msg.coll_algorithms().allgather != AllgatherAlgorithm::Auto {
            return None;
        }
        let (l, jobs) = self.small_blocks(args)?;
        let (n, me, len, recv) = (l.n, l.me, l.len, l.recv);
        let total = len * n as usize;
        if total > DOUBLING_MAX {
            return None;
        }
        let own = recv.wrapping_add(len * me as usize);
        if let Some(send) = l.send {
            // The buffers apart (the builder refuses them otherwise).
            if !apart((send, len), (recv.cast_const(), total)) {
                return None;
            }
        }
        let doubling = n.is_power_of_two();
        // Every message one eager message: the ring's one block, the doubling's
        // half of them at most.
        let longest = if doubling { total / 2 } else { len };
        if !self.eager_to_all(&jobs[..n as usize], me, longest) {
            return None;
        }
        let (ctx, tag) = self.begin_small(args.6)?;
        if let Some(send) = l.send {
            // SAFETY: the caller's contract: a block on each side, apart.
            unsafe { rbtl::btl::move_bytes(send, own, len) };
        }
        let mut mismatch = None;
        let msg = &mut self.msg;
        // One round: `blocks` blocks from block `out` to `to`, then as many into
        // block `inn` from `from`.
        let mut round = |out: u32, inn: u32, blocks: usize, to: u32, from: u32| -> Result<()> {
            let bytes = len * blocks;
            // SAFETY: the caller's contract: the receive buffer holds every block.
            let data = unsafe { told(recv.add(len * out as usize), bytes, mismatch.is_some()) };
            msg.send_in(ctx, data, jobs[to as usize], tag)?;
            // SAFETY: as above.
            let into = unsafe { slice_at_mut(recv.add(len * inn as usize), bytes) };
            let r = msg.recv_in(ctx, into, Some(jobs[from as usize]), Some(tag));
            received(r, bytes, "MPI_Allgather", &mut mismatch).map(drop)
        };
        let done = (|| -> Result<()> {
            if doubling {
                let mut k = 1;
                while k < n {
                    let mine = me & !(k - 1);
                    round(mine, mine ^ k, k as usize, me ^ k, me ^ k)?;
                    k <<= 1;
                }
            } else {
                let (right, left) = ((me + 1) % n, (me + n - 1) % n);
                for step in 0..n - 1 {
                    round((me + n - step) % n, (me + n - step - 1) % n, 1, right, left)?;
                }
            }
            Ok(())
        })();
        Some(ended(done, mismatch))
    }

    /// `MPI_Gather` without a schedule (see the module's documentation): `None`
    /// where it does not apply.
    ///
    /// # Safety
    ///
    /// The binding's contract: the send buffer holds a block (unless in place at the
    /// root), the root's receive buffer a block for every member.
    pub unsafe fn gather_small(&mut self, args: Rooted) -> Option<Result<()>> {
        // SAFETY: the caller's contract.
        unsafe { self.rooted_small(args, true) }
    }

    /// `MPI_Scatter` without a schedule (see the module's documentation): `None`
    /// where it does not apply.
    ///
    /// # Safety
    ///
    /// The binding's contract: the root's send buffer holds a block for every
    /// member, the receive buffer has room for one (unless in place at the root).
    pub unsafe fn scatter_small(&mut self, args: Rooted) -> Option<Result<()>> {
        // SAFETY: the caller's contract.
        unsafe { self.rooted_small(args, false) }
    }

    /// [`Mpi::gather_small`] (`gather`) or [`Mpi::scatter_small`].
    ///
    /// # Safety
    ///
    /// As theirs.
    unsafe fn rooted_small(
        &mut self,
        (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm): Rooted,
        gather: bool,
    ) -> Option<Result<()>> {
        let c = self.comm(comm).ok()?;
        let (n, me) = (c.size(), c.rank);
        if c.remote.is_some() || n < 2 || n as usize > MAX_MEMBERS {
            return None;
        }
        let root = u32::try_from(root).ok().filter(|&r| r < n)?;
        // The side of a block for every member (significant at the root only) and the
        // side of this member's block.
        let recv = (recvbuf.cast_const(), recvcount, recvtype);
        let send = (sendbuf, sendcount, sendtype);
        let (many, one) = if gather { (recv, send) } else { (send, recv) };
        // A side's bytes: where they start and one block's length, where contiguous.
        let side = |(buf, count, ty): (*const c_void, c_int, Handle)| {
            let t = self.dtype(ty).ok()?;
            let len = t.bytes(check_count(count).ok()?)?;
            let usable = t.contiguous && len > 0 && !buf.is_null() && !in_place(buf);
            usable.then(|| (buf.cast::<u8>().wrapping_offset(t.lb), len))
        };
        let jobs = job_ranks(c)?;
        if me != root {
            // This member's block to the root, or from it.
            let (own, len) = side(one)?;
            if gather && !self.one_eager_message(jobs[root as usize], len) {
                return None;
            }
            let (ctx, tag) = self.begin_small(comm)?;
            let from = jobs[root as usize];
            let mut mismatch = None;
            let msg = &mut self.msg;
            let done = if gather {
                // SAFETY: the caller's contract: the send buffer holds the block.
                let data = unsafe { slice_at(own, len) };
                msg.send_in(ctx, data, from, tag).map_err(Into::into)
            } else {
                // SAFETY: the caller's contract: room for the block.
                let into = unsafe { slice_at_mut(own.cast_mut(), len) };
                let r = msg.recv_in(ctx, into, Some(from), Some(tag));
                received(r, len, "MPI_Scatter", &mut mismatch).map(drop)
            };
            return Some(ended(done, mismatch));
        }
        let (base, len) = side(many)?;
        let total = len * n as usize;
        // This member's own block, unless in place.
        let own = match in_place(one.0) {
            true => None,
            false => {
                let (p, own_len) = side(one)?;
                // The same length, and apart from the other side.
                if own_len != len || !apart((p, len), (base, total)) {
                    return None;
                }
                Some(p)
            }
        };
        if !gather && !self.eager_to_all(&jobs[..n as usize], root, len) {
            return None;
        }
        let (ctx, tag) = self.begin_small(comm)?;
        let block = |v: u32| base.wrapping_add(len * v as usize);
        let mut mismatch = None;
        let msg = &mut self.msg;
        let done = (|| -> Result<()> {
            for v in (0..n).filter(|&v| v != root) {
                if gather {
                    // SAFETY: the caller's contract: room for block `v`.
                    let into = unsafe { slice_at_mut(block(v).cast_mut(), len) };
                    let r = msg.recv_in(ctx, into, Some(jobs[v as usize]), Some(tag));
                    received(r, len, "MPI_Gather", &mut mismatch)?;
                } else {
                    // SAFETY: the caller's contract: block `v` is there.
                    let data = unsafe { slice_at(block(v), len) };
                    msg.send_in(ctx, data, jobs[v as usize], tag)?;
                }
            }
            if let Some(p) = own {
                let (from, to) = if gather {
                    (p, block(root))
                } else {
                    (block(root), p)
                };
                // SAFETY: the caller's contract: the block on both sides, apart.
                unsafe { rbtl::btl::move_bytes(from, to.cast_mut(), len) };
            }
            Ok(())
        })();
        Some(ended(done, mismatch))
    }
}
