//! The registration cache over the wrapper's registrar.

use crate::support::{device, pair, Buf, WAIT};
use rbtl_verbs::{MrAccess, Op};

/// Registrations through the registration cache are real memory regions: a second
/// registration of the same buffer hits, and the handle's key works for RDMA.
#[test]
fn registrations_through_the_cache() {
    use rbtl_rcache::{Access, Options, Rcache};
    use rbtl_verbs::VerbsRegistrar;
    let Some(ctx) = device() else { return };
    let mut p = pair(&ctx);
    let cache = Rcache::new(VerbsRegistrar::new(p.pd.clone()), Options::default());
    let mut target = vec![0u8; 8192];
    let src = Buf::new(&p.pd, 64, 0x5c, MrAccess::LOCAL_WRITE);
    let base = target.as_mut_ptr() as usize;
    let r1 = cache
        .register(base, 8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let r2 = cache
        .register(base + 100, 1000, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(r1.id(), r2.id(), "covered with enough access: a hit");
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    let write = Op::Write {
        remote: base as u64 + 4096,
        rkey: r2.handle().rkey(),
    };
    // SAFETY: the local range lies inside `src`; the target is registered and alive.
    unsafe { p.a.post_send(1, write, &src.mr, src.addr(), 64, false) }.unwrap();
    p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
    // SAFETY: reading our buffer after the completion.
    let got: Vec<u8> = (0..64)
        .map(|i| unsafe { std::ptr::read_volatile(target.as_ptr().add(4096 + i)) })
        .collect();
    assert_eq!(got, vec![0x5c; 64]);
    drop((r1, r2));
    assert_eq!(cache.invalidate(base, 8192), 1);
    assert_eq!(
        cache.stats().entries,
        0,
        "deregistered once invalidated and idle"
    );
    drop(p.b);
}

/// How many mappings of this process overlap `[addr, addr+len)` (/proc/self/maps).
fn mappings_over(addr: usize, len: usize) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_once(' ')?.0.split_once('-'))
        .filter_map(|(lo, hi)| {
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .filter(|&(lo, hi)| lo < addr + len && addr < hi)
        .count()
}

/// Where the kernel copies pinned pages into fork children (it says so, and the verbs
/// registrar then asks for no `MADV_DONTFORK`): a parent writing to a registered
/// buffer while a child lives writes to the very pages the device reads, and the
/// registration leaves its mapping whole, so an `mremap` of the whole mapping works.
#[test]
fn without_dontfork_the_device_reads_the_parents_writes_and_the_mapping_stays_whole() {
    use rbtl_rcache::{page_size, Access, Options, Rcache, Registrar};
    use rbtl_verbs::{fork_copies_pinned_pages, VerbsRegistrar};
    let Some(ctx) = device() else { return };
    assert!(
        fork_copies_pinned_pages(),
        "the kernel does not report that fork copies pinned pages (Linux 5.13 and later \
         do, through RDMA netlink)"
    );
    let mut p = pair(&ctx);
    let registrar = VerbsRegistrar::new(p.pd.clone());
    assert!(!registrar.keep_from_children());
    let cache = Rcache::new(registrar, Options::default());
    let ps = page_size();
    let len = 16 * ps;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let m = rbtl_testkit::mem::map(None, len, rw, -1).expect("a mapping");
    // SAFETY: the test's own mapping, written only here.
    unsafe { std::ptr::write_bytes(m as *mut u8, 1, len) };
    let reg = cache
        .register(
            m + 4 * ps,
            4 * ps,
            Access::LOCAL_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    assert_eq!(
        mappings_over(m, len),
        1,
        "the registration split its mapping"
    );

    let dst = Buf::new(&p.pd, 64, 0, MrAccess::LOCAL_WRITE);
    let read = Op::Read {
        remote: (m + 5 * ps + 100) as u64,
        rkey: reg.handle().rkey(),
    };
    let (status, ()) = rbtl_testkit::fork::with_child(
        || 0,
        || {
            // The child lives: without the kernel's copy this write would move the
            // parent to new pages, and the device would go on reading the old ones.
            // SAFETY: the registered pages of the test's own mapping.
            unsafe { std::ptr::write_bytes((m + 4 * ps) as *mut u8, 0x77, 4 * ps) };
            // SAFETY: the local range is `dst`; the remote one lies in the live
            // registration.
            unsafe { p.a.post_send(1, read, &dst.mr, dst.addr(), 64, false) }.unwrap();
            p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
        },
    );
    assert_eq!(status, 0, "the child's wait status");
    assert_eq!(
        dst.read(),
        vec![0x77; 64],
        "the device read pages the parent left"
    );

    drop(reg);
    // SAFETY: the test's own mapping; its registration is released (the monitor
    // invalidates it on the move).
    let moved = unsafe { libc::mremap(m as *mut libc::c_void, len, 2 * len, libc::MREMAP_MAYMOVE) };
    assert_ne!(
        moved,
        libc::MAP_FAILED,
        "mremap over the registration's edges: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the moved mapping, referred to by nothing.
    unsafe { rbtl_testkit::mem::unmap(moved as usize, 2 * len) };
    drop(p.b);
}
