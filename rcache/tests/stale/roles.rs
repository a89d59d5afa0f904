//! Cases that need a process of their own: this binary runs itself again with
//! `RBTL_STALE_ROLE` set and only `role_entry` selected, on one test thread.
//!
//! - `refused`: as an ordinary user (uid 65534) whose `userfaultfd(2)` a seccomp filter
//!   refuses and who may not open /dev/userfaultfd: the reason is typed, and a cache
//!   that asked for the monitor keeps nothing idle.
//! - `ordinary`: as an ordinary user while `vm.unprivileged_userfaultfd` is 0: the
//!   monitor runs with `UFFD_USER_MODE_ONLY` and catches an unmap.
//! - `brk`: memory taken with `sbrk` and given back by a shrinking `brk`.
//! - `in_flight`, `in_flight_raw`: new memory mapped where an unmap has freed the
//!   range but not yet returned, through libc with the mapping hooks and by a raw
//!   system call without them (see `in_flight`).
//! - `fork_child`: a fork child that registers and unmaps memory, its own and the
//!   parent's (see `fork`).

use std::process::Command;
use std::time::{Duration, Instant};

use rbtl_rcache::monitor::{self, Opened, Status, Unavailable};
use rbtl_rcache::{Options, Rcache};

use crate::memory::{fill, map, map_again, unmap, Checker, FrameRegistrar, PS, RW};

pub(crate) const NOBODY: libc::uid_t = 65534;

fn run_role(role: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "roles::role_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RBTL_STALE_ROLE", role)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("role {role} did not end within 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains(&format!("role {role} ok")),
        "role {role} failed: {text}"
    );
}

#[test]
fn without_userfaultfd_the_reason_is_typed_and_nothing_is_kept_idle() {
    run_role("refused");
}

#[test]
fn an_ordinary_user_gets_the_user_mode_only_monitor() {
    run_role("ordinary");
}

#[test]
fn a_shrinking_brk_invalidates() {
    run_role("brk");
}

#[test]
fn new_memory_mapped_while_its_munmap_is_in_flight_is_a_miss() {
    run_role("in_flight");
}

#[test]
fn new_memory_mapped_by_a_raw_system_call_while_its_munmap_is_in_flight_is_a_miss_without_hooks() {
    run_role("in_flight_raw");
}

#[test]
fn a_fork_child_never_hits_memory_that_left_nor_disturbs_the_parents_monitor() {
    run_role("fork_child");
}

#[test]
fn role_entry() {
    let Ok(role) = std::env::var("RBTL_STALE_ROLE") else {
        return;
    };
    match role.as_str() {
        "refused" => role_refused(),
        "ordinary" => role_ordinary(),
        "brk" => role_brk(),
        "in_flight" => crate::in_flight::role_in_flight(crate::in_flight::Mapping::Hooked),
        "in_flight_raw" => {
            crate::in_flight::role_in_flight(crate::in_flight::Mapping::RawEachLookup)
        }
        "fork_child" => crate::fork::role_fork_child(),
        other => panic!("unknown RBTL_STALE_ROLE {other:?}"),
    }
    println!("role {role} ok");
}

fn become_nobody() {
    // SAFETY: drops this process's privileges; nothing else depends on them.
    unsafe {
        assert_eq!(libc::setgroups(0, std::ptr::null()), 0);
        assert_eq!(libc::setgid(NOBODY), 0);
        assert_eq!(libc::setuid(NOBODY), 0);
    }
}

/// Makes `userfaultfd(2)` fail with EPERM in this process from now on.
fn refuse_userfaultfd() {
    let nr = libc::SYS_userfaultfd as u32;
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: nr,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: installs a filter program that lives across the call (the kernel copies
    // it); it only turns one system call into an error.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn role_refused() {
    become_nobody();
    refuse_userfaultfd();
    let status = monitor::status();
    let Status::None(Unavailable::Refused { syscall, device }) = &status else {
        panic!("expected a refusal, got {status:?}");
    };
    assert!(syscall.contains("not permitted"), "{syscall}");
    assert!(device.contains("denied"), "{device}");
    let message = status.to_string();
    assert!(message.contains("/dev/userfaultfd") && message.contains("unprivileged_userfaultfd"));
    let cache = Rcache::new(
        FrameRegistrar::recording(false),
        Options {
            leave_pinned: true,
            ..Options::default()
        },
    );
    assert!(!cache.is_monitored());
    let a = map(None, 2 * PS);
    let r = cache.register(a, 2 * PS, RW).unwrap();
    assert!(!r.is_watched());
    drop(r);
    assert_eq!(cache.stats().entries, 0, "no monitor: nothing kept idle");
    unmap(a, 2 * PS);
}

fn role_ordinary() {
    become_nobody();
    let status = monitor::status();
    assert!(
        matches!(
            status,
            Status::Userfaultfd {
                opened: Opened::SyscallUserModeOnly,
                ..
            }
        ),
        "{status:?}"
    );
    let mut c = Checker::new();
    for _ in 0..20 {
        let a = map(None, 2 * PS);
        let id = c.lookup(a, 2 * PS).id();
        unmap(a, 2 * PS);
        // Another thread may take the address first (its signal stack, say).
        if map_again(a, 2 * PS).is_some() {
            assert_ne!(c.lookup(a, 2 * PS).id(), id, "a stale hit after munmap");
            unmap(a, 2 * PS);
            return;
        }
    }
    panic!("other threads took the freed address 20 times in a row");
}

fn role_brk() {
    let mut c = Checker::new();
    // Warm the cache's and the monitor's own allocations up on other memory, so that
    // malloc needs no more heap while the break is ours.
    for _ in 0..4 {
        let m = map(None, 4 * PS);
        drop(c.lookup(m, 4 * PS));
        unmap(m, 4 * PS);
        drop(c.cache.register(0x1000, 1, RW).err());
    }
    // SAFETY: sbrk(0) reads the break; the next calls move it by whole pages that only
    // this function uses, and give them back before returning.
    unsafe {
        let cur = libc::sbrk(0) as usize;
        let start = (cur + PS - 1) & !(PS - 1);
        let grow = (start - cur + 4 * PS) as libc::intptr_t;
        assert_ne!(libc::sbrk(grow) as isize, -1);
        fill(start, 4 * PS, 5);
        let id = c.lookup(start, 4 * PS).id();
        assert_eq!(
            libc::sbrk(0) as usize,
            start + 4 * PS,
            "malloc moved the break meanwhile"
        );
        assert_ne!(libc::sbrk(-(4 * PS as libc::intptr_t)) as isize, -1);
        assert_ne!(libc::sbrk(4 * PS as libc::intptr_t) as isize, -1);
        fill(start, 4 * PS, 6);
        let again = c.lookup(start, 4 * PS);
        assert_ne!(again.id(), id, "a stale hit after brk shrank");
        assert_eq!(c.stale, 0, "{}", c.stale_report());
        drop(again);
        c.cache.flush_idle();
        assert_eq!(
            libc::sbrk(0) as usize,
            start + 4 * PS,
            "malloc moved the break meanwhile"
        );
        assert_ne!(libc::sbrk(-grow) as isize, -1);
    }
}
