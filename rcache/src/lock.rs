//! The cache lock: a flag and the state it guards, released with a plain store.
//!
//! A hit takes the lock once. `std::sync::Mutex` releases with an atomic exchange, to
//! learn whether a waiter sleeps on the word and must be woken: with the take, two
//! atomic read-modify-writes per hit, each the price of a cache miss on some
//! processors. Here the release is a store and a waiter does not sleep on the word:
//! it spins, then yields, then naps briefly between tries. Only a miss holds the lock
//! for long (the registrar's call, the monitor's watch), and next to that a nap costs
//! little. Written by hand for that one difference: the lock crates at hand either
//! wake sleepers (`std`, `parking_lot`) or only spin. Neither this nor `std`'s is fair.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_utils::Backoff;

/// A waiter's pause between tries once spinning and yielding did not get the lock.
const NAP: Duration = Duration::from_micros(20);

pub(crate) struct CacheLock<T> {
    held: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time
// (taken by a successful compare-exchange, given back by its drop), so the lock hands
// the value from thread to thread as a mutex does.
unsafe impl<T: Send> Sync for CacheLock<T> {}

impl<T> CacheLock<T> {
    pub(crate) const fn new(value: T) -> Self {
        CacheLock {
            held: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        if self
            .held
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.wait();
        }
        Guard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn wait(&self) {
        let backoff = Backoff::new();
        loop {
            // Tried only when seen free: spinning on a load leaves the holder's line
            // alone.
            if !self.held.load(Ordering::Relaxed)
                && self
                    .held
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return;
            }
            if backoff.is_completed() {
                std::thread::sleep(NAP);
            } else {
                backoff.snooze();
            }
        }
    }
}

/// The lock, held: the value while it lives, released when dropped (also when
/// unwinding).
pub(crate) struct Guard<'a, T> {
    lock: &'a CacheLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock: no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only one through it.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.lock.held.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Increments that are not atomic, made under the lock from several threads, some
    /// of them holding it long enough that the others nap: none is lost.
    #[test]
    fn one_holder_at_a_time() {
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 20_000;
        let lock = CacheLock::new(0u64);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let lock = &lock;
                s.spawn(move || {
                    for i in 0..ROUNDS {
                        let mut g = lock.lock();
                        let v = *g;
                        if (i + t) % 5_000 == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        } else {
                            std::hint::spin_loop();
                        }
                        *g = v + 1;
                    }
                });
            }
        });
        assert_eq!(*lock.lock(), THREADS * ROUNDS);
    }

    #[test]
    fn a_panic_while_held_releases_it() {
        let lock = CacheLock::new(1);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _g = lock.lock();
            panic!("inside");
        }));
        assert!(caught.is_err());
        assert_eq!(*lock.lock(), 1);
    }
}
