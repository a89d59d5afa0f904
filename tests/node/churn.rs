//! Memory that comes and goes in random ways, for the registration stress
//! (`node/stress.rs`). Memory is taken by C `malloc` of a byte to 4 MiB, by an anonymous
//! mapping of 1 to 1024 pages, by a new mapping at an address just unmapped, by moving a
//! spare mapping there with `mremap`, or by taking a spare mapping (one whose pages were
//! dropped, or replaced by a new `mmap(MAP_FIXED)`, or moved in by `mremap`: the same
//! address with other pages). It is given back by `free`, `munmap`,
//! `madvise(MADV_DONTNEED)`, `mremap` elsewhere, a new `mmap(MAP_FIXED)` over it, or
//! kept as it is for the next round.

use std::collections::{BTreeMap, VecDeque};

/// The page size the test assumes (checked when the churn starts).
pub const PS: usize = 4096;
/// The largest block.
pub const MAX_LEN: usize = 4 << 20;
/// Spare mappings kept at most (the oldest is unmapped past this).
const SPARES: usize = 4;
/// Unmapped ranges remembered as places for new mappings.
const FREED: usize = 16;

/// A seeded xorshift generator: the same rounds on every run.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
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

/// Memory a round uses.
#[derive(Clone, Copy, Debug)]
pub enum Block {
    /// From C `malloc`.
    Heap {
        /// Its start.
        addr: usize,
        /// Its length.
        len: usize,
    },
    /// An anonymous private mapping of whole pages that the churn made.
    Mapped {
        /// Its start.
        addr: usize,
        /// Its length, whole pages.
        len: usize,
    },
}

impl Block {
    /// Its start.
    pub fn addr(&self) -> usize {
        match *self {
            Block::Heap { addr, .. } | Block::Mapped { addr, .. } => addr,
        }
    }

    /// Its length.
    pub fn len(&self) -> usize {
        match *self {
            Block::Heap { len, .. } | Block::Mapped { len, .. } => len,
        }
    }
}

/// The memory of the rounds, taken and given back in random ways.
pub struct Churn {
    rng: Rng,
    /// Mappings no round uses now, newest last; taken again from the newest, so that an
    /// address comes back soon with other pages under it.
    spare: VecDeque<(usize, usize)>,
    /// Ranges just unmapped, newest last: where new mappings are placed.
    freed: VecDeque<(usize, usize)>,
    /// The block the last round kept for the next.
    kept: Option<Block>,
    /// How often each way of taking and giving back was used.
    counts: BTreeMap<&'static str, u64>,
}

fn os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A new anonymous private mapping of `len` bytes with `prot`: anywhere, or exactly at
/// `at` when nothing is mapped there (`None` when something is).
fn map(at: Option<usize>, len: usize, prot: i32) -> Option<usize> {
    let (addr, fixed) = match at {
        Some(a) => (a as *mut libc::c_void, libc::MAP_FIXED_NOREPLACE),
        None => (std::ptr::null_mut(), 0),
    };
    // SAFETY: a fresh anonymous mapping that replaces nothing (MAP_FIXED_NOREPLACE
    // refuses a range in use).
    let p = unsafe {
        libc::mmap(
            addr,
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        let e = os_error();
        assert!(
            at.is_some() && e.raw_os_error() == Some(libc::EEXIST),
            "mmap of {len} bytes at {at:x?}: {e}"
        );
        return None;
    }
    // Kernels before 4.17 take MAP_FIXED_NOREPLACE as a hint.
    if at.is_some_and(|a| a != p as usize) {
        unmap(p as usize, len);
        return None;
    }
    Some(p as usize)
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: only ranges this churn mapped and no round uses any more.
    let rc = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    assert_eq!(rc, 0, "munmap: {}", os_error());
}

/// Move the pages of `[from, from + len)` to `to`, over the placeholder mapping there
/// (which the churn made for it); false when the kernel refuses the move with EFAULT
/// (the source spans a watched and an unwatched part: see `docs/memory-monitor.md`).
fn move_pages(from: usize, len: usize, to: usize) -> bool {
    // SAFETY: moves the churn's own mapping onto its own placeholder mapping.
    let p = unsafe {
        libc::mremap(
            from as *mut libc::c_void,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        )
    };
    if p == libc::MAP_FAILED {
        let e = os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "mremap: {e}");
        return false;
    }
    assert_eq!(p as usize, to);
    true
}

impl Churn {
    /// A churn whose choices follow `seed`.
    pub fn new(seed: u64) -> Churn {
        // SAFETY: sysconf reads a constant of the system.
        let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        assert_eq!(ps, PS as libc::c_long, "the churn works in 4 KiB pages");
        Churn {
            rng: Rng::new(seed),
            spare: VecDeque::new(),
            freed: VecDeque::new(),
            kept: None,
            counts: BTreeMap::new(),
        }
    }

    fn count(&mut self, way: &'static str) {
        *self.counts.entry(way).or_default() += 1;
    }

    /// Memory for the next round.
    pub fn take(&mut self) -> Block {
        if let Some(b) = self.kept.take() {
            self.count("take: kept from the last round");
            return b;
        }
        match self.rng.below(8) {
            0..=2 => {
                let len = self.rng.size(MAX_LEN);
                // SAFETY: a C allocation the churn frees itself.
                let addr = unsafe { libc::malloc(len) } as usize;
                assert_ne!(addr, 0, "malloc({len})");
                self.count("take: malloc");
                return Block::Heap { addr, len };
            }
            5 => {
                if let Some((at, len)) = self.freed.pop_back() {
                    if let Some(addr) = map(Some(at), len, libc::PROT_READ | libc::PROT_WRITE) {
                        self.forget_freed(addr, len);
                        self.count("take: mmap at an address just unmapped");
                        return Block::Mapped { addr, len };
                    }
                }
            }
            6 => {
                if let Some((addr, len)) = self.spare.pop_back() {
                    self.count("take: a spare mapping");
                    return Block::Mapped { addr, len };
                }
            }
            7 => {
                if let (Some(&(from, len)), Some(&(at, _))) = (self.spare.back(), self.freed.back())
                {
                    self.freed.pop_back();
                    if map(Some(at), len, libc::PROT_NONE).is_some() {
                        if move_pages(from, len, at) {
                            self.spare.pop_back();
                            self.forget_freed(at, len);
                            self.freed.push_back((from, len));
                            self.count("take: mremap of a spare to an address just unmapped");
                            return Block::Mapped { addr: at, len };
                        }
                        unmap(at, len);
                        self.count("mremap refused (EFAULT)");
                    }
                }
            }
            _ => {}
        }
        let len = self.rng.size(MAX_LEN / PS) * PS;
        let addr = map(None, len, libc::PROT_READ | libc::PROT_WRITE).expect("mmap anywhere");
        self.count("take: mmap");
        Block::Mapped { addr, len }
    }

    /// Give `block` back, its round being over.
    pub fn give_back(&mut self, block: Block) {
        let keep = self.rng.below(8) == 0;
        match block {
            _ if keep => {
                self.count("give back: keep for the next round");
                self.kept = Some(block);
            }
            Block::Heap { addr, .. } => {
                // SAFETY: the churn's own C allocation, which no round uses any more.
                unsafe { libc::free(addr as *mut libc::c_void) };
                self.count("give back: free");
            }
            Block::Mapped { addr, len } => match self.rng.below(4) {
                0 => {
                    unmap(addr, len);
                    self.unmapped(addr, len);
                    self.count("give back: munmap");
                }
                1 => {
                    // SAFETY: drops the pages of the churn's own mapping, which no
                    // round uses any more.
                    let rc = unsafe {
                        libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED)
                    };
                    assert_eq!(rc, 0, "madvise: {}", os_error());
                    self.spare(addr, len);
                    self.count("give back: madvise(MADV_DONTNEED)");
                }
                2 => {
                    let to = map(None, len, libc::PROT_NONE).expect("mmap anywhere");
                    if move_pages(addr, len, to) {
                        self.unmapped(addr, len);
                        self.spare(to, len);
                        self.count("give back: mremap elsewhere");
                    } else {
                        unmap(to, len);
                        unmap(addr, len);
                        self.unmapped(addr, len);
                        self.count("mremap refused (EFAULT)");
                    }
                }
                _ => {
                    // SAFETY: new memory over the churn's own mapping, which no round
                    // uses any more.
                    let p = unsafe {
                        libc::mmap(
                            addr as *mut libc::c_void,
                            len,
                            libc::PROT_READ | libc::PROT_WRITE,
                            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                            -1,
                            0,
                        )
                    };
                    assert_eq!(p as usize, addr, "mmap(MAP_FIXED): {}", os_error());
                    self.spare(addr, len);
                    self.count("give back: mmap(MAP_FIXED) over it");
                }
            },
        }
    }

    fn spare(&mut self, addr: usize, len: usize) {
        self.spare.push_back((addr, len));
        while self.spare.len() > SPARES {
            let (a, l) = self.spare.pop_front().expect("more than SPARES");
            unmap(a, l);
            self.unmapped(a, l);
        }
    }

    fn unmapped(&mut self, addr: usize, len: usize) {
        self.freed.push_back((addr, len));
        if self.freed.len() > FREED {
            self.freed.pop_front();
        }
    }

    /// Forget remembered free ranges that overlap `[addr, addr + len)`, now in use.
    fn forget_freed(&mut self, addr: usize, len: usize) {
        self.freed
            .retain(|&(a, l)| a + l <= addr || addr + len <= a);
    }

    /// How often each way was used, one `way: count` a line.
    pub fn counts(&self) -> String {
        self.counts
            .iter()
            .map(|(way, n)| format!("  {way}: {n}\n"))
            .collect()
    }

    /// Give back everything the churn still holds.
    pub fn finish(mut self) {
        match self.kept.take() {
            // SAFETY: the churn's own C allocation, no longer used.
            Some(Block::Heap { addr, .. }) => unsafe { libc::free(addr as *mut libc::c_void) },
            Some(Block::Mapped { addr, len }) => unmap(addr, len),
            None => {}
        }
        for (a, l) in std::mem::take(&mut self.spare) {
            unmap(a, l);
        }
    }
}
