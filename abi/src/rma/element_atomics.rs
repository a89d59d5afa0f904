//! The elements of accumulates that transports perform atomically (sums, bitwise
//! operations, replacement and fetches on integers of 4 and 8 bytes): which
//! transport atomic performs an operation, the elements read as words, and applied
//! one by one with the processor's atomic instructions where the memory is mapped
//! ([`super::direct`]) or at the target of a shipped accumulate
//! ([`super::shipped`]).

use crate::datatype::Prim;
use crate::ffi::*;
use rbtl::btl::{AtomicOp, AtomicRequest, AtomicWidth};
use std::sync::atomic::{
    AtomicU32, AtomicU64,
    Ordering::{Acquire, Release},
};

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
/// for `no_op`, a fetch that adds nothing) to the words at `at`, each with one
/// atomic instruction of this processor (as transports do on memory they map): a
/// replacement whose previous values nobody wants, an atomic store; a `no_op`, an
/// atomic load. Each word's previous value to `fetched`, when not null.
///
/// # Safety
///
/// `at` holds `n` words aligned to `bytes`, which other processes reach meanwhile
/// only atomically (a holder of the member's exclusive lock combines them without
/// atomics, never while others reach them); `operand` holds `n` unless `no_op`;
/// `fetched` is null or has room for `n`.
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
    if fetched.is_null() {
        // Without the previous values: each word changed by an atomic instruction
        // that returns nothing (`lock xor` where a fetch takes a compare-and-swap
        // loop; a replacement an atomic store, no locked instruction at all); a
        // read that nobody reads (`no_op`) changes nothing.
        if no_op {
            return;
        }
        if atomic == AtomicOp::Swap {
            // SAFETY: the caller's contract: operand `i` is there; word `i` is
            // aligned and reached only atomically.
            unsafe { store_each(operand, at, n, width) };
            return;
        }
        for i in 0..n {
            // SAFETY: the caller's contract: operand `i` is there; word `i` is aligned
            // and reached only atomically.
            unsafe {
                let v = word(operand, i, bytes);
                // (The previous values dropped: nobody wants them.)
                match width {
                    AtomicWidth::W32 => {
                        atomic.apply32(AtomicU32::from_ptr(at.cast::<u32>().add(i)), v as u32);
                    }
                    AtomicWidth::W64 => {
                        atomic.apply(AtomicU64::from_ptr(at.cast::<u64>().add(i)), v);
                    }
                }
            }
        }
        return;
    }
    if no_op {
        // A fetch that changes nothing: each word read by an atomic load.
        // SAFETY: the caller's contract: word `i` is aligned and reached atomically;
        // result `i` has room.
        unsafe { load_each(at, fetched, n, width) };
        return;
    }
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
            let out = fetched.add(i * bytes);
            match width {
                AtomicWidth::W32 => out.cast::<u32>().write_unaligned(old as u32),
                AtomicWidth::W64 => out.cast::<u64>().write_unaligned(old),
            }
        }
    }
}

/// Store each of the `n` words of `width` at `operand` to the words at `at`, each
/// with one atomic store: a replacement whose previous values nobody wants.
///
/// # Safety
///
/// As [`apply_each`]'s, without a result.
unsafe fn store_each(operand: *const u8, at: *mut u8, n: usize, width: AtomicWidth) {
    for i in 0..n {
        // SAFETY: the caller's contract: operand `i` is there; word `i` is aligned
        // and reached only atomically.
        unsafe {
            let v = word(operand, i, width.bytes());
            match width {
                AtomicWidth::W32 => {
                    AtomicU32::from_ptr(at.cast::<u32>().add(i)).store(v as u32, Release)
                }
                AtomicWidth::W64 => AtomicU64::from_ptr(at.cast::<u64>().add(i)).store(v, Release),
            }
        }
    }
}

/// Read each of the `n` words of `width` at `at` into `fetched` with one atomic
/// load: a fetch that changes nothing (`MPI_NO_OP`).
///
/// # Safety
///
/// As [`apply_each`]'s, without an operand; `fetched` has room for `n` words.
unsafe fn load_each(at: *const u8, fetched: *mut u8, n: usize, width: AtomicWidth) {
    for i in 0..n {
        // SAFETY: the caller's contract: word `i` is aligned and reached only
        // atomically; result `i` has room.
        unsafe {
            match width {
                AtomicWidth::W32 => fetched.cast::<u32>().add(i).write_unaligned(
                    AtomicU32::from_ptr(at.cast::<u32>().cast_mut().add(i)).load(Acquire),
                ),
                AtomicWidth::W64 => fetched.cast::<u64>().add(i).write_unaligned(
                    AtomicU64::from_ptr(at.cast::<u64>().cast_mut().add(i)).load(Acquire),
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words in each test.
    const N: usize = 5;

    #[test]
    fn each_operation_changes_every_word_alike_fetched_or_not() {
        let ops = [
            AtomicOp::Add,
            AtomicOp::And,
            AtomicOp::Or,
            AtomicOp::Xor,
            AtomicOp::Swap,
        ];
        for atomic in ops {
            for bytes in [4usize, 8] {
                let mask = if bytes == 4 { 0xffff_ffff } else { u64::MAX };
                let start: Vec<u64> = (0..N as u64)
                    .map(|i| (0x0f0f_1234_5678_9abc ^ i) & mask)
                    .collect();
                let operand: Vec<u64> = (0..N as u64)
                    .map(|i| (0x3c3c_0000_ffff_0003 + i) & mask)
                    .collect();
                let bytes_of = |v: &[u64]| -> Vec<u8> {
                    v.iter()
                        .flat_map(|&x| x.to_ne_bytes()[..bytes].to_vec())
                        .collect()
                };
                // 8-byte storage, so that the words are aligned whatever their size.
                let mut words = [vec![0u64; N], vec![0u64; N]];
                for w in &mut words {
                    let b = bytes_of(&start);
                    // SAFETY: `w` has room for `N` words of `bytes`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), w.as_mut_ptr().cast(), b.len())
                    };
                }
                let mut fetched = vec![0u8; N * bytes];
                let op = bytes_of(&operand);
                // SAFETY: each buffer holds `N` aligned words of `bytes`.
                unsafe {
                    let [a, b] = &mut words;
                    apply_each(
                        atomic,
                        false,
                        op.as_ptr(),
                        a.as_mut_ptr().cast(),
                        N,
                        bytes,
                        fetched.as_mut_ptr(),
                    );
                    apply_each(
                        atomic,
                        false,
                        op.as_ptr(),
                        b.as_mut_ptr().cast(),
                        N,
                        bytes,
                        std::ptr::null_mut(),
                    );
                }
                assert_eq!(words[0], words[1], "{atomic:?}, {bytes} bytes");
                assert_eq!(fetched, bytes_of(&start), "{atomic:?}, {bytes} bytes");
                let want: Vec<u64> = start
                    .iter()
                    .zip(&operand)
                    .map(|(&s, &o)| atomic.value(s, o) & mask)
                    .collect();
                // SAFETY: the words as bytes.
                let got = unsafe {
                    std::slice::from_raw_parts(words[0].as_ptr().cast::<u8>(), N * bytes)
                };
                assert_eq!(got, &bytes_of(&want)[..], "{atomic:?}, {bytes} bytes");
            }
        }
    }

    #[test]
    fn a_no_op_fetches_every_word_and_changes_none() {
        for bytes in [4usize, 8] {
            let mut words: Vec<u64> = (0..N as u64)
                .map(|i| 0x0102_0304_0506_0708 * (i + 1))
                .collect();
            let before = words.clone();
            let mut fetched = vec![0xeeu8; N * bytes];
            // SAFETY: `words` holds `N` aligned words of `bytes`; `fetched` has room
            // for them; a no-op reads no operand.
            unsafe {
                apply_each(
                    AtomicOp::Add,
                    true,
                    std::ptr::null(),
                    words.as_mut_ptr().cast(),
                    N,
                    bytes,
                    fetched.as_mut_ptr(),
                )
            };
            assert_eq!(words, before, "{bytes} bytes");
            // SAFETY: the words as bytes.
            let want =
                unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), N * bytes) };
            assert_eq!(fetched, want, "{bytes} bytes");
        }
    }
}
