//! The elements of accumulates that transports perform atomically (sums, bitwise
//! operations, replacement and fetches on integers of 4 and 8 bytes): which
//! transport atomic performs an operation, the elements read as words, and applied
//! one by one with the processor's atomic instructions where the memory is mapped
//! ([`super::direct`]) or at the target of a shipped accumulate
//! ([`super::shipped`]).

use crate::datatype::Prim;
use crate::ffi::*;
use rbtl::btl::{AtomicOp, AtomicRequest, AtomicWidth};

/// The transport atomic that performs predefined `op` on an integer of 4 or 8
/// bytes (`MPI_NO_OP`, a fetch, adds nothing); `None` when `op` or the type needs
/// the mutex.
pub(super) fn hardware(op: Handle, prim: Option<Prim>) -> Option<AtomicOp> {
    let Some(Prim::Int { bytes: 4 | 8, .. }) = prim else {
        return None;
    };
    Some(match op {
        MPI_SUM | MPI_NO_OP => AtomicOp::Add,
        MPI_BAND => AtomicOp::And,
        MPI_BOR => AtomicOp::Or,
        MPI_BXOR => AtomicOp::Xor,
        MPI_REPLACE => AtomicOp::Swap,
        _ => return None,
    })
}

/// Read element `i` of `bytes` (4 or 8) at `p` as a u64.
///
/// # Safety
///
/// `p` holds element `i`.
pub(super) unsafe fn word(p: *const u8, i: usize, bytes: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        if bytes == 4 {
            u64::from(p.cast::<u32>().add(i).read_unaligned())
        } else {
            p.cast::<u64>().add(i).read_unaligned()
        }
    }
}

/// Apply `atomic` with each of the `n` words of `bytes` (4 or 8) at `operand` (none
/// for `no_op`: an add of 0, as transports fetch) to the words at `at`, each with
/// one atomic instruction of this processor (as transports do on memory they map);
/// each word's previous value to `fetched`, when not null.
///
/// # Safety
///
/// `at` holds `n` words aligned to `bytes`, which every process reaches only
/// atomically; `operand` holds `n` unless `no_op`; `fetched` is null or has room
/// for `n`.
pub(super) unsafe fn apply_each(
    atomic: AtomicOp,
    no_op: bool,
    operand: *const u8,
    at: *mut u8,
    n: usize,
    bytes: usize,
    fetched: *mut u8,
) {
    let width = if bytes == 4 {
        AtomicWidth::W32
    } else {
        AtomicWidth::W64
    };
    let request = AtomicRequest {
        op: Some(atomic),
        width,
    };
    for i in 0..n {
        // SAFETY: the caller's contract: operand `i` is there unless `no_op`; word
        // `i` is aligned and reached atomically; result `i` has room.
        unsafe {
            let v = if no_op { 0 } else { word(operand, i, bytes) };
            let old = request.apply(at.add(i * bytes), v, 0);
            if fetched.is_null() {
                continue;
            }
            let out = fetched.add(i * bytes);
            match width {
                AtomicWidth::W32 => out.cast::<u32>().write_unaligned(old as u32),
                AtomicWidth::W64 => out.cast::<u64>().write_unaligned(old),
            }
        }
    }
}
