//! Private anonymous memory regions: normal pages, `MAP_HUGETLB` huge pages and
//! transparent huge pages.

use std::ptr::NonNull;
use std::sync::OnceLock;

use memmap2::{Advice, MmapMut, MmapOptions};

use crate::error::Error;

/// Alignment used for transparent-huge-page regions: the x86-64 / aarch64 PMD size.
pub const THP_ALIGN: usize = 2 * 1024 * 1024;

/// The system's base page size in bytes.
pub fn system_page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 {
            n as usize
        } else {
            4096
        }
    })
}

/// The default huge page size (`Hugepagesize:` in `/proc/meminfo`), or 2 MiB
/// when it cannot be read.
pub fn default_huge_page_size() -> usize {
    static HUGE: OnceLock<usize> = OnceLock::new();
    *HUGE.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| parse_hugepagesize(&s))
            .unwrap_or(THP_ALIGN)
    })
}

fn parse_hugepagesize(meminfo: &str) -> Option<usize> {
    let line = meminfo.lines().find(|l| l.starts_with("Hugepagesize:"))?;
    let mut words = line["Hugepagesize:".len()..].split_whitespace();
    let n: usize = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") | Some("KB") | Some("kb") => 1024,
        Some("MB") => 1024 * 1024,
        None => 1,
        Some(_) => return None,
    };
    n.checked_mul(unit).filter(|&v| v.is_power_of_two())
}

/// Rounds `len` up to a multiple of `to` (a power of two).
pub(crate) fn round_up(len: usize, to: usize) -> Option<usize> {
    debug_assert!(to.is_power_of_two());
    len.checked_add(to - 1).map(|v| v & !(to - 1))
}

/// A private anonymous mapping of `len` bytes (zero-filled, normal pages).
fn map_anon(len: usize) -> Result<MmapMut, Error> {
    MmapOptions::new()
        .len(len)
        .map_anon()
        .map_err(|source| Error::Map { len, source })
}

/// What [`Region::huge`] actually got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HugeOutcome {
    /// The region is backed by `MAP_HUGETLB` pages of `page_size` bytes.
    Huge {
        /// The huge page size in bytes.
        page_size: usize,
    },
    /// `MAP_HUGETLB` failed; the region uses normal pages (with
    /// `MADV_HUGEPAGE` advice) and `reason` says why and how to fix it.
    FellBack {
        /// Why huge pages could not be had, and what to do about it.
        reason: String,
    },
}

impl HugeOutcome {
    /// True when the region really is backed by huge pages.
    pub fn is_huge(&self) -> bool {
        matches!(self, HugeOutcome::Huge { .. })
    }
}

/// A private anonymous mapping (memmap2 underneath), unmapped on drop.
///
/// The mapping may be larger than [`len`](Region::len) (rounded up to whole
/// pages, or over-mapped to get 2 MiB alignment); only `len` bytes from
/// [`as_ptr`](Region::as_ptr) are promised.
#[derive(Debug)]
pub struct Region {
    // Keeps the mapping alive; never accessed through after construction.
    _map: MmapMut,
    ptr: NonNull<u8>,
    len: usize,
    page_size: usize,
}

// SAFETY: a Region exclusively owns its private mapping; the raw pointer is only
// a cached address into it. Shared access (`&Region`) hands out `&[u8]` or a raw
// pointer, mutable access needs `&mut Region`, so the usual borrow rules make
// sending and sharing across threads sound.
unsafe impl Send for Region {}
// SAFETY: see the Send impl above.
unsafe impl Sync for Region {}

impl Region {
    fn from_map(mut map: MmapMut, offset: usize, len: usize, page_size: usize) -> Region {
        debug_assert!(offset + len <= map.len());
        // SAFETY: offset + len <= map.len(), so the offset pointer stays inside the mapping.
        let raw = unsafe { map.as_mut_ptr().add(offset) };
        let ptr = NonNull::new(raw).expect("mmap never returns a null mapping");
        Region {
            _map: map,
            ptr,
            len,
            page_size,
        }
    }

    /// Maps `len` bytes of private anonymous memory (zero-filled, normal pages).
    pub fn anonymous(len: usize) -> Result<Region, Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let page = system_page_size();
        let mapped = round_up(len, page).ok_or(Error::TooLarge { len })?;
        let map = map_anon(mapped)?;
        Ok(Region::from_map(map, 0, len, page))
    }

    /// Maps `len` bytes with `MAP_HUGETLB` (default huge page size, length
    /// rounded up to whole huge pages).
    ///
    /// If the kernel refuses (typically because `vm.nr_hugepages` is 0), falls
    /// back to [`Region::transparent_huge`] and says so: the outcome is
    /// [`HugeOutcome::FellBack`] with the reason, and a `tracing::warn!` is
    /// logged. The fallback is never silent.
    pub fn huge(len: usize) -> Result<(Region, HugeOutcome), Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let huge_page = default_huge_page_size();
        let mapped = round_up(len, huge_page).ok_or(Error::TooLarge { len })?;
        match MmapOptions::new().len(mapped).huge(None).map_anon() {
            Ok(map) => Ok((
                Region::from_map(map, 0, len, huge_page),
                HugeOutcome::Huge {
                    page_size: huge_page,
                },
            )),
            Err(err) => {
                let (region, advised) = Region::transparent_huge(len)?;
                let reason = format!(
                    "MAP_HUGETLB mapping of {mapped} bytes in {huge_page}-byte pages failed ({err}); \
                     using normal pages instead, transparent huge page advice {}. \
                     Reserve huge pages (e.g. `sysctl vm.nr_hugepages=N`) to get real ones",
                    if advised { "accepted" } else { "refused" }
                );
                tracing::warn!(len, %reason, "huge page region fell back to normal pages");
                Ok((region, HugeOutcome::FellBack { reason }))
            }
        }
    }

    /// Maps `len` bytes of anonymous memory aligned to 2 MiB and advises the
    /// kernel to back it with transparent huge pages (`MADV_HUGEPAGE`).
    ///
    /// Returns whether the advice was accepted; accepted advice is still only a
    /// hint, so [`page_size`](Region::page_size) reports the base page size.
    pub fn transparent_huge(len: usize) -> Result<(Region, bool), Error> {
        if len == 0 {
            return Err(Error::ZeroLength);
        }
        let page = system_page_size();
        let rounded = round_up(len, THP_ALIGN).ok_or(Error::TooLarge { len })?;
        // Over-map by one alignment unit so an aligned start always fits.
        let mapped = rounded
            .checked_add(THP_ALIGN)
            .ok_or(Error::TooLarge { len })?;
        let map = map_anon(mapped)?;
        let base = map.as_ptr() as usize;
        let offset = round_up(base, THP_ALIGN).expect("address fits") - base;
        let advised = match map.advise_range(Advice::HugePage, offset, rounded) {
            Ok(()) => true,
            Err(err) => {
                tracing::debug!(%err, "MADV_HUGEPAGE refused");
                false
            }
        };
        Ok((Region::from_map(map, offset, len, page), advised))
    }

    /// Size of the pages backing the region: the huge page size for a
    /// [`HugeOutcome::Huge`] region, the base page size otherwise.
    pub fn page_size(&self) -> usize {
        self.page_size
    }
}

byte_span!(Region, "region", slices);

/// Memory that stays mapped while the value lives: what a
/// [`CarveSource`](crate::CarveSource) carves chunks out of.
///
/// # Safety
///
/// `base_ptr()..base_ptr() + mapped_len()` must be valid for reads and writes
/// for as long as the value is alive, and must not move.
pub unsafe trait Mapping: Send + Sync + 'static {
    /// Start of the memory.
    fn base_ptr(&self) -> *mut u8;
    /// Number of usable bytes from `base_ptr()`.
    fn mapped_len(&self) -> usize;
}

// SAFETY: the region's mapping lives as long as the Region and never moves.
unsafe impl Mapping for Region {
    fn base_ptr(&self) -> *mut u8 {
        self.as_ptr()
    }
    fn mapped_len(&self) -> usize {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_meminfo() {
        let s = "MemTotal: 1 kB\nHugepagesize:       2048 kB\nHugetlb: 0 kB\n";
        assert_eq!(parse_hugepagesize(s), Some(2 * 1024 * 1024));
        assert_eq!(
            parse_hugepagesize("Hugepagesize: 1048576 kB"),
            Some(1 << 30)
        );
        assert_eq!(parse_hugepagesize("nothing"), None);
        assert_eq!(parse_hugepagesize("Hugepagesize: 3 kB"), None);
    }

    #[test]
    fn rounding() {
        assert_eq!(round_up(1, 4096), Some(4096));
        assert_eq!(round_up(4096, 4096), Some(4096));
        assert_eq!(round_up(usize::MAX, 4096), None);
    }
}
