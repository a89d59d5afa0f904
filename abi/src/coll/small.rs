//! Small collectives without a schedule, on the message layer's blocking send and
//! receive, here, with nothing built: building and running a schedule cost as much
//! as the exchange itself at two ranks. Where no nonblocking collective is in flight
//! and every message is one eager message:
//!
//! * `MPI_Allreduce` of a contiguous predefined type with a predefined operation:
//!   recursive doubling on a power-of-two communicator (Open MPI's `tuned` runs the
//!   same algorithm at these sizes), or gathered at member 0 where
//!   [`super::allreduce::gathers`] says so;
//! * `MPI_Bcast` of a contiguous type, one piece long: down the tree of
//!   [`super::basic::bcast_tree`];
//! * `MPI_Barrier` where it disseminates ([`super::basic::barrier`]: 2 members, or
//!   more than gather at member 0);
//! * `MPI_Reduce` of a contiguous predefined type with a predefined operation, on a
//!   communicator of at most [`MAX_REDUCE_MEMBERS`]: down the binomial tree of
//!   [`super::reduce::reduce`] to the root;
//! * `MPI_Reduce_scatter` and `MPI_Reduce_scatter_block` alike, where they run
//!   pairwise ([`super::reduce::reduce_scatter_pairwise`]).
//!
//! Where the user chose the collective's algorithm (`msg_allreduce_algorithm`,
//! `msg_bcast_algorithm`, `msg_barrier_algorithm`), it runs by its schedule.
//!
//! Each sends exactly the messages of its schedule ([`super::reduce`],
//! [`super::basic`]: the same context, tag, peers and lengths; an all-reduction's
//! members combining as `acc = received op acc`), so members that take different
//! ways (one has a nonblocking collective in flight) still meet.

use super::allreduce;
use super::args::in_place;
use super::basic::{barrier_gathers, bcast_links, bcast_tree, dissemination, BCAST_PIECE};
use crate::entry::call_in_steps;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::op;
use crate::p2p::{check_buffer, check_count};
use crate::state::Mpi;
use rbtl::msg::{AllreduceAlgorithm, BarrierAlgorithm, BcastAlgorithm};

/// The most rounds (a communicator of up to 2^31 members).
const MAX_ROUNDS: usize = 31;

/// An error unless a member's message of `got` bytes is the `len` this member's
/// collective `name` has.
fn whole(name: &str, got: usize, len: usize) -> Result<()> {
    if got == len {
        return Ok(());
    }
    Err(Error::new(
        MPI_ERR_TRUNCATE,
        format!("a member sent {got} bytes where this member's {name} has {len}: the members' counts or types differ"),
    ))
}

/// The bytes of a member's message to use, of `expected` (its outcome `r`). A
/// message of another length (the members' counts or types differ; a longer one
/// was cut) is noted in `mismatch`, not returned: this member goes on with its part,
/// so that the others do not wait for it, and the collective fails at its end.
pub(super) fn received(
    r: rbtl::msg::Result<rbtl::msg::Status>,
    expected: usize,
    name: &str,
    mismatch: &mut Option<Error>,
) -> Result<usize> {
    let got = match r {
        Ok(s) => s.len,
        Err(rbtl::msg::Error::Truncated { len, .. }) => len,
        Err(e) => return Err(e.into()),
    };
    if let Err(e) = whole(name, got, expected) {
        mismatch.get_or_insert(e);
    }
    Ok(got.min(expected))
}

/// What a member sends of the `len` bytes at `data`: all of them, unless it has
/// found that the members' arguments disagree (`failing`); then one byte fewer (one
/// zero byte where there are none), so that whoever receives it sees a message of
/// the wrong length and fails too, and so on down every member's part of the
/// collective (MPICH passes an error flag in its messages' tags instead).
pub(super) fn told(data: *const u8, len: usize, failing: bool) -> (*const u8, usize) {
    /// The byte sent in place of none.
    static ONE_BYTE: u8 = 0;
    match (failing, len) {
        (false, _) => (data, len),
        (true, 0) => (&ONE_BYTE, 1),
        (true, n) => (data, n - 1),
    }
}

/// [`told`] of a slice.
fn told_slice(data: &[u8], failing: bool) -> &[u8] {
    match (failing, data.len()) {
        (false, _) => data,
        (true, 0) => &[0],
        (true, n) => &data[..n - 1],
    }
}

/// The arguments of `MPI_Allreduce`: send and receive buffers, count, datatype,
/// operation, communicator.
pub type Allreduce = (*const c_void, *mut c_void, c_int, Handle, Handle, Handle);

/// The arguments of `MPI_Bcast`: buffer, count, datatype, root, communicator.
pub type Bcast = (*mut c_void, c_int, Handle, c_int, Handle);

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

/// Run `MPI_Allreduce` without a schedule where that is the whole algorithm:
/// `Some` with the call's code, or `None` (the caller builds a schedule).
///
/// # Safety
///
/// The binding's contract: the buffers hold `count` elements of `ty`.
pub unsafe fn allreduce(args: Allreduce) -> Option<c_int> {
    let mut taken = false;
    let code = call_in_steps("MPI_Allreduce", Object::Comm(args.5), || {
        global::with(|mpi| {
            // SAFETY: the caller's contract.
            match unsafe { mpi.allreduce_small(args) } {
                Some(outcome) => {
                    taken = true;
                    outcome
                }
                None => Ok(()),
            }
        })
    });
    // (A refusal to enter the library, say from a second thread, is an answer too.)
    (taken || code != MPI_SUCCESS).then_some(code)
}

impl Mpi {
    /// The context and tag of a collective on `comm` run without a schedule, taken
    /// only where no nonblocking collective is in flight (`None`: a schedule then).
    pub(super) fn begin_small(&mut self, comm: Handle) -> Option<(u32, i32)> {
        if !self.waits_in_layer() {
            return None;
        }
        let c = self.comm_mut(comm).ok()?;
        Some((c.coll_ctx(), c.next_coll_tag(true)))
    }

    /// [`allreduce`] on the state: `None` where it does not apply.
    ///
    /// # Safety
    ///
    /// As [`allreduce`].
    unsafe fn allreduce_small(
        &mut self,
        (sendbuf, recvbuf, count, ty, op, comm): Allreduce,
    ) -> Option<Result<()>> {
        if matches!(op, MPI_REPLACE | MPI_NO_OP) || !op::is_predefined(op) {
            return None;
        }
        if self.msg.coll_algorithms().allreduce != AllreduceAlgorithm::Auto {
            return None;
        }
        let n = check_count(count).ok()?;
        let t = self.dtype(ty).ok()?;
        // A null buffer is an error whichever way runs (here, before either does).
        if let Err(e) = check_buffer(recvbuf, n, t).and_then(|()| match in_place(sendbuf) {
            true => Ok(()),
            false => check_buffer(sendbuf, n, t),
        }) {
            return Some(Err(e));
        }
        let prim = t.prim?;
        if !t.contiguous || !op::supports(op, prim) || n == 0 {
            return None;
        }
        let (len, lb) = (t.bytes(n)?, t.lb);
        let c = self.comm(comm).ok()?;
        let (size, me) = (c.size(), c.rank);
        if c.remote.is_some() || size < 2 {
            return None;
        }
        if let Err(e) = super::aliased::reduction(sendbuf, recvbuf, n, t) {
            return Some(Err(e));
        }
        // (A predefined operation commutes.)
        let job = |v: u32| c.group.job_rank(v).unwrap_or(u32::MAX);
        let gather = allreduce::gathers(true, size, || self.placement(size, false, job));
        if !gather && !size.is_power_of_two() {
            return None;
        }
        // The peers, by job rank, every one reached by one eager message: each
        // round's, or gathered, member 0's (at member 0: every other member's).
        let mut peers = [0u32; MAX_ROUNDS];
        let npeers = match (gather, me) {
            (true, 0) => size as usize - 1,
            (true, _) => 1,
            (false, _) => size.trailing_zeros() as usize,
        };
        for (k, p) in peers[..npeers].iter_mut().enumerate() {
            let member = match (gather, me) {
                (true, 0) => k as u32 + 1,
                (true, _) => 0,
                (false, _) => me ^ (1 << k),
            };
            *p = c.group.job_rank(member)?;
            if self.msg.eager_payload_to(*p)? < len {
                return None;
            }
        }
        let peers = &peers[..npeers];
        let (ctx, tag) = self.begin_small(comm)?;
        let acc = recvbuf.cast::<u8>().wrapping_offset(lb);
        if !in_place(sendbuf) {
            // SAFETY: the caller's contract: both hold `len` packed bytes from the
            // type's lower bound (a contiguous type).
            unsafe { std::ptr::copy(sendbuf.cast::<u8>().wrapping_offset(lb), acc, len) };
        }
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.resize(len, 0);
        let mine = || {
            // SAFETY: `acc` holds the `len` bytes (above), each slice used for one
            // call, while nothing else touches them.
            unsafe { rbtl::btl::slice_at(acc, len) }
        };
        let mut mismatch = None;
        // Receive a member's operand and combine it into `acc`.
        let combine = |msg: &mut rbtl::msg::Comm, from: u32, tmp: &mut Vec<u8>, m: &mut _| {
            let r = msg.recv_in(ctx, tmp, Some(from), Some(tag));
            let got = received(r, len, "MPI_Allreduce", m)?;
            // SAFETY: both hold `got / prim.size()` elements of `prim` (`got` <= `len`).
            unsafe { op::reduce_basic(op, prim, tmp.as_ptr(), acc, got / prim.size()) }
        };
        let msg = &mut self.msg;
        let mut done = (|| -> Result<()> {
            match (gather, me) {
                (true, 0) => {
                    for &p in peers {
                        combine(msg, p, &mut tmp, &mut mismatch)?;
                    }
                    for &p in peers {
                        msg.send_in(ctx, told_slice(mine(), mismatch.is_some()), p, tag)?;
                    }
                }
                (true, _) => {
                    msg.send_in(ctx, told_slice(mine(), mismatch.is_some()), peers[0], tag)?;
                    // SAFETY: as above.
                    let result = unsafe { rbtl::btl::slice_at_mut(acc, len) };
                    let r = msg.recv_in(ctx, result, Some(peers[0]), Some(tag));
                    received(r, len, "MPI_Allreduce", &mut mismatch)?;
                }
                (false, _) => {
                    for &p in peers {
                        msg.send_in(ctx, told_slice(mine(), mismatch.is_some()), p, tag)?;
                        combine(msg, p, &mut tmp, &mut mismatch)?;
                    }
                }
            }
            Ok(())
        })();
        if let (Ok(()), Some(e)) = (&done, mismatch) {
            done = Err(e);
        }
        self.scratch = tmp;
        Some(done)
    }
}

impl Mpi {
    /// `MPI_Bcast` without a schedule where that is the whole algorithm (see the
    /// module's documentation): `None` where it does not apply.
    ///
    /// # Safety
    ///
    /// The binding's contract: `buf` holds `count` elements of `ty`.
    pub unsafe fn bcast_small(
        &mut self,
        (buf, count, ty, root, comm): Bcast,
    ) -> Option<Result<()>> {
        let n = check_count(count).ok()?;
        let t = self.dtype(ty).ok()?;
        // A null buffer is an error whichever way runs (here, before either does).
        if let Err(e) = check_buffer(buf, n, t) {
            return Some(Err(e));
        }
        let (len, lb) = (t.bytes(n)?, t.lb);
        if !t.contiguous || len == 0 || len > BCAST_PIECE {
            return None;
        }
        let c = self.comm(comm).ok()?;
        let size = c.size();
        let root = u32::try_from(root).ok().filter(|&r| r < size)?;
        let chosen = self.msg.coll_algorithms().bcast != BcastAlgorithm::Auto;
        if c.remote.is_some() || size < 2 || chosen {
            return None;
        }
        let vr = (c.rank + size - root) % size;
        let job = |v: u32| c.group.job_rank((v + root) % size);
        let one_node = || self.one_node(size, |v| job(v).unwrap_or(u32::MAX));
        let over = self.msg.node_oversubscribed();
        let (parent, children) = bcast_links(bcast_tree(size, len, one_node, over), vr, size);
        let parent = match parent {
            Some(v) => Some(job(v)?),
            None => None,
        };
        let mut kids = [0u32; MAX_ROUNDS];
        let mut k = 0;
        for v in children {
            kids[k] = job(v)?;
            k += 1;
        }
        let kids = &kids[..k];
        let fits = |j: u32| self.msg.eager_payload_to(j).is_some_and(|e| e >= len);
        if !parent.is_none_or(fits) || !kids.iter().all(|&j| fits(j)) {
            return None;
        }
        let (ctx, tag) = self.begin_small(comm)?;
        let data = buf.cast::<u8>().wrapping_offset(lb);
        let mut mismatch = None;
        Some((|| {
            if let Some(p) = parent {
                // SAFETY: the caller's contract: `len` bytes from the lower bound.
                let into = unsafe { rbtl::btl::slice_at_mut(data, len) };
                let r = self.msg.recv_in(ctx, into, Some(p), Some(tag));
                received(r, len, "MPI_Bcast", &mut mismatch)?;
            }
            for &to in kids {
                // SAFETY: as above.
                let from = unsafe { rbtl::btl::slice_at(data, len) };
                self.msg
                    .send_in(ctx, told_slice(from, mismatch.is_some()), to, tag)?;
            }
            mismatch.map_or(Ok(()), Err)
        })())
    }

    /// `MPI_Barrier` without a schedule where that is the whole algorithm (see the
    /// module's documentation): in round k, a message of no bytes to the member 2^k
    /// after this one, then one from the member 2^k before. `None` where it does not
    /// apply.
    pub fn barrier_small(&mut self, comm: Handle) -> Option<Result<()>> {
        let c = self.comm(comm).ok()?;
        let (n, me) = (c.size(), c.rank);
        let chosen = self.msg.coll_algorithms().barrier != BarrierAlgorithm::Auto;
        if c.remote.is_some() || n < 2 || barrier_gathers(n) || chosen {
            return None;
        }
        // Each round's peers by job rank: to, from.
        let mut peers = [(0u32, 0u32); MAX_ROUNDS];
        let mut rounds = 0;
        for (to, from) in dissemination(n, me) {
            peers[rounds] = (c.group.job_rank(to)?, c.group.job_rank(from)?);
            rounds += 1;
        }
        let peers = &peers[..rounds];
        let (ctx, tag) = self.begin_small(comm)?;
        let mut mismatch = None;
        Some((|| {
            for &(to, from) in peers {
                self.msg
                    .send_in(ctx, told_slice(&[], mismatch.is_some()), to, tag)?;
                let r = self.msg.recv_in(ctx, &mut [], Some(from), Some(tag));
                received(r, 0, "MPI_Barrier", &mut mismatch)?;
            }
            mismatch.map_or(Ok(()), Err)
        })())
    }

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
        if matches!(op, MPI_REPLACE | MPI_NO_OP) || !op::is_predefined(op) {
            return None;
        }
        let n = check_count(count).ok()?;
        let t = self.dtype(ty).ok()?;
        let prim = t.prim?;
        if !t.contiguous || !op::supports(op, prim) || n == 0 {
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
        let fits = |p: u32| self.msg.eager_payload_to(p).is_some_and(|e| e >= len);
        if !parent.is_none_or(fits) {
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
        if acc.cast_const() != own {
            // SAFETY: the caller's contract: `own` holds the operand; `acc` has room
            // for it (the receive buffer, apart from it, or `buf`).
            unsafe { std::ptr::copy(own, acc, len) };
        }
        let mut mismatch = None;
        let msg = &mut self.msg;
        let mut done = (|| -> Result<()> {
            for &from in kids {
                // SAFETY: `buf` holds `len` bytes at `tmp`, used for this receive alone.
                let into = unsafe { rbtl::btl::slice_at_mut(tmp, len) };
                let r = msg.recv_in(ctx, into, Some(from), Some(tag));
                let got = received(r, len, "MPI_Reduce", &mut mismatch)?;
                // SAFETY: both hold `got / prim.size()` elements of `prim` (`got` <=
                // `len`); `acc` is not `own` where this member has children.
                unsafe { op::reduce_basic(op, prim, tmp, acc, got / prim.size()) }?;
            }
            if let Some(p) = parent {
                // SAFETY: `acc` holds the `len` bytes (above).
                let data = unsafe { rbtl::btl::slice_at(acc.cast_const(), len) };
                msg.send_in(ctx, told_slice(data, mismatch.is_some()), p, tag)?;
            }
            Ok(())
        })();
        if let (Ok(()), Some(e)) = (&done, mismatch) {
            done = Err(e);
        }
        self.scratch = buf;
        Some(done)
    }

    /// `MPI_Reduce_scatter` or `MPI_Reduce_scatter_block` without a schedule (see
    /// the module's documentation): in round k, the block of the member k after this
    /// one sent to it, then this member's block from the member k before it
    /// received and combined into its own (`acc = received op acc`). `None` where it
    /// does not apply (errors included).
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
        if matches!(op, MPI_REPLACE | MPI_NO_OP) || !op::is_predefined(op) {
            return None;
        }
        let t = self.dtype(ty).ok()?;
        let prim = t.prim?;
        if !t.contiguous || !op::supports(op, prim) || recvbuf.is_null() || sendbuf.is_null() {
            return None;
        }
        let c = self.comm(comm).ok()?;
        let (size, me) = (c.size(), c.rank);
        if c.remote.is_some() || !(2..=super::build::PAIRWISE_REDUCE_SCATTER_MAX).contains(&size) {
            return None;
        }
        // Each member's block: where it starts in the operand, its bytes.
        let mut blocks = [(0usize, 0usize); MAX_ROUNDS];
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
        let elements = total / t.size.max(1);
        if !in_place(sendbuf) && super::aliased::reduction(sendbuf, recvbuf, elements, t).is_err() {
            return None;
        }
        let mut jobs = [0u32; MAX_ROUNDS];
        for (v, j) in jobs[..size as usize].iter_mut().enumerate() {
            *j = c.group.job_rank(v as u32)?;
            let fits = self
                .msg
                .eager_payload_to(*j)
                .is_some_and(|e| e >= blocks[v].1);
            if v as u32 != me && !fits {
                return None;
            }
        }
        let lb = t.lb;
        let (ctx, tag) = self.begin_small(comm)?;
        let out = recvbuf.cast::<u8>().wrapping_offset(lb);
        let (off, len) = blocks[me as usize];
        // The operand, and this member's block of it, the result's place until the end.
        let (input, acc) = match in_place(sendbuf) {
            true => (out.cast_const(), out.wrapping_add(off)),
            false => {
                let input = sendbuf.cast::<u8>().wrapping_offset(lb);
                // SAFETY: the caller's contract: this member's block of the operand,
                // room for it in the receive buffer, apart (checked above).
                unsafe { std::ptr::copy(input.add(off), out, len) };
                (input, out)
            }
        };
        let mut tmp = std::mem::take(&mut self.scratch);
        tmp.resize(len, 0);
        let mut mismatch = None;
        let msg = &mut self.msg;
        let mut done = (|| -> Result<()> {
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
                unsafe { std::ptr::copy(acc, out, len) };
            }
            Ok(())
        })();
        if let (Ok(()), Some(e)) = (&done, mismatch) {
            done = Err(e);
        }
        self.scratch = tmp;
        Some(done)
    }
}
