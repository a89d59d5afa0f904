//! `register_mem` for transports whose peers check handles against a [`KeyTable`]
//! (`self`, `sm`): the registration goes through the registration cache, gets a key in
//! the table, and leaves the table when its handle is deregistered or dropped.

use crate::keytable::{KeyTable, KeyTableView};
use crate::{Error, MemHandle, ModuleId, Result};
use rbtl_rcache::{Access, Rcache, Registrar, RegistrarError, Registration};
use std::any::Any;
use std::sync::{Arc, Mutex};

/// The registrar of memory that needs no pinning (processes on one node).
#[derive(Debug)]
pub struct NoPin;

impl Registrar for NoPin {
    type Handle = ();

    fn register(&self, _base: usize, _len: usize, _access: Access) -> Result<(), RegistrarError> {
        Ok(())
    }

    fn deregister(&self, _handle: ()) {}
}

/// A module's live registrations.
pub struct Registrations {
    table: Mutex<KeyTable>,
    view: KeyTableView,
    capacity: usize,
    _memory: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the table's raw pointer targets `_memory`, which this value keeps alive;
// mutation goes through the mutex, reads through atomics.
unsafe impl Send for Registrations {}
// SAFETY: as above.
unsafe impl Sync for Registrations {}

/// What a memory handle of such a transport holds.
pub struct Reg<R: Registrar> {
    key: u64,
    owner: Arc<Registrations>,
    _cached: Registration<R>,
}

impl<R: Registrar> Drop for Reg<R> {
    fn drop(&mut self) {
        self.owner.lock().remove(self.key);
    }
}

impl Registrations {
    /// A table of `capacity` entries in the zeroed memory at `mem`, which `memory` keeps
    /// mapped.
    ///
    /// # Safety
    ///
    /// `mem` must be 8-byte aligned, point to `keytable::table_bytes(capacity)` zeroed
    /// bytes inside the mapping `memory` owns, and be used by nothing else.
    pub unsafe fn new(
        mem: *mut u8,
        capacity: usize,
        memory: Arc<dyn Any + Send + Sync>,
    ) -> Arc<Registrations> {
        // SAFETY: forwarded contract.
        let table = unsafe { KeyTable::new(mem, capacity) };
        Arc::new(Registrations {
            view: table.view(),
            table: Mutex::new(table),
            capacity,
            _memory: memory,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, KeyTable> {
        // Table updates are single stores: a panic elsewhere cannot leave it torn.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The read side, for checking handles.
    pub fn view(&self) -> KeyTableView {
        self.view
    }

    /// Register `[base, base+len)` for `access`: through `rcache`, then into the table.
    pub fn register<R: Registrar>(
        self: &Arc<Self>,
        module: ModuleId,
        rcache: &Arc<Rcache<R>>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<MemHandle> {
        check_span(base, len)?;
        let cached = rcache.register(base, len, access)?;
        let (key, remote) = self
            .lock()
            .insert(module, base, len, access)
            .ok_or_else(|| {
                Error::NotAvailable(format!(
                    "all {} registration slots are in use: deregister handles or raise the \
                 transport's max_registrations parameter",
                    self.capacity
                ))
            })?;
        let inner = Reg {
            key,
            owner: Arc::clone(self),
            _cached: cached,
        };
        Ok(MemHandle::new(
            module,
            base,
            len,
            access,
            remote,
            Box::new(inner),
        ))
    }
}

/// Refuse what no transport registers: zero bytes, or a range past the address space.
pub fn check_span(base: usize, len: usize) -> Result<()> {
    if len == 0 {
        return Err(Error::ZeroLength);
    }
    if base.checked_add(len).is_none() {
        return Err(Error::Overflow { base, len });
    }
    Ok(())
}
