//! Atomic operations as the contract names them (Open MPI: `mca_btl_base_atomic_op_t`,
//! `MCA_BTL_ATOMIC_FLAG_32BIT`), and how a target applies one to its memory.
//!
//! An atomic works on a 64-bit word, or on a 32-bit one when its flags carry
//! [`AtomicWidth::W32`] (Open MPI: `MCA_BTL_ATOMIC_FLAG_32BIT`). A 32-bit operation
//! uses the low 32 bits of its operand and compare values (so a value sign-extended to
//! 64 bits, as Open MPI's one-sided layer passes an `int32_t`, works as well as one
//! zero-extended), wraps modulo 2^32 without touching the bytes beside its word, and
//! hands back the previous value as 4 bytes.

use crate::{Error, Result};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Atomic operations (Open MPI: `mca_btl_base_atomic_op_t`); compare-and-swap has its
/// own call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// `*target += operand` (wrapping).
    Add,
    /// `*target &= operand`.
    And,
    /// `*target |= operand`.
    Or,
    /// `*target ^= operand`.
    Xor,
    /// `*target = operand`.
    Swap,
}

/// The `fetch_*` of `$op` on the atomic word `$word` (of either width), acquire and
/// release: the previous value.
macro_rules! fetch_op {
    ($op:expr, $word:expr, $operand:expr) => {{
        use std::sync::atomic::Ordering::AcqRel;
        match $op {
            AtomicOp::Add => $word.fetch_add($operand, AcqRel),
            AtomicOp::And => $word.fetch_and($operand, AcqRel),
            AtomicOp::Or => $word.fetch_or($operand, AcqRel),
            AtomicOp::Xor => $word.fetch_xor($operand, AcqRel),
            AtomicOp::Swap => $word.swap($operand, AcqRel),
        }
    }};
}

impl AtomicOp {
    /// Apply the operation to `word`; the previous value (inlined, so that a caller
    /// that drops it gets the instruction that returns nothing, `lock xor`, not a
    /// compare-and-swap loop).
    #[inline]
    pub fn apply(self, word: &AtomicU64, operand: u64) -> u64 {
        fetch_op!(self, word, operand)
    }

    /// Apply the operation to the 32-bit `word`; the previous value (inlined, as
    /// [`AtomicOp::apply`]).
    #[inline]
    pub fn apply32(self, word: &AtomicU32, operand: u32) -> u32 {
        fetch_op!(self, word, operand)
    }

    /// What the operation makes of `old` (for transports that emulate it with a
    /// compare-and-swap loop).
    pub fn value(self, old: u64, operand: u64) -> u64 {
        match self {
            AtomicOp::Add => old.wrapping_add(operand),
            AtomicOp::And => old & operand,
            AtomicOp::Or => old | operand,
            AtomicOp::Xor => old ^ operand,
            AtomicOp::Swap => operand,
        }
    }
}

/// Compare-and-swap on `word`; the previous value.
pub fn compare_swap(word: &AtomicU64, compare: u64, value: u64) -> u64 {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    match word.compare_exchange(compare, value, AcqRel, Acquire) {
        Ok(v) | Err(v) => v,
    }
}

/// The size of the word an atomic works on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicWidth {
    /// A 32-bit word (Open MPI: `MCA_BTL_ATOMIC_FLAG_32BIT`).
    W32,
    /// A 64-bit word (the default).
    W64,
}

impl AtomicWidth {
    /// Bytes of the word (and of the previous value a fetching atomic writes).
    #[inline]
    pub const fn bytes(self) -> usize {
        match self {
            AtomicWidth::W32 => 4,
            AtomicWidth::W64 => 8,
        }
    }

    /// [`Error::Misaligned`] unless `addr` is aligned to the word.
    #[inline]
    pub fn check_aligned(self, addr: u64) -> Result<()> {
        if addr % self.bytes() as u64 == 0 {
            Ok(())
        } else {
            Err(Error::Misaligned(addr))
        }
    }

    /// Store a previous value `old` at `at` as this width's bytes (the low 32 bits for
    /// [`AtomicWidth::W32`]).
    ///
    /// # Safety
    ///
    /// `[at, at + self.bytes())` must be valid for writes and not referenced elsewhere
    /// (a fetching atomic's local result, checked against its registration).
    #[inline]
    pub unsafe fn store(self, at: usize, old: u64) {
        // SAFETY: the caller's contract; unaligned stores need no alignment.
        unsafe {
            match self {
                AtomicWidth::W32 => (at as *mut u32).write_unaligned(old as u32),
                AtomicWidth::W64 => (at as *mut u64).write_unaligned(old),
            }
        }
    }
}

/// One atomic as a target applies it: `op` (compare-and-swap for `None`) on a word of
/// `width`. Its wire code, shared by the transports that send atomics as messages,
/// is the operation's number (0..=4 for add, and, or, xor, swap; 5 for
/// compare-and-swap) with bit 7 set for 32-bit words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicRequest {
    /// The operation; `None` for compare-and-swap.
    pub op: Option<AtomicOp>,
    /// The word's width.
    pub width: AtomicWidth,
}

/// Bit 7 of an atomic's wire code: a 32-bit word.
const WIRE_32BIT: u8 = 0x80;
/// Compare-and-swap's wire number.
const WIRE_CSWAP: u8 = 5;

impl AtomicRequest {
    /// Its wire code.
    pub fn code(self) -> u8 {
        let n = match self.op {
            Some(AtomicOp::Add) => 0,
            Some(AtomicOp::And) => 1,
            Some(AtomicOp::Or) => 2,
            Some(AtomicOp::Xor) => 3,
            Some(AtomicOp::Swap) => 4,
            None => WIRE_CSWAP,
        };
        match self.width {
            AtomicWidth::W32 => n | WIRE_32BIT,
            AtomicWidth::W64 => n,
        }
    }

    /// The request of a wire code; `None` for a code no sender writes.
    pub fn of_code(code: u8) -> Option<AtomicRequest> {
        let width = if code & WIRE_32BIT != 0 {
            AtomicWidth::W32
        } else {
            AtomicWidth::W64
        };
        let op = match code & !WIRE_32BIT {
            0 => Some(AtomicOp::Add),
            1 => Some(AtomicOp::And),
            2 => Some(AtomicOp::Or),
            3 => Some(AtomicOp::Xor),
            4 => Some(AtomicOp::Swap),
            WIRE_CSWAP => None,
            _ => return None,
        };
        Some(AtomicRequest { op, width })
    }

    /// Apply it to the word at `target` with `operand` (the new value of a
    /// compare-and-swap) and `compare`; the previous value (zero-extended for 32 bits).
    ///
    /// # Safety
    ///
    /// `target` must be aligned to the width and lie, with the whole word, inside a
    /// live registration with atomic access (register_mem's contract keeps that memory
    /// mapped and lets peers access it only through atomics or raw pointers).
    pub unsafe fn apply(self, target: *mut u8, operand: u64, compare: u64) -> u64 {
        match self.width {
            AtomicWidth::W64 => {
                // SAFETY: the caller's contract: aligned, mapped, shared only atomically.
                let word = unsafe { AtomicU64::from_ptr(target.cast::<u64>()) };
                match self.op {
                    Some(op) => op.apply(word, operand),
                    None => compare_swap(word, compare, operand),
                }
            }
            AtomicWidth::W32 => {
                // SAFETY: as above, for 4 bytes.
                let word = unsafe { AtomicU32::from_ptr(target.cast::<u32>()) };
                let old = match self.op {
                    Some(op) => op.apply32(word, operand as u32),
                    None => {
                        use std::sync::atomic::Ordering::{AcqRel, Acquire};
                        match word.compare_exchange(compare as u32, operand as u32, AcqRel, Acquire)
                        {
                            Ok(v) | Err(v) => v,
                        }
                    }
                };
                u64::from(old)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_codes_round_trip_and_unknown_ones_are_refused() {
        let ops = [
            Some(AtomicOp::Add),
            Some(AtomicOp::And),
            Some(AtomicOp::Or),
            Some(AtomicOp::Xor),
            Some(AtomicOp::Swap),
            None,
        ];
        for op in ops {
            for width in [AtomicWidth::W32, AtomicWidth::W64] {
                let r = AtomicRequest { op, width };
                assert_eq!(AtomicRequest::of_code(r.code()), Some(r));
            }
        }
        for code in [6u8, 9, 0x7f, 0x86, 0xff] {
            assert_eq!(AtomicRequest::of_code(code), None, "{code:#x}");
        }
    }

    #[test]
    fn thirty_two_bit_operations_wrap_and_leave_the_neighbour_alone() {
        let mut words = [0u32; 2];
        words[0] = u32::MAX;
        words[1] = 0x1234_5678;
        let at = words.as_mut_ptr().cast::<u8>();
        let add = AtomicRequest {
            op: Some(AtomicOp::Add),
            width: AtomicWidth::W32,
        };
        // SAFETY: `words` is 4-byte aligned, live, and used only through these calls.
        let old = unsafe { add.apply(at, 1, 0) };
        assert_eq!(
            (old, words[0], words[1]),
            (u64::from(u32::MAX), 0, 0x1234_5678)
        );
        // A sign-extended -1 adds -1 to the 32-bit word.
        // SAFETY: as above.
        let old = unsafe { add.apply(at, (-1i64) as u64, 0) };
        assert_eq!((old, words[0]), (0, u32::MAX));
        let cswap = AtomicRequest {
            op: None,
            width: AtomicWidth::W32,
        };
        // A compare of the sign-extended -1 matches u32::MAX.
        // SAFETY: as above.
        let old = unsafe { cswap.apply(at, 7, (-1i64) as u64) };
        assert_eq!(
            (old, words[0], words[1]),
            (u64::from(u32::MAX), 7, 0x1234_5678)
        );
        assert!(AtomicWidth::W32.check_aligned(4).is_ok());
        assert!(matches!(
            AtomicWidth::W32.check_aligned(6),
            Err(Error::Misaligned(6))
        ));
        assert!(matches!(
            AtomicWidth::W64.check_aligned(4),
            Err(Error::Misaligned(4))
        ));
    }
}
