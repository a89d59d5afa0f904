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
            4..=7 => copy_ends::<u32>(src, dst, len),
            8..=16 => copy_ends::<u64>(src, dst, len),
            _ => ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// Copy `len` bytes, at least one `T` and at most two, as the first and the last `T`
/// (overlapping in the middle).
///
/// # Safety
///
/// As `ptr::copy_nonoverlapping`, with `size_of::<T>() <= len`.
#[inline(always)]
unsafe fn copy_ends<T: Copy>(src: *const u8, dst: *mut u8, len: usize) {
    let tail = len - std::mem::size_of::<T>();
    // SAFETY: both `T`s lie inside the two ranges (the caller's contract); unaligned
    // reads and writes.
    unsafe {
        let (a, b) = (
            src.cast::<T>().read_unaligned(),
            src.add(tail).cast::<T>().read_unaligned(),
        );
        dst.cast::<T>().write_unaligned(a);
        dst.add(tail).cast::<T>().write_unaligned(b);
    }
}

#[cfg(test)]
mod tests {
    use super::copy_bytes;

    #[test]
    fn every_length_copies_exactly_its_bytes() {
        let src: Vec<u8> = (1..=40).collect();
        for len in 0..=40 {
            let mut dst = [0u8; 42];
            // SAFETY: `len` bytes of `src` into `dst[1..]`, which holds 41.
            unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr().add(1), len) };
            assert_eq!(&dst[1..=len], &src[..len], "length {len}");
            assert!(
                dst[0] == 0 && dst[len + 1..].iter().all(|&b| b == 0),
                "length {len}"
            );
        }
    }
}
