//! Cross-memory attach: `process_vm_readv`/`process_vm_writev`, one copy between two
//! processes' address spaces, no shared mapping needed.

use std::io;

/// Which way the bytes go.
#[derive(Clone, Copy, Debug)]
pub enum Direction {
    /// Local to remote (`process_vm_writev`).
    Write,
    /// Remote to local (`process_vm_readv`).
    Read,
}

/// Let the node's other processes of this user attach to this one where the Yama
/// security module restricts it to ancestors (`kernel.yama.ptrace_scope = 1`), as
/// Open MPI's `vader` does for cross-memory attach. Without Yama the call fails with
/// `EINVAL` and nothing changes; under scopes 2 and 3 the kernel still refuses, and
/// peers find out with their probe ([`works_with`]).
pub fn let_peers_attach() {
    // SAFETY: a process attribute, no memory passed.
    let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if r != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "prctl(PR_SET_PTRACER) not applied");
    }
}

/// Copy `len` bytes between local `local` and `remote` in process `pid`, looping over
/// partial transfers.
///
/// # Safety
///
/// `[local, local+len)` must be valid for the direction (readable for Write, writable
/// for Read) and not aliased by a Rust reference for the duration.
pub unsafe fn copy(
    pid: i32,
    dir: Direction,
    local: usize,
    remote: u64,
    len: usize,
) -> io::Result<()> {
    let mut done = 0;
    while done < len {
        let l = libc::iovec {
            iov_base: (local + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let r = libc::iovec {
            iov_base: (remote as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: one local and one remote iovec describing the ranges of the
        // contract; the kernel checks the remote one against the target's mappings.
        let n = unsafe {
            match dir {
                Direction::Write => libc::process_vm_writev(pid, &l, 1, &r, 1, 0),
                Direction::Read => libc::process_vm_readv(pid, &l, 1, &r, 1, 0),
            }
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "no progress")),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Whether cross-memory attach to `pid` works from here: a one-byte read of the
/// target's own copy of `probe` (an address valid in both processes, such as a shared
/// mapping seen at the same address or, for a forked peer, any static).
pub fn works_with(pid: i32, probe: u64) -> bool {
    let mut byte = 0u8;
    // SAFETY: one writable local byte.
    unsafe {
        copy(
            pid,
            Direction::Read,
            &mut byte as *mut u8 as usize,
            probe,
            1,
        )
    }
    .is_ok()
}
