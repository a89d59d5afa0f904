//! Anonymous, huge-page and transparent-huge-page regions.

use rbtl_mpool::{default_huge_page_size, system_page_size, Error, HugeOutcome, Region, THP_ALIGN};

fn fill_and_check(region: &mut Region) {
    let len = region.len();
    assert!(!region.is_empty());
    assert!(
        region.as_slice().iter().all(|&b| b == 0),
        "fresh mapping is zero-filled"
    );
    for (i, b) in region.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let s = region.as_slice();
    assert_eq!(s.len(), len);
    assert!(s.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    // Raw pointer and slice agree.
    // SAFETY: len - 1 is inside the region.
    let last = unsafe { region.as_ptr().add(len - 1).read() };
    assert_eq!(last, ((len - 1) % 251) as u8);
}

#[test]
fn anonymous_read_write() {
    let mut r = Region::anonymous(10_000).unwrap();
    assert_eq!(r.len(), 10_000);
    assert_eq!(r.page_size(), system_page_size());
    assert_eq!(r.as_ptr() as usize % system_page_size(), 0);
    fill_and_check(&mut r);
}

#[test]
fn zero_length_is_refused() {
    assert!(matches!(Region::anonymous(0), Err(Error::ZeroLength)));
    assert!(matches!(Region::huge(0), Err(Error::ZeroLength)));
    assert!(matches!(
        Region::transparent_huge(0),
        Err(Error::ZeroLength)
    ));
}

#[test]
fn huge_pages_or_reported_fallback() {
    let len = 3 * 1024 * 1024;
    let (mut r, outcome) = Region::huge(len).unwrap();
    assert_eq!(r.len(), len);
    let sysctl = |name: &str| -> usize {
        std::fs::read_to_string(format!("/proc/sys/vm/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let reserved = sysctl("nr_hugepages") + sysctl("nr_overcommit_hugepages");
    match &outcome {
        HugeOutcome::Huge { page_size } => {
            assert_eq!(*page_size, default_huge_page_size());
            assert_eq!(r.page_size(), *page_size);
            assert_eq!(r.as_ptr() as usize % page_size, 0);
            assert!(outcome.is_huge());
        }
        HugeOutcome::FellBack { reason } => {
            assert!(!reason.is_empty(), "a fallback must say why");
            assert!(reason.contains("MAP_HUGETLB"), "reason: {reason}");
            assert!(!outcome.is_huge());
            assert_eq!(r.page_size(), system_page_size());
            // The fallback uses the transparent-huge-page path: 2 MiB aligned.
            assert_eq!(r.as_ptr() as usize % THP_ALIGN, 0);
        }
    }
    if reserved == 0 {
        // Nothing reserved (as on the development machine): MAP_HUGETLB cannot
        // succeed, so the fallback must have been reported.
        assert!(
            matches!(outcome, HugeOutcome::FellBack { .. }),
            "nr_hugepages is 0 but huge() claims {outcome:?}"
        );
    }
    fill_and_check(&mut r);
}

#[test]
fn transparent_huge_is_aligned() {
    for len in [1, 4096, THP_ALIGN, THP_ALIGN + 1, 5 * 1024 * 1024] {
        let (mut r, advised) = Region::transparent_huge(len).unwrap();
        assert_eq!(r.len(), len);
        assert_eq!(r.as_ptr() as usize % THP_ALIGN, 0, "len {len}");
        // madvise(MADV_HUGEPAGE) is accepted whenever the kernel has THP at
        // all (whatever the mode); kernels built without it (no sysfs
        // directory) answer EINVAL.
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if thp.is_ok() {
            assert!(advised, "MADV_HUGEPAGE refused although THP is available");
        }
        fill_and_check(&mut r);
    }
}

#[test]
fn regions_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Region>();
    let r = Region::anonymous(64).unwrap();
    let ptr = std::thread::spawn(move || r.as_ptr() as usize)
        .join()
        .unwrap();
    assert_ne!(ptr, 0);
}
