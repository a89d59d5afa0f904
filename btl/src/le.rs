//! Little-endian fields read at byte offsets of bytes from a peer (remote handles,
//! frame headers), for transports that decode them.

/// The little-endian `u64` at byte `at` of `b`. Panics where `b` ends before
/// `at + 8`: callers check the length first.
#[inline]
pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian `u32` at byte `at` of `b`. Panics where `b` ends before
/// `at + 4`: callers check the length first.
#[inline]
pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
