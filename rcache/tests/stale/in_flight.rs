//! Memory mapped at an address whose `munmap` has not returned yet: the kernel frees
//! the range first and reports the unmap after, so another thread can map new memory
//! there and look it up before the monitor thread has read the event. That lookup
//! must not be a hit on the registration of the memory that left.
//!
//! To hold the window open, the monitor thread is starved (`SCHED_IDLE` on one CPU
//! beside a spinning thread) while the unmapping thread and the one that maps again
//! run on another. It changes the monitor's scheduling, so it runs as a role, in a
//! process of its own (see `roles`). A round whose address another thread of the
//! process takes first proves nothing and is not counted.
//!
//! Two ways: with the mapping hooks (the default), the new memory mapped through
//! libc's `mmap`, which counts it, so the lookup after asks the kernel; with the hooks
//! turned off, mapped by a raw `syscall(SYS_mmap)`, which only the question asked at
//! every lookup catches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rbtl_rcache::monitor::{self, Status};

use crate::memory::{fill, map, map_again, unmap, Checker, PS};

const ROUNDS: usize = 40;
/// How long the thread that maps again waits for the address to come free.
const WAIT: Duration = Duration::from_secs(20);

/// The CPUs this process may run on.
fn cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set lives across the call and its size is passed.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        rc,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads the set within its size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Runs thread `tid` (0: the calling thread) on `cpu` only.
fn run_on(tid: libc::pid_t, cpu: usize) {
    // SAFETY: as in `cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes within the set.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the set lives across the call and its size is passed.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    assert_eq!(
        rc,
        0,
        "sched_setaffinity: {}",
        std::io::Error::last_os_error()
    );
}

/// The thread id of the memory monitor's thread.
fn monitor_thread() -> libc::pid_t {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let path = task.unwrap().path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            if comm.starts_with("rbtl-memory") {
                return path.file_name().unwrap().to_str().unwrap().parse().unwrap();
            }
        }
        // The thread names itself once it runs.
        assert!(Instant::now() < deadline, "no monitor thread in 10 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How the thread that maps again does it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// libc's `mmap`, with the mapping hooks installed.
    Hooked,
    /// A raw `syscall(SYS_mmap)`, with the hooks turned off.
    RawEachLookup,
}

/// `len` bytes at `addr` by the system call itself, bypassing libc's `mmap`; None if
/// the address is taken.
fn map_again_raw(addr: usize, len: usize) -> Option<usize> {
    // SAFETY: a private anonymous mapping where nothing is mapped
    // (MAP_FIXED_NOREPLACE refuses otherwise).
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    (p as usize == addr).then_some(addr)
}

pub fn role_in_flight(mapping: Mapping) {
    monitor::use_mapping_hooks(mapping == Mapping::Hooked);
    let mut c = Checker::new();
    let status = monitor::status();
    let Status::Userfaultfd { mapping_hooks, .. } = &status else {
        panic!("{status}");
    };
    match mapping {
        Mapping::Hooked if cfg!(all(target_arch = "x86_64", target_env = "gnu")) => {
            assert_eq!(mapping_hooks, &Ok(()), "{status}")
        }
        Mapping::Hooked => rbtl_testkit::cannot_run(
            "the in-flight case with mapping hooks",
            "the hooks are made for x86-64 glibc only",
        ),
        Mapping::RawEachLookup => assert!(mapping_hooks.is_err(), "{status}"),
    }
    let map_again = match mapping {
        Mapping::Hooked => map_again,
        Mapping::RawEachLookup => map_again_raw,
    };
    let cpus = cpus();
    assert!(cpus.len() >= 2, "this case needs two CPUs, has {cpus:?}");
    let (slow, fast) = (cpus[0], cpus[1]);
    let monitor = monitor_thread();
    run_on(monitor, slow);
    let idle = libc::sched_param { sched_priority: 0 };
    // SAFETY: lowers the scheduling class of a thread of this process.
    let rc = unsafe { libc::sched_setscheduler(monitor, libc::SCHED_IDLE, &idle) };
    assert_eq!(rc, 0, "SCHED_IDLE: {}", std::io::Error::last_os_error());
    let stop = Arc::new(AtomicBool::new(false));
    let spinning = Arc::new(std::sync::Barrier::new(2));
    let spinner = {
        let (stop, spinning) = (Arc::clone(&stop), Arc::clone(&spinning));
        std::thread::spawn(move || {
            run_on(0, slow);
            spinning.wait();
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    // Once running, a thread maps nothing more (a late start would map its signal stack
    // at the address just unmapped).
    spinning.wait();
    run_on(0, fast);
    let (mut in_flight, mut stale, mut taken) = (0, 0, 0);
    for _ in 0..ROUNDS {
        let a = map(None, 4 * PS);
        fill(a, 4 * PS, 1);
        let old = c.lookup(a, 4 * PS).id();
        let returned = Arc::new(AtomicBool::new(false));
        let started = Arc::new(std::sync::Barrier::new(2));
        let again = {
            let (cache, returned) = (Arc::clone(&c.cache), Arc::clone(&returned));
            let started = Arc::clone(&started);
            std::thread::spawn(move || {
                run_on(0, fast);
                started.wait();
                let deadline = Instant::now() + WAIT;
                while map_again(a, 4 * PS).is_none() {
                    // Once the munmap has returned the address is free, unless another
                    // thread of the process took it: then this round proves nothing.
                    if returned.load(Ordering::SeqCst) && map_again(a, 4 * PS).is_none() {
                        return None;
                    }
                    assert!(Instant::now() < deadline, "{a:#x} not free in {WAIT:?}");
                }
                let early = !returned.load(Ordering::SeqCst);
                fill(a, 4 * PS, 2);
                let id = cache.register(a, 4 * PS, crate::memory::RW).unwrap().id();
                Some((early, id))
            })
        };
        // The thread has mapped what it maps when it starts (its signal stack).
        started.wait();
        unmap(a, 4 * PS);
        returned.store(true, Ordering::SeqCst);
        let Some((early, id)) = again.join().unwrap() else {
            taken += 1;
            continue;
        };
        in_flight += usize::from(early);
        stale += usize::from(id == old);
        unmap(a, 4 * PS);
    }
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    println!(
        "in flight ({mapping:?}): {in_flight} of {ROUNDS} new mappings made before \
         munmap returned ({taken} addresses taken by another thread first)"
    );
    assert_eq!(
        stale, 0,
        "{stale} of {ROUNDS} lookups of new memory hit the registration of what left \
         ({in_flight} mapped before munmap returned)"
    );
    assert!(
        in_flight > 0,
        "the unmap was never in flight when the address was mapped again: the case \
         did not test the window"
    );
    assert_eq!(c.stale, 0, "{}", c.stale_report());
}
