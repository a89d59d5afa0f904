//! The `self` transport's live registrations: the key table its remote handles name,
//! so that a put or get is checked against the target registration before it runs.

use crate::{check_range, Error, ModuleId, RemoteHandle, Result};
use rbtl_rcache::{Access, Registrar, RegistrarError, Registration};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of a `self` remote handle: module id, key, base, length (u64 each), access (u32).
pub const HANDLE_SIZE: usize = 36;

/// The registrar of a process talking to itself: nothing needs pinning.
#[derive(Debug)]
pub struct NoPin;

impl Registrar for NoPin {
    type Handle = ();

    fn register(&self, _base: usize, _len: usize, _access: Access) -> Result<(), RegistrarError> {
        Ok(())
    }

    fn deregister(&self, _handle: ()) {}
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    base: u64,
    len: usize,
    access: Access,
}

/// Live keys of one module.
#[derive(Debug, Default)]
pub struct Keys {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Entry>>,
}

/// What a `self` memory handle holds: its key (removed from the table when dropped) and
/// the cache registration.
pub struct SelfReg {
    key: u64,
    keys: Arc<Keys>,
    _reg: Registration<NoPin>,
}

impl Drop for SelfReg {
    fn drop(&mut self) {
        self.keys.lock().remove(&self.key);
    }
}

impl Keys {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // A panic elsewhere cannot leave the map half-updated: recover it.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Add a registration; its remote handle and the state its memory handle keeps.
    pub fn insert(
        self: &Arc<Self>,
        module: ModuleId,
        base: usize,
        len: usize,
        access: Access,
        reg: Registration<NoPin>,
    ) -> (RemoteHandle, SelfReg) {
        let key = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Entry {
            base: base as u64,
            len,
            access,
        };
        self.lock().insert(key, entry);
        let mut bytes = [0u8; HANDLE_SIZE];
        bytes[0..8].copy_from_slice(&module.0.to_le_bytes());
        bytes[8..16].copy_from_slice(&key.to_le_bytes());
        bytes[16..24].copy_from_slice(&entry.base.to_le_bytes());
        bytes[24..32].copy_from_slice(&(len as u64).to_le_bytes());
        bytes[32..36].copy_from_slice(&access.bits().to_le_bytes());
        let remote = RemoteHandle::from_bytes(&bytes).expect("36 bytes fit a handle");
        let inner = SelfReg {
            key,
            keys: Arc::clone(self),
            _reg: reg,
        };
        (remote, inner)
    }

    /// Check that `handle` names a live registration of `module` that covers
    /// `[addr, addr+len)` and grants `needs`.
    pub fn check(
        &self,
        module: ModuleId,
        handle: &RemoteHandle,
        addr: u64,
        len: usize,
        needs: Access,
    ) -> Result<()> {
        let b = handle.as_bytes();
        if b.len() != HANDLE_SIZE {
            return Err(Error::MalformedHandle(b.len()));
        }
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        if word(0) != module.0 {
            return Err(Error::BadRemoteHandle(format!(
                "made by module {:#x}, not by the target {:#x}",
                word(0),
                module.0
            )));
        }
        let entry = *self
            .lock()
            .get(&word(8))
            .ok_or_else(|| Error::BadRemoteHandle("deregistered".into()))?;
        check_range("remote", addr, len, entry.base, entry.len)?;
        if !entry.access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "remote",
                has: entry.access,
                needs,
            });
        }
        Ok(())
    }
}
