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
//!   more than gather at member 0).
//!
//! Reduces and reduce-scatters run so too ([`super::small_reduce`]), and all-to-alls,
//! all-gathers, gathers and scatters ([`super::small_blocks`]).
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
use super::reduce::Combine;
use crate::datatype::{Datatype, Prim};
use crate::entry::call_in_steps;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::op::{self, Op};
use crate::p2p::{check_buffer, check_count};
use crate::state::Mpi;
use rbtl::msg::{AllreduceAlgorithm, BarrierAlgorithm, BcastAlgorithm};

/// The most rounds (a communicator of up to 2^31 members).
pub(super) const MAX_ROUNDS: usize = 31;

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

/// The outcome of a collective run without a schedule: its own, else the
/// disagreement among the members' arguments that its receives found
/// ([`received`]).
pub(super) fn ended(done: Result<()>, mismatch: Option<Error>) -> Result<()> {
    done.and(mismatch.map_or(Ok(()), Err))
}

/// The basic kind of `t` where a small reduction with `op` runs without a schedule:
/// a predefined operation that combines (not `MPI_REPLACE` or `MPI_NO_OP`), on a
/// contiguous type of one basic kind that it supports.
pub(super) fn combines(op: Handle, t: &Datatype) -> Option<Prim> {
    if matches!(op, MPI_REPLACE | MPI_NO_OP) || !op::is_predefined(op) || !t.contiguous {
        return None;
    }
    t.prim.filter(|&p| op::supports(op, p))
}

/// [`told`] of a slice.
pub(super) fn told_slice(data: &[u8], failing: bool) -> &[u8] {
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
    /// Whether one eager message of `len` bytes reaches job rank `job`.
    pub(super) fn one_eager_message(&self, job: u32, len: usize) -> bool {
        self.msg.eager_payload_to(job).is_some_and(|e| e >= len)
    }

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
        let prim = combines(op, t)?;
        if n == 0 {
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
        // The way its schedule takes, asked as the schedule asks it: recursive
        // doubling or gathered, not a ring or halving (long vectors).
        let job = |v: u32| c.group.job_rank(v).unwrap_or(u32::MAX);
        let at = self.placement(size, len >= allreduce::RING_FROM, job);
        let combine = Combine {
            op: Op::Predefined(op),
            ty: t,
            handle: ty,
            count: n,
        };
        let gather = match allreduce::default_way(&combine, size, at) {
            allreduce::Way::Gathered => true,
            allreduce::Way::Doubling if size.is_power_of_two() => false,
            _ => return None,
        };
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
            if !self.one_eager_message(*p, len) {
                return None;
            }
        }
        let peers = &peers[..npeers];
        let (ctx, tag) = self.begin_small(comm)?;
        let acc = recvbuf.cast::<u8>().wrapping_offset(lb);
        if !in_place(sendbuf) {
            // SAFETY: the caller's contract: both hold `len` packed bytes from the
            // type's lower bound (a contiguous type).
            unsafe { rbtl::btl::move_bytes(sendbuf.cast::<u8>().wrapping_offset(lb), acc, len) };
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
        let done = (|| -> Result<()> {
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
        self.scratch = tmp;
        Some(ended(done, mismatch))
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
        let fits = |j: u32| self.one_eager_message(j, len);
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
}
