//! With the monitor's mapping hooks in place (libc's `mmap`, `mremap`, `shmat` and
//! `brk` replaced by functions that make the system call and count the mapping), each
//! answers as libc's own: the same results, the same `errno` on failure.

use std::io::Error;

use rbtl_rcache::monitor::{self, Status};

use crate::memory::{fill, Checker, PS};

fn errno() -> Option<i32> {
    Error::last_os_error().raw_os_error()
}

const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;
const PRIVATE: i32 = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;

#[test]
fn libc_mapping_functions_answer_as_before_under_the_hooks() {
    let _c = Checker::new();
    let status = monitor::status();
    let Status::Userfaultfd { mapping_hooks, .. } = &status else {
        panic!("{status}");
    };
    if mapping_hooks.is_err() {
        let why = format!("{status}");
        return rbtl_testkit::cannot_run("the mapping hooks' answers", &why);
    }
    // SAFETY: each call maps, moves or unmaps memory of this test's own, referred to
    // only through the addresses these calls return.
    unsafe {
        let null = std::ptr::null_mut();
        assert_eq!(libc::mmap(null, 0, RW, PRIVATE, -1, 0), libc::MAP_FAILED);
        assert_eq!(errno(), Some(libc::EINVAL), "mmap of 0 bytes");
        assert_eq!(libc::mmap(null, PS, RW, PRIVATE, -1, 1), libc::MAP_FAILED);
        assert_eq!(errno(), Some(libc::EINVAL), "mmap at an unaligned offset");

        let a = libc::mmap(null, PS, RW, PRIVATE, -1, 0);
        assert_ne!(a, libc::MAP_FAILED, "{}", Error::last_os_error());
        fill(a as usize, PS, 3);
        let b = libc::mremap(a, PS, 4 * PS, libc::MREMAP_MAYMOVE);
        assert_ne!(b, libc::MAP_FAILED, "{}", Error::last_os_error());
        assert_eq!(*(b as *const u8), 3, "mremap kept the contents");
        assert_eq!(libc::mremap(b, 4 * PS, 8 * PS, 0x100), libc::MAP_FAILED);
        assert_eq!(errno(), Some(libc::EINVAL), "mremap with unknown flags");
        let to = libc::mmap(null, 4 * PS, libc::PROT_NONE, PRIVATE, -1, 0);
        assert_ne!(to, libc::MAP_FAILED);
        let moved = libc::mremap(
            b,
            4 * PS,
            4 * PS,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to,
        );
        assert_eq!(
            moved,
            to,
            "mremap to a fixed address: {}",
            Error::last_os_error()
        );
        assert_eq!(*(to as *const u8), 3, "moved with its contents");
        assert_eq!(libc::munmap(to, 4 * PS), 0);

        assert_eq!(libc::shmat(-1, null, 0) as isize, -1);
        assert_eq!(errno(), Some(libc::EINVAL), "shmat of no segment");
        let id = libc::shmget(libc::IPC_PRIVATE, PS, libc::IPC_CREAT | 0o600);
        assert!(id >= 0, "shmget: {}", Error::last_os_error());
        let s = libc::shmat(id, null, 0);
        assert_ne!(s as isize, -1, "shmat: {}", Error::last_os_error());
        fill(s as usize, PS, 4);
        assert_eq!(libc::shmdt(s), 0);
        assert_eq!(libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()), 0);

        let cur = libc::sbrk(0);
        assert_eq!(libc::brk(usize::MAX as *mut libc::c_void), -1);
        assert_eq!(errno(), Some(libc::ENOMEM), "brk past the address space");
        assert_eq!(libc::sbrk(0), cur, "a refused brk keeps the break");
    }
}
