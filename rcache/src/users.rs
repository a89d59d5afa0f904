//! Who retires a registration: its number of users and its `DEAD` bit, in one atomic
//! word, so that a release needs no lock unless it retires.
//!
//! The rules (the cache relies on each of them):
//!
//! * A registration gains a user under the cache lock (a hit, or its creation), or
//!   from a user it already has (a clone). So a registration with no users changes
//!   only under the cache lock: the lock holder may take "idle" as stable.
//! * `DEAD` is set under the cache lock, once, when the registration becomes
//!   unreachable: invalidated, replaced by an access upgrade, evicted, flushed, or its
//!   cache dropped. It is never cleared.
//! * A user lets go with one atomic subtraction, without the lock.
//! * The registration is retired (deregistered, its slot freed) by whoever brings the
//!   word to "no users and `DEAD`": the one setting `DEAD` when it has no users
//!   ([`Users::kill`] returns true), or the last user letting go of a `DEAD` one
//!   ([`Users::release`] returns [`Released::Retire`]). Both are single
//!   read-modify-writes of the one word, so exactly one of them sees that transition:
//!   a registration is retired exactly once, and never while it has a user.

use std::sync::atomic::{fence, AtomicUsize, Ordering};

/// Unreachable: the last user retires it.
const DEAD: usize = 1;
/// One user.
const ONE: usize = 2;
/// Beyond this many users (in units of [`ONE`]) the count could wrap: abort, as
/// `Arc` does.
const MAX: usize = usize::MAX / 2;

/// The users of one registration and its `DEAD` bit.
#[derive(Debug)]
pub(crate) struct Users(AtomicUsize);

/// What a release left behind.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// Other users remain.
    Others,
    /// That was the last user of a reachable registration: it is idle now.
    Idle,
    /// That was the last user of an unreachable registration: the caller retires it.
    Retire,
}

impl Users {
    /// A new registration, with its first user.
    pub(crate) const fn one() -> Users {
        Users(AtomicUsize::new(ONE))
    }

    /// Adds a user. Only under the cache lock, or by a current user (a clone).
    #[inline]
    pub(crate) fn add(&self) {
        // Relaxed, as `Arc::clone`: the caller already holds the registration (a user,
        // or the lock that keeps an idle one in place), so nothing needs ordering here.
        let old = self.0.fetch_add(ONE, Ordering::Relaxed);
        if old > MAX {
            std::process::abort();
        }
    }

    /// Lets one user go. After it returns anything but [`Released::Retire`], the
    /// registration may be retired by another thread at any moment: the caller must not
    /// touch it again.
    #[inline]
    pub(crate) fn release(&self) -> Released {
        let old = self.0.fetch_sub(ONE, Ordering::Release);
        debug_assert!(old >= ONE, "a release without a user");
        match old {
            o if o == ONE | DEAD => {
                // Everything the other users did happens before the retire (`Arc`'s
                // pattern: their release-subtractions, then this acquire).
                fence(Ordering::Acquire);
                Released::Retire
            }
            ONE => Released::Idle,
            _ => Released::Others,
        }
    }

    /// Marks the registration unreachable (under the cache lock); true when it has no
    /// users, so that the caller retires it now. False when it was already `DEAD`
    /// (someone else is responsible) or when users remain (the last one retires it).
    pub(crate) fn kill(&self) -> bool {
        self.0.fetch_or(DEAD, Ordering::AcqRel) == 0
    }

    /// No users and reachable: an idle registration kept for reuse (stable under the
    /// cache lock).
    pub(crate) fn is_idle(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// Unreachable since [`Users::kill`].
    pub(crate) fn is_dead(&self) -> bool {
        self.0.load(Ordering::Acquire) & DEAD != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Barrier;

    #[test]
    fn last_release_of_a_live_registration_leaves_it_idle() {
        let u = Users::one();
        u.add();
        assert_eq!(u.release(), Released::Others);
        assert!(!u.is_idle());
        assert_eq!(u.release(), Released::Idle);
        assert!(u.is_idle() && !u.is_dead());
        // A hit on the idle registration, then it is killed in use.
        u.add();
        assert!(!u.kill(), "in use: the last user retires it");
        assert!(u.is_dead() && !u.is_idle());
        assert!(!u.kill(), "killed twice: still not the killer's to retire");
        assert_eq!(u.release(), Released::Retire);
    }

    #[test]
    fn killing_an_idle_registration_retires_it_at_once() {
        let u = Users::one();
        assert_eq!(u.release(), Released::Idle);
        assert!(u.kill());
        assert!(!u.kill(), "only the first kill retires");
    }

    /// Releases and a kill race on one word: exactly one side retires, every round.
    #[test]
    fn exactly_one_retire_when_releases_race_a_kill() {
        const USERS: usize = 3;
        const ROUNDS: usize = 2_000;
        for round in 0..ROUNDS {
            let u = Users::one();
            for _ in 1..USERS {
                u.add();
            }
            let retires = AtomicU32::new(0);
            let start = Barrier::new(USERS + 1);
            std::thread::scope(|s| {
                for _ in 0..USERS {
                    s.spawn(|| {
                        start.wait();
                        if u.release() == Released::Retire {
                            retires.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                }
                start.wait();
                if u.kill() {
                    retires.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert_eq!(retires.load(Ordering::Relaxed), 1, "round {round}");
            assert!(u.is_dead());
        }
    }
}
