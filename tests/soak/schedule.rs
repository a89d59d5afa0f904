//! What every rank and the harness compute alike from a run's seed: random numbers,
//! payloads and their checksums, and each step's exchange of messages.

/// Ranks of a soak job.
pub const RANKS: u32 = 4;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64, seeded by the run's seed and what the numbers are for.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, a: u64, b: u64) -> Rng {
        Rng(mix(
            seed ^ mix(a.wrapping_add(0x9e37_79b9_7f4a_7c15) ^ mix(b))
        ))
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The `len` bytes named by (`seed`, `a`, `b`).
pub fn payload(seed: u64, a: u64, b: u64, len: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed, a, b);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// A checksum of `bytes` and their length.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = mix(h ^ u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    for &b in words.remainder() {
        h = mix(h ^ u64::from(b));
    }
    h
}

/// How a receive is made.
#[derive(Clone, Copy)]
pub enum Style {
    /// `irecv` and `isend` in a scope, each waited for.
    Scope,
    /// `irecv`, a blocking `send`, then `wait`.
    PostedThenSend,
    /// `isend`, a blocking `recv` (which a transport may match itself), then `wait`.
    SendThenRecv,
}

/// Which messages a receive accepts.
#[derive(Clone, Copy)]
pub enum Match {
    SourceAndTag,
    /// Any source, the step's tag: only this step's message has it.
    AnySource,
    /// The sender, any tag: its messages arrive in order.
    AnyTag,
}

/// One step's exchange, the same on every rank: rank r sends `len[r]` bytes to
/// `to[r]` (a permutation, so each rank receives one message) and receives as
/// `style[r]` and `matching[r]` say.
pub struct Exchange {
    pub to: Vec<u32>,
    pub len: Vec<usize>,
    pub style: Vec<Style>,
    pub matching: Vec<Match>,
}

impl Exchange {
    /// Step `step`: sizes from tiny to over a megabyte, many around the eager limit
    /// `eager`; wildcard receives only where `wildcards` (runs without kills: a
    /// receive from any source waits while other ranks live, even for a dead sender).
    pub fn new(seed: u64, step: u64, eager: usize, wildcards: bool) -> Exchange {
        let mut rng = Rng::new(seed, step, u64::MAX);
        let n = RANKS as usize;
        let mut to: Vec<u32> = (0..RANKS).collect();
        for i in (1..n).rev() {
            to.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let len = (0..n)
            .map(|_| match rng.below(100) {
                0..=39 => rng.below(256) as usize,
                40..=64 => eager - 80 + rng.below(160) as usize,
                65..=91 => eager + rng.below(256 << 10) as usize,
                _ => (1 << 20) + rng.below(64 << 10) as usize,
            })
            .collect();
        let style = (0..n)
            .map(|_| match rng.below(3) {
                0 => Style::Scope,
                1 => Style::PostedThenSend,
                _ => Style::SendThenRecv,
            })
            .collect();
        let matching = (0..n)
            .map(|_| match (wildcards, rng.below(3)) {
                (true, 1) => Match::AnySource,
                (true, 2) => Match::AnyTag,
                _ => Match::SourceAndTag,
            })
            .collect();
        Exchange {
            to,
            len,
            style,
            matching,
        }
    }

    /// Who sends to `rank` this step.
    pub fn sender_to(&self, rank: u32) -> u32 {
        self.to
            .iter()
            .position(|&t| t == rank)
            .expect("a permutation") as u32
    }
}
