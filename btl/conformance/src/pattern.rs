//! The bytes of test messages, and the sizes worth sending.

/// The byte at `i` of a test message of `len` bytes.
pub(crate) fn pattern(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ len.wrapping_mul(7)) as u8
}

pub(crate) fn fill(buf: &mut [u8], seed: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
}

pub(crate) fn matches_pattern(buf: &[u8], seed: usize) -> bool {
    buf.iter().enumerate().all(|(i, &b)| b == pattern(seed, i))
}

/// Sizes worth sending: all up to 64, and around every power of two and the limits.
pub fn interesting_sizes(eager: usize, max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..=64).collect();
    let mut p = 128;
    while p <= max {
        sizes.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    sizes.extend([eager.saturating_sub(1), eager, eager + 1, max - 1, max]);
    sizes.retain(|&s| s <= max);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}
