//! `register` for transports whose peers check handles against a [`KeyTable`]
//! (`self`, `sm`, `tcp`): each range goes through the registration cache, the
//! registration gets its key and an entry per range in the table, and leaves the table
//! when its handle is deregistered or dropped.

use crate::keytable::{table_bytes, Entry, KeyTable, KeyTableView};
use crate::{Attributes, MemHandle, ModuleId, RegRequest, Result};
use rbtl_mpool::Region;
use rbtl_rcache::{Access, Options, Rcache, Registrar, RegistrarError, Registration, Stats};
use std::any::Any;

pub use crate::request::check_span;
use std::sync::{Arc, Mutex};

/// The registrar of memory that needs no pinning: `self`, `sm` and `tcp` address a
/// registered buffer by its virtual address at the time of each transfer (a memcpy,
/// `process_vm_readv/writev`, a socket), so a registration never reaches pages that
/// left the address space. Its cache therefore follows no memory monitor: nothing is
/// watched, no lookup asks the kernel anything, and idle registrations are kept as
/// `rcache_leave_pinned` says.
#[derive(Debug)]
pub struct NoPin;

impl Registrar for NoPin {
    type Handle = ();

    fn register(&self, _base: usize, _len: usize, _access: Access) -> Result<(), RegistrarError> {
        Ok(())
    }

    fn deregister(&self, _handle: ()) {}

    fn pins_pages(&self) -> bool {
        false
    }
}

/// A module's live registrations, and the registration cache their ranges go through.
pub struct Registrations {
    table: Mutex<KeyTable>,
    view: KeyTableView,
    rcache: Arc<Rcache<NoPin>>,
    _memory: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the table's raw pointer targets `_memory`, which this value keeps alive;
// mutation goes through the mutex, reads through atomics.
unsafe impl Send for Registrations {}
// SAFETY: as above.
unsafe impl Sync for Registrations {}

/// What a memory handle of such a transport holds.
pub struct Reg<R: Registrar> {
    entry: Entry,
    owner: Arc<Registrations>,
    /// The cache's registration of each range: the first, then the others (a
    /// registration of one range, the common case, allocates no list).
    _first: Registration<R>,
    _others: Vec<Registration<R>>,
}

impl<R: Registrar> Drop for Reg<R> {
    fn drop(&mut self) {
        self.owner.lock().remove(&self.entry);
    }
}

impl Registrations {
    /// A table of `capacity` entries in the zeroed memory at `mem`, which `memory` keeps
    /// mapped, over a registration cache of these `options`.
    ///
    /// # Safety
    ///
    /// `mem` must be 8-byte aligned, point to `keytable::table_bytes(capacity)` zeroed
    /// bytes inside the mapping `memory` owns, and be used by nothing else.
    pub unsafe fn new(
        mem: *mut u8,
        capacity: usize,
        memory: Arc<dyn Any + Send + Sync>,
        options: Options,
    ) -> Arc<Registrations> {
        // SAFETY: forwarded contract.
        let table = unsafe { KeyTable::new(mem, capacity) };
        Arc::new(Registrations {
            view: table.view(),
            table: Mutex::new(table),
            rcache: Rcache::new(NoPin, options),
            _memory: memory,
        })
    }

    /// A table of `capacity` entries in memory of its own (a fresh anonymous mapping of
    /// room for one entry at least), over a registration cache of these `options`.
    pub fn anonymous(capacity: usize, options: Options) -> Result<Arc<Registrations>> {
        let table = Arc::new(Region::anonymous(table_bytes(capacity.max(1)))?);
        // SAFETY: a fresh anonymous mapping is zeroed, page-aligned and ours alone, with
        // room for `capacity` entries; the Arc handed over keeps it mapped.
        Ok(unsafe { Registrations::new(table.as_ptr(), capacity, table.clone(), options) })
    }

    /// The counters of the registration cache.
    pub fn cache_stats(&self) -> Stats {
        self.rcache.stats()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeyTable> {
        // Table updates are single stores: a panic elsewhere cannot leave it torn.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The read side, for checking handles.
    pub fn view(&self) -> KeyTableView {
        self.view
    }

    /// Register what `request` asks for, after [`RegRequest::check`] against the
    /// module's `attrs`: each range through the cache, then the registration into the
    /// table under the requested key or one the table chooses.
    pub fn register(
        self: &Arc<Self>,
        module: ModuleId,
        attrs: &Attributes,
        request: &RegRequest,
    ) -> Result<MemHandle> {
        request.check(attrs)?;
        let (ranges, access) = (request.ranges(), request.access());
        let (first, others) = ranges.split_first().expect("checked: one range or more");
        let first = self.rcache.register(first.base, first.len, access)?;
        let others = others
            .iter()
            .map(|r| self.rcache.register(r.base, r.len, access))
            .collect::<Result<Vec<_>, _>>()?;
        let entry = self.lock().insert(module, ranges, access, request.key())?;
        let inner = Reg {
            entry,
            owner: Arc::clone(self),
            _first: first,
            _others: others,
        };
        Ok(MemHandle::new(
            module,
            entry.key,
            ranges,
            access,
            entry.remote,
            Box::new(inner),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::NoPin;
    use rbtl_rcache::{monitor, Access, Options, Rcache};

    /// With the default options, which ask for the monitor (running here), a cache over
    /// `NoPin` watches nothing and still keeps what is released.
    #[test]
    fn a_cache_over_no_pin_follows_no_monitor() {
        let cache = Rcache::new(NoPin, Options::default());
        assert!(!cache.is_monitored(), "{}", monitor::status());
        let buf = vec![0u8; 1 << 16];
        let (base, len) = (buf.as_ptr() as usize, buf.len());
        let r = cache.register(base, len, Access::LOCAL_READ).unwrap();
        assert!(!r.is_watched());
        assert!(
            !monitor::is_watched(base, len),
            "no userfaultfd registration"
        );
        drop(r);
        let s = cache.stats();
        assert_eq!((s.entries, s.idle_entries), (1, 1), "kept idle: {s:?}");
        let again = cache.register(base + 100, 100, Access::LOCAL_READ).unwrap();
        assert_eq!(cache.stats().hits, 1);
        drop((again, buf));
    }
}
