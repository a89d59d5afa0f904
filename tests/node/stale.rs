//! Cached registrations when memory is remapped or the process forks, over `sm` (from
//! `tests/node.rs`) and over `openib` (from `tests/openib.rs`, in the guest).
//!
//! `sm` pins and maps nothing of a registered buffer: its handles name an address in
//! the owner's address space, and put/get reach it with `process_vm_writev/readv`,
//! which resolve the address at the time of the transfer. So a transfer can never
//! land in pages that left the address space, and `sm`'s registration cache (with
//! `rcache_leave_pinned` on, its default) keeps its idle registrations without the
//! memory monitor. `openib`'s registrations pin pages: its cache follows the monitor
//! and drops the registration of remapped memory. What these roles check is that the
//! data lands in the new memory and not in the old pages, and that a fork changes
//! nothing for the parent.

use crate::report_ok;
use rbtl::btl::{
    Access, ActiveMessage, Endpoint, Local, MemHandle, Module, RdmaCompletion, Remote,
    RemoteHandle, SendiOutcome, Tag, Transfer,
};
use rbtl_rcache::monitor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PS: usize = 4096;
const LEN: usize = 4 * PS;
const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

fn memfd(name: &std::ffi::CStr) -> i32 {
    // SAFETY: creates a descriptor from a constant name; checked below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: sizes the test's own memfd.
    assert_eq!(unsafe { libc::ftruncate(fd, LEN as libc::off_t) }, 0);
    fd
}

/// Maps `LEN` bytes: of `fd` shared (or private anonymous for -1), at `at` exactly if given.
fn map(fd: i32, at: Option<usize>) -> usize {
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    rbtl_testkit::mem::map(at, LEN, rw, fd).expect("nothing mapped at the address")
}

fn bytes(addr: usize) -> &'static mut [u8] {
    // SAFETY: the role's own mapping of LEN bytes, alive while the role looks at it.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, LEN) }
}

/// Publishes `addr` and its handle under `key`, and returns the peer's.
fn exchange(
    job: &mut rbtl::pmi::Job,
    key: &str,
    addr: usize,
    h: &MemHandle,
) -> (u64, RemoteHandle) {
    let mut blob = (addr as u64).to_le_bytes().to_vec();
    blob.extend_from_slice(h.remote().as_bytes());
    job.modex.publish(key, &blob).unwrap();
    job.modex.fence().unwrap();
    let theirs = job.modex.lookup(job.rank ^ 1, key).unwrap().unwrap();
    rbtl_conformance::remote_of(&theirs)
}

/// One put or get of `LEN` bytes, progressed to its completion.
fn transfer(
    m: &mut dyn Module,
    ep: Endpoint,
    put: bool,
    (local, lh): (usize, &MemHandle),
    (remote, rh): (u64, &RemoteHandle),
) {
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let cb = Box::new(move |_: &mut dyn Module, c: RdmaCompletion| {
        c.status.expect("the transfer completes");
        d.fetch_add(1, Ordering::Release);
    });
    if put {
        m.put(
            &Transfer::new(ep, Local::new(local, lh), Remote::new(remote, rh), LEN),
            cb,
        )
    } else {
        m.get(
            &Transfer::new(ep, Local::new(local, lh), Remote::new(remote, rh), LEN),
            cb,
        )
    }
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.load(Ordering::Acquire) == 0 {
        m.progress();
        assert!(Instant::now() < deadline, "a transfer hung (put: {put})");
    }
}

/// Rank 0 owns the memory and remaps it; rank 1 puts and gets, then tells rank 0 with
/// a message (transfers through sm's rings need rank 0 to progress until then). `pins`
/// says whether the transport's registrations pin pages: its cache then follows the
/// memory monitor, and keeps registered pages out of fork children, so the fork child
/// writes to its copy of a registered buffer only when they do not.
pub fn remap_and_fork(mut m: Box<dyn Module>, ep: Endpoint, mut job: rbtl::pmi::Job, pins: bool) {
    let rank = job.rank;
    assert!(monitor::status().is_running(), "{}", monitor::status());
    let heard = crate::common::arrivals(m.as_mut(), Tag::USR);
    let round_done = |m: &mut dyn Module, job: &mut rbtl::pmi::Job, round: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while heard.load(Ordering::Acquire) <= round {
            m.progress();
            assert!(
                Instant::now() < deadline,
                "rank 1 never finished round {round}"
            );
        }
        job.modex.fence().unwrap();
    };
    if rank == 1 {
        let src = map(-1, None);
        let dst = map(-1, None);
        // SAFETY: the role's mappings outlive the handles, dropped at the end.
        let (sh, dh) = unsafe {
            (
                m.register_mem(Some(ep), src, LEN, ALL).unwrap(),
                m.register_mem(Some(ep), dst, LEN, ALL).unwrap(),
            )
        };
        for (round, key) in ["remap1", "remap2", "fork"].into_iter().enumerate() {
            let (raddr, rh) = exchange(&mut job, key, src, &sh);
            // What the owner wrote there first.
            transfer(m.as_mut(), ep, false, (dst, &dh), (raddr, &rh));
            assert!(
                bytes(dst).iter().all(|&b| b == 0x40 + round as u8),
                "{key}: get"
            );
            bytes(src).fill(0x10 + round as u8);
            transfer(m.as_mut(), ep, true, (src, &sh), (raddr, &rh));
            let told = m.sendi(&ActiveMessage::new(ep, Tag::USR, &[], &[1]));
            assert!(
                matches!(told, Ok(SendiOutcome::Sent)),
                "a one-byte message fits"
            );
            job.modex.fence().unwrap();
        }
        drop((sh, dh));
        report_ok(rank, "ok");
        return;
    }
    let (old, new) = (memfd(c"old"), memfd(c"new"));
    let x = map(old, None);
    let old_view = map(old, None);
    bytes(x).fill(0x40);
    // SAFETY: `x` stays mapped until the handle is dropped below.
    let h = unsafe { m.register_mem(Some(ep), x, LEN, ALL) }.unwrap();
    exchange(&mut job, "remap1", x, &h);
    round_done(m.as_mut(), &mut job, 0);
    assert!(bytes(x).iter().all(|&b| b == 0x10), "the first put landed");
    drop(h);
    // Shared memory is never watched (its file could lose pages unseen): a pinning
    // cache does not keep its idle registration; sm's cache needs no monitor.
    assert!(
        !monitor::is_watched(x, LEN),
        "shared memory watched by the monitor"
    );
    // The memory leaves; new memory comes at the same address.
    // SAFETY: the role's own mapping, no longer referenced.
    unsafe { rbtl_testkit::mem::unmap(x, LEN) };
    assert_eq!(map(new, Some(x)), x);
    bytes(x).fill(0x41);
    // SAFETY: as above.
    let h = unsafe { m.register_mem(Some(ep), x, LEN, ALL) }.unwrap();
    assert!(!monitor::is_watched(x, LEN), "registered anew, unwatched");
    exchange(&mut job, "remap2", x, &h);
    round_done(m.as_mut(), &mut job, 1);
    let new_view = map(new, None);
    assert!(
        bytes(new_view).iter().all(|&b| b == 0x11),
        "the put landed in the new memory"
    );
    assert!(
        bytes(old_view).iter().all(|&b| b == 0x10),
        "the old pages are untouched"
    );
    drop(h);
    // Fork: a child writes to its copy of a registered private buffer and exits; the
    // parent's transfers stay right (sm needs no MADV_DONTFORK: it pins nothing).
    let f = map(-1, None);
    bytes(f).fill(0x42);
    // SAFETY: as above.
    let h = unsafe { m.register_mem(Some(ep), f, LEN, ALL) }.unwrap();
    // SAFETY: the child only writes to its copy of `f` and calls _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        if !pins {
            bytes(f).fill(0xee);
        }
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: reaps the child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert_eq!(status, 0);
    assert!(
        bytes(f).iter().all(|&b| b == 0x42),
        "the child's write stayed in the child"
    );
    exchange(&mut job, "fork", f, &h);
    round_done(m.as_mut(), &mut job, 2);
    assert!(
        bytes(f).iter().all(|&b| b == 0x12),
        "the put after fork landed in the parent"
    );
    drop(h);
    report_ok(rank, "ok");
}

/// The message layer's rendezvous registers send buffers through the cache: rank 1
/// sends from a buffer, remaps it with new contents at the same address, and sends
/// again; rank 0 receives both contents.
pub fn role_msg_remap(settings: &[(&str, &str)]) {
    let mut comm = rbtl::msg::Comm::init(settings).unwrap();
    let me = comm.rank();
    let big = 1 << 20;
    if me == 1 {
        let x = {
            // SAFETY: a fresh private anonymous mapping of `big` bytes.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    big,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            p as usize
        };
        for round in 0..3u8 {
            // SAFETY: the role's own mapping of `big` bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(x as *mut u8, big) };
            buf.fill(0x20 + round);
            comm.send(buf, 0, round as i32).unwrap();
            // The buffer's memory leaves and new memory comes at its address.
            // SAFETY: the role's own mapping; nothing refers into it.
            unsafe { rbtl_testkit::mem::map_over(x, big) };
            monitor::apply_pending();
            assert!(
                !monitor::is_watched(x, big),
                "no watched registration is left at the old address (a pinning cache dropped it)"
            );
        }
    } else {
        let mut buf = vec![0u8; big];
        for round in 0..3u8 {
            comm.recv(&mut buf, Some(1), Some(round as i32)).unwrap();
            assert!(buf.iter().all(|&b| b == 0x20 + round), "round {round}");
        }
    }
    comm.finalize().unwrap();
    report_ok(me, "ok");
}
