//! Fragment free lists over anonymous and carved (shared) memory.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::TempDir;
use rbtl_mpool::{
    AnonymousSource, CarveSource, ChunkSource, Error, Frag, FreeList, FreeListConfig, PageKind,
    Region, SharedRegion,
};

fn config(frag_size: usize, frag_align: usize, per_chunk: usize, max: usize) -> FreeListConfig {
    FreeListConfig {
        frag_size,
        frag_align,
        frags_per_chunk: per_chunk,
        max_frags: max,
    }
}

/// Asserts the fragments are aligned, of the list's size, pairwise disjoint and
/// carry distinct indices that `frag_ptr` maps back to them.
fn check_frags<R>(list: &FreeList<R>, frags: &[Frag]) {
    let mut spans: Vec<(usize, usize)> = frags
        .iter()
        .map(|f| (f.as_ptr() as usize, f.len()))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        assert!(w[0].0 + w[0].1 <= w[1].0, "fragments overlap: {w:?}");
    }
    let mut seen = HashSet::new();
    for f in frags {
        assert_eq!(f.len(), list.frag_size());
        assert_eq!(
            f.as_ptr() as usize % list.frag_align(),
            0,
            "misaligned {f:?}"
        );
        assert!(
            seen.insert(f.index()),
            "index {} handed out twice",
            f.index()
        );
        assert_eq!(list.frag_ptr(f.index()), Some(f.as_ptr()));
    }
}

#[test]
fn get_put_many() {
    let mut list = FreeList::new(config(100, 64, 64, 0), Box::new(AnonymousSource::new())).unwrap();
    assert_eq!(list.frag_size(), 128, "rounded up to the alignment");
    assert_eq!(list.allocated(), 0, "lazy: nothing before the first get");

    let mut frags: Vec<Frag> = (0..1000).map(|_| list.get().unwrap()).collect();
    assert_eq!(list.allocated(), 1024, "grew in whole chunks of 64");
    assert_eq!(list.chunks(), 16);
    assert_eq!(list.available(), 24);
    assert_eq!(list.in_use(), 1000);
    check_frags(&list, &frags);
    // Fresh indices are handed out in order.
    assert!(frags
        .iter()
        .enumerate()
        .all(|(i, f)| f.index() as usize == i));

    for f in frags.iter_mut() {
        let tag = f.index() as u8;
        f.as_mut_slice().fill(tag);
    }
    for f in &frags {
        assert!(
            f.as_slice().iter().all(|&b| b == f.index() as u8),
            "{f:?} was overwritten"
        );
    }

    for f in frags.drain(..) {
        list.put(f);
    }
    assert_eq!(list.available(), 1024);
    assert_eq!(list.in_use(), 0);

    // Steady state: no more growth, LIFO reuse.
    for _ in 0..10_000 {
        let f = list.get().unwrap();
        list.put(f);
    }
    let a = list.get().unwrap();
    let b = list.get().unwrap();
    assert_ne!(a.index(), b.index());
    let ia = a.index();
    list.put(a);
    assert_eq!(
        list.get().unwrap().index(),
        ia,
        "most recently returned comes back first"
    );
    assert_eq!(list.allocated(), 1024);
    assert_eq!(list.frag_ptr(1024), None);
}

#[test]
fn alignments() {
    for (size, align) in [
        (1, 1),
        (24, 8),
        (64, 64),
        (3000, 4096),
        (100, 8192),
        (5000, 1 << 16),
    ] {
        let mut list =
            FreeList::new(config(size, align, 5, 0), Box::new(AnonymousSource::new())).unwrap();
        assert_eq!(list.frag_size() % align, 0);
        assert!(list.frag_size() >= size);
        let frags: Vec<Frag> = (0..12).map(|_| list.get().unwrap()).collect();
        check_frags(&list, &frags);
        assert_eq!(list.chunks(), 3);
        for f in frags {
            list.put(f);
        }
    }
}

#[test]
fn grows_to_max_then_exhausted() {
    let mut list = FreeList::new(config(256, 64, 8, 20), Box::new(AnonymousSource::new())).unwrap();
    let mut frags: Vec<Frag> = (0..20).map(|_| list.get().unwrap()).collect();
    assert_eq!(list.allocated(), 20);
    assert_eq!(
        list.chunks(),
        3,
        "8 + 8 + 4: the last chunk is cut to the limit"
    );
    check_frags(&list, &frags);

    let err = list.get().unwrap_err();
    assert!(matches!(err, Error::Exhausted { max_frags: 20 }), "{err:?}");
    assert!(err.is_retryable());
    let msg = err.to_string();
    assert!(msg.contains("retry") && msg.contains("max_frags"), "{msg}");
    assert_eq!(list.allocated(), 20);

    // Returning one makes get succeed again, with that very fragment.
    let back = frags.pop().unwrap();
    let idx = back.index();
    list.put(back);
    let again = list.get().unwrap();
    assert_eq!(again.index(), idx);
    assert!(list.get().is_err());
    frags.push(again);
    for f in frags {
        list.put(f);
    }
    assert_eq!(list.available(), 20);
}

#[test]
fn reserve_preallocates() {
    let mut list = FreeList::new(config(64, 64, 10, 25), Box::new(AnonymousSource::new())).unwrap();
    list.reserve(15).unwrap();
    assert_eq!(list.allocated(), 20);
    assert_eq!(list.available(), 20);
    list.reserve(25).unwrap();
    assert_eq!(list.allocated(), 25);
    assert!(matches!(
        list.reserve(26),
        Err(Error::Exhausted { max_frags: 25 })
    ));
}

#[test]
fn registration_once_per_chunk() {
    #[derive(Debug, PartialEq)]
    struct Reg {
        chunk: usize,
        start: usize,
        len: usize,
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let seen: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
    let (c, s) = (Arc::clone(&calls), Arc::clone(&seen));
    let mut list = FreeList::with_registration(
        config(200, 64, 16, 0),
        Box::new(AnonymousSource::new()),
        Box::new(move |ptr, len| {
            let chunk = c.fetch_add(1, Ordering::SeqCst);
            s.lock().unwrap().push((ptr as usize, len));
            Ok(Reg {
                chunk,
                start: ptr as usize,
                len,
            })
        }),
    )
    .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let frags: Vec<Frag> = (0..50).map(|_| list.get().unwrap()).collect();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        4,
        "50 fragments / 16 per chunk = 4 chunks"
    );
    assert_eq!(seen.lock().unwrap().len(), 4);
    for f in &frags {
        let reg = list.registration(f);
        assert_eq!(reg.chunk, f.index() as usize / 16);
        let p = f.as_ptr() as usize;
        assert!(
            p >= reg.start && p + f.len() <= reg.start + reg.len,
            "{reg:?} does not cover {f:?}"
        );
        assert_eq!(list.registration_by_index(f.index()), Some(reg));
    }
    assert_eq!(seen.lock().unwrap()[0].1, 16 * list.frag_size());

    // Recycling fragments registers nothing new.
    for f in frags {
        list.put(f);
    }
    let frags: Vec<Frag> = (0..64).map(|_| list.get().unwrap()).collect();
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    for f in frags {
        list.put(f);
    }
    assert_eq!(list.registration_by_index(64), None);
}

#[test]
fn registration_failure_is_reported() {
    let mut list: FreeList<u64> = FreeList::with_registration(
        config(64, 64, 4, 0),
        Box::new(AnonymousSource::new()),
        Box::new(|_, _| {
            Err(Error::Registration {
                reason: "no memory keys left".into(),
            })
        }),
    )
    .unwrap();
    let err = list.get().unwrap_err();
    assert!(err.to_string().contains("no memory keys left"), "{err}");
    assert_eq!(list.allocated(), 0);
    assert_eq!(list.available(), 0);
}

#[test]
fn carve_source_over_shared_region() {
    let tmp = TempDir::new("carve");
    const HEADER: usize = 4096;
    const TOTAL: usize = 64 * 1024;
    let seg = Arc::new(SharedRegion::create_in(tmp.path(), "frags", TOTAL).unwrap());
    let source = CarveSource::with_range(Arc::clone(&seg), HEADER, TOTAL - HEADER).unwrap();
    assert_eq!(source.capacity(), TOTAL - HEADER);
    let mut list = FreeList::new(config(1000, 64, 16, 0), Box::new(source)).unwrap();
    assert_eq!(list.frag_size(), 1024);

    let base = seg.as_ptr() as usize;
    let mut frags = Vec::new();
    let err = loop {
        match list.get() {
            Ok(f) => frags.push(f),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::SourceFull { .. }), "{err:?}");
    assert!(err.is_retryable());
    // Every byte of the carve range was used: the last chunks shrank to fit.
    assert_eq!(frags.len(), (TOTAL - HEADER) / 1024);
    check_frags(&list, &frags);
    for f in &frags {
        let off = f.as_ptr() as usize - base;
        assert!(
            off >= HEADER && off + f.len() <= TOTAL,
            "offset {off} outside the carve range"
        );
    }

    // A peer mapping the segment finds a fragment's bytes at its offset.
    let f = &mut frags[7];
    f.as_mut_slice().fill(0xab);
    let off = f.as_ptr() as usize - base;
    let peer = SharedRegion::open_in(tmp.path(), seg.name()).unwrap();
    // SAFETY: off + len <= TOTAL, the peer maps the same TOTAL bytes.
    let seen = unsafe { std::slice::from_raw_parts(peer.as_ptr().add(off), f.len()) };
    assert!(seen.iter().all(|&b| b == 0xab));
    drop(peer);

    // Returned fragments are reused; the source stays full.
    let n = frags.len();
    for f in frags {
        list.put(f);
    }
    let again: Vec<Frag> = (0..n).map(|_| list.get().unwrap()).collect();
    assert!(matches!(list.get(), Err(Error::SourceFull { .. })));
    for f in again {
        list.put(f);
    }

    // The list's chunks keep the segment mapped (and its file) until the list goes.
    let path = seg.path().to_owned();
    drop(seg);
    assert!(path.exists());
    drop(list);
    assert!(!path.exists(), "last reference (a chunk) dropped the owner");
}

#[test]
fn carve_source_refuses_when_full() {
    let region = Arc::new(Region::anonymous(10_000).unwrap());
    let mut src = CarveSource::new(Arc::clone(&region));
    assert_eq!(src.capacity(), 10_000);
    let a = src.alloc_chunk(4000).unwrap();
    assert_eq!(a.as_ptr(), region.as_ptr());
    let b = src.alloc_chunk_aligned(1000, 4096).unwrap();
    assert_eq!(b.as_ptr() as usize % 4096, 0);
    assert_eq!(b.as_ptr() as usize - region.as_ptr() as usize, 4096);
    assert_eq!(src.remaining(), Some(10_000 - 5096));
    match src.alloc_chunk(5000) {
        Err(e @ Error::SourceFull { .. }) => {
            assert!(matches!(
                e,
                Error::SourceFull {
                    requested: 5000,
                    remaining: 4904,
                    capacity: 10_000
                }
            ));
            assert!(e.to_string().contains("larger region"), "{e}");
        }
        other => panic!("expected SourceFull, got {other:?}"),
    }
    let c = src.alloc_chunk(4904).unwrap();
    assert_eq!(src.remaining(), Some(0));
    assert!(matches!(src.alloc_chunk(1), Err(Error::SourceFull { .. })));
    assert_eq!(src.used(), 10_000);
    drop((a, b, c));
    assert!(CarveSource::with_range(region, 9000, 2000).is_err());
}

#[test]
fn huge_page_source_works_either_way() {
    let mut src = AnonymousSource::with_pages(PageKind::Huge);
    let mut list = FreeList::new(
        config(4096, 4096, 4, 8),
        Box::new(AnonymousSource::with_pages(PageKind::TransparentHuge)),
    )
    .unwrap();
    let chunk = src.alloc_chunk(4096).unwrap();
    assert_eq!(chunk.len(), 4096);
    // SAFETY: the chunk is 4096 writable bytes.
    unsafe { chunk.as_ptr().add(4095).write(1) };
    assert!(src.huge_fallbacks() <= 1);
    let frags: Vec<Frag> = (0..8).map(|_| list.get().unwrap()).collect();
    check_frags(&list, &frags);
    for f in frags {
        list.put(f);
    }
}

#[test]
fn frags_move_between_threads() {
    fn check<T: Send>() {}
    check::<Frag>();
    check::<FreeList>();
    let mut list = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let frag = list.get().unwrap();
    let frag = std::thread::spawn(move || {
        let mut frag = frag;
        frag.as_mut_slice().fill(9);
        frag
    })
    .join()
    .unwrap();
    assert!(frag.as_slice().iter().all(|&b| b == 9));
    list.put(frag);
    // The list itself can move too.
    let list = std::thread::spawn(move || {
        let f = list.get().unwrap();
        list.put(f);
        list
    })
    .join()
    .unwrap();
    assert_eq!(list.allocated(), 4);
}

#[test]
fn outstanding_frag_survives_list_drop() {
    let mut list = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let mut frag = list.get().unwrap();
    drop(list);
    frag.as_mut_slice().fill(3);
    assert!(frag.as_slice().iter().all(|&b| b == 3));
}

#[test]
fn invalid_configs() {
    let src = || Box::new(AnonymousSource::new()) as Box<dyn ChunkSource>;
    for bad in [
        config(0, 64, 4, 0),
        config(64, 0, 4, 0),
        config(64, 48, 4, 0),
        config(64, 64, 0, 0),
        config(usize::MAX, 64, 4, 0),
        config(1 << 40, 64, 1 << 40, 0),
    ] {
        assert!(
            matches!(FreeList::new(bad, src()), Err(Error::InvalidConfig(_))),
            "{bad:?} accepted"
        );
    }
    assert!(FreeList::new(FreeListConfig::new(100), src()).is_ok());
}

#[cfg(debug_assertions)]
#[test]
#[should_panic(expected = "does not belong")]
fn foreign_frag_trips_debug_assert() {
    let mut a = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let mut b = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let f = a.get().unwrap();
    b.put(f);
}

#[cfg(not(debug_assertions))]
#[test]
fn foreign_frag_is_dropped_in_release() {
    let mut a = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let mut b = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let f = a.get().unwrap();
    b.put(f);
    assert_eq!(b.available(), 0);
}

#[test]
#[should_panic(expected = "another free list")]
fn registration_of_foreign_frag_panics() {
    let mut a = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let b = FreeList::new(config(64, 64, 4, 0), Box::new(AnonymousSource::new())).unwrap();
    let f = a.get().unwrap();
    let _ = b.registration(&f);
}
