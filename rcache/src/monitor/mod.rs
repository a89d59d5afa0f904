//! The memory monitor: tells every registration cache of this process when memory
//! under its registrations leaves the address space, whoever makes it leave (Rust or
//! C code, the allocator, a direct system call).
//!
//! It serves the caches whose registrar pins pages (`Registrar::pins_pages`: a
//! device's registration keeps reaching the pages that were there, so a cached one of
//! memory that left must never be handed out again) and that ask for it
//! (`Options::monitor`). A cache whose registrations pin nothing (the addresses are
//! resolved at each transfer) does not follow it and pays none of its costs.
//!
//! It is built on userfaultfd's non-cooperative events (as libfabric's uffd monitor):
//! it watches private anonymous memory only (`monitor/anonymous.rs`: a file's pages,
//! shared memory's included, can go by hole punching or truncation with no event), so
//! registrations of other memory are never kept idle. Each watched registration's
//! pages are registered with one process-wide userfaultfd
//! in write-protect mode (never protecting a page, so nothing ever faults into the
//! monitor), and the kernel then reports `munmap`, `mremap`, `madvise(MADV_DONTNEED /
//! MADV_FREE / MADV_REMOVE)`, a shrinking `brk`, `shmdt` and `mmap(MAP_FIXED)` over
//! those pages as events.
//!
//! # How a lookup never sees a stale registration
//!
//! The kernel makes the thread that unmapped watched pages wait until the event is
//! *read*. A monitor thread reads events as they come, marks itself busy (an odd
//! `posted` count) before each read and idle after queueing what it read, and
//! allocates nothing in between. A cache, before each lookup, compares `posted` with
//! `applied`; if they differ it waits for the monitor to be idle and applies the
//! queued events to every monitored cache. So once `munmap` has returned, the next
//! lookup in any thread that follows it applies the invalidation first.
//!
//! That alone leaves a window: the kernel frees the range *before* it queues the
//! event, so another thread can map new memory at the same address and look it up
//! while the `munmap` has not returned and `posted` has not moved. Before comparing
//! the counts, a lookup therefore asks the kernel whether such a change is in flight
//! (one `ioctl`, see `monitor/probe.rs`) and waits for it to be read. So a lookup of
//! memory mapped after the old memory left misses, whichever thread unmapped it and
//! whether or not its `munmap` has returned. Where libc's mapping functions are
//! hooked (`monitor/hooks.rs`), a lookup asks only when a mapping was made since the
//! last time it asked: without a new mapping there is no new memory to mistake.
//!
//! The cost: a lookup of a monitored cache that follows a mapping (or every lookup,
//! without the hooks) makes that one `ioctl`; an unmap of watched pages waits for the
//! monitor thread to be scheduled and read the event (two context switches); unmaps
//! of pages no cache registration covers pay nothing. See `docs/memory-monitor.md`
//! for what the monitor cannot see.

mod anonymous;
mod hooks;
mod pages;
mod probe;
mod uffd;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, Weak};

use crossbeam_queue::ArrayQueue;

use crate::auto::Watched;
pub use hooks::set_wanted as use_mapping_hooks;
pub(crate) use pages::PageCounts;
use probe::Probe;
pub use uffd::Opened;
use uffd::{Event, Uffd, MSG_BYTES};

/// Events queued between the monitor thread and the caches; past this many
/// unapplied events every cache is invalidated whole instead.
const QUEUE: usize = 4096;

/// Why no memory monitor runs in this process.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// The kernel has no userfaultfd (`CONFIG_USERFAULTFD` unset).
    #[error(
        "the kernel has no userfaultfd (ENOSYS): build it with CONFIG_USERFAULTFD=y; \
         until then keep rcache_leave_pinned off"
    )]
    NotInKernel,
    /// Both ways to get a descriptor were refused.
    #[error(
        "userfaultfd refused: the system call gave `{syscall}`, /dev/userfaultfd gave `{device}`: \
         set vm.unprivileged_userfaultfd=1, or give this user read-write access to \
         /dev/userfaultfd, or run with CAP_SYS_PTRACE"
    )]
    Refused {
        /// The error of `userfaultfd(2)`.
        syscall: String,
        /// The error of opening `/dev/userfaultfd` or of its `USERFAULTFD_IOC_NEW`.
        device: String,
    },
    /// The kernel's userfaultfd lacks events the monitor needs.
    #[error(
        "the kernel's userfaultfd lacks {missing} (Linux 5.7 or later has them all): \
         keep rcache_leave_pinned off"
    )]
    MissingFeatures {
        /// The missing `UFFD_FEATURE_*` names.
        missing: String,
    },
    /// The API handshake failed.
    #[error("the userfaultfd API handshake failed: {0}")]
    Api(String),
    /// The monitor thread could not be started.
    #[error("the monitor thread could not start: {0}")]
    Thread(String),
    /// The monitor thread stopped on an error it could not recover from.
    #[error(
        "the monitor thread stopped on an error ({0}); every cache was emptied and \
         registrations are no longer kept idle"
    )]
    Stopped(String),
    /// This process is a fork child: the monitor belongs to its parent.
    #[error(
        "this process was forked after the monitor started in its parent: its caches \
         were emptied and keep nothing idle; a child that needs cached registrations \
         should exec or start its own transports"
    )]
    Forked,
    /// Turned off by configuration.
    #[error("turned off (rcache_monitor = none)")]
    Disabled,
}

/// Which monitor runs in this process, or why none does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    /// The userfaultfd monitor runs.
    Userfaultfd {
        /// How the descriptor was obtained.
        opened: Opened,
        /// Whether lookups ask the kernel about unmaps in flight only after a mapping
        /// (libc's mapping functions hooked), or why each lookup asks.
        mapping_hooks: Result<(), String>,
    },
    /// No monitor runs.
    None(Unavailable),
}

impl Status {
    /// Whether a monitor runs.
    pub fn is_running(&self) -> bool {
        matches!(self, Status::Userfaultfd { .. })
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Userfaultfd {
                opened,
                mapping_hooks,
            } => {
                let how = match opened {
                    Opened::SyscallUserModeOnly => "userfaultfd(2), user-mode only",
                    Opened::Syscall => "userfaultfd(2)",
                    Opened::Device => "/dev/userfaultfd",
                };
                let in_flight = match mapping_hooks {
                    Ok(()) => "unmaps in flight checked after a mapping (libc's mmap, \
                               mremap, shmat, brk hooked)"
                        .to_string(),
                    Err(why) => format!("unmaps in flight checked at each lookup: {why}"),
                };
                write!(
                    f,
                    "userfaultfd (events unmap, remove, remap; {how}; {in_flight}; \
                     watches private anonymous memory, never keeps shared memory idle; \
                     serves caches whose registrations pin pages)"
                )
            }
            Status::None(why) => write!(f, "none: {why}"),
        }
    }
}

/// Counts of the events the monitor thread has read since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// `UFFD_EVENT_UNMAP` and `UFFD_EVENT_REMOVE`: pages left the address space or
    /// lost their contents.
    pub gone: u64,
    /// `UFFD_EVENT_REMAP`: pages moved.
    pub moved: u64,
    /// Anything else (none is expected).
    pub other: u64,
    /// Times the queue was full and every cache was emptied instead.
    pub overflows: u64,
}

/// The process-wide monitor.
pub(crate) struct Monitor {
    uffd: Uffd,
    /// Asks whether an unmap is in flight (see [`Monitor::settle`]).
    probe: Probe,
    /// The mapping hooks, or why none are installed (see [`Monitor::sync`]).
    hooks: Result<hooks::Installed, String>,
    /// The count of hooked mappings read before the last check found no unmap in
    /// flight.
    probed: AtomicU64,
    queue: ArrayQueue<Event>,
    overflow: AtomicBool,
    /// Odd while the monitor thread reads and queues; +2 per round.
    posted: AtomicU64,
    /// The `posted` value up to which queued events were applied to every cache.
    applied: AtomicU64,
    forked: AtomicBool,
    stopped: OnceLock<String>,
    drain: Mutex<()>,
    caches: Mutex<Vec<Weak<dyn Watched>>>,
    watched: Mutex<PageCounts>,
    gone: AtomicU64,
    moved: AtomicU64,
    other: AtomicU64,
    overflows: AtomicU64,
}

static GLOBAL: OnceLock<Result<&'static Monitor, Unavailable>> = OnceLock::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The monitor, started on first use.
pub(crate) fn get() -> Result<&'static Monitor, &'static Unavailable> {
    GLOBAL.get_or_init(start).as_ref().map(|m| *m)
}

fn start() -> Result<&'static Monitor, Unavailable> {
    let uffd = Uffd::open()?;
    let probe = Probe::new(&uffd)?;
    let hooks = if hooks::wanted() {
        hooks::install()
    } else {
        Err("mapping hooks turned off (rcache_monitor_mmap_hooks = false)".into())
    };
    if let Err(why) = &hooks {
        tracing::debug!(%why, "rcache: every lookup asks the kernel about unmaps in flight");
    }
    let monitor: &'static Monitor = Box::leak(Box::new(Monitor {
        uffd,
        probe,
        hooks,
        probed: AtomicU64::new(u64::MAX),
        queue: ArrayQueue::new(QUEUE),
        overflow: AtomicBool::new(false),
        posted: AtomicU64::new(0),
        applied: AtomicU64::new(0),
        forked: AtomicBool::new(false),
        stopped: OnceLock::new(),
        drain: Mutex::new(()),
        caches: Mutex::new(Vec::new()),
        watched: Mutex::new(PageCounts::new()),
        gone: AtomicU64::new(0),
        moved: AtomicU64::new(0),
        other: AtomicU64::new(0),
        overflows: AtomicU64::new(0),
    }));
    std::thread::Builder::new()
        .name("rbtl-memory-monitor".into())
        .spawn(move || monitor.run())
        .map_err(|e| Unavailable::Thread(e.to_string()))?;
    // SAFETY: `forked_child` only stores to atomics and calls open/dup3/close, which
    // are async-signal-safe, as a fork child handler must be.
    let rc = unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    if rc != 0 {
        tracing::warn!(
            rc,
            "rcache: pthread_atfork failed; fork children keep a stale view"
        );
    }
    tracing::debug!(
        features = format_args!("{:#x}", monitor.uffd.features),
        "rcache: memory monitor started"
    );
    Ok(monitor)
}

extern "C" fn forked_child() {
    if let Some(Ok(m)) = GLOBAL.get() {
        m.forked.store(true, Ordering::SeqCst);
        m.overflow.store(true, Ordering::SeqCst);
        let p = m.posted.load(Ordering::SeqCst);
        m.posted.store((p | 1) + 1, Ordering::SeqCst);
        m.uffd.release_in_place();
    }
}

/// Which monitor runs in this process, or why none does; starts it on first call.
pub fn status() -> Status {
    match get() {
        Ok(m) => match m.unusable() {
            Some(why) => Status::None(why),
            None => Status::Userfaultfd {
                opened: m.uffd.opened,
                mapping_hooks: m.hooks.as_ref().map(|_| ()).map_err(Clone::clone),
            },
        },
        Err(why) => Status::None(why.clone()),
    }
}

/// The events read so far (zero when no monitor runs).
pub fn event_counts() -> EventCounts {
    match GLOBAL.get() {
        Some(Ok(m)) => EventCounts {
            gone: m.gone.load(Ordering::Relaxed),
            moved: m.moved.load(Ordering::Relaxed),
            other: m.other.load(Ordering::Relaxed),
            overflows: m.overflows.load(Ordering::Relaxed),
        },
        _ => EventCounts::default(),
    }
}

impl Monitor {
    fn unusable(&self) -> Option<Unavailable> {
        if self.forked.load(Ordering::Acquire) {
            return Some(Unavailable::Forked);
        }
        self.stopped.get().map(|e| Unavailable::Stopped(e.clone()))
    }

    /// Whether events still arrive.
    pub(crate) fn usable(&self) -> bool {
        !self.forked.load(Ordering::Acquire) && self.stopped.get().is_none()
    }

    /// The monitor thread: reads events, queues them, never allocates.
    fn run(&'static self) {
        let mut buf = [0u8; MSG_BYTES * 64];
        let err = loop {
            if self.stopped.get().is_some() {
                // Stopped from a lookup (see `settle`): the descriptor is released.
                return;
            }
            if let Err(e) = self.uffd.wait() {
                break e;
            }
            self.posted.fetch_add(1, Ordering::SeqCst);
            let mut failed = None;
            loop {
                match self.uffd.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        for chunk in buf[..n].chunks_exact(MSG_BYTES) {
                            self.queue_event(uffd::decode(chunk));
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = failed {
                self.posted.fetch_add(1, Ordering::SeqCst);
                break e;
            }
            self.posted.fetch_add(1, Ordering::SeqCst);
        };
        self.stop(err.to_string());
    }

    /// Stops for good: every cache is emptied at its next lookup and keeps nothing
    /// idle, and the descriptor is released so that no unmapping thread waits for the
    /// monitor thread (which then ends).
    fn stop(&self, why: String) {
        if self.stopped.set(why.clone()).is_err() {
            return;
        }
        self.overflow.store(true, Ordering::SeqCst);
        self.posted.fetch_add(2, Ordering::SeqCst);
        self.uffd.release_in_place();
        tracing::error!(error = %why, "rcache: memory monitor stopped; caches keep nothing idle");
    }

    fn queue_event(&self, ev: Event) {
        let counter = match ev {
            Event::Gone { .. } => &self.gone,
            Event::Moved { .. } => &self.moved,
            Event::Other { .. } => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if self.queue.push(ev).is_err() {
            self.overflows.fetch_add(1, Ordering::Relaxed);
            self.overflow.store(true, Ordering::SeqCst);
        }
    }

    /// Adds a cache to those the events are applied to.
    pub(crate) fn add_cache(&self, cache: Weak<dyn Watched>) {
        let mut list = lock(&self.caches);
        list.retain(|w| w.strong_count() > 0);
        list.push(cache);
    }

    /// Watches the page-aligned `[start, start+len)` by the whole mappings holding it
    /// (the range watched, to give back to [`unwatch`](Self::unwatch)); `None` if it
    /// cannot be watched (not private anonymous memory, registered with another
    /// userfaultfd, not mapped, or no monitor any more). Whole mappings, because a
    /// userfaultfd registration of part of one splits it in the kernel, and an
    /// `mremap` over the parts would then fail (`EFAULT`) where it succeeds unwatched.
    pub(crate) fn watch(&self, start: usize, len: usize) -> Option<(usize, usize)> {
        if !self.usable() {
            return None;
        }
        let (start, len) = anonymous::anonymous_extent(start, len)?;
        let mut counts = lock(&self.watched);
        // Register the whole range each time: pages still counted for an older,
        // invalidated registration may be new memory the kernel does not watch.
        match self.uffd.register(start, len) {
            Ok(()) => {
                counts.add(start, start + len);
                Some((start, len))
            }
            Err(e) => {
                tracing::debug!(start, len, error = %e, "rcache: range cannot be watched");
                None
            }
        }
    }

    /// Stops watching what `[start, start+len)` (a range [`watch`](Self::watch) gave)
    /// alone kept watched.
    pub(crate) fn unwatch(&self, start: usize, len: usize) {
        let mut counts = lock(&self.watched);
        let gone = counts.remove(start, start + len);
        if !self.usable() {
            return;
        }
        for (s, e) in gone {
            self.unregister_unwatched(&counts, s, e);
        }
    }

    /// Unregisters the whole mappings over `[start, end)` that no watched page lies in
    /// (never a part of one, which would split it; a mapping with watched pages stays
    /// registered whole, and its other pages only bring events that change nothing).
    fn unregister_unwatched(&self, counts: &PageCounts, start: usize, end: usize) {
        for m in anonymous::mappings(start, end - start).unwrap_or_default() {
            let (s, e) = (m.start as usize, m.end as usize);
            if m.anonymous && !counts.any(s, e) {
                // A mapping the kernel does not watch (any more) is simply not found.
                let _ = self.uffd.unregister(s, e - s);
            }
        }
    }

    /// Applies the events read so far to every cache (before a lookup), after waiting
    /// for those still in flight. With the mapping hooks, a few atomic loads when
    /// nothing happened; without, one `ioctl` more.
    ///
    /// In flight matters only where new memory was mapped over what left before its
    /// event was read (`probe.rs`), and new memory comes from a mapping, which the
    /// hooks count once it exists. A lookup that reads the count the last check read
    /// before it found nothing in flight follows no mapping made since: any unmap in
    /// flight under such a mapping had begun before that check, which waited until
    /// its event was read (and counted in `posted`, compared below).
    #[inline]
    pub(crate) fn sync(&self) {
        if self.usable() {
            match &self.hooks {
                Ok(hooks) => {
                    let mapped = hooks::mapped();
                    if mapped != self.probed.load(Ordering::SeqCst) || !hooks.intact() {
                        self.settle();
                        if hooks.intact() {
                            self.probed.store(mapped, Ordering::SeqCst);
                        }
                    }
                }
                Err(_) => self.settle(),
            }
        }
        if self.posted.load(Ordering::SeqCst) == self.applied.load(Ordering::Acquire) {
            return;
        }
        self.drain_slow();
    }

    /// Waits until no unmap, remap or remove of watched memory is in flight: the
    /// kernel frees an unmapped range before it reports it, and new memory mapped
    /// there meanwhile must not find the old registration (see `probe.rs`). Once none
    /// is in flight, every change that began before has been read, which the monitor
    /// thread marked in `posted` before reading: the sync that follows applies it.
    fn settle(&self) {
        loop {
            match self.probe.in_flight(&self.uffd) {
                Ok(false) => return,
                // The monitor thread is about to read it; the unmapping thread waits.
                Ok(true) => std::thread::yield_now(),
                Err(e) => {
                    if self.usable() {
                        self.stop(format!(
                            "asking whether an unmap is in flight failed ({e}): \
                             was the monitor's probe page unmapped?"
                        ));
                    }
                    return;
                }
            }
        }
    }

    #[cold]
    fn drain_slow(&self) {
        let _d = lock(&self.drain);
        let mut posted = self.posted.load(Ordering::Acquire);
        // The monitor thread is between a read and its end of round: it only queues.
        while posted & 1 == 1 {
            std::thread::yield_now();
            posted = self.posted.load(Ordering::Acquire);
        }
        if posted == self.applied.load(Ordering::Acquire) {
            return;
        }
        let caches: Vec<_> = {
            let mut list = lock(&self.caches);
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(|w| w.upgrade()).collect()
        };
        let everything = self.overflow.swap(false, Ordering::SeqCst);
        if everything {
            while self.queue.pop().is_some() {}
            for c in &caches {
                c.invalidate_range(0, usize::MAX);
            }
        }
        while let Some(ev) = self.queue.pop() {
            match ev {
                Event::Gone { start, end } => {
                    for c in &caches {
                        c.invalidate_range(start, end.saturating_sub(start));
                    }
                }
                Event::Moved { from, to, len } => {
                    for c in &caches {
                        c.invalidate_range(from, len);
                    }
                    // The moved pages stay registered at their new place: stop
                    // watching the mappings there that no registration covers.
                    let counts = lock(&self.watched);
                    if self.usable() {
                        self.unregister_unwatched(&counts, to, to.saturating_add(len));
                    }
                }
                Event::Other { event, address } => {
                    tracing::warn!(event, address, "rcache: unexpected userfaultfd event");
                }
            }
        }
        self.applied.store(posted, Ordering::Release);
    }

    /// Whether any page of `[start, start+len)` is watched (for tests).
    pub(crate) fn is_watched(&self, start: usize, len: usize) -> bool {
        lock(&self.watched).any(start, start + len)
    }
}

/// Applies the events read so far to every monitored cache now (each lookup does it
/// anyway); a no-op when no monitor runs or when called from inside a registrar.
pub fn apply_pending() {
    if let Some(Ok(m)) = GLOBAL.get() {
        if !crate::auto::busy() {
            m.sync();
        }
    }
}

/// Whether any page of `[start, start+len)` is watched for a cache registration
/// (false when no monitor runs).
pub fn is_watched(start: usize, len: usize) -> bool {
    match GLOBAL.get() {
        Some(Ok(m)) => m.is_watched(start, len),
        _ => false,
    }
}
