//! The accumulates of a window: `MPI_Accumulate`, `MPI_Get_accumulate`,
//! `MPI_Fetch_and_op` and `MPI_Compare_and_swap`: a transport atomic where one
//! performs the operation (shipped whole when long, where the target can apply it
//! atomically itself); else, on memory this process maps, in place under the
//! target's accumulate mutex; else, from the size its transport names where it
//! reads and writes the target's memory without its process, read, combined and
//! written back from here under the same mutex; else shipped to the target, which
//! applies it under that mutex ([`super::shipped`]). Several elements under an
//! exclusive lock, where no other accumulate reaches them, take the mutex's ways
//! whatever the operation: combined at once, not by an atomic each. On memory this
//! process maps, the common forms (one basic kind, contiguous) are done in one step
//! ([`super::direct`]).

use super::crossing::{Chosen, Way};
use super::direct;
use super::element_atomics::{hardware, word};
use super::lock_word::acquire;
use super::ops::{mismatch, origin_target_binding, Access, Runs};
use super::shipped::{Kind, Ship};
use super::{bad_win, ACC_WORD};
use crate::coll::KeepOut;
use crate::datatype::{pack, Prim};
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::op::{self, Op};
use crate::p2p::check_count;
use crate::state::Mpi;
use rbtl::msg::{Atomic, Pending};
use std::ptr::null_mut;

/// Fetching atomics one accumulate (or `MPI_Win_lock_all`) keeps in flight at most
/// (each holds a registration, of which a transport has some thousands).
pub(super) const FETCHES_AT_ONCE: usize = 1024;

/// The largest buffer an accumulate read and written back from here keeps for the
/// next ([`Mpi::scratch`](crate::state::Mpi::scratch)).
const SCRATCH_KEPT: usize = 1 << 20;

/// Accumulates of several elements that a transport atomic performs, on
/// memory this process does not map, go to the target whole where the transport's
/// atomics mix with the processor's there ([`Comm::atomics_global`]): the target
/// applies each element with the processor's atomic instructions
/// ([`super::shipped`]), where one transport atomic per element, each served by the
/// target's process, cost a message each.
///
/// [`Comm::atomics_global`]: rbtl::msg::Comm::atomics_global
const SHIPPED_ATOMICS_FROM: usize = 2;

impl Mpi {
    /// An accumulate of packed `origin` (`a.bytes` bytes) into the target with
    /// predefined `op`; the target's previous data into `fetched` (as many packed
    /// bytes) when given. Complete when it returns.
    ///
    /// # Safety
    ///
    /// `origin` holds `a.bytes` bytes (unless `op` is `MPI_NO_OP`); `fetched` is null
    /// or has room for them.
    unsafe fn accumulate(
        &mut self,
        win: Handle,
        a: &Access,
        ty: Handle,
        origin: *const u8,
        op: Handle,
        fetched: *mut u8,
    ) -> Result<()> {
        // Nothing to combine or fetch (a count of 0, or empty elements).
        if a.bytes == 0 {
            return Ok(());
        }
        let prim = a.prim;
        let bytes = match prim {
            Some(Prim::Int { bytes, .. }) => bytes as usize,
            _ => 0,
        };
        let (addr, direct) = {
            let mem = a.target(self.win(win)?);
            let direct = match *a.runs {
                [(off, len)] => mem.direct_range(off, len),
                _ => None,
            };
            (mem.addr(), direct)
        };
        // Atomics need each element aligned in the target's memory (a window made
        // over the user's memory may start anywhere).
        let run_aligned = |&(off, len): &(usize, usize)| {
            (addr + off as u64) % bytes as u64 == 0 && len % bytes == 0
        };
        let aligned = bytes > 0 && a.runs.iter().all(run_aligned);
        // Under an exclusive lock no other accumulate reaches the target meanwhile:
        // several elements are combined at once, as under the mutex, not each by an
        // atomic of its own.
        let several_alone = bytes > 0 && a.bytes > bytes && self.win(win)?.sync.sole(a.member);
        let hw = hardware(op, prim);
        if hw.is_some() && !aligned && !several_alone && a.runs.iter().any(run_aligned) {
            // Some runs aligned, some not: each run its own way, in order, so that the
            // aligned ones take the atomics, as any accumulate on their elements does
            // (MPI asks each element to be atomic, not the whole access).
            let mut at = 0;
            for &(off, len) in a.runs.iter() {
                let one = Access {
                    runs: Runs::One([(off, len)]),
                    bytes: len,
                    region: a.region.clone(),
                    ..*a
                };
                let fetched_here = if fetched.is_null() {
                    fetched
                } else {
                    // SAFETY: the caller's contract: room for every run's bytes.
                    unsafe { fetched.add(at) }
                };
                let origin = origin.wrapping_add(at);
                // SAFETY: the caller's contract: the run's packed bytes lie at `at` (a
                // null origin, `MPI_NO_OP`'s, stays unread).
                unsafe { self.accumulate(win, &one, ty, origin, op, fetched_here) }?;
                at += len;
            }
            return Ok(());
        }
        let atomic = hw.filter(|_| aligned && !several_alone);
        // A target in shared memory, one run, no atomics: combined where it lies,
        // under the mutex.
        if let (Some(at), None) = (direct, atomic) {
            acquire(&mut KeepOut(self), win, a.member, ACC_WORD, true)?;
            // SAFETY: `at` holds `a.bytes` packed bytes, which the mutex keeps from
            // other accumulates meanwhile; `fetched` has room for them (the caller's
            // contract); `origin` holds them.
            let combined = unsafe {
                if !fetched.is_null() {
                    rbtl::btl::move_bytes(at, fetched, a.bytes);
                }
                self.accumulate_into(op, (ty, prim), origin, at, a.bytes)
            };
            let released = self.win_release(win, a.member, ACC_WORD, true);
            return combined.and(released);
        }
        let shipped_atomics = atomic.is_some() && a.bytes / bytes >= SHIPPED_ATOMICS_FROM && {
            let t = a.target(self.win(win)?);
            !t.is_direct() && self.msg.atomics_global(t)
        };
        // Shipped, or read, combined and written back from here: its way.
        let chosen = match atomic {
            None if !a.target(self.win(win)?).is_direct() => Some(self.way(win, a)?),
            _ => None,
        };
        if shipped_atomics || chosen.is_some_and(|c| c.way == Way::Shipped) {
            let s = Ship {
                kind: Kind::Accumulate,
                // `MPI_REPLACE` and `MPI_NO_OP` on a type of several kinds move bytes.
                prim: prim.unwrap_or(Prim::Byte),
                op,
                alone: several_alone,
            };
            // SAFETY: the caller's contract.
            let shipped = unsafe { self.ship(win, a, &s, origin, fetched) };
            return self.timed(chosen, shipped);
        }
        if let Some(atomic) = atomic {
            let Mpi { wins, msg, .. } = self;
            let w = wins.get(win).ok_or_else(|| bad_win(win))?;
            let (target, job, p) = (a.target(w), w.peers[a.member].job, &w.waited);
            let (mut at, mut started, mut fetching) = (0, Ok(()), 0);
            'runs: for &(off, len) in a.runs.iter() {
                for i in 0..len / bytes {
                    // SAFETY: the caller's contract: element `at + i` of the origin
                    // and of `fetched`, which live until the wait below.
                    started = unsafe {
                        let v = if op == MPI_NO_OP {
                            0
                        } else {
                            word(origin, at / bytes + i, bytes)
                        };
                        let out = if fetched.is_null() {
                            std::ptr::null_mut()
                        } else {
                            fetched.add(at + i * bytes)
                        };
                        msg.atomic_on(
                            target,
                            off + i * bytes,
                            Atomic::Op(atomic, v),
                            bytes == 4,
                            out,
                            p,
                        )
                    };
                    if started.is_err() {
                        break 'runs;
                    }
                    // A fetching atomic holds a registration of its result word until
                    // it completes: so many at a time.
                    fetching += usize::from(!fetched.is_null());
                    if fetching == FETCHES_AT_ONCE {
                        fetching = 0;
                        started = msg.complete(p, Some(job));
                        if started.is_err() {
                            break 'runs;
                        }
                    }
                }
                at += len;
            }
            // Those started complete before the call returns, whatever happened.
            let done = msg.complete(p, Some(job));
            started?;
            return Ok(done?);
        }
        // Memory this process maps, in several runs, or memory the transport reads and
        // writes without the target's process ([`Mpi::way`]): under the mutex, read,
        // combine, write back.
        // The count of its transfers, kept between calls.
        let p = self.combining.clone();
        let (target, job) = {
            let w = self.win(win)?;
            (a.target(w).clone().unattended(), w.peers[a.member].job)
        };
        let combined = self.win_exclusive(win, a.member, |mpi| {
            // The target's bytes, in a buffer kept between calls (allocating and
            // zeroing one each time cost more than the rest of the path).
            let mut data = std::mem::take(&mut mpi.scratch);
            data.resize(a.bytes, 0);
            let done = (|| {
                let mut at = 0;
                for &(off, len) in a.runs.iter() {
                    // SAFETY: `data` lives until the wait below.
                    unsafe {
                        mpi.msg
                            .get_from(&target, off, data.as_mut_ptr().add(at), len, &p)
                    }?;
                    at += len;
                }
                mpi.msg.complete(&p, Some(job))?;
                if !fetched.is_null() {
                    // SAFETY: the caller's contract: room for `a.bytes`.
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), fetched, a.bytes) };
                }
                if op == MPI_NO_OP {
                    return Ok(());
                }
                // SAFETY: both hold `a.bytes` packed bytes of `ty`.
                unsafe { mpi.accumulate_into(op, (ty, prim), origin, data.as_mut_ptr(), a.bytes) }?;
                let mut at = 0;
                for &(off, len) in a.runs.iter() {
                    // SAFETY: `data` lives until the wait below.
                    unsafe { mpi.msg.put_to(&target, off, data.as_ptr().add(at), len, &p) }?;
                    at += len;
                }
                Ok(mpi.msg.complete(&p, Some(job))?)
            })();
            if data.capacity() <= SCRATCH_KEPT {
                mpi.scratch = data;
            }
            if !p.is_idle() {
                // Left unfinished by a failure: the next accumulate counts afresh.
                mpi.combining = Pending::default();
            }
            done
        });
        self.timed(chosen, combined)
    }

    /// `result`, counted in the figures of the way `chosen` (when timed) if it
    /// succeeded ([`Crossing`](super::crossing::Crossing)).
    fn timed(&mut self, chosen: Option<Chosen>, result: Result<()>) -> Result<()> {
        if let (Ok(()), Some(c)) = (&result, chosen) {
            self.crossing.done(c);
        }
        result
    }

    /// `into = origin op into` over `bytes` packed bytes of `ty` (`prim`, its one
    /// basic kind if it has one), predefined `op`; `MPI_NO_OP` leaves `into` as it is.
    ///
    /// # Safety
    ///
    /// `origin` and `into` each hold `bytes` packed bytes of `ty`.
    unsafe fn accumulate_into(
        &self,
        op: Handle,
        (ty, prim): (Handle, Option<Prim>),
        origin: *const u8,
        into: *mut u8,
        bytes: usize,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe {
            match (op, prim) {
                (MPI_NO_OP, _) => Ok(()),
                // One basic kind: the kernel at once, on its elements.
                (_, Some(p)) => op::reduce_basic(op, p, origin, into, bytes / p.size()),
                (_, None) => self.dtype(ty).and_then(|t| {
                    let n = bytes.checked_div(t.size).unwrap_or(0);
                    op::reduce(Op::Predefined(op), t, ty, origin, into, n)
                }),
            }
        }
    }

    /// The way an accumulate of access `a` on window `win`, which no transport atomic
    /// performs, goes: read, combined and written back from here by a transport that
    /// needs nothing of the target's process, from the size that transport says that
    /// is worth it, and around that size the faster of late
    /// ([`Crossing`](super::crossing::Crossing); `sm`: two copies by the kernel against
    /// four through the rings, and two system calls against a message's round trip:
    /// docs/performance.md); else shipped to the target. Both ways hold the target's
    /// accumulate mutex, so concurrent accumulates on the same elements exclude each
    /// other whichever way each goes.
    fn way(&mut self, win: Handle, a: &Access) -> Result<Chosen> {
        Ok(match self.msg.unattended_from(a.target(self.win(win)?)) {
            Some(from) => self.crossing.way(a.bytes, from),
            None => Chosen::untimed(Way::Shipped),
        })
    }

    /// Check `op` for an accumulate of `count` elements of `ty`: predefined, and
    /// defined on its kind.
    fn accumulate_op(&self, op: Handle, (count, ty): (c_int, Handle)) -> Result<()> {
        if !op::is_predefined(op) {
            return Err(Error::new(
                MPI_ERR_OP,
                "accumulates take predefined operations only",
            ));
        }
        let t = self.dtype(ty)?;
        match t.prim {
            Some(p) if op::supports(op, p) => Ok(()),
            // No element to combine (a count of 0, given by the caller): any
            // predefined operation, as MPICH and Open MPI take it.
            _ if count == 0 => Ok(()),
            None if matches!(op, MPI_REPLACE | MPI_NO_OP) => Ok(()),
            _ => op::check(Op::Predefined(op), t),
        }
    }
}

origin_target_binding!(
    PMPI_Accumulate(origin_addr: *const c_void, .. op: Handle),
    |mpi, origin, target, win| {
        // SAFETY: the binding's contract.
        unsafe { mpi.accumulate_to(origin, target, op, win) }
    }
);

origin_target_binding!(
    PMPI_Get_accumulate(
        origin_addr: *const c_void,
        result_addr: *mut c_void,
        result_count: c_int,
        result_datatype: Handle,
        .. op: Handle
    ),
    |mpi, origin, target, win| {
        let result = (result_addr, result_count, result_datatype);
        // SAFETY: the binding's contract.
        unsafe { mpi.get_accumulate(origin, Some(result), target, op, win) }
    }
);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Fetch_and_op(
    origin_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    op: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Fetch_and_op", Object::Win(win), |mpi| {
        let t = mpi.dtype(datatype)?;
        if !t.predefined || !t.contiguous {
            // Refused there as for MPI_Get_accumulate, or served the same (a pair
            // type with padding, `MPI_SHORT_INT`, packed and unpacked).
            // SAFETY: the binding's contract: one element of each.
            return unsafe {
                mpi.get_accumulate(
                    (origin_addr, 1, datatype),
                    Some((result_addr, 1, datatype)),
                    (target_rank, target_disp, 1, datatype),
                    op,
                    win,
                )
            };
        }
        // A predefined type without gaps (as the standard asks): origin and result
        // are the element itself, of the target's size.
        let (one, result) = ((origin_addr, 1, datatype), Some((result_addr, 1, datatype)));
        let target = (target_rank, target_disp, 1, datatype);
        // SAFETY: the binding's contract: one element at `origin_addr`, room for one
        // at `result_addr`.
        if unsafe { direct::accumulate(mpi, one, result, target, op, win) } {
            return Ok(());
        }
        mpi.accumulate_op(op, (1, datatype))?;
        if mpi.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = mpi.access(win, target_rank, target_disp, 1, datatype)?;
        let origin = if op == MPI_NO_OP {
            std::ptr::null()
        } else {
            origin_addr.cast::<u8>()
        };
        // SAFETY: the binding's contract: one element at `origin_addr`, room for one
        // at `result_addr`.
        unsafe { mpi.accumulate(win, &a, datatype, origin, op, result_addr.cast()) }
    })
}

impl Mpi {
    /// `MPI_Accumulate`: origin as (buffer, count, type), target as (rank,
    /// displacement, count, type); not `MPI_NO_OP`.
    ///
    /// # Safety
    ///
    /// The origin buffer holds its elements.
    pub(super) unsafe fn accumulate_to(
        &mut self,
        origin: (*const c_void, c_int, Handle),
        target: (c_int, Aint, c_int, Handle),
        op: Handle,
        win: Handle,
    ) -> Result<()> {
        if op == MPI_NO_OP {
            return Err(Error::new(
                MPI_ERR_OP,
                "MPI_Accumulate does not take MPI_NO_OP",
            ));
        }
        // SAFETY: the caller's contract.
        unsafe { self.get_accumulate(origin, None, target, op, win) }
    }

    /// `MPI_Get_accumulate` (and `MPI_Fetch_and_op`, one element; `MPI_Accumulate`,
    /// no result and not `MPI_NO_OP`): origin and result as (buffer, count, type),
    /// target as (rank, displacement, count, type).
    ///
    /// # Safety
    ///
    /// The buffers hold their elements.
    pub(super) unsafe fn get_accumulate(
        &mut self,
        origin: (*const c_void, c_int, Handle),
        result: Option<(*mut c_void, c_int, Handle)>,
        target: (c_int, Aint, c_int, Handle),
        op: Handle,
        win: Handle,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        if unsafe { direct::accumulate(self, origin, result, target, op, win) } {
            return Ok(());
        }
        let (target_rank, target_disp, target_count, target_datatype) = target;
        self.accumulate_op(op, (target_count, target_datatype))?;
        if self.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = self.access(win, target_rank, target_disp, target_count, target_datatype)?;
        let mut keep = Vec::new();
        let origin = if op == MPI_NO_OP {
            std::ptr::null()
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.origin(origin, &a, &mut keep) }?
        };
        let Some((result_addr, result_count, result_datatype)) = result else {
            // SAFETY: `origin` holds the bytes; nothing is fetched.
            return unsafe { self.accumulate(win, &a, target_datatype, origin, op, null_mut()) };
        };
        let rn = check_count(result_count)?;
        let rt = self.dtype(result_datatype)?;
        if rt.size * rn != a.bytes {
            return Err(mismatch(rt.size * rn, a.bytes));
        }
        if rt.contiguous {
            // Fetched straight into the result buffer.
            let into = result_addr.cast::<u8>().wrapping_offset(rt.lb);
            // SAFETY: `origin` holds the bytes; the caller's contract: the result
            // buffer has room for them.
            return unsafe { self.accumulate(win, &a, target_datatype, origin, op, into) };
        }
        let rt = rt.clone();
        let mut fetched = vec![0u8; a.bytes];
        // SAFETY: `origin` holds the bytes, `fetched` has room for them.
        unsafe { self.accumulate(win, &a, target_datatype, origin, op, fetched.as_mut_ptr()) }?;
        // SAFETY: the caller's contract: room for `result_count` elements.
        unsafe { pack::unpack(&rt, &fetched, result_addr.cast(), rn) };
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Compare_and_swap(
    origin_addr: *const c_void,
    compare_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    win: Handle,
) -> c_int {
    call("MPI_Compare_and_swap", Object::Win(win), |mpi| {
        let buffers = (origin_addr, compare_addr, result_addr);
        // SAFETY: the binding's contract: one element at each buffer.
        if unsafe {
            direct::compare_and_swap(mpi, buffers, datatype, (target_rank, target_disp), win)
        } {
            return Ok(());
        }
        let t = mpi.dtype(datatype)?;
        if !t.predefined
            || !matches!(
                t.prim,
                Some(Prim::Int { .. } | Prim::Logical(_) | Prim::Byte)
            )
        {
            return Err(Error::new(
                MPI_ERR_TYPE,
                "MPI_Compare_and_swap takes one integer, logical or byte element",
            ));
        }
        let (size, t_prim) = (t.size, t.prim.unwrap_or(Prim::Byte));
        if mpi.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = mpi.access(win, target_rank, target_disp, 1, datatype)?;
        let off = a.runs[0].0;
        if origin_addr.is_null() || compare_addr.is_null() || result_addr.is_null() {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "a buffer of MPI_Compare_and_swap is null",
            ));
        }
        let (addr, direct) = {
            let mem = a.target(mpi.win(win)?);
            (mem.addr(), mem.direct_range(off, size))
        };
        let one_word = (size == 4 || size == 8) && (addr + off as u64) % size as u64 == 0;
        // A target in shared memory that no atomic serves: swapped where it lies,
        // under the mutex.
        if let (Some(at), false) = (direct, one_word) {
            let bytes = (origin_addr.cast(), compare_addr.cast(), result_addr.cast());
            return mpi.win_exclusive(win, a.member, |_| {
                // SAFETY: `at` holds the element, which the mutex keeps from other
                // accumulates meanwhile; the binding's contract: one element of
                // `size` at each buffer.
                unsafe { direct::swap_if_equal(at, bytes, size) };
                Ok(())
            });
        }
        if one_word {
            let Mpi { wins, msg, .. } = mpi;
            let w = wins.get(win).ok_or_else(|| bad_win(win))?;
            let (target, job, p) = (a.target(w), w.peers[a.member].job, &w.waited);
            // SAFETY: the binding's contract: one element of `size` at each.
            unsafe {
                let value = word(origin_addr.cast(), 0, size);
                let compare = word(compare_addr.cast(), 0, size);
                msg.atomic_on(
                    target,
                    off,
                    Atomic::CompareSwap { compare, value },
                    size == 4,
                    result_addr.cast(),
                    p,
                )?;
            }
            return Ok(msg.complete(p, Some(job))?);
        }
        // No atomic, memory of another process: swapped there.
        let s = Ship {
            kind: Kind::CompareSwap,
            prim: t_prim,
            op: MPI_REPLACE,
            alone: false,
        };
        // The value, then the comparand (an element has at most 16 bytes).
        let mut operand = [0u8; 32];
        // SAFETY: the binding's contract: one element of `size` at each, and room
        // for one at `result_addr`.
        unsafe {
            std::ptr::copy_nonoverlapping(origin_addr.cast(), operand.as_mut_ptr(), size);
            let comparand = operand[size..].as_mut_ptr();
            std::ptr::copy_nonoverlapping(compare_addr.cast(), comparand, size);
            mpi.ship(win, &a, &s, operand.as_ptr(), result_addr.cast())
        }
    })
}
