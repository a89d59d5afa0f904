//! 100,000 random rounds of allocating (C malloc, mmap), registering, releasing,
//! freeing (free, munmap, madvise) and remapping (mremap, a new mapping at the same
//! address) over one cache: not one stale hit.
//!
//! Two judges: the frames under every hit are those registered (when the process may
//! read frame numbers), and, for memory the test maps itself, no hit returns a
//! registration made before the test last changed any of its pages.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::memory::{advise, fill, map, map_again, unmap, Checker, PS};

const ROUNDS: usize = 100_000;
const SLOTS: usize = 24;
/// Far more than the rounds need; only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(600);

use rbtl_testkit::rng::Xorshift as Rng;

enum Block {
    Empty,
    Malloc { addr: usize, len: usize },
    Mapped { addr: usize, pages: usize },
}

/// When the test last changed each page it maps itself (a counter, not a time).
#[derive(Default)]
struct Changes {
    now: u64,
    page: HashMap<usize, u64>,
    /// Registration id -> the counter when it was first handed out.
    made: HashMap<u64, u64>,
}

impl Changes {
    fn changed(&mut self, addr: usize, len: usize) {
        self.now += 1;
        for p in (addr..addr + len).step_by(PS) {
            self.page.insert(p, self.now);
        }
    }
    /// Whether registration `id` over `[base, base+len)` predates a change of its pages.
    fn stale(&mut self, id: u64, base: usize, len: usize) -> bool {
        let made = *self.made.entry(id).or_insert(self.now);
        (base..base + len)
            .step_by(PS)
            .any(|p| self.page.get(&p).is_some_and(|&c| c > made))
    }
}

#[test]
fn hundred_thousand_random_rounds_without_a_stale_hit() {
    let mut c = Checker::new();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut blocks: Vec<Block> = (0..SLOTS).map(|_| Block::Empty).collect();
    let mut changes = Changes::default();
    let mut held = Vec::new();
    let mut mapped_stale = 0u64;
    let started = Instant::now();
    for round in 0..ROUNDS {
        assert!(
            started.elapsed() < DEADLINE,
            "only {round} rounds in {DEADLINE:?}: something hangs"
        );
        let slot = rng.below(SLOTS);
        match (&blocks[slot], rng.below(10)) {
            (Block::Empty, 0..=4) => {
                let max = if rng.below(4) == 0 { 1 << 20 } else { 16 << 10 };
                let len = 1 + rng.below(max);
                // SAFETY: a C allocation the test frees itself.
                let addr = unsafe { libc::malloc(len) } as usize;
                assert_ne!(addr, 0);
                fill(addr, len, round as u8);
                blocks[slot] = Block::Malloc { addr, len };
            }
            (Block::Empty, _) => {
                let pages = 1 + rng.below(16);
                let addr = map(None, pages * PS);
                changes.changed(addr, pages * PS);
                blocks[slot] = Block::Mapped { addr, pages };
            }
            (b, 0..=5) => {
                let (addr, len, mapped) = match *b {
                    Block::Malloc { addr, len } => (addr, len, false),
                    Block::Mapped { addr, pages } => (addr, pages * PS, true),
                    Block::Empty => unreachable!("empty slots are matched above"),
                };
                let off = rng.below(len);
                let n = 1 + rng.below(len - off);
                let r = c.lookup(addr + off, n);
                if changes.stale(r.id(), r.base(), r.len()) && mapped {
                    mapped_stale += 1;
                }
                if rng.below(8) == 0 && held.len() < 8 {
                    held.push(r);
                }
            }
            (Block::Malloc { addr, .. }, _) => {
                // SAFETY: frees the test's own C allocation.
                unsafe { libc::free(*addr as *mut libc::c_void) };
                blocks[slot] = Block::Empty;
            }
            (&Block::Mapped { addr, pages }, op) => {
                let len = pages * PS;
                match op {
                    6 => {
                        unmap(addr, len);
                        blocks[slot] = Block::Empty;
                    }
                    7 => {
                        let p = rng.below(pages);
                        advise(addr + p * PS, PS, libc::MADV_DONTNEED);
                        changes.changed(addr + p * PS, PS);
                    }
                    8 => {
                        unmap(addr, len);
                        changes.changed(addr, len);
                        if map_again(addr, len).is_none() {
                            let p = map(None, len);
                            changes.changed(p, len);
                            blocks[slot] = Block::Mapped { addr: p, pages };
                        }
                    }
                    _ => {
                        let new_pages = 1 + rng.below(16);
                        // SAFETY: resizes the test's own mapping, moving it if needed.
                        let p = unsafe {
                            libc::mremap(
                                addr as *mut libc::c_void,
                                len,
                                new_pages * PS,
                                libc::MREMAP_MAYMOVE,
                            )
                        } as usize;
                        // The monitor watches whole mappings: it never splits one,
                        // so an mremap of a block never fails on its account.
                        assert_ne!(
                            p,
                            libc::MAP_FAILED as usize,
                            "mremap: {}",
                            std::io::Error::last_os_error()
                        );
                        if p != addr {
                            // Moved: the old range is gone, the new one holds the old
                            // pages, which were registered (if ever) at the old address.
                            changes.changed(addr, len);
                            changes.changed(p, new_pages * PS);
                        } else if new_pages < pages {
                            changes.changed(addr + new_pages * PS, (pages - new_pages) * PS);
                        }
                        blocks[slot] = Block::Mapped {
                            addr: p,
                            pages: new_pages,
                        };
                    }
                }
            }
        }
        if rng.below(16) == 0 {
            held.clear();
        }
    }
    held.clear();
    for b in blocks {
        match b {
            Block::Empty => {}
            // SAFETY: frees the test's own C allocation.
            Block::Malloc { addr, .. } => unsafe { libc::free(addr as *mut libc::c_void) },
            Block::Mapped { addr, pages } => unmap(addr, pages * PS),
        }
    }
    let s = c.cache.stats();
    eprintln!(
        "stress: {ROUNDS} rounds in {:?}: {} hits, {} misses, {} invalidations, \
         events {:?}",
        started.elapsed(),
        s.hits,
        s.misses,
        s.invalidations,
        rbtl_rcache::monitor::event_counts()
    );
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    assert_eq!(mapped_stale, 0, "{mapped_stale} hits predating a change");
    assert!(
        s.hits > 1000 && s.invalidations > 1000,
        "the rounds exercised too little: {s:?}"
    );
}
