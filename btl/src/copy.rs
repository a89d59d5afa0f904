//! Copying the few bytes of a small message.

use std::ptr;

/// Copy `len` bytes; sizes up to 16 without a call into `memcpy` (which costs more
/// than the copy for the small messages that dominate latency).
///
/// # Safety
///
/// As `ptr::copy_nonoverlapping`.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY (all branches): the caller guarantees both ranges of `len` bytes; each
    // access below stays inside them (the two halves may overlap each other, not the
    // other range).
    unsafe {
        match len {
            0 => {}
            1..=3 => {
                for i in 0..len {
                    *dst.add(i) = *src.add(i);
                }
            }
            4..=7 => {
                let (a, b) = (
                    src.cast::<u32>().read_unaligned(),
                    src.add(len - 4).cast::<u32>().read_unaligned(),
                );
                dst.cast::<u32>().write_unaligned(a);
                dst.add(len - 4).cast::<u32>().write_unaligned(b);
            }
            8..=16 => {
                let (a, b) = (
                    src.cast::<u64>().read_unaligned(),
                    src.add(len - 8).cast::<u64>().read_unaligned(),
                );
                dst.cast::<u64>().write_unaligned(a);
                dst.add(len - 8).cast::<u64>().write_unaligned(b);
            }
            _ => ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}
