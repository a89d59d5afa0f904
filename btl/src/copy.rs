//! Copying the bytes of a message: the few of a small one, the many of a large one.

use std::ptr;

/// From this many bytes on, [`copy_bytes`] copies the way this processor copies large
/// blocks fastest (`vector::copy`): below where glibc's `memcpy` turns to `rep movsb`
/// (2,112 bytes on processors with fast short `rep movsb`).
const VECTOR_COPY_MIN: usize = 2048;

/// Copy `len` bytes; sizes up to 16 without a call into `memcpy` (which costs more
/// than the copy for the small messages that dominate latency), and from 2 KiB on as
/// the processor copies them fastest (docs/performance.md): on Intel processors by the
/// C library's `memcpy` (glibc's AVX-512 and `rep movsb` copies ran the `sm`
/// transport's large transfers 5-10% faster than a loop of our own); elsewhere with
/// vector loads and stores of our own (on AMD processors glibc's `rep movsb` ran the
/// same copy at full speed or many times slower depending only on where the two
/// buffers lie: a tenth of the speed or less where they sit at different offsets in a
/// cache line, while a vector loop runs at full speed wherever they are).
///
/// # Safety
///
/// As `ptr::copy_nonoverlapping`.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: (all branches) the caller guarantees both ranges of `len` bytes; each
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
            #[cfg(target_arch = "x86_64")]
            VECTOR_COPY_MIN.. => vector::copy(src, dst, len),
            _ => ptr::copy_nonoverlapping(src, dst, len),
        }
    }
}

/// Copy `len` bytes as [`copy_bytes`] does, the two ranges allowed to overlap (then as
/// `ptr::copy`, which copies them as if through a buffer between).
///
/// # Safety
///
/// As `ptr::copy`.
#[inline(always)]
pub unsafe fn move_bytes(src: *const u8, dst: *mut u8, len: usize) {
    let (s, d) = (src as usize, dst as usize);
    if s < d.wrapping_add(len) && d < s.wrapping_add(len) {
        // SAFETY: the caller's contract.
        unsafe { ptr::copy(src, dst, len) }
    } else {
        // SAFETY: the caller's contract; the ranges do not overlap (checked).
        unsafe { copy_bytes(src, dst, len) }
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

#[cfg(target_arch = "x86_64")]
mod vector {
    use std::arch::x86_64::{
        __cpuid, __m128i, __m256i, _mm256_loadu_si256, _mm256_storeu_si256, _mm_loadu_si128,
        _mm_storeu_si128,
    };
    use std::sync::OnceLock;

    /// Copy `len` (at least 128) bytes the way this processor copies them fastest.
    ///
    /// # Safety
    ///
    /// As `ptr::copy_nonoverlapping`, with `len >= 128`.
    #[inline(never)]
    pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
        debug_assert!(len >= 128);
        if libc_is_faster() {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
        } else {
            // SAFETY: the caller's contract.
            unsafe { copy_loop(src, dst, len) }
        }
    }

    /// Whether the C library's `memcpy` copies large blocks faster than [`copy_loop`]
    /// on this processor: an Intel one (decided once).
    #[inline(always)]
    fn libc_is_faster() -> bool {
        static INTEL: OnceLock<bool> = OnceLock::new();
        *INTEL.get_or_init(|| {
            // SAFETY: CPUID is available on every x86_64 processor; leaf 0 gives the
            // vendor's name in EBX, EDX, ECX.
            #[allow(unused_unsafe)]
            let id = unsafe { __cpuid(0) };
            [id.ebx, id.edx, id.ecx] == [0x756e_6547, 0x4965_6e69, 0x6c65_746e] // "GenuineIntel"
        })
    }

    /// Copy with vector loads and stores of our own (AVX2 where the processor has it,
    /// else SSE2), in blocks of 128 bytes, the last block ending at `len` (overlapping
    /// the one before it).
    ///
    /// # Safety
    ///
    /// As [`copy`].
    pub(super) unsafe fn copy_loop(src: *const u8, dst: *mut u8, len: usize) {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the processor has AVX2 (checked); the caller's contract.
            unsafe { copy_avx2(src, dst, len) }
        } else {
            // SAFETY: SSE2 is part of x86_64; the caller's contract.
            unsafe { copy_sse2(src, dst, len) }
        }
    }

    /// Call `block` at every multiple of 128 below `len - 128`, then at `len - 128`: the
    /// starts of 128-byte blocks that cover `len` (at least 128) bytes, the last one
    /// overlapping the one before it.
    #[inline(always)]
    fn each_block(len: usize, mut block: impl FnMut(usize)) {
        let mut at = 0;
        while at + 128 < len {
            block(at);
            at += 128;
        }
        block(len - 128);
    }

    /// # Safety
    ///
    /// As [`copy`], on a processor with AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn copy_avx2(src: *const u8, dst: *mut u8, len: usize) {
        let block = |at: usize| {
            // SAFETY: `at + 128 <= len`: inside both ranges; unaligned loads and stores.
            unsafe {
                let s = src.add(at).cast::<__m256i>();
                let d = dst.add(at).cast::<__m256i>();
                let v = [
                    _mm256_loadu_si256(s),
                    _mm256_loadu_si256(s.add(1)),
                    _mm256_loadu_si256(s.add(2)),
                    _mm256_loadu_si256(s.add(3)),
                ];
                for (i, v) in v.into_iter().enumerate() {
                    _mm256_storeu_si256(d.add(i), v);
                }
            }
        };
        each_block(len, block);
    }

    /// # Safety
    ///
    /// As [`copy`].
    pub(super) unsafe fn copy_sse2(src: *const u8, dst: *mut u8, len: usize) {
        let block = |at: usize| {
            // SAFETY: `at + 128 <= len`: inside both ranges; unaligned loads and stores.
            unsafe {
                let s = src.add(at).cast::<__m128i>();
                let d = dst.add(at).cast::<__m128i>();
                for i in 0..8 {
                    _mm_storeu_si128(d.add(i), _mm_loadu_si128(s.add(i)));
                }
            }
        };
        each_block(len, block);
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, move_bytes};

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

    /// Every large copy (as chosen for this processor, our loop at the processor's
    /// vector width, and SSE2 alone) at several lengths and alignments.
    #[test]
    fn large_lengths_copy_exactly_their_bytes_at_any_alignment() {
        type Copy = unsafe fn(*const u8, *mut u8, usize);
        let mut copies: Vec<Copy> = vec![copy_bytes];
        #[cfg(target_arch = "x86_64")]
        copies.extend([super::vector::copy_loop, super::vector::copy_sse2]);
        let n = 70_000;
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
        for (copy, len) in copies
            .iter()
            .flat_map(|c| [2048, 2049, 2175, 4096, 4097, 4223, 4224, 4225, 65_543].map(|l| (c, l)))
        {
            for (from, to) in [(0, 0), (1, 3), (5, 64)] {
                let mut dst = vec![0xAAu8; len + to + 8];
                // SAFETY: `len` bytes from `src[from..]` (which holds them) into
                // `dst[to..]` (which holds `len + 8`).
                unsafe { copy(src.as_ptr().add(from), dst.as_mut_ptr().add(to), len) };
                assert_eq!(&dst[to..to + len], &src[from..from + len], "length {len}");
                assert!(
                    dst[..to].iter().chain(&dst[to + len..]).all(|&b| b == 0xAA),
                    "length {len}: wrote outside its range"
                );
            }
        }
    }

    /// Overlapping ranges move as through a buffer between, either way; apart, as
    /// `copy_bytes` copies.
    #[test]
    fn moves_copy_overlapping_ranges_either_way() {
        for len in [0, 5, 100, 3000, 9000] {
            for (from, to) in [(0, 7), (7, 0), (0, 0), (0, len + 3)] {
                let mut buf: Vec<u8> = (0..2 * len + 16).map(|i| (i * 13 + 1) as u8).collect();
                let want: Vec<u8> = buf[from..from + len].to_vec();
                let p = buf.as_mut_ptr();
                // SAFETY: both ranges of `len` bytes lie inside `buf`.
                unsafe { move_bytes(p.add(from), p.add(to), len) };
                assert_eq!(
                    &buf[to..to + len],
                    &want[..],
                    "length {len}, {from} to {to}"
                );
            }
        }
    }
}
