//! The system page size, to which registrations are widened.

use std::sync::atomic::{AtomicUsize, Ordering};

static PAGE: AtomicUsize = AtomicUsize::new(0);

/// System page size (from `sysconf(_SC_PAGESIZE)`, cached; 4096 if unavailable).
#[inline]
pub fn page_size() -> usize {
    let p = PAGE.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    ask_page_size()
}

#[cold]
fn ask_page_size() -> usize {
    // SAFETY: sysconf has no preconditions and only reads system configuration.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let p = if v > 0 && (v as usize).is_power_of_two() {
        v as usize
    } else {
        4096
    };
    PAGE.store(p, Ordering::Relaxed);
    p
}
