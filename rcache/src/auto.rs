//! Automatic invalidation of freed memory (opt-in).
//!
//! A cached registration becomes *stale* when the memory under it is
//! returned to the system and something else is later mapped at the same
//! address: a cache hit would then hand out keys for the old physical pages.
//! Open MPI's patcher/memory hooks and UCX's `ucm` intercept `munmap`,
//! `mremap`, `brk`, `madvise`, `shmdt` and the malloc family to catch this.
//! This module offers a narrower, safe subset:
//!
//! # What is caught
//!
//! * Frees (`dealloc`) of blocks of at least `threshold` bytes made through
//!   Rust's global allocator **when [`InvalidatingAllocator`] is installed as
//!   the program's `#[global_allocator]`**: every [`watch`]ed cache
//!   invalidates the freed range before the block is handed back to the
//!   inner allocator.
//! * `realloc` of such blocks: the old range is invalidated before the inner
//!   allocator is called (whether a block moves, shrinks in place or grows in
//!   place is only known after the inner allocator may already have released
//!   it, so every realloc of a large block invalidates it; a grow in place
//!   merely costs a re-registration).
//! * Explicit calls to [`invalidate_everywhere`], for code that `munmap`s,
//!   `mremap`s or `madvise(MADV_DONTNEED)`s memory itself.
//!
//! # What is not caught
//!
//! * C `malloc`/`free` (and `new`/`delete`) made by other libraries, or by
//!   Rust code that calls libc directly.
//! * `munmap`, `mremap`, `madvise(MADV_DONTNEED/FREE)`, `brk`/`sbrk`, `shmdt`
//!   made by anyone (including the inner allocator trimming its heap after a
//!   *small* free) unless the caller reports it via [`invalidate_everywhere`].
//! * Frees of blocks smaller than the threshold. Such a free can still let
//!   the allocator release whole pages that a registration covers (e.g. when
//!   it coalesces with freed neighbours); choose a threshold no larger than
//!   the smallest buffer you register.
//! * Frees made while the same thread is inside a cache operation or inside
//!   an invalidation (a thread-local re-entrancy flag skips them to avoid
//!   deadlock): memory freed by a [`Registrar`] while it is called, or by
//!   the cache's own bookkeeping.
//! * Memory released by other processes (e.g. shared memory they unmap).
//!
//! Caches are held weakly: a dropped cache is pruned from the list. The
//! global list is a `Mutex<Vec<Weak<..>>>`; allocating while it is locked is
//! fine (allocation never takes it), and frees made while it is locked are
//! skipped by the re-entrancy flag, so the allocator cannot deadlock on it.
//! Lock order is always list → cache.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::{Rcache, Registrar};

thread_local! {
    /// Depth of cache locks / invalidations held by this thread.
    static BUSY: Cell<u32> = const { Cell::new(0) };
}

/// Marks the current thread as inside a cache or an invalidation while alive.
pub(crate) struct BusyGuard(());

impl BusyGuard {
    #[inline]
    pub(crate) fn enter() -> Self {
        let _ = BUSY.try_with(|b| b.set(b.get() + 1));
        BusyGuard(())
    }
}

impl Drop for BusyGuard {
    #[inline]
    fn drop(&mut self) {
        let _ = BUSY.try_with(|b| b.set(b.get().saturating_sub(1)));
    }
}

#[inline]
pub(crate) fn busy() -> bool {
    BUSY.try_with(|b| b.get() > 0).unwrap_or(true)
}

/// Type-erased view of a cache for the global list.
pub(crate) trait Watched: Send + Sync {
    fn invalidate_range(&self, base: usize, len: usize) -> usize;
}

static WATCHED: Mutex<Vec<Weak<dyn Watched>>> = Mutex::new(Vec::new());
/// Number of entries in `WATCHED`, read without the lock as a fast path.
static WATCHED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Adds `cache` to the process-global list invalidated by
/// [`InvalidatingAllocator`] and [`invalidate_everywhere`] (UCX registers its
/// rcaches with `ucm` memory events in the same way). The cache is held
/// weakly; watching it twice has no further effect.
pub fn watch<R: Registrar>(cache: &Arc<Rcache<R>>) {
    let weak: Weak<dyn Watched> = Arc::downgrade(cache) as Weak<dyn Watched>;
    let _busy = BusyGuard::enter();
    let mut list = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|w| w.strong_count() > 0);
    if !list.iter().any(|w| Weak::ptr_eq(w, &weak)) {
        list.push(weak);
    }
    WATCHED_COUNT.store(list.len(), Ordering::Release);
}

/// Removes `cache` from the global list (dropping the cache does this too).
pub fn unwatch<R: Registrar>(cache: &Arc<Rcache<R>>) {
    let weak: Weak<dyn Watched> = Arc::downgrade(cache) as Weak<dyn Watched>;
    let _busy = BusyGuard::enter();
    let mut list = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    list.retain(|w| w.strong_count() > 0 && !Weak::ptr_eq(w, &weak));
    WATCHED_COUNT.store(list.len(), Ordering::Release);
}

/// Invalidates `[base, base+len)` in every watched cache; returns how many
/// registrations were invalidated in total. Call it after you `munmap`,
/// `mremap` or `madvise(MADV_DONTNEED)` memory yourself, before the range
/// can be reused.
///
/// Returns 0 without doing anything when called from inside a cache
/// operation or another invalidation on this thread (e.g. from a
/// [`Registrar`]), where locking would deadlock.
pub fn invalidate_everywhere(base: usize, len: usize) -> usize {
    if len == 0 || WATCHED_COUNT.load(Ordering::Acquire) == 0 || busy() {
        return 0;
    }
    let _busy = BusyGuard::enter();
    let mut list = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
    let mut n = 0;
    list.retain(|w| match w.upgrade() {
        Some(cache) => {
            n += cache.invalidate_range(base, len);
            true
        }
        None => false,
    });
    WATCHED_COUNT.store(list.len(), Ordering::Release);
    n
}

/// A global allocator wrapper that invalidates freed blocks of at least
/// `threshold` bytes in every [`watch`]ed cache before freeing them.
///
/// ```
/// use rbtl_rcache::{auto, Access, Options, Rcache, Registrar, RegistrarError};
///
/// #[global_allocator]
/// static ALLOC: auto::InvalidatingAllocator = auto::InvalidatingAllocator::new(std::alloc::System, 4096);
///
/// struct Nop;
/// impl Registrar for Nop {
///     type Handle = ();
///     fn register(&self, _: usize, _: usize, _: Access) -> Result<(), RegistrarError> { Ok(()) }
///     fn deregister(&self, _: ()) {}
///     fn pins_pages(&self) -> bool { false }
/// }
///
/// fn main() {
///     let cache = Rcache::new(Nop, Options::default());
///     auto::watch(&cache);
///     let buf = vec![0u8; 1 << 16];
///     let reg = cache.register(buf.as_ptr() as usize, buf.len(), Access::LOCAL_READ).unwrap();
///     drop(buf); // frees 64 KiB: the registration becomes unreachable
///     assert!(!reg.is_valid());
/// }
/// ```
///
/// See the [module documentation](self) for exactly what is and is not caught.
pub struct InvalidatingAllocator<A: GlobalAlloc = System> {
    inner: A,
    threshold: usize,
}

impl<A: GlobalAlloc> InvalidatingAllocator<A> {
    /// Wraps `inner`; frees of blocks of `threshold` bytes or more invalidate.
    pub const fn new(inner: A, threshold: usize) -> Self {
        InvalidatingAllocator { inner, threshold }
    }

    /// The size from which frees invalidate.
    pub const fn threshold(&self) -> usize {
        self.threshold
    }

    /// The wrapped allocator.
    pub const fn inner(&self) -> &A {
        &self.inner
    }
}

// SAFETY: every method forwards to `inner` with the caller's arguments
// unchanged, so `inner`'s guarantees carry over; the invalidation done
// beforehand neither touches the block nor changes the layout.
unsafe impl<A: GlobalAlloc> GlobalAlloc for InvalidatingAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= self.threshold {
            invalidate_everywhere(ptr as usize, layout.size());
        }
        // SAFETY: `ptr` was allocated by this allocator (hence by `inner`)
        // with `layout`, as the caller guarantees.
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() >= self.threshold {
            invalidate_everywhere(ptr as usize, layout.size());
        }
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract for a
        // block allocated by `inner`, which we pass on.
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}
