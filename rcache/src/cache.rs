//! The registration cache handle: creation, lookups (a hit under the lock without
//! allocating; a miss registers), invalidation, flushing and counters.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::core::{Core, Locked};
use crate::index::Lookup;
use crate::registration::Registration;
#[cfg(doc)]
use crate::RegistrarError;
use crate::{auto, page_size, Access, Error, Options, Registrar, Stats};

/// The registration cache (Open MPI `mca_rcache_grdma_module_t`, UCX `ucs_rcache_t`).
pub struct Rcache<R: Registrar> {
    /// From `Box::leak`; closed (and freed, or left to its last registration) when
    /// the cache is dropped.
    core: NonNull<Core<R>>,
}

// SAFETY: the core is shared between the cache and its registrations like the
// contents of an `Arc`: its registrar is `Send + Sync`, its state (whose page map
// points into its own entries) sits behind the cache lock, and it is freed exactly
// once (`Core::close`).
unsafe impl<R: Registrar> Send for Rcache<R> {}
// SAFETY: as above.
unsafe impl<R: Registrar> Sync for Rcache<R> {}

impl<R: Registrar> fmt::Debug for Rcache<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rcache")
            .field("options", &self.options())
            .field("monitored", &self.is_monitored())
            .field("stats", &self.stats())
            .finish()
    }
}

impl<R: Registrar> Rcache<R> {
    /// Creates a cache that registers through `registrar`.
    ///
    /// When the registrar pins pages ([`Registrar::pins_pages`]) and
    /// [`Options::monitor`] asks for it, the cache follows the process's memory
    /// monitor (started on first use, see [`monitor`](crate::monitor)) and keeps idle
    /// only the registrations it watches: none when no monitor runs. A registrar that
    /// pins nothing gets no monitor whatever `options.monitor` says: its registrations
    /// cannot reach pages that left, so its cache watches nothing, asks the kernel
    /// nothing before a lookup, and keeps idle registrations as
    /// [`Options::leave_pinned`] alone says.
    pub fn new(registrar: R, options: Options) -> Arc<Self> {
        let core = Box::new(Core::new(registrar, options));
        let cache = Arc::new(Rcache {
            core: NonNull::from(Box::leak(core)),
        });
        if let Some(m) = cache.core().monitor() {
            let weak: Weak<dyn auto::Watched> = Arc::downgrade(&cache) as Weak<dyn auto::Watched>;
            m.add_cache(weak);
        }
        cache
    }

    fn core(&self) -> &Core<R> {
        // SAFETY: the core is closed only when this cache is dropped.
        unsafe { self.core.as_ref() }
    }

    /// Whether the memory monitor keeps this cache's idle registrations safe to reuse:
    /// false when the registrar pins no pages (no monitor is needed), when the cache
    /// did not ask for the monitor, or when none runs.
    pub fn is_monitored(&self) -> bool {
        self.core().is_monitored()
    }

    /// Returns a registration covering `[base, base+len)` with at least
    /// `access` (Open MPI `mca_rcache_base_module_register`, UCX
    /// `ucs_rcache_get`).
    ///
    /// The range is widened to whole pages. A valid cached registration that
    /// covers it with sufficient access is reused (a hit). If one covers it
    /// but lacks access, a replacement over that registration's range is made
    /// with the union of both accesses and the old one becomes unreachable
    /// (deregistered once its users let go). Otherwise a new registration is
    /// made, first evicting idle registrations as the limits require, and evicting
    /// one more and retrying whenever the registrar reports
    /// [`RegistrarError::OutOfResources`]. If the replacement in an access upgrade
    /// cannot be registered, the old registration stays unreachable all the same.
    pub fn register(
        &self,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<Registration<R>, Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let ps = page_size();
        let overflow = || Error::Overflow { base, len };
        let end = base.checked_add(len).ok_or_else(overflow)?;
        let pb = base & !(ps - 1);
        let pe = end.checked_add(ps - 1).ok_or_else(overflow)? & !(ps - 1);

        let core = self.core();
        core.sync_monitor();
        let mut st = core.lock();
        let lookup = st.find(pb, pe, access);
        let Lookup::Hit(entry) = lookup else {
            return self.register_missed(st, lookup, pb, pe, access);
        };
        st.stats.hits += 1;
        // SAFETY: the entry of an indexed slot, and the lock is held (`Lookup::Hit`).
        let e = unsafe { entry.as_ref() };
        e.referenced.store(true, Ordering::Relaxed);
        e.users.add();
        Ok(Registration {
            core: self.core,
            entry,
        })
    }

    /// A miss or an access upgrade: registers anew (out of line, so that a hit stays
    /// short).
    #[inline(never)]
    fn register_missed(
        &self,
        mut st: Locked<'_, R::Handle>,
        lookup: Lookup<R::Handle>,
        pb: usize,
        pe: usize,
        access: Access,
    ) -> Result<Registration<R>, Error> {
        let core = self.core();
        st.stats.misses += 1;
        let (rb, rl, racc) = match lookup {
            Lookup::Upgrade(i) => {
                let (ob, ol, oa) = {
                    let e = st.entry(i);
                    (e.base, e.len, e.access)
                };
                tracing::debug!(base = ob, len = ol, old = ?oa, add = ?access, "rcache: access upgrade");
                if st.unindex(i) {
                    core.retire(&mut st, i);
                }
                (ob, ol, oa | access)
            }
            Lookup::Miss | Lookup::Hit(_) => (pb, pe - pb, access),
        };
        let i = core.register_new(&mut st, rb, rl, racc)?;
        let entry = NonNull::from(st.entry(i));
        Ok(Registration {
            core: self.core,
            entry,
        })
    }

    /// Makes every valid registration overlapping `[base, base+len)` (by at
    /// least one byte) unreachable at once; idle ones are deregistered now,
    /// in-use ones when their last user releases them. Returns how many were
    /// invalidated (Open MPI `mca_rcache_base_module_invalidate_range`, UCX
    /// `ucs_rcache_invalidate_range`/unmapped-region handling).
    pub fn invalidate(&self, base: usize, len: usize) -> usize {
        self.core().invalidate(base, len)
    }

    /// Deregisters every idle (cached, unused) registration
    /// (Open MPI `mca_rcache_grdma_flush`-like, UCX `ucs_rcache_purge` for idle regions).
    pub fn flush_idle(&self) {
        self.core().flush_idle()
    }

    /// Snapshot of the counters (after applying the memory monitor's pending events).
    /// Counting the idle registrations visits every registration kept for reuse.
    pub fn stats(&self) -> Stats {
        self.core().stats()
    }

    /// The options the cache was created with.
    pub fn options(&self) -> &Options {
        &self.core().options
    }

    /// The registrar the cache registers through.
    pub fn registrar(&self) -> &R {
        &self.core().registrar
    }
}

impl<R: Registrar> Drop for Rcache<R> {
    /// Deregisters every idle registration now, and each one still in use when its
    /// last reference goes.
    fn drop(&mut self) {
        // SAFETY: the core came from `Box::leak` in `new` and is closed only here;
        // with the last `Arc` of the cache gone, no lookup can follow.
        unsafe { Core::close(self.core) };
    }
}

impl<R: Registrar> auto::Watched for Rcache<R> {
    fn invalidate_range(&self, base: usize, len: usize) -> usize {
        self.invalidate(base, len)
    }
}
