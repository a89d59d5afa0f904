use super::*;

fn ring(layout: RingLayout) -> (Vec<u64>, Producer, Consumer) {
    // Page-aligned, as rings in a segment are.
    let mut mem = vec![0u64; layout.bytes() / 8 + 512];
    let base = (mem.as_mut_ptr() as usize).next_multiple_of(4096) as *mut u8;
    // SAFETY: `mem` outlives producer and consumer in every test (returned first,
    // dropped last); one producer and one consumer.
    let (p, c) = unsafe { (Producer::new(base, layout), Consumer::new(base, layout)) };
    (mem, p, c)
}

fn take(c: &mut Consumer) -> Option<(u8, Vec<Vec<u8>>)> {
    let r = c.peek()?;
    let mut segs = [&[][..]; rbtl_btl::MAX_SEGMENTS];
    // SAFETY: used before release.
    let n = unsafe { r.segments(&mut segs) };
    let out = (r.tag, segs[..n].iter().map(|s| s.to_vec()).collect());
    c.release(r);
    Some(out)
}

#[test]
fn inline_and_data_messages_round_trip_in_order() {
    let (_m, mut p, mut c) = ring(RingLayout {
        nslots: 8,
        data_bytes: 4096,
    });
    assert!(take(&mut c).is_none());
    let big = vec![7u8; 1000];
    assert!(p.push(1, &[b"hi"], &[]));
    assert!(p.push(2, &[&big, b"!"], &[]));
    assert!(p.push(3, &[b"abcdef"], &[2, 0, 4]));
    assert!(p.push(4, &[], &[]));
    assert_eq!(take(&mut c), Some((1, vec![b"hi".to_vec()])));
    let (tag, segs) = take(&mut c).unwrap();
    assert_eq!((tag, segs[0].len(), segs[0][1000]), (2, 1001, b'!'));
    assert_eq!(
        take(&mut c),
        Some((3, vec![b"ab".to_vec(), vec![], b"cdef".to_vec()]))
    );
    assert_eq!(take(&mut c), Some((4, vec![vec![]])));
    assert!(take(&mut c).is_none());
    assert!(p.is_drained());
}

#[test]
fn small_pushes_fill_slots_in_order_until_the_ring_is_full() {
    let (_m, mut p, mut c) = ring(RingLayout {
        nslots: 2,
        data_bytes: 4096,
    });
    let most = [5u8; INLINE_MAX - 4];
    assert!(p.push_small(1, b"head", &most));
    assert!(p.push_small(2, &[], &[]));
    assert!(!p.push_small(3, b"x", b"y"), "two slots, both taken");
    let mut want = b"head".to_vec();
    want.extend_from_slice(&most);
    assert_eq!(take(&mut c), Some((1, vec![want])));
    assert!(p.push_small(3, b"x", b"y"), "a released slot is reused");
    assert_eq!(take(&mut c), Some((2, vec![vec![]])));
    assert_eq!(take(&mut c), Some((3, vec![b"xy".to_vec()])));
    assert!(take(&mut c).is_none());
}

#[test]
fn a_header_and_a_large_body_arrive_apart_with_the_body_page_aligned() {
    let (_m, mut p, mut c) = ring(RingLayout {
        nslots: 8,
        data_bytes: 64 << 10,
    });
    let head = [1u8; 24];
    let body: Vec<u8> = (0..5000).map(|i| i as u8).collect();
    assert!(
        p.push(9, &[b"x"], &[]),
        "something first, so the data area is not at 0"
    );
    assert!(
        p.push(9, &[&[2u8; 100], &[3u8; 300]], &[]),
        "a 64-byte aligned body"
    );
    assert!(p.push(9, &[&head, &body], &[]));
    assert!(p.push(9, &[&head, &body[..100]], &[]), "too small to split");
    take(&mut c).unwrap();
    let r = c.peek().unwrap();
    let mut segs = [&[][..]; rbtl_btl::MAX_SEGMENTS];
    // SAFETY: used before release.
    assert_eq!(unsafe { r.segments(&mut segs) }, 2);
    assert_eq!((segs[0], segs[1]), (&[2u8; 100][..], &[3u8; 300][..]));
    assert_eq!(segs[1].as_ptr() as usize % 64, 0);
    c.release(r);
    let r = c.peek().unwrap();
    // SAFETY: used before release.
    assert_eq!(unsafe { r.segments(&mut segs) }, 2);
    assert_eq!((segs[0], segs[1]), (&head[..], &body[..]));
    assert_eq!(segs[1].as_ptr() as usize % 4096, 0, "page-aligned body");
    assert_eq!(r.len(), 5024);
    c.release(r);
    let (_, one) = take(&mut c).unwrap();
    assert_eq!(one.len(), 1, "one segment when not split");
    assert_eq!(one[0].len(), 124);
}

/// Minor page faults of this thread so far.
fn minor_faults() -> i64 {
    // SAFETY: a zeroed rusage is valid for getrusage to fill.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to it.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) }, 0);
    u.ru_minflt
}

#[test]
fn the_data_area_is_mapped_in_at_first_use_not_page_by_page() {
    let layout = RingLayout {
        nslots: 64,
        data_bytes: 4 << 20,
    };
    let (_m, mut p, mut c) = ring(layout);
    let msg = [1u8; 1000];
    assert!(
        p.push(1, &[&msg], &[]),
        "the first data record maps the area in"
    );
    take(&mut c).unwrap();
    let before = minor_faults();
    for _ in 0..layout.data_bytes / 1024 {
        assert!(p.push(1, &[&msg], &[]));
        take(&mut c).unwrap();
    }
    let faults = minor_faults() - before;
    assert!(faults < 64, "{faults} page faults in a lap of 1,024 pages");
}

#[test]
fn full_ring_refuses_then_recovers_across_many_laps() {
    let layout = RingLayout {
        nslots: 4,
        data_bytes: 1024,
    };
    let (_m, mut p, mut c) = ring(layout);
    for i in 0..4u8 {
        assert!(p.push(i, &[&[i; 3]], &[]));
    }
    assert!(!p.push(9, &[b"x"], &[]), "slots exhausted");
    assert_eq!(take(&mut c).unwrap().0, 0);
    assert!(p.push(4, &[b"x"], &[]));
    while take(&mut c).is_some() {}
    // Data-area wrap: odd sizes force skips at the end of the area.
    let mut sent = 0u64;
    let mut got = 0u64;
    for round in 0..2000u64 {
        let len = 41 + (round as usize * 37) % 700;
        let msg: Vec<u8> = (0..len).map(|i| (i as u64 ^ round) as u8).collect();
        while !p.push((round % 251) as u8, &[&msg], &[]) {
            let (tag, segs) = take(&mut c).expect("full ring has something to take");
            assert_eq!(u64::from(tag), got % 251);
            let want: Vec<u8> = (0..segs[0].len()).map(|i| (i as u64 ^ got) as u8).collect();
            assert_eq!(segs[0], want, "message {got}");
            got += 1;
        }
        sent += 1;
    }
    while let Some((_, segs)) = take(&mut c) {
        let want: Vec<u8> = (0..segs[0].len()).map(|i| (i as u64 ^ got) as u8).collect();
        assert_eq!(segs[0], want);
        got += 1;
    }
    assert_eq!(sent, got);
    assert_eq!(layout.max_message(1), 1024);
}

/// What a broken or hostile producer may write into a ring, read by the consumer:
/// every slice it hands out, and the segment table it reads, lie inside the ring,
/// and nothing panics. (Longer runs: `PROPTEST_CASES=100000 cargo test -p rbtl-sm
/// hostile`.)
mod hostile {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    /// A slot's fields as a producer may write them.
    #[derive(Clone, Debug)]
    struct RawSlot {
        len: u32,
        tag: u8,
        nseg: u8,
        kind: u8,
        head_len: u8,
        data_pos: u64,
        fill: u8,
    }

    const DATA_BYTES: usize = 4096;

    fn raw_slot() -> impl Strategy<Value = RawSlot> {
        let len = prop_oneof![
            0..300u32,
            (DATA_BYTES as u32 - 80)..(DATA_BYTES as u32 + 80),
            (u32::MAX - 64)..=u32::MAX,
            any::<u32>(),
        ];
        let pos = prop_oneof![
            0..(2 * DATA_BYTES as u64),
            (u64::MAX - 2 * DATA_BYTES as u64)..=u64::MAX,
            any::<u64>(),
        ];
        let kind = prop_oneof![0..3u8, any::<u8>()];
        let nseg = prop_oneof![0..(rbtl_btl::MAX_SEGMENTS as u8 + 2), any::<u8>()];
        (len, any::<u8>(), nseg, kind, any::<u8>(), pos, any::<u8>()).prop_map(
            |(len, tag, nseg, kind, head_len, data_pos, fill)| RawSlot {
                len,
                tag,
                nseg,
                kind,
                head_len,
                data_pos,
                fill,
            },
        )
    }

    proptest! {
        #![proptest_config(rbtl_testkit::fuzz::config(1000))]

        #[test]
        fn records_stay_inside_the_ring(
            slots in vec(raw_slot(), 1..8),
            data in vec(any::<u8>(), DATA_BYTES),
        ) {
            let layout = RingLayout { nslots: 4, data_bytes: DATA_BYTES };
            let (_mem, p, mut c) = ring(layout);
            let base = p.raw.ctrl as usize;
            let end = base + layout.bytes();
            let inside = |at: usize, len: usize| at >= base && at + len <= end;
            // SAFETY: the data area is the ring's last `DATA_BYTES` bytes, ours here.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), c.raw.data, DATA_BYTES) };
            for s in &slots {
                let slot = c.raw.slot(c.next);
                // SAFETY: a slot of the ring, written as a producer would (fields,
                // then the sequence number that publishes them).
                unsafe {
                    ptr::addr_of_mut!((*slot).len).write(s.len);
                    ptr::addr_of_mut!((*slot).tag).write(s.tag);
                    ptr::addr_of_mut!((*slot).nseg).write(s.nseg);
                    ptr::addr_of_mut!((*slot).kind).write(s.kind);
                    ptr::addr_of_mut!((*slot).head_len).write(s.head_len);
                    ptr::addr_of_mut!((*slot).data_pos).write(s.data_pos);
                    ptr::addr_of_mut!((*slot).bytes).write([s.fill; INLINE_MAX]);
                    (*slot).seq.store(c.next + 1, Ordering::Release);
                }
                let rec = c.peek().expect("a published record");
                prop_assert_eq!(rec.tag, s.tag);
                prop_assert!((1..=rbtl_btl::MAX_SEGMENTS).contains(&rec.segment_count()));
                if rec.head.is_none() && rec.nseg > 1 {
                    prop_assert!(inside(rec.table as usize, rec.nseg * 4), "table");
                }
                let mut segs = [&[][..]; rbtl_btl::MAX_SEGMENTS];
                // SAFETY: used before the release below.
                let n = unsafe { rec.segments(&mut segs) };
                prop_assert_eq!(n, rec.segment_count());
                let mut total = 0;
                for seg in &segs[..n] {
                    prop_assert!(inside(seg.as_ptr() as usize, seg.len()), "segment");
                    total += seg.len();
                }
                prop_assert!(total <= rec.len());
                if rec.segment_count() == 1 {
                    // SAFETY: as above.
                    let one = unsafe { rec.payload() };
                    prop_assert!(inside(one.as_ptr() as usize, one.len()), "payload");
                }
                c.release(rec);
            }
            prop_assert!(c.peek().is_none(), "nothing unpublished is read");
        }
    }
}
