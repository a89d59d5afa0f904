//! A seeded xorshift generator: the same inputs on every run of a seed.

/// Xorshift64 over its state (the seed: any value but 0).
#[derive(Clone, Debug)]
pub struct Xorshift(pub u64);

impl Xorshift {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// In `1..=max`, spread evenly over the powers of two: as many sizes under a page
    /// as between 1 and 2 MiB.
    pub fn size(&mut self, max: usize) -> usize {
        if max < 2 {
            return max;
        }
        let hi = 1usize << (1 + self.below(max.ilog2() as usize));
        (hi / 2 + self.below(hi / 2 + 1)).clamp(1, max)
    }
}
