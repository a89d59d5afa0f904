//! Each way memory leaves the address space, made by C or raw system calls that the
//! cache never hears about directly: a later lookup of the address is never a hit on
//! the old registration.

use crate::memory::{advise, fill, kernel_watches, map, map_again, unmap, Checker, PS, RW};

/// Registers `[a, a+len)`, releases it (kept idle), lets `leave` take the memory away
/// and map something new there, then looks the address up again: a miss. `leave`
/// returns None when another thread took the freed address first; the case is then
/// made again elsewhere.
fn never_stale(len: usize, leave: impl Fn(usize) -> Option<usize>) {
    for _ in 0..20 {
        if never_stale_once(len, &leave) {
            return;
        }
    }
    panic!("other threads took the freed address 20 times in a row");
}

fn never_stale_once(len: usize, leave: &impl Fn(usize) -> Option<usize>) -> bool {
    let mut c = Checker::new();
    let a = map(None, len);
    fill(a, len, 7);
    let old = c.lookup(a, len);
    let old_id = old.id();
    assert!(old.is_watched());
    drop(old);
    assert_eq!(c.cache.stats().idle_entries, 1, "kept idle");
    let Some(b) = leave(a) else {
        return false;
    };
    let new = c.lookup(b, len);
    assert_ne!(new.id(), old_id, "a stale hit after the memory left");
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    assert_eq!(c.cache.stats().invalidations, 1);
    drop(new);
    drop(c);
    unmap(b, len);
    true
}

#[test]
fn munmap_then_a_new_mapping_at_the_same_address() {
    never_stale(4 * PS, |a| {
        unmap(a, 4 * PS);
        map_again(a, 4 * PS)
    });
}

#[test]
fn munmap_of_one_page_inside_the_registration() {
    never_stale(4 * PS, |a| {
        unmap(a + PS, PS);
        map_again(a + PS, PS).map(|_| a)
    });
}

#[test]
fn mmap_fixed_over_the_registration() {
    never_stale(4 * PS, |a| {
        // SAFETY: replaces the test's own mapping at `a` with a fresh anonymous one.
        let p = unsafe {
            libc::mmap(
                a as *mut libc::c_void,
                4 * PS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, a);
        Some(a)
    });
}

#[test]
fn madvise_dontneed() {
    never_stale(4 * PS, |a| {
        advise(a, 4 * PS, libc::MADV_DONTNEED);
        Some(a)
    });
}

#[test]
fn madvise_free() {
    never_stale(4 * PS, |a| {
        advise(a + 2 * PS, PS, libc::MADV_FREE);
        Some(a)
    });
}

#[test]
fn mremap_moving_away_then_a_new_mapping_at_the_old_address() {
    let elsewhere = map(None, 4 * PS);
    never_stale(4 * PS, |a| {
        // SAFETY: moves the test's mapping onto `elsewhere`, which the test reserved.
        let p = unsafe {
            libc::mremap(
                a as *mut libc::c_void,
                4 * PS,
                4 * PS,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                elsewhere as *mut libc::c_void,
            )
        };
        assert_eq!(
            p as usize,
            elsewhere,
            "mremap: {}",
            std::io::Error::last_os_error()
        );
        // The moved pages are not watched at their new place once the event is
        // applied: nothing registered them there. (Unless the monitor still counts
        // pages there for a registration of another test, held while its memory
        // went: then they stay watched, and rightly.)
        let _ = Checker::new().cache.stats();
        assert!(
            !kernel_watches(elsewhere, 4 * PS)
                || rbtl_rcache::monitor::is_watched(elsewhere, 4 * PS),
            "moved pages no registration covers are still watched"
        );
        let again = map_again(a, 4 * PS);
        if again.is_none() {
            // Lost the address: give `elsewhere` back its place for the next try.
            unmap(elsewhere, 4 * PS);
            map(Some(elsewhere), 4 * PS);
        }
        again
    });
    unmap(elsewhere, 4 * PS);
}

#[test]
fn mremap_shrinking_then_a_new_mapping_in_the_tail() {
    never_stale(4 * PS, |a| {
        // SAFETY: shrinks the test's own mapping in place.
        let p = unsafe { libc::mremap(a as *mut libc::c_void, 4 * PS, PS, 0) };
        assert_eq!(p as usize, a, "mremap: {}", std::io::Error::last_os_error());
        match map_again(a + PS, 3 * PS) {
            Some(_) => Some(a),
            None => {
                unmap(a, PS);
                None
            }
        }
    });
}

/// The monitor never makes a user's `mremap` fail: with a registration (kept idle)
/// over the middle pages of a mapping, the mapping grows in place or moves whole
/// (what `realloc` of a large block does), and shrinks again, each succeeding where a
/// watch of the registered pages alone would have split the mapping in the kernel
/// (`EFAULT` for a range over the parts); no lookup afterwards is a stale hit.
#[test]
fn mremap_over_the_edge_of_a_watched_range_succeeds() {
    let mut c = Checker::new();
    let a = map(None, 8 * PS);
    fill(a, 8 * PS, 3);
    let old = c.lookup(a + 2 * PS, 2 * PS);
    let old_id = old.id();
    assert!(old.is_watched());
    drop(old);
    assert!(
        kernel_watches(a, PS),
        "the whole mapping is watched, not a part of it"
    );
    let mut at = a;
    let mut len = 8 * PS;
    for new_len in [16 * PS, 64 * PS, 4 * PS, 32 * PS] {
        // SAFETY: resizes the test's own mapping, moving it if needed.
        let p =
            unsafe { libc::mremap(at as *mut libc::c_void, len, new_len, libc::MREMAP_MAYMOVE) };
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mremap of {len} -> {new_len} bytes: {}",
            std::io::Error::last_os_error()
        );
        (at, len) = (p as usize, new_len);
    }
    // SAFETY: reads the test's own mapping, moved with its contents.
    let kept = unsafe { *((at + 3 * PS) as *const u8) };
    assert_eq!(kept, 3, "contents moved along");
    // The pages at their place now: a hit only where they never moved (checked by
    // their frames), else a new registration.
    let now = c.lookup(at + 2 * PS, 2 * PS);
    assert!(
        at == a || now.id() != old_id,
        "a stale hit after the memory moved"
    );
    drop(now);
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    drop(c);
    unmap(at, len);
}

#[test]
fn shmdt_then_shmat_at_the_same_address() {
    for _ in 0..20 {
        if shmdt_then_shmat_once() {
            return;
        }
    }
    panic!("other threads took the detached address 20 times in a row");
}

/// False when another thread mapped something at the detached address first.
fn shmdt_then_shmat_once() -> bool {
    // SAFETY: a private System V segment, attached, detached and removed by the test.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4 * PS, libc::IPC_CREAT | 0o600) };
    assert!(id >= 0, "shmget: {}", std::io::Error::last_os_error());
    let mut c = Checker::new();
    // SAFETY: attaches the segment where the kernel chooses.
    let a = unsafe { libc::shmat(id, std::ptr::null(), 0) } as usize;
    assert_ne!(a, usize::MAX, "shmat: {}", std::io::Error::last_os_error());
    let old = c.lookup(a, 4 * PS);
    let (old_id, watched) = (old.id(), old.is_watched());
    drop(old);
    // SAFETY: detaches the segment the test attached; nothing points into it.
    assert_eq!(unsafe { libc::shmdt(a as *const libc::c_void) }, 0);
    // SAFETY: attaches it again at the same address, if still free.
    let b = unsafe { libc::shmat(id, a as *const libc::c_void, 0) } as usize;
    if b == usize::MAX && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // The address is taken (the kernel refuses to attach over a mapping).
        // SAFETY: removes the test's segment, attached nowhere now.
        unsafe { libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) };
        return false;
    }
    assert_eq!(
        b,
        a,
        "shmat at the old address: {}",
        std::io::Error::last_os_error()
    );
    let new = c.lookup(a, 4 * PS);
    assert_ne!(new.id(), old_id, "a stale hit after shmdt");
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    drop(new);
    drop(c);
    // SAFETY: as above; then the segment is removed.
    unsafe {
        libc::shmdt(a as *const libc::c_void);
        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
    }
    // Shared memory is never watched (its file could lose pages unseen), so its
    // registration was not kept idle, and the second lookup could not hit it.
    assert!(!watched, "shared memory was watched");
    true
}

#[test]
fn memory_freed_while_in_use_is_invalid_at_once() {
    let mut c = Checker::new();
    let a = map(None, 2 * PS);
    let held = c.lookup(a, 2 * PS);
    assert!(held.is_valid());
    unmap(a, 2 * PS);
    assert!(
        !held.is_valid(),
        "munmap has returned: the registration must be invalid"
    );
    let b = map_again(a, 2 * PS).unwrap_or_else(|| map(None, 2 * PS));
    let new = c.lookup(b, 2 * PS);
    assert_ne!(new.id(), held.id());
    drop((held, new));
    unmap(b, 2 * PS);
}

#[test]
fn c_malloc_and_free_never_give_a_stale_hit() {
    let mut c = Checker::new();
    let before = rbtl_rcache::monitor::event_counts();
    for size in [100usize, 5000, 200_000, 4 << 20, 40 << 20] {
        for round in 0..40u8 {
            // SAFETY: C allocations the test frees itself; written within their size.
            unsafe {
                let p = libc::malloc(size) as usize;
                assert_ne!(p, 0);
                fill(p, size, round);
                drop(c.lookup(p, size));
                libc::free(p as *mut libc::c_void);
                let q = libc::malloc(size) as usize;
                fill(q, size, round ^ 0xff);
                drop(c.lookup(q, size));
                libc::free(q as *mut libc::c_void);
            }
        }
    }
    assert_eq!(c.stale, 0, "{}", c.stale_report());
    // The large blocks were mmap'd by malloc and unmapped by free (or trimmed from
    // the heap): the monitor saw that happen.
    let after = rbtl_rcache::monitor::event_counts();
    assert!(
        after.gone > before.gone,
        "no unmap seen: {before:?} -> {after:?}"
    );
    assert!(c.cache.stats().invalidations > 0);
}

#[test]
fn memory_the_monitor_cannot_watch_is_not_kept_idle() {
    // A private mapping of a regular file: userfaultfd cannot register it.
    let dir = std::env::temp_dir().join(format!("rbtl-stale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("file");
    std::fs::write(&path, vec![3u8; 4 * PS]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    use std::os::fd::AsRawFd;
    // SAFETY: a private, copy-on-write mapping of the test's own file.
    let a = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4 * PS,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            0,
        )
    } as usize;
    assert_ne!(a, libc::MAP_FAILED as usize);
    let fs_is_shmem = {
        let a2 = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        a2.lines()
            .any(|l| l.contains(" /tmp ") && l.contains("tmpfs"))
    };
    let mut c = Checker::new();
    let r = c.lookup(a, 4 * PS);
    if !fs_is_shmem {
        assert!(!r.is_watched(), "a regular file mapping cannot be watched");
        drop(r);
        assert_eq!(c.cache.stats().idle_entries, 0, "unwatched: not kept idle");
        assert_eq!(c.cache.stats().entries, 0);
    }
    drop(c);
    unmap(a, 4 * PS);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Only a cache whose registrations pin pages follows the monitor. With the same
/// options (which ask for the monitor), a cache over a registrar that pins nothing (as
/// `sm`, `tcp` and `self` have) watches nothing and keeps its idle registration when
/// the memory goes, since a transfer through it resolves the address anew; a pinning
/// one watches its registration and drops it.
#[test]
fn only_a_cache_whose_registrations_pin_pages_follows_the_monitor() {
    use rbtl_rcache::{monitor, Options, Rcache, Registrar, RegistrarError};
    struct Addresses;
    impl Registrar for Addresses {
        type Handle = ();
        fn register(
            &self,
            _: usize,
            _: usize,
            _: rbtl_rcache::Access,
        ) -> Result<(), RegistrarError> {
            Ok(())
        }
        fn deregister(&self, _: ()) {}
        fn pins_pages(&self) -> bool {
            false
        }
    }
    let plain = Rcache::new(Addresses, Options::default());
    assert!(plain.options().monitor && plain.options().leave_pinned);
    assert!(!plain.is_monitored());
    let mut pinning = Checker::new();
    assert!(pinning.cache.is_monitored());

    let (a, b) = (map(None, 4 * PS), map(None, 4 * PS));
    let r = plain.register(a, 4 * PS, RW).unwrap();
    assert!(!r.is_watched());
    assert!(!kernel_watches(a, 4 * PS), "no userfaultfd registration");
    drop(r);
    let p = pinning.lookup(b, 4 * PS);
    assert!(p.is_watched());
    assert!(kernel_watches(b, 4 * PS), "registered with userfaultfd");
    drop(p);
    assert_eq!(
        plain.stats().idle_entries,
        1,
        "kept idle as leave_pinned says"
    );
    assert_eq!(pinning.cache.stats().idle_entries, 1, "kept idle, watched");

    unmap(a, 4 * PS);
    unmap(b, 4 * PS);
    monitor::apply_pending();
    let s = plain.stats();
    assert_eq!(
        (s.entries, s.idle_entries, s.invalidations),
        (1, 1, 0),
        "{s:?}"
    );
    let s = pinning.cache.stats();
    assert_eq!((s.entries, s.invalidations), (0, 1), "{s:?}");
}
