//! Memory that comes and goes in random ways, for the registration stress
//! (`node/stress.rs`). Memory is taken by C `malloc` of a byte to the largest block
//! (4 MiB unless the stress says less), by an anonymous mapping of 1 page to the
//! largest block, by a new mapping at an address just unmapped, by moving a spare
//! mapping there with `mremap`, or by taking a spare mapping (one whose pages were
//! dropped, or replaced by a new `mmap(MAP_FIXED)`, or moved in by `mremap`: the same
//! address with other pages). It is given back by `free`, `munmap`,
//! `madvise(MADV_DONTNEED)`, `mremap` elsewhere, a new `mmap(MAP_FIXED)` over it, or
//! kept as it is for the next batch taken.
//!
//! The stress takes blocks a batch at a time, and gives a batch's blocks all back
//! before it takes the next batch, so the places the churn remembers (spare mappings,
//! ranges just unmapped) scale with the batch: what one batch gives back, the next
//! batch taken takes again.
//!
//! The churn counts the blocks that overlap its mappings whose pages left since the
//! batch before was taken (unmapped, dropped, moved away or replaced): blocks a stale
//! cached registration could cover (a lower bound: C `free` may unmap too, unseen
//! here).

use rbtl_testkit::mem;
use std::collections::{BTreeMap, VecDeque};

/// The page size the test assumes (checked when the churn starts).
pub const PS: usize = 4096;
/// The largest block unless the stress says less.
pub const MAX_LEN: usize = 4 << 20;
/// Spare mappings kept at most, and at least one per block of a batch (the oldest is
/// unmapped past this).
const SPARES: usize = 4;
/// Unmapped ranges remembered as places for new mappings, and at least four per block
/// of a batch.
const FREED: usize = 16;

/// The count of blocks taken over memory that left since the batch before was taken.
const OVER_MEMORY_THAT_LEFT: &str = "taken over memory that left since the last batch was taken";

// A seeded generator: the same rounds on every run.
pub use rbtl_testkit::rng::Xorshift as Rng;

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
    /// The largest block, whole pages.
    max_len: usize,
    /// Spare mappings kept at most.
    spares: usize,
    /// Unmapped ranges remembered at most.
    freed_most: usize,
    /// Mappings no round uses now, newest last; taken again from the newest, so that an
    /// address comes back soon with other pages under it.
    spare: VecDeque<(usize, usize)>,
    /// Ranges just unmapped, newest last: where new mappings are placed.
    freed: VecDeque<(usize, usize)>,
    /// The blocks kept for the next batch taken.
    kept: Vec<Block>,
    /// Ranges whose pages left since this batch was taken (unmapped, dropped, moved
    /// away, replaced).
    left_now: Vec<(usize, usize)>,
    /// The same, from when the batch before was taken to when this one was: blocks
    /// taken over them are counted.
    left_before: Vec<(usize, usize)>,
    /// How often each way of taking and giving back was used.
    counts: BTreeMap<&'static str, u64>,
}

fn os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A new anonymous private mapping of `len` bytes with `prot`: anywhere, or exactly at
/// `at` when nothing is mapped there (`None` when something is).
fn map(at: Option<usize>, len: usize, prot: i32) -> Option<usize> {
    mem::map(at, len, prot, -1)
}

fn unmap(addr: usize, len: usize) {
    // SAFETY: only ranges this churn mapped and no round uses any more.
    unsafe { mem::unmap(addr, len) };
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
    /// A churn whose choices follow `seed`, of blocks up to `max_len` bytes (whole
    /// pages, at most [`MAX_LEN`]), taken `batch` at a time.
    pub fn new(seed: u64, max_len: usize, batch: usize) -> Churn {
        // SAFETY: sysconf reads a constant of the system.
        let ps = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        assert_eq!(ps, PS as libc::c_long, "the churn works in 4 KiB pages");
        assert!(
            max_len >= PS && max_len % PS == 0 && max_len <= MAX_LEN,
            "blocks of up to {max_len} bytes: whole pages, at most {MAX_LEN}"
        );
        Churn {
            rng: Rng(seed | 1),
            max_len,
            spares: SPARES.max(batch),
            freed_most: FREED.max(4 * batch),
            spare: VecDeque::new(),
            freed: VecDeque::new(),
            kept: Vec::new(),
            left_now: Vec::new(),
            left_before: Vec::new(),
            counts: BTreeMap::new(),
        }
    }

    /// A new batch is taken: what left since the last one was taken is what its blocks
    /// may cover.
    pub fn next_batch(&mut self) {
        self.left_before = std::mem::take(&mut self.left_now);
    }

    /// Count `block` if it overlaps memory whose pages left since the batch before was
    /// taken.
    fn taken(&mut self, block: Block) -> Block {
        let (a, l) = (block.addr(), block.len().max(1));
        if self
            .left_before
            .iter()
            .any(|&(b, m)| a < b + m && b < a + l)
        {
            self.count(OVER_MEMORY_THAT_LEFT);
        }
        block
    }

    fn count(&mut self, way: &'static str) {
        *self.counts.entry(way).or_default() += 1;
    }

    /// Memory for the next round.
    pub fn take(&mut self) -> Block {
        let block = self.take_any();
        self.taken(block)
    }

    fn take_any(&mut self) -> Block {
        if let Some(b) = self.kept.pop() {
            self.count("take: kept from a batch given back");
            return b;
        }
        match self.rng.below(8) {
            0..=2 => {
                let len = self.rng.size(self.max_len);
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
                            self.left_now.push((from, len));
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
        let len = self.rng.size(self.max_len / PS) * PS;
        let addr = map(None, len, libc::PROT_READ | libc::PROT_WRITE).expect("mmap anywhere");
        self.count("take: mmap");
        Block::Mapped { addr, len }
    }

    /// Give `block` back, its round being over.
    pub fn give_back(&mut self, block: Block) {
        let keep = self.rng.below(8) == 0;
        match block {
            _ if keep => {
                self.count("give back: keep for the next batch taken");
                self.kept.push(block);
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
                    self.left_now.push((addr, len));
                    self.count("give back: munmap");
                }
                1 => {
                    // SAFETY: drops the pages of the churn's own mapping, which no
                    // round uses any more.
                    unsafe { mem::advise(addr, len, libc::MADV_DONTNEED) };
                    self.left_now.push((addr, len));
                    self.spare(addr, len);
                    self.count("give back: madvise(MADV_DONTNEED)");
                }
                2 => {
                    let to = map(None, len, libc::PROT_NONE).expect("mmap anywhere");
                    self.left_now.push((addr, len));
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
                    unsafe { mem::map_over(addr, len) };
                    self.left_now.push((addr, len));
                    self.spare(addr, len);
                    self.count("give back: mmap(MAP_FIXED) over it");
                }
            },
        }
    }

    fn spare(&mut self, addr: usize, len: usize) {
        self.spare.push_back((addr, len));
        while self.spare.len() > self.spares {
            let (a, l) = self.spare.pop_front().expect("more spares than kept");
            unmap(a, l);
            self.unmapped(a, l);
            self.left_now.push((a, l));
        }
    }

    fn unmapped(&mut self, addr: usize, len: usize) {
        self.freed.push_back((addr, len));
        if self.freed.len() > self.freed_most {
            self.freed.pop_front();
        }
    }

    /// Forget remembered free ranges that overlap `[addr, addr + len)`, now in use.
    fn forget_freed(&mut self, addr: usize, len: usize) {
        self.freed
            .retain(|&(a, l)| a + l <= addr || addr + len <= a);
    }

    /// Blocks taken over memory that left since the batch before was taken.
    pub fn over_memory_that_left(&self) -> u64 {
        self.counts.get(OVER_MEMORY_THAT_LEFT).copied().unwrap_or(0)
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
        for block in std::mem::take(&mut self.kept) {
            match block {
                // SAFETY: the churn's own C allocation, no longer used.
                Block::Heap { addr, .. } => unsafe { libc::free(addr as *mut libc::c_void) },
                Block::Mapped { addr, len } => unmap(addr, len),
            }
        }
        for (a, l) in std::mem::take(&mut self.spare) {
            unmap(a, l);
        }
    }
}
