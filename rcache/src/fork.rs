//! Fork safety of pinned memory: `MADV_DONTFORK` on the pages of registrations whose
//! registrar pins them (verbs), counted so overlapping registrations set it once and
//! the last one to go clears it (`MADV_DOFORK`), as rdma-core's `ibv_fork_init` does.
//!
//! Without it, a parent that writes to a pinned page after `fork` may get a fresh copy
//! of the page (copy-on-write) while the device keeps the old one: its later transfers
//! would use memory the program no longer sees. (Kernels from 5.13 copy pinned pages
//! for the child at fork instead, which also keeps the parent right; the advice costs
//! nothing there and keeps older kernels right.) The child gets no copy of such pages:
//! touching them there faults, so a child must not use the parent's registered buffers.

use std::sync::Mutex;

use crate::monitor::PageCounts;

static COUNTS: Mutex<PageCounts> = Mutex::new(PageCounts::new());

fn advise(start: usize, end: usize, advice: libc::c_int) -> bool {
    // SAFETY: MADV_DONTFORK / MADV_DOFORK change only what fork copies, never the
    // contents or mapping of the range in this process.
    unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) == 0 }
}

/// Keeps `[start, start+len)` (page-aligned) out of fork children; false if the kernel
/// refused (the range is then not counted).
pub(crate) fn keep_from_children(start: usize, len: usize) -> bool {
    let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    if !advise(start, start + len, libc::MADV_DONTFORK) {
        tracing::debug!(
            start,
            len,
            error = %std::io::Error::last_os_error(),
            "rcache: MADV_DONTFORK refused"
        );
        return false;
    }
    counts.add(start, start + len);
    true
}

/// Undoes [`keep_from_children`] for the pages no other registration keeps.
pub(crate) fn release(start: usize, len: usize) {
    let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
    for (s, e) in counts.remove(start, start + len) {
        // Pages unmapped meanwhile are simply not found.
        advise(s, e, libc::MADV_DOFORK);
    }
}
