//! Mappings for tests that make memory come and go under registrations: `mmap`,
//! `munmap` and `madvise` through libc, each failure a panic that names the call. What
//! can take memory from under a reference (unmapping, replacing, dropping contents) is
//! `unsafe`.

use std::io;

/// A new mapping of `len` bytes with `prot`: of `fd` shared, or private anonymous
/// memory for `fd` -1; anywhere, or exactly at `at` when nothing is mapped there.
/// `None` when something is (`MAP_FIXED_NOREPLACE` refuses, or a kernel before 4.17,
/// which takes it as a hint, put the mapping elsewhere).
///
/// # Panics
///
/// If the kernel refuses for another reason.
pub fn map(at: Option<usize>, len: usize, prot: i32, fd: i32) -> Option<usize> {
    let (addr, fixed) = match at {
        Some(a) => (a as *mut libc::c_void, libc::MAP_FIXED_NOREPLACE),
        None => (std::ptr::null_mut(), 0),
    };
    let kind = if fd < 0 {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_SHARED
    };
    // SAFETY: a fresh mapping (of the caller's file or of new memory) that replaces
    // nothing: MAP_FIXED_NOREPLACE refuses a range in use.
    let p = unsafe { libc::mmap(addr, len, prot, kind | fixed, fd, 0) };
    if p == libc::MAP_FAILED {
        let e = io::Error::last_os_error();
        assert!(
            at.is_some() && e.raw_os_error() == Some(libc::EEXIST),
            "mmap of {len} bytes at {at:x?}: {e}"
        );
        return None;
    }
    if at.is_some_and(|a| a != p as usize) {
        // SAFETY: the mapping just made, which nothing refers into.
        unsafe { unmap(p as usize, len) };
        return None;
    }
    Some(p as usize)
}

/// New private anonymous read-write memory over `[addr, addr + len)`, replacing what
/// is mapped there (`MAP_FIXED`): the memory at those addresses leaves and new memory
/// comes in its place.
///
/// # Safety
///
/// The caller owns the range (a mapping of its own) and nothing refers into it.
///
/// # Panics
///
/// If the kernel refuses or maps elsewhere.
pub unsafe fn map_over(addr: usize, len: usize) {
    // SAFETY: the caller owns the range it replaces.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_eq!(
        p as usize,
        addr,
        "mmap(MAP_FIXED) at {addr:#x}: {}",
        io::Error::last_os_error()
    );
}

/// `len` bytes of new private anonymous read-write memory, anywhere.
///
/// # Panics
///
/// If the kernel refuses.
pub fn map_anywhere(len: usize) -> usize {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    map(None, len, rw, -1).expect("a mapping anywhere")
}

/// Unmap `[addr, addr + len)`.
///
/// # Safety
///
/// The caller owns the range (a mapping of its own) and nothing refers into it.
///
/// # Panics
///
/// If the kernel refuses.
pub unsafe fn unmap(addr: usize, len: usize) {
    // SAFETY: the caller owns the range and keeps no reference into it.
    let rc = unsafe { libc::munmap(addr as *mut libc::c_void, len) };
    assert_eq!(rc, 0, "munmap: {}", io::Error::last_os_error());
}

/// `madvise(addr, len, advice)`.
///
/// # Safety
///
/// The caller owns the range, and may lose its contents (`MADV_DONTNEED` and the
/// like drop them): nothing may rely on them.
///
/// # Panics
///
/// If the kernel refuses.
pub unsafe fn advise(addr: usize, len: usize, advice: libc::c_int) {
    // SAFETY: the caller owns the range and gives up its contents.
    let rc = unsafe { libc::madvise(addr as *mut libc::c_void, len, advice) };
    assert_eq!(rc, 0, "madvise: {}", io::Error::last_os_error());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_at_a_taken_address_is_none_and_one_at_a_free_address_is_there_then_replaced() {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let a = map_anywhere(8192);
        assert_eq!(map(Some(a), 4096, rw, -1), None, "taken");
        // SAFETY: the test's own mapping, which nothing refers into.
        unsafe { unmap(a, 8192) };
        assert_eq!(map(Some(a), 4096, rw, -1), Some(a), "free again");
        // SAFETY: the page was just mapped read-write.
        unsafe { (a as *mut u8).write(7) };
        // SAFETY: the test's own page, whose contents it gives up.
        unsafe { advise(a, 4096, libc::MADV_DONTNEED) };
        // SAFETY: still mapped read-write; the advice dropped the contents.
        assert_eq!(unsafe { (a as *const u8).read() }, 0);
        // SAFETY: as above.
        unsafe { (a as *mut u8).write(9) };
        // SAFETY: the test's own page, which nothing refers into.
        unsafe { map_over(a, 4096) };
        // SAFETY: new read-write memory at the same address.
        assert_eq!(unsafe { (a as *const u8).read() }, 0);
        // SAFETY: the test's own page, which nothing refers into.
        unsafe { unmap(a, 4096) };
    }
}
