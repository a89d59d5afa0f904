//! Fork safety: a registrar that pins pages gets `MADV_DONTFORK` on them (unless its
//! `keep_from_children` says otherwise), so a parent that writes to its registered
//! buffer while a fork child lives keeps the very pages it registered (without it,
//! copy-on-write hands the parent fresh pages and a device would go on using the old
//! ones). These registrars record the frames without pinning them, so that what the
//! advice alone does shows.
//!
//! And why the staleness judges pin: a fork anywhere in the process moves the pages of
//! memory that never left from under a registration that does not pin them.

use crate::memory::{fill, frames, map, unmap, vm_flag, Checker, FrameRegistrar, PS, RW};

/// Forks a child that waits for a byte on a pipe, then exits at once (0, or 3 if the
/// parent's monitor runs in it); runs `meanwhile` in the parent while the child lives;
/// returns the child's exit status and what `meanwhile` returned.
fn with_child<T>(meanwhile: impl FnOnce() -> T) -> (i32, T) {
    // The monitor belongs to the parent: the child must say none runs there
    // (`status()` reads atomics, allocates nothing).
    let child = || {
        if rbtl_rcache::monitor::status().is_running() {
            3
        } else {
            0
        }
    };
    rbtl_testkit::fork::with_child(child, meanwhile)
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

/// What a fork child does with the registration cache, in a process of its own
/// (`roles.rs`: a fork child of a process running other tests' threads could find a
/// lock held): the child gets no monitor and keeps nothing idle, so it never hits a
/// registration of memory that left, whether it unmaps its own memory or the parent's
/// watched memory; the parent's monitor sees none of the child's unmaps, its idle
/// registration stays a right hit, and its later unmaps are seen as before.
pub(crate) fn role_fork_child() {
    let mut c = Checker::new();
    let a = map(None, 4 * PS);
    fill(a, 4 * PS, 1);
    let kept = c.lookup(a, 4 * PS);
    let kept_id = kept.id();
    drop(kept);
    assert_eq!(c.cache.stats().idle_entries, 1, "the parent keeps it idle");
    let before = rbtl_rcache::monitor::event_counts();
    // SAFETY: the child runs `in_child` (no other thread of this process holds a lock
    // it takes: the role runs alone, the monitor thread reads events without locks)
    // and ends with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match std::panic::catch_unwind(|| in_child(a)) {
            Ok(()) => 0,
            Err(_) => 5,
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: reaps our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the fork child failed: status {status:#x}"
    );
    assert_eq!(
        rbtl_rcache::monitor::event_counts(),
        before,
        "the child's unmaps reached the parent's monitor"
    );
    // The parent's idle registration is still right, and still hit.
    let again = c.lookup(a, 4 * PS);
    assert_eq!(again.id(), kept_id, "the parent lost its idle registration");
    drop(again);
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    // And its own unmaps are seen as before: new memory over `a` in one call (an
    // unmap then a new mapping would leave the range free meanwhile, for any other
    // mapping of this process to take).
    // SAFETY: `a` is this test's mapping, and nothing refers into it.
    unsafe { rbtl_testkit::mem::map_over(a, 4 * PS) };
    let b = a;
    fill(b, 4 * PS, 2);
    let new = c.lookup(b, 4 * PS);
    assert_ne!(
        new.id(),
        kept_id,
        "a stale hit in the parent after the fork"
    );
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    drop(new);
    unmap(b, 4 * PS);
}

/// The child's side: no monitor here; a cache made here keeps nothing idle and never
/// hits memory that left (its own, or the parent's `a`, unmapped and mapped anew).
fn in_child(a: usize) {
    assert!(
        !rbtl_rcache::monitor::status().is_running(),
        "a monitor runs in the fork child"
    );
    let cache = rbtl_rcache::Rcache::new(
        FrameRegistrar::pinning(),
        rbtl_rcache::Options {
            leave_pinned: true,
            ..rbtl_rcache::Options::default()
        },
    );
    for at in [None, Some(a)] {
        // Memory of the child's own, or the parent's range taken over.
        let m = match at {
            None => map(None, 2 * PS),
            Some(a) => {
                unmap(a, 4 * PS);
                crate::memory::map_again(a, 2 * PS).expect("the parent's range is free here")
            }
        };
        fill(m, 2 * PS, 3);
        let r = cache.register(m, 2 * PS, RW).expect("register");
        let (id, was) = (r.id(), r.handle().frames.clone());
        drop(r);
        assert_eq!(cache.stats().idle_entries, 0, "kept idle without a monitor");
        unmap(m, 2 * PS);
        let n = crate::memory::map_again(m, 2 * PS).expect("the address is free again");
        fill(n, 2 * PS, 4);
        let r = cache.register(n, 2 * PS, RW).expect("register");
        assert_ne!(r.id(), id, "a hit on memory that left, in the child");
        if was.iter().any(|&f| f != 0) {
            assert_ne!(
                r.handle().frames,
                was,
                "the same frames after a new mapping"
            );
        }
        drop(r);
        unmap(n, 2 * PS);
    }
}
