//! Fork safety: a registrar that pins pages gets `MADV_DONTFORK` on them (unless its
//! `keep_from_children` says otherwise), so a parent that writes to its registered
//! buffer while a fork child lives keeps the very pages it registered (without it,
//! copy-on-write hands the parent fresh pages and a device would go on using the old
//! ones). These registrars record the frames without pinning them, so that what the
//! advice alone does shows.
//!
//! And why the staleness judges pin: a fork anywhere in the process moves the pages of
//! memory that never left from under a registration that does not pin them.

use crate::memory::{fill, frames, map, unmap, vm_flag, Checker, FrameRegistrar, PS};

/// Forks a child that waits for a byte on a pipe, then exits at once (only
/// async-signal-safe calls, and nothing of this process's memory); runs `meanwhile`
/// in the parent while the child lives; returns the child's exit status and what
/// `meanwhile` returned.
fn with_child<T>(meanwhile: impl FnOnce() -> T) -> (i32, T) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child calls only read, status() (atomics, no allocation) and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut b = 0u8;
        // SAFETY: reads one byte into `b` from the pipe the parent writes.
        unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) };
        // The monitor belongs to the parent: the child must say none runs here.
        let code = if rbtl_rcache::monitor::status().is_running() {
            3
        } else {
            0
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let out = meanwhile();
    let mut status = 0;
    // SAFETY: wakes the child, then reaps it and closes the pipe.
    unsafe {
        libc::write(fds[1], [1u8].as_ptr().cast(), 1);
        libc::waitpid(pid, &mut status, 0);
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    (status, out)
}

#[test]
fn a_parent_writing_after_fork_keeps_the_pages_it_registered() {
    for keep in [true, false] {
        let mut c = Checker::with_registrar(FrameRegistrar::recording(keep));
        assert!(
            c.frames_visible,
            "this test reads frame numbers: run it as root"
        );
        let a = map(None, 4 * PS);
        fill(a, 4 * PS, 1);
        let r = c.lookup(a + 10, 3 * PS);
        assert_eq!(
            vm_flag(a, "dc"),
            keep,
            "MADV_DONTFORK exactly when the registrar asks for it"
        );
        let (status, after) = with_child(|| {
            fill(a, 4 * PS, 2);
            frames(r.base(), r.len())
        });
        assert_eq!(
            status, 0,
            "the child saw a monitor running (status {status})"
        );
        if keep {
            assert_eq!(
                after,
                r.handle().frames,
                "the parent's pages left the registration"
            );
        } else {
            // The control: without the advice copy-on-write moved the parent.
            assert_ne!(after, r.handle().frames);
        }
        drop(r);
        c.cache.flush_idle();
        assert!(
            !vm_flag(a, "dc"),
            "the last registration gone, MADV_DOFORK again"
        );
        drop(c);
        unmap(a, 4 * PS);
    }
}

/// A fork child lives while the parent writes to an idle registration's memory, which
/// never leaves the address space: the next lookup is a hit, rightly. Under a
/// registration that only records its frames, copy-on-write gave the parent new pages,
/// and a judge of frames would call the hit stale; under a device's pin (the judges'
/// registrar) the kernel copied the pages for the child instead and the parent keeps
/// them. Without the pin, the tests of this binary that run beside this file's forks
/// counted such hits as stale.
#[test]
fn a_fork_moves_only_unpinned_pages_so_the_staleness_judges_pin() {
    for pin in [false, true] {
        let registrar = if pin {
            FrameRegistrar::pinning()
        } else {
            FrameRegistrar::recording(false)
        };
        let mut c = Checker::with_registrar(registrar);
        assert!(
            c.frames_visible,
            "this test reads frame numbers: run it as root"
        );
        let a = map(None, 4 * PS);
        fill(a, 4 * PS, 1);
        let id = c.lookup(a, 4 * PS).id();
        let (status, ()) = with_child(|| fill(a, 4 * PS, 2));
        assert_eq!(status, 0, "the child saw a monitor running");
        let again = c.lookup(a, 4 * PS);
        assert_eq!(again.id(), id, "the memory never left: a hit");
        if pin {
            assert_eq!(c.stale, 0, "the pin kept the pages: {}", c.stale_report());
        } else {
            assert_eq!(
                c.stale,
                1,
                "copy-on-write moved the unpinned pages: {}",
                c.stale_report()
            );
        }
        drop(again);
        drop(c);
        unmap(a, 4 * PS);
    }
}

#[test]
fn overlapping_registrations_keep_pages_from_children_until_the_last_goes() {
    let mut c = Checker::with_registrar(FrameRegistrar::recording(true));
    let a = map(None, 8 * PS);
    let one = c.lookup(a, 4 * PS);
    let two = c.lookup(a + 2 * PS, 6 * PS);
    drop(one);
    c.cache.invalidate(a, PS);
    assert!(!vm_flag(a, "dc"), "page 0 only the first kept");
    assert!(vm_flag(a + 3 * PS, "dc"));
    drop(two);
    c.cache.flush_idle();
    assert!(!vm_flag(a + 3 * PS, "dc"));
    drop(c);
    unmap(a, 8 * PS);
}
