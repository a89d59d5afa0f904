//! Memory a registration owns: the safe form of [`Module::register_mem`] for a buffer
//! the caller hands over. The raw form's promise (the memory stays mapped until the
//! handle is deregistered, and nothing of this process still uses it after) is kept
//! here by holding the bytes and giving them back only from
//! [`release`](OwnedMemory::release), after a flush of the module and the
//! deregistration; dropped without it, the registration ends and the bytes stay
//! allocated (leaked: an operation may still be using them).
//!
//! Peers are another process's business, as with the raw form: their puts, gets and
//! atomics on this memory must be over (ordered by a synchronisation with them, as
//! `MPI_Win_free`'s barrier orders them) before it is released; after the
//! deregistration the transport refuses theirs.

use crate::{Access, Endpoint, Error, Local, MemHandle, Module, Result};
use std::fmt;
use std::ptr::NonNull;

/// Registered bytes the registration owns (see the module documentation).
pub struct OwnedMemory {
    /// The bytes, from a `Box<[u8]>`; touched only through raw pointers (by peers and
    /// by the transport) until `release` gives the box back.
    bytes: NonNull<[u8]>,
    handle: MemHandle,
}

// SAFETY: the bytes are a heap allocation this value owns alone; nothing here touches
// them through a reference, so moving the owner to another thread is as sound as
// moving the `Box<[u8]>` it came from (and `MemHandle` is `Send`).
unsafe impl Send for OwnedMemory {}

/// `release` refused: the memory stays registered and is handed back with why.
#[derive(Debug)]
pub struct NotReleased {
    /// Why: [`Error::ForeignHandle`] for another module, or the flush's error (such as
    /// [`Error::PeerTimeout`]: operations still pending).
    pub error: Error,
    /// The memory, still registered.
    pub memory: OwnedMemory,
}

impl fmt::Display for NotReleased {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the owned memory was not released: {}", self.error)
    }
}

impl std::error::Error for NotReleased {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl OwnedMemory {
    /// Register `bytes` on `module` for `access` (toward `endpoint` where the transport
    /// registers per peer, as [`Module::register_mem`]). A refusal drops the bytes.
    pub fn register(
        module: &mut dyn Module,
        endpoint: Option<Endpoint>,
        bytes: Box<[u8]>,
        access: Access,
    ) -> Result<OwnedMemory> {
        let len = bytes.len();
        let bytes = NonNull::from(Box::leak(bytes));
        let base = bytes.as_ptr().cast::<u8>() as usize;
        // SAFETY: the allocation is this value's until `release` returns it after the
        // deregistration, or is never freed (`Drop`); it stays mapped meanwhile.
        match unsafe { module.register_mem(endpoint, base, len, access) } {
            Ok(handle) => Ok(OwnedMemory { bytes, handle }),
            Err(e) => {
                // SAFETY: from `Box::leak` above, and nothing registered it.
                drop(unsafe { Box::from_raw(bytes.as_ptr()) });
                Err(e)
            }
        }
    }

    /// Where the bytes start (peers address them by it).
    pub fn addr(&self) -> usize {
        self.bytes.as_ptr().cast::<u8>() as usize
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there are none (never: a registration of zero bytes is refused).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The registration: its [`remote`](MemHandle::remote) bytes go to peers.
    pub fn handle(&self) -> &MemHandle {
        &self.handle
    }

    /// The local side of a put or get at `offset` (the transport checks the length).
    pub fn local(&self, offset: usize) -> Local<'_> {
        Local::new(self.addr().wrapping_add(offset), &self.handle)
    }

    /// Flush `module` (every operation of this process that may use the bytes
    /// completes, callbacks run), deregister, and give the bytes back. Refused, with
    /// the memory still registered, on another module or when the flush fails.
    pub fn release(
        mut self,
        module: &mut dyn Module,
    ) -> std::result::Result<Box<[u8]>, Box<NotReleased>> {
        let owner = self.handle.owner();
        if owner != module.id() {
            let error = Error::ForeignHandle {
                what: "owned memory",
                owner: owner.0,
                this: module.id().0,
            };
            return Err(Box::new(NotReleased {
                error,
                memory: self,
            }));
        }
        let done = module
            .flush(None)
            .and_then(|()| module.deregister_mem(&mut self.handle));
        if let Err(error) = done {
            return Err(Box::new(NotReleased {
                error,
                memory: self,
            }));
        }
        // SAFETY: from `Box::leak` in `register`, given back once (`self` ends here,
        // and its `Drop` never touches the bytes); the module is flushed and the
        // registration gone, so nothing of this process uses them any more.
        Ok(unsafe { Box::from_raw(self.bytes.as_ptr()) })
    }
}

impl Drop for OwnedMemory {
    /// The registration ends with the handle; the bytes stay allocated, since an
    /// operation may still be using them (`release` is the way to get them back).
    fn drop(&mut self) {
        if self.handle.is_live() {
            tracing::debug!(
                len = self.len(),
                "owned memory dropped without release: its bytes are left allocated"
            );
        }
    }
}

impl fmt::Debug for OwnedMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedMemory")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("handle", &self.handle)
            .finish()
    }
}
