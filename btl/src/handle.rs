//! Memory handles: the local one `register_mem` returns, and the bytes a peer uses
//! (Open MPI: `mca_btl_base_registration_handle_t`, an opaque blob of
//! `btl_registration_handle_size` bytes).

use crate::inline_ranges::InlineRanges;
use crate::{Error, MemRange, Result, MAX_HANDLE_SIZE};
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

/// A local registration made by `register` (or `register_mem`). It keeps the
/// registration alive: `deregister_mem` releases it (a second call is an error), and so
/// does dropping it. Not `Clone`: one handle, one registration reference.
pub struct MemHandle {
    owner: ModuleId,
    key: u64,
    ranges: InlineRanges<MemRange>,
    access: Access,
    remote: RemoteHandle,
    inner: Option<Box<dyn Any + Send + Sync>>,
}

impl MemHandle {
    /// Made by transports: the registration of `ranges` (1 to
    /// [`MAX_RANGES`](crate::MAX_RANGES), checked by the transport) under `key`; `inner`
    /// is the transport's own state of the registration (typically rcache
    /// registrations), released when the handle is deregistered or dropped.
    pub fn new(
        owner: ModuleId,
        key: u64,
        ranges: &[MemRange],
        access: Access,
        remote: RemoteHandle,
        inner: Box<dyn Any + Send + Sync>,
    ) -> MemHandle {
        MemHandle {
            owner,
            key,
            ranges: InlineRanges::new(ranges),
            access,
            remote,
            inner: Some(inner),
        }
    }

    /// The bytes a peer needs to reach this memory.
    pub fn remote(&self) -> &RemoteHandle {
        &self.remote
    }

    /// The registration's key (libfabric: `fi_mr_key`): the requested one, or the one
    /// the transport chose. Keys of live registrations of one module differ, except on
    /// transports with [`BtlFlags::PROVIDER_KEYS`](crate::BtlFlags::PROVIDER_KEYS),
    /// where two handles served by one device registration share its key.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The registered ranges, as asked (not page-aligned).
    pub fn ranges(&self) -> &[MemRange] {
        &self.ranges
    }

    /// Start of the (first) registered range.
    pub fn base(&self) -> usize {
        self.ranges[0].base
    }

    /// Bytes registered: the length of the range, or the sum over a vectored
    /// registration's ranges.
    pub fn len(&self) -> usize {
        self.ranges().iter().map(|r| r.len).sum()
    }

    /// Always false: zero-length registrations are refused.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// lies inside one of its ranges and that it grants `needs`; then give their inner
    /// state.
    #[inline]
    pub fn check<T: 'static>(
        &self,
        module: ModuleId,
        addr: usize,
        len: usize,
        needs: Access,
    ) -> Result<&T> {
        self.check_at(module, addr, len, needs).map(|(t, _)| t)
    }

    /// As [`MemHandle::check`], with the index of the range the access lies in.
    #[inline]
    pub fn check_at<T: 'static>(
        &self,
        module: ModuleId,
        addr: usize,
        len: usize,
        needs: Access,
    ) -> Result<(&T, usize)> {
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
        let ranges = self.ranges().iter().map(|r| (r.base as u64, r.len));
        let index = find_range("local", ranges, addr as u64, len)?;
        if !self.access.contains(needs) {
            return Err(Error::AccessDenied {
                side: "local",
                has: self.access,
                needs,
            });
        }
        match inner.downcast_ref::<T>() {
            Some(reg) => Ok((reg, index)),
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
            .field("key", &format_args!("{:#x}", self.key))
            .field("ranges", &self.ranges())
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
        Err(out_of_range(side, addr, len, (base, reg_len)))
    }
}

/// The error of an access `[addr, addr+len)` of `side` outside the range `(base,
/// reg_len)`.
fn out_of_range(side: &'static str, addr: u64, len: usize, (base, reg_len): (u64, usize)) -> Error {
    Error::OutOfRange {
        side,
        addr,
        len,
        base,
        reg_len,
    }
}

/// The index of the first of `ranges` (start, length) that holds `[addr, addr+len)`,
/// or [`Error::OutOfRange`] naming the range the access starts in (else the first).
#[inline]
pub fn find_range(
    side: &'static str,
    ranges: impl Iterator<Item = (u64, usize)> + Clone,
    addr: u64,
    len: usize,
) -> Result<usize> {
    let mut nearest = None;
    for (i, (base, reg_len)) in ranges.clone().enumerate() {
        if check_range(side, addr, len, base, reg_len).is_ok() {
            return Ok(i);
        }
        if nearest.is_none() && addr >= base && addr - base < reg_len as u64 {
            nearest = Some((base, reg_len));
        }
    }
    let named = nearest.or_else(|| ranges.clone().next()).unwrap_or((0, 0));
    Err(out_of_range(side, addr, len, named))
}

#[cfg(test)]
mod tests {
    use super::{check_range, find_range};
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

    #[test]
    fn an_access_lies_inside_one_range_or_is_out_of_range() {
        let ranges = [(100u64, 10usize), (110, 10), (200, 50)];
        let find = |addr: u64, len: usize| find_range("remote", ranges.iter().copied(), addr, len);
        assert_eq!(find(100, 10).unwrap(), 0);
        assert_eq!(
            find(110, 10).unwrap(),
            1,
            "the second, though it touches the first"
        );
        assert_eq!(find(220, 30).unwrap(), 2);
        // Across the boundary of two touching ranges, in a gap, past the last.
        for (addr, len, base) in [(105u64, 10usize, 100u64), (150, 1, 100), (240, 11, 200)] {
            match find(addr, len) {
                Err(Error::OutOfRange { base: b, .. }) => assert_eq!(b, base, "{addr}+{len}"),
                other => panic!("{addr}+{len}: {other:?}"),
            }
        }
    }
}
