//! The one-step paths of a window's operations on a member whose memory this
//! process maps (in a transport's shared heap on this node): a put or a get of
//! contiguous data, copied at once; an accumulate of one basic kind, combined in
//! place under the member's accumulate mutex, or of elements that transport
//! atomics perform, by the processor's atomic on each (several of them under an
//! exclusive lock: under the mutex as well); a compare-and-swap, by the
//! processor's on one word, else under the mutex. Each does what the general path
//! ([`super::ops`], [`super::atomics`]) would do, without building the access that
//! path needs for every datatype and transport; each does nothing and says so for
//! any other operation, and for a wrong one (the general path raises its error).

use super::element_atomics::{apply_each, hardware, word};
use super::lock_word::EXCLUSIVE;
use super::{Peer, ACC_WORD};
use crate::datatype::{Datatype, Prim};
use crate::ffi::*;
use crate::op;
use crate::state::Mpi;
use rbtl::msg::{Atomic, Comm};
use std::sync::atomic::Ordering;

/// Member `rank` of window `win` and the offset in its memory of displacement
/// `disp` plus `lb` bytes, where the window is open for access to it; `None` for
/// a rank out of range (`MPI_PROC_NULL` too), an overflow, or no open epoch.
#[inline(always)]
fn member(mpi: &Mpi, win: Handle, rank: c_int, disp: Aint, lb: isize) -> Option<(&Peer, usize)> {
    let w = mpi.wins.get(win)?;
    let r = usize::try_from(rank).ok().filter(|&r| r < w.peers.len())?;
    let p = &w.peers[r];
    let at = disp
        .checked_mul(p.disp_unit as isize)
        .and_then(|d| d.checked_add(lb))
        .and_then(|d| usize::try_from(d).ok())?;
    w.sync.may_access(r).then_some((p, at))
}

/// The bytes of `count` elements of `ty` when they lie in one run from its lower
/// bound (`None` else, or for a negative count or an overflow).
#[inline(always)]
fn contiguous(ty: &Datatype, count: c_int) -> Option<usize> {
    let n = usize::try_from(count).ok()?;
    ty.contiguous.then(|| ty.size.checked_mul(n)).flatten()
}

/// `MPI_Put` or `MPI_Get` (`put` false) in one step: contiguous data at both ends,
/// as many bytes, a member whose memory this process maps. `false`, having done
/// nothing, for any other.
///
/// # Safety
///
/// The origin holds (a put) or has room for (a get) `ocount` elements of `otype`.
#[inline(always)]
pub(super) unsafe fn put_get(
    mpi: &Mpi,
    put: bool,
    (origin, ocount, otype): (*mut c_void, c_int, Handle),
    (rank, disp, tcount, ttype): (c_int, Aint, c_int, Handle),
    win: Handle,
) -> bool {
    let (Ok(ot), Ok(tt)) = (mpi.dtype(otype), mpi.dtype(ttype)) else {
        return false;
    };
    let len = contiguous(ot, ocount);
    let (Some(len), true) = (len, len == contiguous(tt, tcount)) else {
        return false;
    };
    let Some((p, at)) = member(mpi, win, rank, disp, tt.lb) else {
        return false;
    };
    // SAFETY: the origin holds (a put) or has room for (a get) `len` bytes from its
    // type's lower bound (the caller's contract).
    unsafe {
        p.mem
            .copy_direct(at, origin.cast::<u8>().wrapping_offset(ot.lb), len, put)
    }
}

/// `MPI_Accumulate`, `MPI_Get_accumulate` or `MPI_Fetch_and_op` in one step:
/// origin (unless `op` is `MPI_NO_OP`) and target of the same type, of one basic
/// kind without gaps, as many elements; a predefined operation on that kind; the
/// result (when given) contiguous, as many bytes; a member whose memory this process
/// maps. An operation that a transport atomic performs takes the processor's atomic
/// on each element (a read or an unfetched replacement a plain atomic load or store),
/// aligned where it lies (as the general path, so that the atomics and the mutex
/// never mix on the same elements); any other, and several elements of it under an
/// exclusive lock (where no other accumulate reaches them), takes the member's
/// accumulate mutex, when free: the target's elements are copied to the result,
/// then combined with the origin's, where they lie. `false`, having done nothing,
/// for any other (a held mutex included: the general path waits for it).
///
/// # Safety
///
/// The origin holds `ocount` elements of `otype` (unless `op` is `MPI_NO_OP`); the
/// result has room for `rcount` elements of `rtype`.
#[inline(always)]
pub(super) unsafe fn accumulate(
    mpi: &Mpi,
    (origin, ocount, otype): (*const c_void, c_int, Handle),
    result: Option<(*mut c_void, c_int, Handle)>,
    (rank, disp, tcount, ttype): (c_int, Aint, c_int, Handle),
    op: Handle,
    win: Handle,
) -> bool {
    // (`MPI_NO_OP` ignores the origin's arguments, as the standard says.)
    if (op != MPI_NO_OP && (otype, ocount) != (ttype, tcount)) || !op::is_predefined(op) {
        return false;
    }
    let Ok(t) = mpi.dtype(ttype) else {
        return false;
    };
    let (Some(prim), Some(len)) = (t.prim, contiguous(t, tcount)) else {
        return false;
    };
    // (Whether `op` applies to `prim`: every transport atomic does, and the kernel
    // asks before it combines anything, below.)
    if len == 0 {
        return false;
    }
    let fetched = match result {
        None => std::ptr::null_mut(),
        Some((buf, count, ty)) => match mpi.dtype(ty) {
            Ok(rt) if contiguous(rt, count) == Some(len) => buf.cast::<u8>().wrapping_offset(rt.lb),
            _ => return false,
        },
    };
    let Some((p, at)) = member(mpi, win, rank, disp, t.lb) else {
        return false;
    };
    let origin = origin.cast::<u8>().wrapping_offset(t.lb);
    let atomic = hardware(op, Some(prim));
    let several = len != prim.size();
    // A read (`MPI_NO_OP`) or a replacement nobody fetches: an atomic load or store,
    // no locked instruction, one element or several.
    let plain = op == MPI_NO_OP || (op == MPI_REPLACE && fetched.is_null());
    let each = if several {
        !held_alone(mpi, win, rank)
    } else {
        plain
    };
    if let Some(atomic) = atomic.filter(|_| each) {
        // Several elements that transport atomics perform (or one read or
        // replaced): each by the processor's atomic, as the transport's own on
        // memory mapped here.
        let size = prim.size();
        let Some(into) = p.mem.direct_range(at, len) else {
            return false;
        };
        // Aligned where the member's process has them (the general path's test, so
        // that both ways take the atomics on the same elements); so here too, as
        // mappings begin on a page.
        if (p.mem.addr() + at as u64) % size as u64 != 0 {
            // Not aligned: the general path takes the mutex.
            return false;
        }
        // SAFETY: `into` holds the target's `len` bytes (checked inside its
        // mapping), aligned elements that other processes reach meanwhile only
        // atomically (several only where no exclusive lock is held here, whose
        // holder combines without atomics); the caller's contract: the
        // origin holds them (unless `MPI_NO_OP`), the result has room for them.
        unsafe {
            apply_each(
                atomic,
                op == MPI_NO_OP,
                origin,
                into,
                len / size,
                size,
                fetched,
            )
        };
        return true;
    }
    if let Some(atomic) = atomic.filter(|_| !several) {
        // One element that a transport atomic performs: the processor's atomic, as
        // the transport's own on memory mapped here.
        let value = match op {
            MPI_NO_OP => 0,
            // SAFETY: the origin holds the element (the caller's contract).
            _ => unsafe { word(origin, 0, len) },
        };
        let Ok(Some(old)) = Comm::atomic_here(&p.mem, at, Atomic::Op(atomic, value), len == 4)
        else {
            // Not mapped here, or not aligned: nothing done.
            return false;
        };
        if !fetched.is_null() {
            // SAFETY: the result has room for the element (the caller's contract).
            unsafe { std::ptr::copy_nonoverlapping(old.to_ne_bytes().as_ptr(), fetched, len) };
        }
        return true;
    }
    let Some(into) = p.mem.direct_range(at, len) else {
        return false;
    };
    // SAFETY: `into` holds the target's `len` bytes (checked inside its mapping),
    // which the mutex keeps from other accumulates meanwhile; the caller's
    // contract: the origin holds them, the result has room for them (a result
    // overlapping the window, which the standard forbids, is copied as `memmove`
    // would, never undefined).
    let combined = under_mutex(p, || unsafe {
        if !fetched.is_null() {
            rbtl::btl::move_bytes(into, fetched, len);
        }
        op::reduce_basic(op, prim, origin, into, len / prim.size())
    });
    // (A kernel refuses before it combines anything: the general path raises it.)
    matches!(combined, Some(Ok(())))
}

/// Whether this process holds member `rank` of window `win` exclusively, where no
/// other accumulate reaches its memory.
fn held_alone(mpi: &Mpi, win: Handle, rank: c_int) -> bool {
    let r = usize::try_from(rank).unwrap_or(usize::MAX);
    mpi.wins.get(win).is_some_and(|w| w.sync.sole(r))
}

/// Run `f` holding member `p`'s accumulate mutex, where its control block is
/// mapped here and the mutex is free: what `f` returned; `None`, `f` not run, else.
#[inline(always)]
fn under_mutex<T>(p: &Peer, f: impl FnOnce() -> T) -> Option<T> {
    let Ok(Some(mutex)) = Comm::word_here(&p.ctrl, ACC_WORD) else {
        return None;
    };
    mutex
        .compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    let out = f();
    // Every process takes the mutex from 0 and only its holder changes it back: a
    // store gives it back, as its holder's subtraction would.
    mutex.store(0, Ordering::Release);
    Some(out)
}

/// `MPI_Compare_and_swap` in one step: an integer, logical or byte element in the
/// memory of a member this process maps: of 4 or 8 bytes aligned there, the
/// processor's compare-and-swap (as the transport's own there); else compared and
/// swapped under the member's accumulate mutex, when free. `false`, having done
/// nothing, for any other.
///
/// # Safety
///
/// Each buffer holds (the result: has room for) one element of `ty`.
#[inline(always)]
pub(super) unsafe fn compare_and_swap(
    mpi: &Mpi,
    (origin, compare, result): (*const c_void, *const c_void, *mut c_void),
    ty: Handle,
    (rank, disp): (c_int, Aint),
    win: Handle,
) -> bool {
    let Ok(t) = mpi.dtype(ty) else {
        return false;
    };
    let size = t.size;
    let integer = matches!(
        t.prim,
        Some(Prim::Int { .. } | Prim::Logical(_) | Prim::Byte)
    );
    if !(t.predefined && integer) || origin.is_null() || compare.is_null() || result.is_null() {
        return false;
    }
    let Some((p, at)) = member(mpi, win, rank, disp, t.lb) else {
        return false;
    };
    let (origin, compare, result) = (
        origin.cast::<u8>(),
        compare.cast::<u8>(),
        result.cast::<u8>(),
    );
    if (size == 4 || size == 8) && (p.mem.addr() + at as u64) % size as u64 == 0 {
        // SAFETY: the caller's contract: one element at each.
        let (value, compare) = unsafe { (word(origin, 0, size), word(compare, 0, size)) };
        let swap = Atomic::CompareSwap { compare, value };
        let Ok(Some(old)) = Comm::atomic_here(&p.mem, at, swap, size == 4) else {
            // Not mapped here: nothing done.
            return false;
        };
        // SAFETY: the caller's contract: room for one element at the result.
        unsafe { std::ptr::copy_nonoverlapping(old.to_ne_bytes().as_ptr(), result, size) };
        return true;
    }
    let Some(at) = p.mem.direct_range(at, size) else {
        return false;
    };
    // SAFETY: `at` holds the element (checked inside the mapping), which the mutex
    // keeps from other accumulates meanwhile; the caller's contract: one element at
    // each buffer.
    under_mutex(p, || unsafe {
        swap_if_equal(at, (origin, compare, result), size)
    })
    .is_some()
}

/// The compare-and-swap of the `size` bytes at `at`, which the caller keeps from
/// other accumulates (under the member's mutex): copied to `result`, then replaced
/// by `origin`'s where they equal `compare`'s.
///
/// # Safety
///
/// Each of `at`, `origin`, `compare` and `result` holds (`result`: has room for)
/// `size` bytes; they may overlap (which the standard forbids the program), copied
/// as `memmove` would.
pub(super) unsafe fn swap_if_equal(
    at: *mut u8,
    (origin, compare, result): (*const u8, *const u8, *mut u8),
    size: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        let equal = rbtl::btl::slice_at(compare, size) == rbtl::btl::slice_at(at, size);
        std::ptr::copy(at, result, size);
        if equal {
            std::ptr::copy(origin, at, size);
        }
    }
}
