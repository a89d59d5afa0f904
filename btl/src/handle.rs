//! Memory handles: the local one `register_mem` returns, and the bytes a peer uses
//! (Open MPI: `mca_btl_base_registration_handle_t`, an opaque blob of
//! `btl_registration_handle_size` bytes).

use crate::{Error, Result, MAX_HANDLE_SIZE};
use rbtl_rcache::Access;
use std::any::Any;
use std::fmt;

/// Identity of one module instance, carried in its handles and descriptors so that
/// one from another module is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ModuleId(pub u64);

impl ModuleId {
    /// A fresh id, distinct from every other module in this process and, with high
    /// probability, in every other process.
    pub fn fresh() -> ModuleId {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        ModuleId((u64::from(std::process::id()) << 40) ^ (nanos << 12) ^ n)
    }
}

/// The serialised form of a registration, at most [`MAX_HANDLE_SIZE`] bytes: what a
/// peer passes to `put`/`get`/atomics to name this memory. Its content is the
/// transport's business.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RemoteHandle {
    len: u16,
    bytes: [u8; MAX_HANDLE_SIZE],
}

impl RemoteHandle {
    /// Wrap bytes received from a peer.
    pub fn from_bytes(bytes: &[u8]) -> Result<RemoteHandle> {
        if bytes.len() > MAX_HANDLE_SIZE {
            return Err(Error::MalformedHandle(bytes.len()));
        }
        let mut h = RemoteHandle {
            len: bytes.len() as u16,
            bytes: [0; MAX_HANDLE_SIZE],
        };
        h.bytes[..bytes.len()].copy_from_slice(bytes);
        Ok(h)
    }

    /// The bytes to send to a peer.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for RemoteHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RemoteHandle({} bytes)", self.len)
    }
}

/// A local registration made by `register_mem`. It keeps the registration alive:
/// `deregister_mem` releases it (a second call is an error), and so does dropping it.
/// Not `Clone`: one handle, one registration reference.
pub struct MemHandle {
    owner: ModuleId,
    base: usize,
    len: usize,
    access: Access,
    remote: RemoteHandle,
    inner: Option<Box<dyn Any + Send + Sync>>,
}

impl MemHandle {
    /// Made by transports: `inner` is the transport's own state of the registration
    /// (typically an rcache registration), released when the handle is deregistered or
    /// dropped.
    pub fn new(
        owner: ModuleId,
        base: usize,
        len: usize,
        access: Access,
        remote: RemoteHandle,
        inner: Box<dyn Any + Send + Sync>,
    ) -> MemHandle {
        MemHandle {
            owner,
            base,
            len,
            access,
            remote,
            inner: Some(inner),
        }
    }

    /// The bytes a peer needs to reach this memory.
    pub fn remote(&self) -> &RemoteHandle {
        &self.remote
    }

    /// Start of the registered range (as asked, not page-aligned).
    pub fn base(&self) -> usize {
        self.base
    }

    /// Length of the registered range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: zero-length registrations are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access the registration grants.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The module that made it.
    pub fn owner(&self) -> ModuleId {
        self.owner
    }

    /// Whether it is still registered.
    pub fn is_live(&self) -> bool {
        self.inner.is_some()
    }

    /// For transports: check the handle is theirs and live, that `[addr, addr+len)`
    /// lies inside it and that it grants `needs`; then give their inner state.
    pub fn check<T: 'static>(
        &self,
        module: ModuleId,
        addr: usize,
        len: usize,
        needs: Access,
    ) -> Result<&T> {
        if self.owner != module {
            return Err(Error::ForeignHandle {
                what: "memory handle",
                owner: self.owner.0,
                this: module.0,
            });
        }
        // (Matches, not `ok_or`: that builds and drops an error on every call.)
        let Some(inner) = self.inner.as_ref() else {
            return Err(Error::Deregistered);
        };
        check_range("local", addr as u64, len, self.base as u64, self.len)?;
        if !self.access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "local",
                has: self.access,
                needs,
            });
        }
        match inner.downcast_ref::<T>() {
            Some(reg) => Ok(reg),
            None => Err(Error::BadRemoteHandle("handle of another transport".into())),
        }
    }

    /// For transports: release the registration (`deregister_mem`).
    pub fn release(&mut self, module: ModuleId) -> Result<()> {
        if self.owner != module {
            return Err(Error::ForeignHandle {
                what: "memory handle",
                owner: self.owner.0,
                this: module.0,
            });
        }
        self.inner.take().map(drop).ok_or(Error::Deregistered)
    }
}

impl fmt::Debug for MemHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemHandle")
            .field("owner", &format_args!("{:#x}", self.owner.0))
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.len)
            .field("access", &self.access)
            .field("live", &self.is_live())
            .finish()
    }
}

/// Check that `[addr, addr+len)` lies inside `[base, base+reg_len)`, without overflow
/// on either side (the registration's bounds may come from a peer's memory): a range
/// or a registration that would run past the end of the address space is outside.
pub fn check_range(
    side: &'static str,
    addr: u64,
    len: usize,
    base: u64,
    reg_len: usize,
) -> Result<()> {
    let inside = addr >= base
        && match (
            addr.checked_add(len as u64),
            base.checked_add(reg_len as u64),
        ) {
            (Some(end), Some(limit)) => end <= limit,
            _ => false,
        };
    if inside {
        Ok(())
    } else {
        Err(Error::OutOfRange {
            side,
            addr,
            len,
            base,
            reg_len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::check_range;
    use crate::Error;

    #[test]
    fn ranges_are_checked_without_overflow() {
        let outside = |addr: u64, len: usize, base: u64, reg_len: usize| {
            matches!(
                check_range("remote", addr, len, base, reg_len),
                Err(Error::OutOfRange { .. })
            )
        };
        assert!(check_range("local", 100, 10, 100, 10).is_ok());
        assert!(check_range("local", 109, 1, 100, 10).is_ok());
        assert!(
            check_range("local", 110, 0, 100, 10).is_ok(),
            "empty, at the end"
        );
        assert!(outside(99, 1, 100, 10), "before");
        assert!(outside(105, 6, 100, 10), "past the end");
        // Access ranges that wrap around the address space.
        assert!(outside(u64::MAX, 2, 100, 10));
        assert!(outside(u64::MAX - 1, usize::MAX, 0, usize::MAX));
        // Registrations (as a peer's table may claim them) that run past its end.
        assert!(outside(u64::MAX - 1, 1, u64::MAX - 2, 16));
        assert!(outside(5, 1, 1, usize::MAX));
        assert!(outside(u64::MAX, 0, u64::MAX, usize::MAX));
    }
}
