//! What a registration asks for, in libfabric's terms (`fi_mr_reg`, `fi_mr_regv`,
//! `struct fi_mr_attr`): one or several ranges, the access they grant, and optionally
//! the key the registration is to carry.
//!
//! # Addresses in a vectored registration
//!
//! A peer names memory of a registration by its virtual address in the owner, whether
//! the registration covers one range or several (libfabric's `FI_MR_VIRT_ADDR`, not
//! offsets into the concatenation of the ranges). A put, get or atomic must lie inside
//! one range: an access that crosses from one range into the next is refused as out of
//! range, even where the ranges happen to touch, and so is one in a gap between them.
//! Virtual addresses suit these handles because every transport already names a
//! single-range registration that way and moves the bytes at that address without a
//! translation: `self` copies there, `sm`'s cross-memory attach writes the peer's
//! virtual address, `tcp`'s target applies the request at it, and a verbs device
//! addresses each memory region by virtual address. A vectored registration is then
//! one key and one handle over several such ranges, each still reached where it lies.
//! Ranges may overlap; an access inside several is served by the first.

use crate::{Attributes, BtlFlags, Endpoint, Error, Result};
use rbtl_rcache::Access;

/// Most ranges one registration covers (libfabric: the domain's `mr_iov_limit`).
/// Every transport takes this many.
pub const MAX_RANGES: usize = 8;

/// One range of memory: `[base, base + len)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemRange {
    /// Its start.
    pub base: usize,
    /// Its length.
    pub len: usize,
}

impl MemRange {
    /// `[base, base + len)`.
    pub const fn new(base: usize, len: usize) -> MemRange {
        MemRange { base, len }
    }
}

/// A registration request (libfabric: `struct fi_mr_attr`), built up and then given
/// to [`Module::register`](crate::Module::register):
///
/// ```
/// # use rbtl_btl::{Access, MemRange, RegRequest};
/// let (a, b) = ([0u8; 64], [0u8; 64]);
/// let req = RegRequest::vectored(
///     &[MemRange::new(a.as_ptr() as usize, 64), MemRange::new(b.as_ptr() as usize, 64)],
///     Access::REMOTE_READ | Access::REMOTE_WRITE,
/// )
/// .requested_key(42);
/// assert_eq!(req.ranges().len(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegRequest {
    ranges: [MemRange; MAX_RANGES],
    /// How many ranges were given (more than [`MAX_RANGES`] is remembered, to be
    /// refused by `register`).
    count: usize,
    access: Access,
    key: Option<u64>,
    endpoint: Option<Endpoint>,
}

impl RegRequest {
    /// One range, `[base, base + len)` (`fi_mr_reg`).
    pub fn new(base: usize, len: usize, access: Access) -> RegRequest {
        let mut ranges = [MemRange::default(); MAX_RANGES];
        ranges[0] = MemRange { base, len };
        RegRequest {
            ranges,
            count: 1,
            access,
            key: None,
            endpoint: None,
        }
    }

    /// Several ranges under one key and one handle (`fi_mr_regv`); at most
    /// [`MAX_RANGES`], or `register` refuses the request.
    pub fn vectored(ranges: &[MemRange], access: Access) -> RegRequest {
        let mut r = [MemRange::default(); MAX_RANGES];
        for (slot, range) in r.iter_mut().zip(ranges) {
            *slot = *range;
        }
        RegRequest {
            ranges: r,
            count: ranges.len(),
            access,
            key: None,
            endpoint: None,
        }
    }

    /// Ask for `key` (`requested_key`). Transports that choose keys themselves
    /// ([`BtlFlags::PROVIDER_KEYS`], libfabric's `FI_MR_PROV_KEY`) refuse the request
    /// with [`Error::KeyRejected`]; the others give the registration this key or refuse
    /// with [`Error::KeyInUse`] while a live registration of the module holds it.
    pub fn requested_key(mut self, key: u64) -> RegRequest {
        self.key = Some(key);
        self
    }

    /// The peer the memory is meant for, as Open MPI's `btl_register_mem` takes it
    /// (a hint; every transport here registers for all peers).
    pub fn endpoint(mut self, endpoint: Option<Endpoint>) -> RegRequest {
        self.endpoint = endpoint;
        self
    }

    /// The ranges (all of them given, when no more than [`MAX_RANGES`]).
    pub fn ranges(&self) -> &[MemRange] {
        &self.ranges[..self.count.min(MAX_RANGES)]
    }

    /// The access asked for.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The key asked for, if any.
    pub fn key(&self) -> Option<u64> {
        self.key
    }

    /// The endpoint hint.
    pub fn endpoint_hint(&self) -> Option<Endpoint> {
        self.endpoint
    }

    /// For transports: refuse what no transport with `attrs` registers, each case with
    /// its own error (libfabric's return codes in brackets): no range or more than
    /// [`MAX_RANGES`] ([`Error::TooManyRanges`], `-FI_EINVAL`); a range of zero bytes or
    /// past the address space; no access at all, or atomic access on a transport
    /// without atomics ([`Error::AccessNotSupported`], `-FI_EINVAL` /
    /// `-FI_EOPNOTSUPP`); a requested key on a transport that chooses its keys
    /// ([`Error::KeyRejected`], `-FI_EKEYREJECTED`). Whether a key is in use is the
    /// transport's to say ([`Error::KeyInUse`], `-FI_ENOKEY`).
    pub fn check(&self, attrs: &Attributes) -> Result<()> {
        if self.count == 0 || self.count > MAX_RANGES {
            return Err(Error::TooManyRanges {
                count: self.count,
                max: MAX_RANGES,
            });
        }
        for r in self.ranges() {
            check_span(r.base, r.len)?;
        }
        if self.access.is_empty() {
            return Err(Error::AccessNotSupported {
                requested: self.access,
                why: "a registration must grant some access",
            });
        }
        if self.access.contains(Access::ATOMIC)
            && !attrs
                .flags
                .intersects(BtlFlags::ATOMIC_OPS | BtlFlags::ATOMIC_FOPS)
        {
            return Err(Error::AccessNotSupported {
                requested: self.access,
                why: "this transport (or its device) has no atomics: drop Access::ATOMIC",
            });
        }
        if let Some(key) = self.key {
            if attrs.flags.contains(BtlFlags::PROVIDER_KEYS) {
                return Err(Error::KeyRejected {
                    key,
                    why: "this transport chooses the keys itself; register without a requested \
                          key and send the handle to peers",
                });
            }
        }
        Ok(())
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
