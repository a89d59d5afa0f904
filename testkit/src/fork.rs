//! A fork child kept alive while the parent works.

/// Forks a child that waits for a byte on a pipe, then exits with the code `child`
/// returns (which must call only async-signal-safe functions and touch nothing of
/// the parent's memory but reads); runs `meanwhile` in the parent while the child
/// lives; returns the child's wait status and what `meanwhile` returned.
///
/// # Panics
///
/// If the pipe or the fork fails.
pub fn with_child<T>(child: fn() -> i32, meanwhile: impl FnOnce() -> T) -> (i32, T) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: the child calls only read, `child` (async-signal-safe, the caller's
    // contract) and _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mut b = 0u8;
        // SAFETY: reads one byte into `b` from the pipe the parent writes.
        unsafe { libc::read(fds[0], (&mut b as *mut u8).cast(), 1) };
        let code = child();
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
