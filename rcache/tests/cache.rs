//! Behaviour of the registration cache with a counting, checking registrar.
mod common;

use std::sync::Arc;

use common::{Shared, TestRegistrar, PS, UNMONITORED};
use rbtl_rcache::{
    libfabric, page_size, Access, Error, Options, Rcache, RegistrarError, Registration, Stats,
};

const B: usize = 0x4000_0000;
const R: Access = Access::LOCAL_READ;

/// A cache over made-up addresses, which no memory monitor can watch: the caller
/// reports freed memory (`invalidate`) itself.
fn cache(options: Options) -> Arc<Rcache<TestRegistrar>> {
    assert_eq!(page_size(), PS, "tests assume 4 KiB pages");
    Rcache::new(
        TestRegistrar::new(),
        Options {
            monitor: false,
            ..options
        },
    )
}

/// A cache as [`cache`] makes, of `max_entries` registrations at most.
fn cache_of_entries(max_entries: usize) -> Arc<Rcache<TestRegistrar>> {
    cache(Options {
        max_entries,
        ..Options::default()
    })
}

/// `N` registrations of one page each, from `B` on, a page apart (none covers another).
fn pages_apart<const N: usize>(c: &Rcache<TestRegistrar>) -> [Registration<TestRegistrar>; N] {
    std::array::from_fn(|i| c.register(B + 2 * i * PS, PS, R).unwrap())
}

fn seq(r: &Registration<TestRegistrar>) -> u64 {
    r.handle().seq
}

/// Registers the page at `B` and releases it at once: its sequence number. The page
/// stays registered, idle in the cache.
fn idle_page(c: &Rcache<TestRegistrar>) -> u64 {
    let r = c.register(B, PS, R).unwrap();
    let s = seq(&r);
    drop(r);
    assert!(c.registrar().is_live(s), "an idle registration is kept");
    s
}

#[test]
fn hit_and_miss() {
    let c = cache(Options::default());
    let a = c.register(B + 100, 200, R).unwrap();
    assert_eq!(c.stats().misses, 1);
    assert_eq!(c.stats().hits, 0);
    let b = c.register(B + 1000, 3000, R).unwrap();
    assert_eq!(a.id(), b.id());
    assert_eq!(seq(&a), seq(&b));
    assert_eq!(c.stats().hits, 1);
    // Next page: not covered, a miss.
    let d = c.register(B + PS, 1, R).unwrap();
    assert_ne!(d.id(), a.id());
    // Spanning both pages: neither single-page registration covers it.
    let e = c.register(B + PS - 1, 2, R).unwrap();
    assert_ne!(e.id(), a.id());
    assert_ne!(e.id(), d.id());
    assert_eq!((e.base(), e.len()), (B, 2 * PS));
    // Now the two-page one covers sub-ranges of either page.
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.entries), (1, 3, 3));
    assert_eq!(c.registrar().registers(), 3);
    drop((a, b, d, e));
}

#[test]
fn page_alignment_and_covers() {
    let c = cache(Options::default());
    let a = c.register(B + 1, 1, R).unwrap();
    assert_eq!((a.base(), a.len()), (B, PS));
    assert!(a.covers(B, PS));
    assert!(a.covers(B + 5, 10));
    assert!(!a.covers(B + PS - 1, 2));
    assert!(!a.covers(B - 1, 1));
    assert!(!a.covers(usize::MAX, 2));
    let b = c.register(B + 3 * PS - 1, PS + 2, R).unwrap();
    assert_eq!((b.base(), b.len()), (B + 2 * PS, 3 * PS));
    let h = c.registrar().dereg_order();
    assert!(h.is_empty());
    assert_eq!(c.stats().bytes_pinned, 4 * PS);
    assert_eq!(c.registrar().pinned(), 4 * PS);
}

#[test]
fn zero_length_and_overflow() {
    let c = cache(Options::default());
    assert!(matches!(c.register(B, 0, R), Err(Error::ZeroLength)));
    assert!(matches!(
        c.register(usize::MAX - 10, 100, R),
        Err(Error::Overflow { base, len: 100 }) if base == usize::MAX - 10
    ));
    // base + len fits, but rounding up to a page does not.
    assert!(matches!(
        c.register(usize::MAX - 10, 5, R),
        Err(Error::Overflow { .. })
    ));
    let msg = Error::ZeroLength.to_string();
    assert!(msg.contains("len >= 1"), "{msg}");
    assert_eq!(c.registrar().registers(), 0);
    assert_eq!(c.stats().misses, 0);
}

#[test]
fn access_union_replaces_and_retires_old() {
    let c = cache(Options::default());
    let old = c
        .register(B, 4 * PS, Access::LOCAL_READ | Access::REMOTE_READ)
        .unwrap();
    // Covered and a subset of the access: a hit.
    let hit = c.register(B + PS, PS, Access::REMOTE_READ).unwrap();
    assert_eq!(hit.id(), old.id());
    drop(hit);
    // Covered but lacking REMOTE_WRITE: a new registration of the old range with the union.
    let new = c.register(B + PS, 10, Access::REMOTE_WRITE).unwrap();
    assert_ne!(new.id(), old.id());
    assert_eq!(
        new.access(),
        Access::LOCAL_READ | Access::REMOTE_READ | Access::REMOTE_WRITE
    );
    assert_eq!((new.base(), new.len()), (old.base(), old.len()));
    assert!(!old.is_valid());
    assert!(new.is_valid());
    // The old one is in use: still registered until released.
    assert!(c.registrar().is_live(seq(&old)));
    assert_eq!(c.stats().entries, 2);
    // Lookups with the old access now find the new one.
    let again = c.register(B, PS, Access::LOCAL_READ).unwrap();
    assert_eq!(again.id(), new.id());
    let old_seq = seq(&old);
    drop(old);
    assert!(!c.registrar().is_live(old_seq));
    assert_eq!(c.registrar().dereg_order(), vec![old_seq]);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.entries, s.invalidations), (2, 2, 1, 0));
    drop((new, again));
    assert_eq!(c.stats().idle_entries, 1);
}

#[test]
fn access_upgrade_of_idle_entry_deregisters_it_at_once() {
    let c = cache(Options::default());
    let old_seq = idle_page(&c);
    let new = c.register(B, PS, Access::LOCAL_WRITE).unwrap();
    assert_eq!(new.access(), Access::LOCAL_READ | Access::LOCAL_WRITE);
    assert_eq!(c.registrar().dereg_order(), vec![old_seq]);
    assert_eq!(c.stats().entries, 1);
    assert_eq!(c.stats().idle_entries, 0);
}

#[test]
fn leave_pinned_on_keeps_idle_registrations() {
    let c = cache(Options::default());
    let s = idle_page(&c);
    assert_eq!(c.stats().idle_entries, 1);
    let b = c.register(B, PS, R).unwrap();
    assert_eq!(seq(&b), s);
    assert_eq!(c.stats().idle_entries, 0);
    assert_eq!(c.stats().hits, 1);
    drop(b);
    c.flush_idle();
    assert!(!c.registrar().is_live(s));
    assert_eq!(
        c.stats(),
        Stats {
            hits: 1,
            misses: 1,
            ..Stats::default()
        }
    );
}

#[test]
fn leave_pinned_off_deregisters_on_last_release() {
    let c = cache(Options {
        leave_pinned: false,
        ..Options::default()
    });
    let a = c.register(B, PS, R).unwrap();
    let a2 = a.clone();
    let hit = c.register(B, 10, R).unwrap();
    assert_eq!(hit.id(), a.id());
    let s = seq(&a);
    drop(a);
    drop(hit);
    assert!(c.registrar().is_live(s), "still referenced by a clone");
    assert!(a2.is_valid());
    drop(a2);
    assert!(!c.registrar().is_live(s));
    assert_eq!(c.registrar().deregisters(), 1);
    assert_eq!(c.stats().entries, 0);
    assert_eq!(c.stats().idle_entries, 0);
    let b = c.register(B, PS, R).unwrap();
    assert!(seq(&b) > s);
    assert_eq!(c.stats().misses, 2);
}

/// Eviction sweeps from the oldest registration: one in use moves on, never evicted;
/// one hit since the sweep last passed gets a second chance; the first idle one not
/// hit since goes.
#[test]
fn eviction_takes_the_oldest_idle_with_a_second_chance_for_hits() {
    let c = cache_of_entries(3);
    let [a, b, d] = pages_apart(&c);
    let (sa, sb) = (seq(&a), seq(&b));
    drop(b);
    drop(a);
    // A hit on a, made before b: it is spared once.
    drop(c.register(B, PS, R).unwrap());
    let e = c.register(B + 6 * PS, PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![sb]);
    // d is in use and passed over; a's second chance is spent.
    let f = c.register(B + 8 * PS, PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![sb, sa]);
    let se = seq(&e);
    drop(e);
    let g = c.register(B + 10 * PS, PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![sb, sa, se]);
    let s = c.stats();
    assert_eq!((s.evictions, s.entries, s.idle_entries), (3, 3, 0));
    assert!(d.is_valid());
    // Everything in use: nothing to evict.
    assert!(matches!(
        c.register(B + 12 * PS, PS, R),
        Err(Error::LimitExceeded { .. })
    ));
    drop((d, f, g));
    assert_eq!(c.stats().idle_entries, 3);
}

#[test]
fn lru_eviction_under_max_pinned_bytes() {
    let c = cache(Options {
        max_pinned_bytes: 4 * PS,
        ..Options::default()
    });
    let a = c.register(B, PS, R).unwrap();
    let b = c.register(B + 2 * PS, 2 * PS, R).unwrap();
    let (sa, sb) = (seq(&a), seq(&b));
    drop(a);
    drop(b);
    // 3 pages pinned; 2 more need 1 page freed: only the oldest one (a) goes.
    let d = c.register(B + 8 * PS, 2 * PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![sa]);
    assert!(c.registrar().is_live(sb));
    assert_eq!(c.stats().bytes_pinned, 4 * PS);
    // Larger than the limit on its own: refused without evicting anything.
    let err = c.register(B + 16 * PS, 5 * PS, R).unwrap_err();
    assert!(
        matches!(err, Error::LimitExceeded { requested, .. } if requested == 5 * PS),
        "{err}"
    );
    assert_eq!(c.registrar().dereg_order(), vec![sa]);
    // Needs b evicted too.
    let e = c.register(B + 16 * PS, 2 * PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![sa, sb]);
    assert_eq!(c.stats().evictions, 2);
    assert_eq!(c.registrar().pinned(), 4 * PS);
    drop((d, e));
}

#[test]
fn limit_exceeded_when_everything_is_in_use() {
    let c = cache_of_entries(2);
    let [a, b] = pages_apart(&c);
    let err = c.register(B + 4 * PS, PS, R).unwrap_err();
    match &err {
        Error::LimitExceeded {
            entries,
            max_entries,
            ..
        } => assert_eq!((*entries, *max_entries), (2, 2)),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
    assert!(err.to_string().contains("release registrations"), "{err}");
    assert!(a.is_valid() && b.is_valid());
    assert_eq!(c.registrar().registers(), 2);
    assert_eq!(c.stats().evictions, 0);
    // Hits still work at the limit.
    assert_eq!(c.register(B, 1, R).unwrap().id(), a.id());
    drop(b);
    // Now one is idle and can be evicted.
    let d = c.register(B + 4 * PS, PS, R).unwrap();
    assert_eq!(c.stats().evictions, 1);
    drop((a, d));
}

#[test]
fn out_of_resources_evicts_lru_and_retries() {
    let c = Rcache::new(TestRegistrar::with_oor_above(3 * PS), UNMONITORED);
    let regs: Vec<_> = (0..3)
        .map(|i| c.register(B + 2 * i * PS, PS, R).unwrap())
        .collect();
    let seqs: Vec<u64> = regs.iter().map(seq).collect();
    drop(regs); // oldest first: 0, 1, 2
    let d = c.register(B + 10 * PS, PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), vec![seqs[0]]);
    // Two pages: needs two evictions (1 and 2), retried each time.
    let e = c.register(B + 20 * PS, 2 * PS, R).unwrap();
    assert_eq!(c.registrar().dereg_order(), seqs.clone());
    assert_eq!(c.stats().evictions, 3);
    // Everything is in use now: the registrar's error comes back.
    let err = c.register(B + 30 * PS, PS, R).unwrap_err();
    assert!(
        matches!(err, Error::Registrar(RegistrarError::OutOfResources(_))),
        "{err}"
    );
    assert!(d.is_valid() && e.is_valid());
    assert_eq!(c.stats().entries, 2);
    drop((d, e));
}

#[test]
fn other_registrar_errors_are_not_retried() {
    struct Failing;
    impl rbtl_rcache::Registrar for Failing {
        type Handle = ();
        fn register(&self, _: usize, _: usize, _: Access) -> Result<(), RegistrarError> {
            Err(RegistrarError::Failed("EINVAL".into()))
        }
        fn deregister(&self, _: ()) {
            panic!("nothing was registered");
        }
        fn pins_pages(&self) -> bool {
            false
        }
    }
    let c = Rcache::new(Failing, UNMONITORED);
    let err = c.register(B, 1, R).unwrap_err();
    assert!(
        matches!(err, Error::Registrar(RegistrarError::Failed(ref m)) if m == "EINVAL"),
        "{err}"
    );
    assert_eq!(c.stats().entries, 0);
}

#[test]
fn invalidate_idle_now_in_use_on_release() {
    let c = cache(Options::default());
    let idle = c.register(B, PS, R).unwrap();
    let used = c.register(B + 2 * PS, 2 * PS, R).unwrap();
    let other = c.register(B + 8 * PS, PS, R).unwrap();
    let (si, su, so) = (seq(&idle), seq(&used), seq(&other));
    drop(idle);
    drop(other);
    // Exact byte overlap: a range ending right at a registration does not touch it.
    assert_eq!(c.invalidate(B + 4 * PS, PS), 0);
    assert_eq!(c.invalidate(B - PS, PS), 0);
    // [B + PS - 1, B + 2 * PS + 1) overlaps idle (last byte) and used (first byte).
    assert_eq!(c.invalidate(B + PS - 1, PS + 2), 2);
    assert_eq!(c.registrar().dereg_order(), vec![si]);
    assert!(c.registrar().is_live(su));
    assert!(!used.is_valid());
    assert!(c.registrar().is_live(so));
    // Unreachable: a lookup registers anew.
    let fresh = c.register(B + 2 * PS, PS, R).unwrap();
    assert!(seq(&fresh) > su);
    // Already invalid entries are not counted again.
    assert_eq!(c.invalidate(B + 2 * PS, PS), 1);
    assert!(!fresh.is_valid());
    let clone = used.clone();
    drop(used);
    assert!(c.registrar().is_live(su));
    drop(clone);
    assert_eq!(c.registrar().dereg_order(), vec![si, su]);
    let sf = seq(&fresh);
    drop(fresh);
    assert_eq!(c.registrar().dereg_order(), vec![si, su, sf]);
    let s = c.stats();
    assert_eq!(
        (s.invalidations, s.entries, s.idle_entries, s.bytes_pinned),
        (3, 1, 1, PS)
    );
    assert!(c.registrar().is_live(so));
    assert_eq!(c.invalidate(0, usize::MAX), 1);
    assert_eq!(c.invalidate(0, 0), 0);
    assert_eq!(c.registrar().live_count(), 0);
}

#[test]
fn invalidate_finds_long_registrations_starting_far_below() {
    let c = cache(Options::default());
    let long = c.register(B, 1000 * PS, R).unwrap();
    let smalls: Vec<_> = (0..50)
        .map(|i| c.register(B + 2000 * PS + 2 * i * PS, PS, R).unwrap())
        .collect();
    // Lookup deep inside the long one.
    assert_eq!(c.register(B + 900 * PS, PS, R).unwrap().id(), long.id());
    assert_eq!(c.invalidate(B + 999 * PS, 1), 1);
    assert!(!long.is_valid());
    assert!(smalls.iter().all(|s| s.is_valid()));
}

#[test]
fn hit_among_ten_thousand() {
    let c = cache(Options::default());
    for i in 0..10_000 {
        drop(c.register(B + 2 * i * PS, PS, R).unwrap());
    }
    for i in (0..10_000).step_by(7) {
        let r = c.register(B + 2 * i * PS + 100, 100, R).unwrap();
        assert_eq!(r.base(), B + 2 * i * PS);
    }
    let s = c.stats();
    assert_eq!(
        (s.misses, s.hits, s.entries, s.idle_entries),
        (10_000, 1429, 10_000, 10_000)
    );
    c.flush_idle();
    assert_eq!(c.registrar().live_count(), 0);
}

#[test]
fn stats_track_everything() {
    let c = cache_of_entries(2);
    let a = c.register(B, 2 * PS, R).unwrap();
    let _hit = c.register(B, PS, R).unwrap();
    let b = c.register(B + 4 * PS, PS, R).unwrap();
    assert_eq!(
        c.stats(),
        Stats {
            hits: 1,
            misses: 2,
            evictions: 0,
            invalidations: 0,
            bytes_pinned: 3 * PS,
            entries: 2,
            idle_entries: 0
        }
    );
    drop(b);
    assert_eq!(c.stats().idle_entries, 1);
    let d = c.register(B + 8 * PS, PS, R).unwrap();
    c.invalidate(B, 1);
    assert_eq!(
        c.stats(),
        Stats {
            hits: 1,
            misses: 3,
            evictions: 1,
            invalidations: 1,
            bytes_pinned: 3 * PS,
            entries: 2,
            idle_entries: 0
        }
    );
    drop((a, _hit, d));
    c.flush_idle();
    let s = c.stats();
    assert_eq!((s.bytes_pinned, s.entries, s.idle_entries), (0, 0, 0));
    assert_eq!(c.registrar().live_count(), 0);
    assert_eq!(c.registrar().registers(), c.registrar().deregisters());
}

#[test]
fn flush_idle_keeps_in_use() {
    let c = cache(Options::default());
    let a = c.register(B, PS, R).unwrap();
    drop(c.register(B + 2 * PS, PS, R).unwrap());
    c.flush_idle();
    assert_eq!(c.registrar().live_count(), 1);
    assert!(a.is_valid());
    assert_eq!(c.register(B, PS, R).unwrap().id(), a.id());
}

#[test]
fn dropping_the_cache_deregisters_everything() {
    let inner = Arc::new(TestRegistrar::new());
    let c = Rcache::new(Shared(inner.clone()), UNMONITORED);
    let a = c.register(B, PS, R).unwrap();
    drop(c.register(B + 2 * PS, PS, R).unwrap());
    drop(c);
    // The idle registration goes with the cache; the one in use stays registered,
    // unreachable, until its last reference goes.
    assert_eq!(inner.live_count(), 1);
    assert!(inner.is_live(a.handle().seq));
    assert!(!a.is_valid());
    let a2 = a.clone();
    drop(a);
    assert_eq!(inner.live_count(), 1);
    drop(a2);
    assert_eq!(inner.live_count(), 0);
    assert_eq!(inner.deregisters(), 2);
}

#[test]
fn libfabric_access_bits() {
    assert_eq!(libfabric::FI_READ, 1 << 8);
    assert_eq!(libfabric::FI_WRITE, 1 << 9);
    assert_eq!(libfabric::FI_REMOTE_READ, 1 << 12);
    assert_eq!(libfabric::FI_REMOTE_WRITE, 1 << 13);
    let all = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    assert_eq!(Access::from_libfabric(all.to_libfabric()), all);
    assert_eq!(
        Access::REMOTE_READ.to_libfabric(),
        libfabric::FI_REMOTE_READ
    );
    assert_eq!(
        Access::ATOMIC.to_libfabric(),
        libfabric::FI_REMOTE_READ | libfabric::FI_REMOTE_WRITE
    );
    assert_eq!(
        Access::from_libfabric(libfabric::FI_WRITE | libfabric::FI_SEND),
        Access::LOCAL_WRITE
    );
    assert!(!Access::from_libfabric(u64::MAX).contains(Access::ATOMIC));
}

#[test]
fn registration_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Registration<TestRegistrar>>();
    check::<Rcache<TestRegistrar>>();
}
