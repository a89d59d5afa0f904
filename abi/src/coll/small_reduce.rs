//! Small reduces and reduce-scatters without a schedule, as [`super::small`] runs
//! small all-reductions: on the message layer's blocking send and receive, with
//! nothing built, where no nonblocking collective is in flight, for a contiguous
//! predefined type with a predefined operation, every message sent one eager message:
//!
//! * `MPI_Reduce` on a communicator of at most 64 members: down the binomial tree of
//!   [`super::reduce::reduce`] to the root;
//! * `MPI_Reduce_scatter` and `MPI_Reduce_scatter_block` alike, where they run by
//!   recursive halving or pairwise ([`super::reduce::reduce_scatter`]).
//!
//! Each sends exactly the messages of its schedule (the same context, tag, peers,
//! lengths and order per peer), and combines as it does (`acc = received op acc`),
//! so members that take different ways still meet, with the same results. Anything
//! else, errors included, is left to the schedule's builder (`None`).

use super::args::in_place;
use super::reduce::{halves, halving_rounds, span, Halving, PAIRWISE_REDUCE_SCATTER_MAX};
use super::small::{combines, ended, received, told_slice, MAX_ROUNDS};
use super::small_blocks::job_ranks;
use crate::datatype::Prim;
use crate::error::Result;
use crate::ffi::*;
use crate::op;
use crate::p2p::check_count;
use crate::state::Mpi;

/// The arguments of `MPI_Reduce`: send and receive buffers, count, datatype,
/// operation, root, communicator.
pub type Reduce = (
    *const c_void,
    *mut c_void,
    c_int,
    Handle,
    Handle,
    c_int,
    Handle,
);

/// The arguments of `MPI_Reduce_scatter` (`Some` counts, one per member) or
/// `MPI_Reduce_scatter_block` (`None`: the count, each): send and receive buffers,
/// counts, count, datatype, operation, communicator.
pub type ReduceScatter = (
    *const c_void,
    *mut c_void,
    Option<*const c_int>,
    c_int,
    Handle,
    Handle,
    Handle,
);

/// The most members of a communicator whose reductions run here.
const MAX_REDUCE_MEMBERS: u32 = 64;

impl Mpi {
    /// `MPI_Reduce` without a schedule (see the module's documentation): each
    /// member receives its children's results in the tree's order, combining each
    /// as `acc = received op acc`, then sends its own to its parent. `None` where it
    /// does not apply (errors included: the schedule's builder reports them).
    ///
    /// # Safety
    ///
    /// The binding's contract: the buffers hold `count` elements of `ty` (the
    /// receive buffer at the root only).
    pub unsafe fn reduce_small(
        &mut self,
        (sendbuf, recvbuf, count, ty, op, root, comm): Reduce,
    ) -> Option<Result<()>> {
        let t = self.dtype(ty).ok()?;
        let prim = combines(op, t)?;
        let n = check_count(count).ok()?;
        if n == 0 {
            return None;
        }
        let (len, lb) = (t.bytes(n)?, t.lb);
        let c = self.comm(comm).ok()?;
        let (size, me) = (c.size(), c.rank);
        if c.remote.is_some() || !(2..=MAX_REDUCE_MEMBERS).contains(&size) {
            return None;
        }
        let root = u32::try_from(root).ok().filter(|&r| r < size)?;
        let at_root = me == root;
        if sendbuf.is_null() || (at_root && recvbuf.is_null()) || (!at_root && in_place(sendbuf)) {
            return None;
        }
        if at_root && super::aliased::reduction(sendbuf, recvbuf, n, t).is_err() {
            return None;
        }
        // The tree (a predefined operation commutes: rooted at the root), by job
        // rank: the children in the order their results come, the parent.
        let vr = (me + size - root) % size;
        let job = |v: u32| c.group.job_rank((v + root) % size);
        // (A child for each round of the tree, at most.)
        let (mut kids, mut k, mut parent) = ([0u32; MAX_ROUNDS], 0, None);
        let mut mask = 1;
        while mask < size {
            if vr & mask != 0 {
                parent = Some(job(vr - mask)?);
                break;
            }
            if vr | mask < size {
                kids[k] = job(vr | mask)?;
                k += 1;
            }
            mask <<= 1;
        }
        let kids = &kids[..k];
        if !parent.is_none_or(|p| self.one_eager_message(p, len)) {
            return None;
        }
        let (ctx, tag) = self.begin_small(comm)?;
        let own = match in_place(sendbuf) {
            true => recvbuf.cast::<u8>().wrapping_offset(lb).cast_const(),
            false => sendbuf.cast::<u8>().wrapping_offset(lb),
        };
        // A received result, then (at a member inside the tree) the accumulation;
        // at the root the accumulation is the receive buffer.
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(if at_root { len } else { 2 * len }, 0);
        let tmp = buf.as_mut_ptr();
        let acc = match (at_root, kids.is_empty()) {
            (true, _) => recvbuf.cast::<u8>().wrapping_offset(lb),
            // A leaf sends its operand as it is.
            (false, true) => own.cast_mut(),
            // SAFETY: `buf` holds `2 * len` bytes.
            (false, false) => unsafe { tmp.add(len) },
        };
        // Where this member's partial result is: its operand, until the first
        // child's result lands in `acc` and is combined there with it (`acc = own op
        // acc`), which saves copying the operand first. The root has a child (two
        // members at least), so its result always ends in the receive buffer.
        let mut held = own;
        let mut mismatch = None;
        let msg = &mut self.msg;
        let done = (|| -> Result<()> {
            for &from in kids {
                let apart = held != acc.cast_const();
                let land = if apart { acc } else { tmp };
                // SAFETY: `land` holds `len` bytes: `acc` (apart from `own`, the
                // receive buffer or `buf`), or `buf` at `tmp`, used for this
                // receive alone.
                let into = unsafe { rbtl::btl::slice_at_mut(land, len) };
                let r = msg.recv_in(ctx, into, Some(from), Some(tag));
                let got = received(r, len, "MPI_Reduce", &mut mismatch)?;
                let n = got / prim.size();
                // SAFETY: both hold `n` elements of `prim` (`got` <= `len`); where
                // `held` is `acc`, the received result is at `tmp`, apart.
                unsafe { op::reduce_basic(op, prim, if apart { held } else { tmp }, acc, n) }?;
                if apart {
                    // SAFETY: both hold `len` bytes; what a short message left
                    // unwritten keeps this member's operand.
                    unsafe { rbtl::btl::move_bytes(held.add(got), acc.add(got), len - got) };
                    held = acc;
                }
            }
            if let Some(p) = parent {
                // SAFETY: `acc` holds the `len` bytes (above).
                let data = unsafe { rbtl::btl::slice_at(acc.cast_const(), len) };
                msg.send_in(ctx, told_slice(data, mismatch.is_some()), p, tag)?;
            }
            Ok(())
        })();
        self.scratch = buf;
        Some(ended(done, mismatch))
    }

    /// `MPI_Reduce_scatter` or `MPI_Reduce_scatter_block` without a schedule (see
    /// the module's documentation): by recursive halving where the schedule halves
    /// (`Mpi::reduce_scatter_halving`); else pairwise, in round k the
    /// block of the member k after this one sent to it, then this member's block
    /// from the member k before it received and combined into its own (`acc =
    /// received op acc`). `None` where it does not apply (errors included).
    ///
    /// # Safety
    ///
    /// The binding's contract: the send buffer (the receive buffer in place) holds
    /// every member's block; the receive buffer has room for this member's; `counts`,
    /// when given, holds a count per member.
    pub unsafe fn reduce_scatter_small(
        &mut self,
        (sendbuf, recvbuf, counts, count, ty, op, comm): ReduceScatter,
    ) -> Option<Result<()>> {
        let t = self.dtype(ty).ok()?;
        let prim = combines(op, t)?;
        if recvbuf.is_null() || sendbuf.is_null() {
            return None;
        }
        let c = self.comm(comm).ok()?;
        let (size, me) = (c.size(), c.rank);
        if c.remote.is_some() || !(2..=PAIRWISE_REDUCE_SCATTER_MAX).contains(&size) {
            return None;
        }
        // Each member's block: where it starts in the operand, its bytes.
        const MOST: usize = PAIRWISE_REDUCE_SCATTER_MAX as usize;
        let mut blocks = [(0usize, 0usize); MOST];
        let mut total = 0;
        for (v, b) in blocks[..size as usize].iter_mut().enumerate() {
            let k = match counts {
                None => count,
                Some(p) if p.is_null() => return None,
                // SAFETY: the caller's contract: a count per member.
                Some(p) => unsafe { *p.add(v) },
            };
            let len = t.bytes(check_count(k).ok()?)?;
            *b = (total, len);
            total += len;
        }
        let elements = total / t.size;
        if !in_place(sendbuf) && super::aliased::reduction(sendbuf, recvbuf, elements, t).is_err() {
            return None;
        }
        let jobs = job_ranks(c)?;
        let blocks = &blocks[..size as usize];
        let lb = t.lb;
        let out = recvbuf.cast::<u8>().wrapping_offset(lb);
        let input = match in_place(sendbuf) {
            true => out.cast_const(),
            false => sendbuf.cast::<u8>().wrapping_offset(lb),
        };
        if halves(size, total) {
            // SAFETY: the caller's contract.
            return unsafe {
                self.reduce_scatter_halving(
                    (comm, me as usize),
                    (op, prim),
                    (input, out),
                    (blocks, total),
                    &jobs,
                )
            };
        }
        let fits = |v: usize| v as u32 == me || self.one_eager_message(jobs[v], blocks[v].1);
        if !(0..size as usize).all(fits) {
            return None;
        }
        let (ctx, tag) = self.begin_small(comm)?;
        let (off, len) = blocks[me as usize];
        // The operand, and this member's block of it, the result's place until the end.
        let acc = match in_place(sendbuf) {
            true => out.wrapping_add(off),
            false => {
                // SAFETY: the caller's contract: this member's block of the operand,
                // room for it in the receive buffer, apart (checked above).
                unsafe { rbtl::btl::move_bytes(input.add(off), out, len) };
                out
            }
        };
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.resize(len, 0);
        let mut mismatch = None;
        let msg = &mut self.msg;
        let done = (|| -> Result<()> {
            for k in 1..size {
                let (to, from) = (
                    ((me + k) % size) as usize,
                    ((me + size - k) % size) as usize,
                );
                let (at, bytes) = blocks[to];
                // SAFETY: the caller's contract: block `to` of the operand, which no
                // round changes (only this member's block is combined into).
                let data = unsafe { rbtl::btl::slice_at(input.add(at), bytes) };
                msg.send_in(ctx, told_slice(data, mismatch.is_some()), jobs[to], tag)?;
                let r = msg.recv_in(ctx, &mut tmp, Some(jobs[from]), Some(tag));
                let got = received(r, len, "MPI_Reduce_scatter", &mut mismatch)?;
                // SAFETY: both hold `got / prim.size()` elements of `prim` (`got` <=
                // `len`), apart.
                unsafe { op::reduce_basic(op, prim, tmp.as_ptr(), acc, got / prim.size()) }?;
            }
            if acc != out {
                // SAFETY: in place: the result to the receive buffer's start, once
                // every block has been sent.
                unsafe { rbtl::btl::move_bytes(acc, out, len) };
            }
            Ok(())
        })();
        self.scratch = tmp;
        Some(ended(done, mismatch))
    }

    /// A reduce-scatter by recursive halving ([`halving_rounds`]) on a power of two
    /// of members, for [`Mpi::reduce_scatter_small`] at member `me`: the operand
    /// (`input`, `total` bytes, every member's block of it at `blocks`, this
    /// member's result to `out`) copied, then
    /// in each round the half given up sent to the round's peer and the peer's copy
    /// of the half kept received and combined into it (`acc = received op acc`).
    /// `None` where a round's message is not one eager message.
    ///
    /// # Safety
    ///
    /// As [`Mpi::reduce_scatter_small`]: `input` holds the operand's blocks; `out`
    /// has room for this member's.
    unsafe fn reduce_scatter_halving(
        &mut self,
        (comm, me): (Handle, usize),
        (op, prim): (Handle, Prim),
        (input, out): (*const u8, *mut u8),
        (blocks, total): (&[(usize, usize)], usize),
        jobs: &[u32],
    ) -> Option<Result<()>> {
        let n = blocks.len();
        let fits = |h: Halving| self.one_eager_message(jobs[h.peer], span(blocks, &h.give).1);
        if !halving_rounds(n, me).all(fits) {
            return None;
        }
        let most = halving_rounds(n, me)
            .next()
            .map_or(0, |h| span(blocks, &h.keep).1);
        let (ctx, tag) = self.begin_small(comm)?;
        // The operand's copy, combined into, then room for a received half (what
        // the buffer held before is overwritten or not read).
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(total + most, 0);
        // SAFETY: the caller's contract: `input` holds the operand's `total` bytes;
        // `buf`, ours and apart from it, holds at least as many.
        unsafe { rbtl::btl::copy_bytes(input, buf.as_mut_ptr(), total) };
        let (work, tmp) = buf.split_at_mut(total);
        let mut mismatch = None;
        let msg = &mut self.msg;
        let done = (|| -> Result<()> {
            for h in halving_rounds(n, me) {
                let ((give, glen), (keep, klen)) = (span(blocks, &h.give), span(blocks, &h.keep));
                let data = told_slice(&work[give..give + glen], mismatch.is_some());
                msg.send_in(ctx, data, jobs[h.peer], tag)?;
                let r = msg.recv_in(ctx, &mut tmp[..klen], Some(jobs[h.peer]), Some(tag));
                let got = received(r, klen, "MPI_Reduce_scatter", &mut mismatch)?;
                let acc = work[keep..].as_mut_ptr();
                // SAFETY: both hold `got / prim.size()` elements of `prim` (`got` <=
                // `klen`), apart.
                unsafe { op::reduce_basic(op, prim, tmp.as_ptr(), acc, got / prim.size()) }?;
            }
            let (off, len) = blocks[me];
            // SAFETY: the caller's contract: room for this member's block at `out`,
            // whose operand was copied before any round.
            unsafe { rbtl::btl::copy_bytes(work[off..].as_ptr(), out, len) };
            Ok(())
        })();
        self.scratch = buf;
        Some(ended(done, mismatch))
    }
}
