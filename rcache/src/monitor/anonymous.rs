//! Whether a range is private anonymous memory only (heap, stack, `mmap` of no file):
//! the only memory the monitor watches. Memory backed by a file, shared memory
//! included (memfd, `/dev/shm`, System V, `MAP_SHARED|MAP_ANONYMOUS`, hugetlbfs), can
//! lose its pages under a mapping that stays (the file's hole punching or truncation),
//! and userfaultfd has no event for that; the kernel would still register such a
//! range (write-protect mode on shmem needs no feature flag where it has PTE markers),
//! so the monitor asks the kernel what the range is instead.
//!
//! The answer comes from `PROCMAP_QUERY` (an `ioctl` on `/proc/self/maps`, Linux 6.11+),
//! one call per mapping of the range, or else from reading `/proc/self/maps`. Either
//! runs only when a registration is made (a cache miss), never on a hit.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;

/// `struct procmap_query` of `linux/fs.h`.
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `PROCMAP_QUERY_COVERING_OR_NEXT_VMA` of `linux/fs.h`: the mapping holding the
/// address, or else the next one above it.
const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = (3 << 30)
    | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16)
    | ((b'f' as libc::c_ulong) << 8)
    | 17;

/// What a mapping is, as far as this module cares: where it starts and ends, and
/// whether it is backed by no file (`inode` 0 and device 0:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) anonymous: bool,
}

/// The mappings over `[start, start+len)`, whole, in address order (holes between
/// them left out); `None` if the kernel could not be asked.
pub(crate) fn mappings(start: usize, len: usize) -> Option<Vec<Mapping>> {
    let maps = File::open("/proc/self/maps").ok()?;
    let (start, end) = (start as u64, start.saturating_add(len) as u64);
    let mut found = Vec::new();
    let mut at = start;
    while at < end {
        match query(&maps, at) {
            Err(Unsupported) => return from_text(maps, start, end),
            Ok(None) => break,
            Ok(Some(m)) => {
                if m.start >= end {
                    break;
                }
                at = m.end;
                found.push(m);
            }
        }
    }
    Some(found)
}

/// The whole mappings that hold `[start, start+len)`, as one range, when every byte of
/// it lies in private anonymous memory; `None` if any part is backed by a file or not
/// mapped. (Watching whole mappings never splits one in the kernel: a split would make
/// an `mremap` over the parts fail.)
pub(crate) fn anonymous_extent(start: usize, len: usize) -> Option<(usize, usize)> {
    let found = mappings(start, len)?;
    let (first, last) = (found.first()?, found.last()?);
    let contiguous = found.windows(2).all(|w| w[0].end == w[1].start);
    let covers = first.start <= start as u64 && last.end >= start.saturating_add(len) as u64;
    if !(contiguous && covers && found.iter().all(|m| m.anonymous)) {
        return None;
    }
    Some((first.start as usize, (last.end - first.start) as usize))
}

/// The kernel has no `PROCMAP_QUERY`.
struct Unsupported;

/// The first mapping at or above `addr` (`None` if none is), by `PROCMAP_QUERY`.
fn query(maps: &File, addr: u64) -> Result<Option<Mapping>, Unsupported> {
    let mut q = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA,
        query_addr: addr,
        ..ProcmapQuery::default()
    };
    // SAFETY: the ioctl reads and writes `q`, a live `procmap_query` of the size it
    // states; asking for no name and no build id, it writes nothing else.
    let rc = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY, &mut q as *mut ProcmapQuery) };
    if rc == 0 {
        return Ok(Some(Mapping {
            start: q.vma_start,
            end: q.vma_end,
            anonymous: q.inode == 0 && q.dev_major == 0 && q.dev_minor == 0,
        }));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        // Nothing mapped there or above.
        Some(libc::ENOENT) => Ok(None),
        _ => Err(Unsupported),
    }
}

/// [`mappings`] from the text of `/proc/self/maps` (`start-end perms offset
/// major:minor inode path`).
fn from_text(maps: File, start: u64, end: u64) -> Option<Vec<Mapping>> {
    let mut found = Vec::new();
    for line in BufReader::new(maps).lines() {
        let line = line.ok()?;
        let mut fields = line.split_whitespace();
        let (Some(range), Some(dev), Some(inode)) = (fields.next(), fields.nth(2), fields.next())
        else {
            return None;
        };
        let (s, e) = range.split_once('-')?;
        let (s, e) = (
            u64::from_str_radix(s, 16).ok()?,
            u64::from_str_radix(e, 16).ok()?,
        );
        if e <= start {
            continue;
        }
        if s >= end {
            break;
        }
        found.push(Mapping {
            start: s,
            end: e,
            anonymous: inode == "0" && dev == "00:00",
        });
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(len: usize, flags: libc::c_int, fd: libc::c_int) -> usize {
        // SAFETY: a new mapping of the test's own, unmapped below.
        let a = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        assert_ne!(a, libc::MAP_FAILED);
        a as usize
    }

    fn unmap(a: usize, len: usize) {
        // SAFETY: the test's own mapping.
        unsafe { libc::munmap(a as *mut libc::c_void, len) };
    }

    /// Both ways of asking agree: private anonymous memory is, a memfd mapped shared
    /// or private and shared anonymous memory are not, nor a range running into a
    /// hole.
    #[test]
    fn private_anonymous_memory_only() {
        let len = 4 * 4096;
        let anon = map(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1);
        let shared_anon = map(len, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1);
        // SAFETY: a descriptor from a constant name, closed below.
        let fd = unsafe { libc::memfd_create(c"rbtl-anon-test".as_ptr(), 0) };
        // SAFETY: sizes the test's own memfd.
        assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
        let shared_file = map(len, libc::MAP_SHARED, fd);
        let private_file = map(len, libc::MAP_PRIVATE, fd);
        // A hole: the last page of `anon` unmapped.
        let cases = [
            (anon, len - 4096, true),
            (anon + 4096, 4096, true),
            (shared_anon, len, false),
            (shared_file, len, false),
            (private_file, len, false),
        ];
        for (a, l, want) in cases {
            let extent = anonymous_extent(a, l);
            assert_eq!(extent.is_some(), want, "{a:#x}+{l}");
            if want {
                let (s, n) = extent.unwrap();
                assert!(
                    s <= anon && s + n >= anon + len,
                    "the whole mapping: {s:#x}+{n}"
                );
            }
            let maps = File::open("/proc/self/maps").unwrap();
            let by_text = from_text(maps, a as u64, (a + l) as u64).unwrap();
            assert_eq!(by_text, mappings(a, l).unwrap(), "text: {a:#x}+{l}");
        }
        unmap(anon + len - 4096, 4096);
        assert!(anonymous_extent(anon, len).is_none(), "a range into a hole");
        let maps = File::open("/proc/self/maps").unwrap();
        let by_text = from_text(maps, anon as u64, (anon + len) as u64).unwrap();
        assert_eq!(by_text, mappings(anon, len).unwrap());
        assert!(by_text.iter().all(|m| m.end <= (anon + len - 4096) as u64));
        unmap(anon, len - 4096);
        for a in [shared_anon, shared_file, private_file] {
            unmap(a, len);
        }
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(fd) };
    }
}
