//! Real memory for the stale-cache tests: mappings (`rbtl_testkit::mem`), the physical frames
//! under a range (from /proc/self/pagemap), and a registrar that pins the pages the way
//! a device does and records their frames, so that a cache hit on memory that was
//! replaced shows up, and only that.

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use rbtl_rcache::{Access, Options, Rcache, Registrar, RegistrarError, Registration};

use crate::pin::Pins;

pub const PS: usize = 4096;
pub const RW: Access = Access::LOCAL_WRITE;

/// Unmaps what [`map`] (or another mapping call of the test) mapped.
pub fn unmap(addr: usize, len: usize) {
    // SAFETY: every range these tests unmap is a mapping of their own that they keep
    // no reference into.
    unsafe { rbtl_testkit::mem::unmap(addr, len) };
}

/// `madvise(addr, len, advice)`, asserted to succeed.
pub fn advise(addr: usize, len: usize, advice: libc::c_int) {
    // SAFETY: as in `unmap`; the tests give up the contents they advise away.
    unsafe { rbtl_testkit::mem::advise(addr, len, advice) };
}

const PROT_RW: i32 = libc::PROT_READ | libc::PROT_WRITE;

/// Maps `len` bytes at `addr`, which the caller just unmapped; None if another thread
/// of this process took the address meanwhile (a thread's signal stack, a malloc arena).
pub fn map_again(addr: usize, len: usize) -> Option<usize> {
    rbtl_testkit::mem::map(Some(addr), len, PROT_RW, -1)
}

/// Maps `len` bytes of private anonymous memory, at `hint` exactly if given.
pub fn map(hint: Option<usize>, len: usize) -> usize {
    rbtl_testkit::mem::map(hint, len, PROT_RW, -1).expect("nothing mapped at the hint")
}

/// The VmFlags of each mapping of this process that overlaps `[addr, addr+len)`, from
/// /proc/self/smaps.
fn vm_flags_over(addr: usize, len: usize) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut inside = false;
    let mut found = Vec::new();
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo < addr + len && addr < hi;
                    continue;
                }
            }
        }
        if inside {
            if let Some(flags) = line.strip_prefix("VmFlags:") {
                found.push(flags.to_string());
            }
        }
    }
    found
}

/// Whether the mapping containing `addr` has `flag` among its VmFlags (`dc`: not copied
/// on fork).
pub fn vm_flag(addr: usize, flag: &str) -> bool {
    vm_flags_over(addr, 1)
        .iter()
        .any(|flags| flags.split_whitespace().any(|f| f == flag))
}

/// Whether the kernel has any page of `[addr, addr+len)` registered with a userfaultfd
/// in write-protect mode (VmFlags `uw`), which is how the monitor watches memory. The
/// kernel's record, not the monitor's: the monitor's counts are process-wide, and
/// another test's memory unmapped at the same address stays counted until an event
/// is applied.
pub fn kernel_watches(addr: usize, len: usize) -> bool {
    vm_flags_over(addr, len)
        .iter()
        .any(|flags| flags.split_whitespace().any(|f| f == "uw"))
}

/// Fills `[addr, addr+len)` with `byte`.
pub fn fill(addr: usize, len: usize, byte: u8) {
    // SAFETY: the test owns the writable range.
    unsafe { std::ptr::write_bytes(addr as *mut u8, byte, len) };
}

/// Faults `[addr, addr+len)` in writable without changing its contents.
fn populate(addr: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: MADV_POPULATE_WRITE only faults pages in; it writes no data.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The page frame numbers under `[addr, addr+len)` (page-aligned), 0 for pages not
/// present; all 0 for a process that may not see frame numbers (not root).
pub fn frames(addr: usize, len: usize) -> Vec<u64> {
    let mut buf = vec![0u8; len / PS * 8];
    // An ordinary user (or a process that dropped privileges) may not read it at all.
    let Ok(pagemap) = std::fs::File::open("/proc/self/pagemap") else {
        return vec![0; len / PS];
    };
    pagemap
        .read_exact_at(&mut buf, (addr / PS * 8) as u64)
        .expect("read /proc/self/pagemap");
    buf.chunks_exact(8)
        .map(|c| {
            let v = u64::from_le_bytes(c.try_into().unwrap());
            if v >> 63 == 1 {
                v & ((1 << 55) - 1)
            } else {
                0
            }
        })
        .collect()
}

/// Whether this process sees frame numbers (root does).
pub fn frames_visible() -> bool {
    let a = map(None, PS);
    fill(a, PS, 1);
    let seen = frames(a, PS)[0] != 0;
    unmap(a, PS);
    seen
}

/// What a registration holds: the frames it was made over, and its pin if it has one.
#[derive(Debug)]
pub struct Pinned {
    pub frames: Vec<u64>,
    slot: Option<u32>,
}

/// Registers by faulting the range in writable, pinning it as a device does (when
/// frames are visible, see [`Pins`]) and recording its frames. It reports that it pins
/// pages whether or not it holds a pin: its handle names the frames that were there,
/// as a device's does, so its cache follows the memory monitor.
pub struct FrameRegistrar {
    /// None: records the frames only; the kernel may then move pages under memory
    /// that never left (copy-on-write after a fork, migration).
    pins: Option<Pins>,
    /// What `keep_from_children` reports: whether the cache keeps the pages out of
    /// fork children.
    keep_from_children: bool,
}

impl FrameRegistrar {
    /// The registrar of the staleness judges: holds a device's pin on every
    /// registration, so that a hit whose frames changed is a stale hit and nothing
    /// else. It asks for no `MADV_DONTFORK`: the kernel already copies pinned private
    /// pages for a fork child, and the fork tests of this process must not lose C
    /// heap pages in their children (the monitor's own data may share them).
    pub fn pinning() -> FrameRegistrar {
        let pins = frames_visible().then(|| {
            Pins::new().unwrap_or_else(|e| {
                panic!(
                    "these tests pin pages as a device does, through io_uring fixed \
                     buffers (kernel.io_uring_disabled must be 0 for root): {e}"
                )
            })
        });
        FrameRegistrar {
            pins,
            keep_from_children: false,
        }
    }

    /// Records the frames and pins nothing; `keep_from_children` is what it reports
    /// as `Registrar::keep_from_children` (the fork tests show what `MADV_DONTFORK`
    /// alone does).
    pub fn recording(keep_from_children: bool) -> FrameRegistrar {
        FrameRegistrar {
            pins: None,
            keep_from_children,
        }
    }
}

impl Registrar for FrameRegistrar {
    type Handle = Pinned;

    fn register(&self, base: usize, len: usize, _access: Access) -> Result<Pinned, RegistrarError> {
        populate(base, len).map_err(|e| RegistrarError::Failed(format!("populate: {e}")))?;
        // Pin before reading the frames: a long-term pin moves pages out of movable
        // memory (ZONE_MOVABLE, CMA) before it holds them.
        let slot = match &self.pins {
            None => None,
            Some(pins) => Some(pins.pin(base, len).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOMEM | libc::ENOSPC) => {
                    RegistrarError::OutOfResources(format!("pin: {e}"))
                }
                _ => RegistrarError::Failed(format!("pin: {e}")),
            })?),
        };
        Ok(Pinned {
            frames: frames(base, len),
            slot,
        })
    }

    fn deregister(&self, handle: Pinned) {
        if let (Some(pins), Some(slot)) = (&self.pins, handle.slot) {
            pins.unpin(slot);
        }
    }

    fn pins_pages(&self) -> bool {
        true
    }

    fn keep_from_children(&self) -> bool {
        self.keep_from_children
    }
}

/// A monitored cache that keeps idle registrations, and counts the hits whose pages
/// are no longer the ones registered.
pub struct Checker {
    pub cache: Arc<Rcache<FrameRegistrar>>,
    pub frames_visible: bool,
    pub hits: u64,
    pub stale: u64,
    /// What each stale hit was: the registration, the pages on other frames, the
    /// monitor's event counts then.
    pub stale_hits: Vec<String>,
}

impl Checker {
    pub fn new() -> Checker {
        Self::with_registrar(FrameRegistrar::pinning())
    }

    pub fn with_registrar(registrar: FrameRegistrar) -> Checker {
        let cache = Rcache::new(
            registrar,
            Options {
                leave_pinned: true,
                ..Options::default()
            },
        );
        assert!(
            cache.is_monitored(),
            "these tests need the memory monitor: {}",
            rbtl_rcache::monitor::status()
        );
        let frames_visible = frames_visible();
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        // The roles that become an ordinary user are blind by design; elsewhere a
        // blind judge passes what it cannot see.
        if !frames_visible && uid != crate::roles::NOBODY {
            assert_ne!(
                uid, 0,
                "root reads no frame numbers here: the judge would be blind"
            );
            rbtl_testkit::cannot_run(
                "the frame judge of the stale-registration tests",
                "frame numbers need root: only the cache's own view is checked",
            );
        }
        Checker {
            cache,
            frames_visible,
            hits: 0,
            stale: 0,
            stale_hits: Vec::new(),
        }
    }

    /// Registers `[addr, addr+len)`; on a hit, checks the frames under the registration
    /// are still those it was made over (a stale hit counts in `stale`).
    pub fn lookup(&mut self, addr: usize, len: usize) -> Registration<FrameRegistrar> {
        let hits = self.cache.stats().hits;
        let r = self.cache.register(addr, len, RW).expect("register");
        if self.cache.stats().hits > hits {
            self.hits += 1;
            let was = &r.handle().frames;
            let now = match populate(r.base(), r.len()) {
                Ok(()) if self.frames_visible => frames(r.base(), r.len()),
                Ok(()) => was.clone(),
                // Not mapped any more (or not writable): stale whatever the frames say.
                Err(_) => vec![u64::MAX; was.len()],
            };
            let moved: Vec<usize> = (0..now.len()).filter(|&i| now[i] != was[i]).collect();
            if let Some(&first) = moved.first() {
                self.stale += 1;
                self.stale_hits.push(format!(
                    "lookup {addr:#x}+{len} hit registration {} over {:#x}+{:#x}, {}: \
                     {} of {} pages on other frames (page {first}: {:#x} then, {:#x} now); \
                     events so far {:?}",
                    r.id(),
                    r.base(),
                    r.len(),
                    if r.handle().slot.is_some() {
                        "pinned"
                    } else {
                        "not pinned"
                    },
                    moved.len(),
                    now.len(),
                    was[first],
                    now[first],
                    rbtl_rcache::monitor::event_counts()
                ));
            }
        }
        r
    }

    /// The stale hits so far, for an assertion's message.
    pub fn stale_report(&self) -> String {
        format!(
            "{} stale hits of {}:\n{}",
            self.stale,
            self.hits,
            self.stale_hits.join("\n")
        )
    }
}
