//! Turning SIGINT, SIGTERM and SIGHUP into a request to end the job while
//! [`launch`](super::launch) runs.
//!
//! The handlers only count signals (async-signal-safe atomics). They are installed
//! by the first concurrent launch and the previous ones restored by the last, so
//! several launches in one process (tests) share them; each launch notices the
//! signals that arrive after it started.

use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Signals received so far.
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// The last one.
static LAST: AtomicI32 = AtomicI32::new(0);

/// Launches under way and the handlers they replaced.
static INSTALLED: Mutex<(usize, Vec<libc::sigaction>)> = Mutex::new((0, Vec::new()));

extern "C" fn on_signal(signal: libc::c_int) {
    LAST.store(signal, Ordering::SeqCst);
    COUNT.fetch_add(1, Ordering::SeqCst);
}

/// The handlers, installed for as long as this lives.
pub(super) struct Watch {
    seen: usize,
}

impl Watch {
    /// Installs the handlers (if no other launch has) and starts watching.
    pub fn install() -> Self {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if installed.0 == 0 {
            installed.1.clear();
            for &signal in &SIGNALS {
                // SAFETY: sigaction is plain data; all-zero is a valid start.
                let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                // SAFETY: sigaction is plain data; all-zero is a valid start.
                let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
                // SAFETY: `action` has an empty mask and a handler that only touches
                // atomics; the previous action is written into `old`, which we own.
                unsafe {
                    libc::sigemptyset(&mut action.sa_mask);
                    libc::sigaction(signal, &action, &mut old);
                }
                installed.1.push(old);
            }
        }
        installed.0 += 1;
        Watch {
            seen: COUNT.load(Ordering::SeqCst),
        }
    }

    /// The latest signal if one arrived since this watch started.
    pub fn received(&self) -> Option<i32> {
        (COUNT.load(Ordering::SeqCst) != self.seen).then(|| LAST.load(Ordering::SeqCst))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        installed.0 -= 1;
        if installed.0 == 0 {
            for (&signal, old) in SIGNALS.iter().zip(installed.1.iter()) {
                // SAFETY: restores the action saved by `install` for this signal.
                unsafe { libc::sigaction(signal, old, std::ptr::null_mut()) };
            }
        }
    }
}
