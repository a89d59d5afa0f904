//! Aliased buffer arguments of intracommunicator collectives: a send buffer that is
//! the receive buffer (or the member's own block of it) where MPI asks for
//! `MPI_IN_PLACE` (MPI 4.1, 2.3: no output argument may alias another argument).
//! As MPICH does, each member checks its own arguments by address, before anything
//! moves, and refuses the call with `MPI_ERR_BUFFER`: a reduction whose two buffers
//! are one, a gather or all-gather whose send buffer is the member's block of the
//! receive buffer (a scatter's receive buffer, the root's block of the send buffer),
//! an all-to-all whose two sides are alike. Buffers that overlap from different
//! addresses are not seen.

use super::args::{at, in_place, part};
use crate::datatype::Datatype;
use crate::error::{Error, Result};
use crate::ffi::*;

/// The refusal of `what`.
fn refused(what: &str) -> Error {
    Error::new(
        MPI_ERR_BUFFER,
        format!("{what}: MPI forbids aliased arguments (MPI_IN_PLACE is the way to say this)"),
    )
}

/// Whether `count` elements of `ty` hold any byte.
pub fn holds(count: usize, ty: &Datatype) -> bool {
    count > 0 && ty.size > 0
}

/// A reduction's send buffer (`MPI_IN_PLACE` allowed) that is its receive buffer,
/// of `count` elements of `ty`.
pub fn reduction(
    sendbuf: *const c_void,
    recvbuf: *const c_void,
    count: usize,
    ty: &Datatype,
) -> Result<()> {
    if holds(count, ty) && !in_place(sendbuf) && sendbuf == recvbuf {
        return Err(refused("sendbuf and recvbuf are one buffer"));
    }
    Ok(())
}

/// A member's own buffer `own` (`MPI_IN_PLACE` allowed; `own_holds`: it holds some
/// bytes) that is `member`'s block of the collective's whole buffer (`whole`, its
/// vector argument `v` among `n` members, of type `ty`); `gather` says which is the
/// send side (a gather's own buffer, a scatter's block).
///
/// # Safety
///
/// Unless its arrays are null, `v` holds `n` counts and displacements.
pub unsafe fn own_block(
    (own, own_holds): (*const c_void, bool),
    (whole, v, ty): (
        *const c_void,
        (c_int, *const c_int, *const c_int),
        &Datatype,
    ),
    (member, n): (u32, u32),
    gather: bool,
) -> Result<()> {
    if !own_holds || in_place(own) {
        return Ok(());
    }
    // SAFETY: the caller's contract.
    let (count, displ) = unsafe { part(v, member, n) }?;
    let block_holds = usize::try_from(count).is_ok_and(|k| holds(k, ty));
    if block_holds && own == at(whole, displ as isize, ty, false).cast_const() {
        return Err(refused(match gather {
            true => "sendbuf is this member's block of recvbuf",
            false => "recvbuf is the root's block of sendbuf",
        }));
    }
    Ok(())
}

/// One side of an all-to-all: its buffer; its count, or its arrays of counts and
/// displacements; its types.
pub type Side<'a> = (
    *const c_void,
    (c_int, *const c_int, *const c_int),
    &'a [Handle],
);

/// An all-to-all whose send and receive sides are the same buffer, counts,
/// displacements and types; the send buffer may be `MPI_IN_PLACE`.
pub fn alltoall((sendbuf, send, sendtypes): Side, (recvbuf, recv, recvtypes): Side) -> Result<()> {
    let moves = !send.1.is_null() || send.0 > 0;
    if moves && !in_place(sendbuf) && sendbuf == recvbuf && send == recv && sendtypes == recvtypes {
        return Err(refused("the send and receive sides are one buffer"));
    }
    Ok(())
}
