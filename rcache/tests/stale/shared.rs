//! Shared memory whose file loses its pages under a mapping, by hole punching or
//! truncation: no userfaultfd event says so, so such memory is never watched and its
//! registration is never kept idle. A lookup after either is a new registration over
//! the new pages, never a hit on the pinned old ones.

use crate::memory::{fill, frames, Checker, PS};

const LEN: usize = 4 * PS;

/// A memfd of `LEN` bytes, mapped shared: (descriptor, address).
fn shared_file() -> (i32, usize) {
    // SAFETY: a descriptor from a constant name; checked below.
    let fd = unsafe { libc::memfd_create(c"rbtl-stale-shared".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: sizes the test's own memfd.
    assert_eq!(unsafe { libc::ftruncate(fd, LEN as libc::off_t) }, 0);
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let a = rbtl_testkit::mem::map(None, LEN, rw, fd).expect("map the memfd");
    (fd, a)
}

/// Registers the shared mapping, releases it, lets `lose` take the file's pages away
/// (the mapping stays), writes the memory again (new pages), and looks it up again:
/// never the old registration, never a stale hit, nothing kept idle.
fn never_stale_after(lose: impl Fn(i32)) {
    let mut c = Checker::new();
    let (fd, a) = shared_file();
    fill(a, LEN, 5);
    let before = frames(a, LEN);
    let old = c.lookup(a, LEN);
    let old_id = old.id();
    assert!(!old.is_watched(), "shared memory is never watched");
    drop(old);
    assert_eq!(c.cache.stats().idle_entries, 0, "shared memory kept idle");
    lose(fd);
    fill(a, LEN, 6);
    if c.frames_visible {
        let after = frames(a, LEN);
        assert!(
            before.iter().zip(&after).all(|(b, a)| b != a),
            "the file kept its pages: {before:?} -> {after:?}"
        );
    }
    let new = c.lookup(a, LEN);
    assert_ne!(
        new.id(),
        old_id,
        "a hit on the registration of the lost pages"
    );
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    drop(new);
    drop(c);
    crate::memory::unmap(a, LEN);
    // SAFETY: the test's own descriptor, closed once.
    unsafe { libc::close(fd) };
}

#[test]
fn a_hole_punched_in_a_shared_file_under_a_registration_is_never_a_stale_hit() {
    never_stale_after(|fd| {
        // SAFETY: punches the test's own memfd; its mapping stays valid (the pages
        // read as zeros until written).
        let rc = unsafe {
            libc::fallocate(
                fd,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                0,
                LEN as libc::off_t,
            )
        };
        assert_eq!(rc, 0, "fallocate: {}", std::io::Error::last_os_error());
    });
}

#[test]
fn a_shared_file_truncated_under_a_registration_is_never_a_stale_hit() {
    never_stale_after(|fd| {
        // SAFETY: truncates the test's own memfd, then gives it its size back before
        // the mapping is touched again (so no access falls beyond its end).
        unsafe {
            assert_eq!(libc::ftruncate(fd, 0), 0);
            assert_eq!(libc::ftruncate(fd, LEN as libc::off_t), 0);
        }
    });
}
