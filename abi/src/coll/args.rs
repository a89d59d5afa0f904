//! A collective's buffer arguments as places of its schedule: a contiguous type's
//! buffer is used where it is; another is packed into a scratch buffer at the start
//! (input) or unpacked from one at the end (output). And the blocks of its array
//! arguments (counts and displacements per member), `MPI_IN_PLACE` and the root.

use super::{Loc, Local, Members, Schedule};
use crate::datatype::{pack, Datatype};
use crate::error::{Error, Result};
use crate::ffi::*;

/// `MPI_IN_PLACE`.
pub fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// A reduction's input: the receive buffer where the send buffer is
/// `MPI_IN_PLACE`.
pub fn reduction_input(sendbuf: *const c_void, recvbuf: *mut c_void) -> *const c_void {
    if in_place(sendbuf) {
        recvbuf.cast_const()
    } else {
        sendbuf
    }
}

/// A root argument.
pub fn check_root(root: c_int, m: &Members) -> Result<u32> {
    u32::try_from(root)
        .ok()
        .filter(|r| *r < m.size)
        .ok_or_else(|| {
            Error::new(
                MPI_ERR_ROOT,
                format!(
                    "root {root} is not a rank of the communicator of {} processes",
                    m.size
                ),
            )
        })
}

/// `count` elements of `ty` in bytes.
pub fn bytes(ty: &Datatype, count: usize) -> Result<usize> {
    ty.bytes(count)
        .ok_or_else(|| Error::new(MPI_ERR_COUNT, format!("{count} elements overflow")))
}

/// The place of an input buffer of `count` elements of `ty`, and its bytes.
///
/// # Safety
///
/// `buf` holds `count` elements of `ty` (readable now, and until the collective ends
/// when the type is contiguous).
pub unsafe fn input(
    s: &mut Schedule,
    buf: *const c_void,
    count: usize,
    ty: &Datatype,
) -> Result<(Loc, usize)> {
    let len = bytes(ty, count)?;
    if ty.contiguous {
        return Ok((
            Loc::User(buf.cast::<u8>().cast_mut().wrapping_offset(ty.lb)),
            len,
        ));
    }
    let at = s.scratch_to_fill(len);
    let p = s.ptr(at);
    // SAFETY: the caller's contract; the scratch buffer holds `len` bytes.
    unsafe { pack::pack(ty, buf.cast(), count, rbtl::btl::slice_at_mut(p, len)) };
    Ok((at, len))
}

/// The place where an output buffer of `count` elements of `ty` is filled, and its
/// bytes; for a type that is not contiguous, the unpacking to do at the end.
///
/// # Safety
///
/// `buf` has room for `count` elements of `ty` until the collective ends.
pub unsafe fn output(
    s: &mut Schedule,
    buf: *mut c_void,
    count: usize,
    ty: &Datatype,
) -> Result<(Loc, usize, Option<Local>)> {
    let len = bytes(ty, count)?;
    if ty.contiguous {
        return Ok((
            Loc::User(buf.cast::<u8>().wrapping_offset(ty.lb)),
            len,
            None,
        ));
    }
    let at = s.scratch(len);
    Ok((at, len, Some(unpacking(at, ty, buf, count))))
}

/// The unpacking of `count` elements of `ty` from `from` into the program's `to`.
fn unpacking(from: Loc, ty: &Datatype, to: *mut c_void, count: usize) -> Local {
    Local::Unpack {
        from,
        ty: ty.clone(),
        to: to.cast(),
        count,
    }
}

/// An output buffer that also holds input (`MPI_IN_PLACE`, or a reduction's
/// accumulator): packed now, unpacked at the end.
///
/// # Safety
///
/// As [`input`] and [`output`] together.
pub unsafe fn inout(
    s: &mut Schedule,
    buf: *mut c_void,
    count: usize,
    ty: &Datatype,
) -> Result<(Loc, usize, Option<Local>)> {
    // SAFETY: the caller's contract.
    let (at, len) = unsafe { input(s, buf, count, ty) }?;
    let unpack = (!ty.contiguous).then(|| unpacking(at, ty, buf, count));
    Ok((at, len, unpack))
}

/// A scratch copy of an input buffer, taken in the schedule's first step (a
/// reduction's accumulator, or an input whose buffer the collective also writes),
/// and its bytes.
///
/// # Safety
///
/// As [`input`].
pub unsafe fn input_copy(
    s: &mut Schedule,
    buf: *const c_void,
    count: usize,
    ty: &Datatype,
) -> Result<(Loc, usize)> {
    // SAFETY: the caller's contract.
    let (from, len) = unsafe { input(s, buf, count, ty) }?;
    let to = s.scratch_to_fill(len);
    s.round().then.push(Local::Copy { from, to, len });
    Ok((to, len))
}

/// Add the unpacking of outputs as the schedule's last step.
pub fn finish(s: &mut Schedule, unpacks: impl IntoIterator<Item = Option<Local>>) {
    let mut unpacks = unpacks.into_iter().flatten().peekable();
    if unpacks.peek().is_some() {
        s.round().then.extend(unpacks);
    }
}

/// A block of an array argument: `count` elements of `ty` at `displ` extents (or
/// `displ` bytes, `bytes`) from `buf`.
pub fn at(buf: *const c_void, displ: isize, ty: &Datatype, bytes: bool) -> *mut c_void {
    let step = if bytes { 1 } else { ty.extent() };
    buf.cast::<u8>()
        .cast_mut()
        .wrapping_offset(displ * step)
        .cast()
}

/// The counts and displacements of a vector argument, `n` of each.
///
/// # Safety
///
/// Each pointer holds `n` ints.
unsafe fn vector<'a>(
    counts: *const c_int,
    displs: *const c_int,
    n: u32,
) -> Result<(&'a [c_int], &'a [c_int])> {
    if counts.is_null() || displs.is_null() {
        return Err(Error::new(
            MPI_ERR_ARG,
            "a counts or displacements array is null",
        ));
    }
    // SAFETY: the caller's contract.
    unsafe {
        Ok((
            rbtl::btl::slice_at(counts, n as usize),
            rbtl::btl::slice_at(displs, n as usize),
        ))
    }
}

/// Member `i`'s count and displacement in a vector argument `(count, counts,
/// displs)` of `n` members: with `counts` null, `count` each, one after another.
///
/// # Safety
///
/// Unless `counts` is null, `counts` and `displs` hold `n` ints each.
pub unsafe fn part(
    v: (c_int, *const c_int, *const c_int),
    i: u32,
    n: u32,
) -> Result<(c_int, c_int)> {
    if v.1.is_null() {
        return Ok((v.0, i as c_int * v.0));
    }
    // SAFETY: the caller's contract.
    let (counts, displs) = unsafe { vector(v.1, v.2, n) }?;
    Ok((counts[i as usize], displs[i as usize]))
}
