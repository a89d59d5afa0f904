//! The checks of sends and active messages: sizes, tags, segments, descriptor
//! ownership, completion and receive callbacks.

use crate::pattern::{fill, interesting_sizes, matches_pattern};
use crate::peer::collect;
use crate::retry::{alloc_retry, idle_progress, retry, send_all};
use crate::{Peer, EXCHANGE_TAG, NOBODY_TAG};
use rbtl_btl::{
    ActiveMessage, BtlFlags, DesFlags, DescriptorRequest, Error, SendOutcome, SendiOutcome, Tag,
    MAX_SEGMENTS,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A message on a tag that the receiver has no callback for is refused by the sender
/// when it can tell (`self`), or else dropped by the receiver and reported to its error
/// callback as [`Error::BadTag`]; the messages after it arrive as usual. (Run first:
/// the other checks register tags.)
pub fn unregistered_tag(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let reported = Arc::new(AtomicUsize::new(0));
    let r = reported.clone();
    p.module.register_error(Box::new(move |event| {
        if matches!(event.error, Error::BadTag { tag, .. } if tag == NOBODY_TAG) {
            r.fetch_add(1, Ordering::SeqCst);
        }
    }));
    // Both sides have their error callback before either sends.
    p.barrier();
    let ep = p.endpoint;
    let start = Instant::now();
    let refused = loop {
        match p
            .module
            .sendi(&ActiveMessage::new(ep, NOBODY_TAG, &[], &[1]))
        {
            Ok(SendiOutcome::Sent) => break false,
            Ok(SendiOutcome::Descriptor(mut des)) => {
                des.flags |= DesFlags::OWNERSHIP;
                match p.module.send(ep, des, NOBODY_TAG) {
                    Err(e) if matches!(e.error, Error::BadTag { .. }) => {
                        p.module.free(e.descriptor).expect("free");
                        break true;
                    }
                    Err(e) => panic!("send on a tag nobody registered: {}", e.error),
                    Ok(SendOutcome::Done(Some(back))) => {
                        p.module.free(back).expect("free");
                        break false;
                    }
                    Ok(_) => break false,
                }
            }
            Err(Error::BadTag { .. }) => break true,
            Err(Error::OutOfResource(_)) => {
                idle_progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "sendi stuck");
            }
            Err(e) => panic!("sendi on a tag nobody registered: {e}"),
        }
    };
    // The exchange arrives, and tells whether the peer's message went out.
    let peer_sent = p.swap(&[u8::from(!refused)]) == [1];
    if peer_sent {
        p.wait(
            "the report of the peer's message on a tag nobody registered",
            || reported.load(Ordering::SeqCst) > 0,
        );
    }
    p.barrier();
    assert_eq!(
        reported.load(Ordering::SeqCst),
        usize::from(peer_sent),
        "{}: one report per message on a tag nobody registered",
        p.module.name()
    );
}

/// Sends of every interesting size up to `max_send_size` through `alloc`,
/// `prepare_src` and `sendi`, each arriving whole and intact.
pub fn sends_every_size(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.contains(BtlFlags::SEND) {
        return;
    }
    let tag = Tag::USR;
    let seen: Arc<Mutex<Vec<usize>>> = Arc::default();
    let bad: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s, b) = (seen.clone(), bad.clone());
    p.module
        .register_am(
            tag,
            Box::new(move |_, r| {
                let data = r.to_vec();
                if !matches_pattern(&data, data.len()) {
                    b.lock()
                        .unwrap()
                        .push(format!("{} bytes corrupted", data.len()));
                }
                s.lock().unwrap().push(data.len());
            }),
        )
        .expect("register_am");
    // Both sides have their callbacks before either sends.
    p.barrier();
    let sizes = interesting_sizes(attrs.eager_limit, attrs.max_send_size);
    let mut expected = Vec::new();
    for &size in &sizes {
        let mut des = alloc_retry(p, size, DesFlags::OWNERSHIP);
        fill(des.segment_mut(0), size);
        send_all(p, des, tag);
        expected.push(size);

        let mut msg = vec![0; size];
        fill(&mut msg, size);
        let reserve = size.min(8);
        let ep = p.endpoint;
        let request = DescriptorRequest::new(ep, reserve).flagged(DesFlags::OWNERSHIP);
        let mut des = retry(p, "prepare_src", |m| {
            m.prepare_src(&request, &[&msg[reserve..]])
        });
        assert_eq!(des.len(), size, "prepare_src packed all of {size} bytes");
        des.segment_mut(0)[..reserve].copy_from_slice(&msg[..reserve]);
        send_all(p, des, tag);
        expected.push(size);

        if size <= attrs.eager_limit {
            let split = size / 3;
            let (h, b) = msg.split_at(split);
            let out = retry(p, "sendi", |m| m.sendi(&ActiveMessage::new(ep, tag, h, b)));
            if let SendiOutcome::Descriptor(mut d) = out {
                d.flags |= DesFlags::OWNERSHIP;
                send_all(p, d, tag)
            }
            expected.push(size);
        }
    }
    let want = expected.len();
    p.wait("every message", || seen.lock().unwrap().len() >= want);
    p.barrier();
    let mut got = seen.lock().unwrap().clone();
    got.sort_unstable();
    expected.sort_unstable();
    assert_eq!(*bad.lock().unwrap(), Vec::<String>::new());
    assert_eq!(got, expected, "sizes received");
}

/// A message on every registrable tag reaches that tag's callback; reserved tags are
/// refused.
pub fn all_tags(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let seen: Arc<Mutex<BTreeMap<u8, Vec<u8>>>> = Arc::default();
    let tags = || Tag::registrable().filter(|t| *t != EXCHANGE_TAG && *t != NOBODY_TAG);
    for tag in tags() {
        let s = seen.clone();
        p.module
            .register_am(
                tag,
                Box::new(move |_, r| {
                    s.lock()
                        .unwrap()
                        .entry(r.tag.0)
                        .or_default()
                        .push(r.to_vec()[0]);
                }),
            )
            .expect("register_am");
    }
    for reserved in [Tag(0), Tag(Tag::PML.0 - 1)] {
        let refused = p.module.register_am(reserved, Box::new(|_, _| {}));
        assert!(
            matches!(refused, Err(Error::BadTag { .. })),
            "tag {reserved} must be refused"
        );
    }
    // Both sides have their callbacks before either sends.
    p.barrier();
    for tag in tags() {
        let mut des = alloc_retry(p, 1, DesFlags::OWNERSHIP);
        des.segment_mut(0)[0] = tag.0;
        send_all(p, des, tag);
    }
    let n = tags().count();
    p.wait("a message per tag", || seen.lock().unwrap().len() >= n);
    p.barrier();
    for (tag, got) in seen.lock().unwrap().iter() {
        assert_eq!(got, &vec![*tag], "tag {tag:#x} got exactly its own message");
    }
}

/// A receive callback that progresses the module itself for a while (as one that
/// flushes does) while the peer keeps sending on its tag, through `send` and `sendi`
/// alternately: the messages that arrive meanwhile wait for it to return, and every
/// one arrives once, in order.
pub fn callbacks_may_progress(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    const N: u32 = 64;
    let tag = Tag::USR;
    let got: Arc<Mutex<Vec<u32>>> = Arc::default();
    let g = got.clone();
    p.module
        .register_am(
            tag,
            Box::new(move |m, r| {
                let seq = u32::from_le_bytes(r.to_vec()[..4].try_into().expect("4 bytes"));
                g.lock().unwrap().push(seq);
                // The first two progress: the messages behind each of them wait,
                // whichever way they were sent.
                if seq < 2 {
                    let until = Instant::now() + Duration::from_millis(50);
                    while Instant::now() < until {
                        m.progress();
                    }
                }
            }),
        )
        .expect("register_am");
    p.barrier();
    for seq in 0..N {
        // Descriptors and small sends alternately: both kinds wait in order while
        // the callback runs.
        if seq % 2 == 0 {
            let mut des = alloc_retry(p, 4, DesFlags::OWNERSHIP);
            des.segment_mut(0).copy_from_slice(&seq.to_le_bytes());
            send_all(p, des, tag);
            continue;
        }
        let ep = p.endpoint;
        let bytes = seq.to_le_bytes();
        let out = retry(p, "sendi", |m| {
            m.sendi(&ActiveMessage::new(ep, tag, &bytes, &[]))
        });
        if let SendiOutcome::Descriptor(mut d) = out {
            d.flags |= DesFlags::OWNERSHIP;
            send_all(p, d, tag)
        }
    }
    p.wait("every message around a callback that progresses", || {
        got.lock().unwrap().len() >= N as usize
    });
    p.barrier();
    assert_eq!(
        *got.lock().unwrap(),
        (0..N).collect::<Vec<_>>(),
        "every message once, in order"
    );
}

/// A descriptor cut into [`MAX_SEGMENTS`] segments arrives with the same cut.
pub fn segments(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let tag = Tag(Tag::USR.0 + 1);
    let got = collect(p.module, tag, |r| {
        r.segments.iter().map(|s| s.to_vec()).collect::<Vec<_>>()
    });
    p.barrier();
    let lens: Vec<usize> = (0..MAX_SEGMENTS).map(|i| (i * 5) % 17).collect();
    let total: usize = lens.iter().sum();
    let mut des = alloc_retry(p, total, DesFlags::OWNERSHIP);
    let too_many = vec![1; MAX_SEGMENTS + 1];
    assert!(matches!(
        des.set_segments(&too_many),
        Err(Error::TooLarge(_))
    ));
    des.set_segments(&lens).expect("16 segments");
    for i in 0..MAX_SEGMENTS {
        des.segment_mut(i).fill(i as u8);
    }
    send_all(p, des, tag);
    p.wait("the segmented message", || !got.lock().unwrap().is_empty());
    p.barrier();
    let msg = got.lock().unwrap().pop().expect("one message");
    assert_eq!(msg.len(), MAX_SEGMENTS, "segment count");
    for (i, seg) in msg.iter().enumerate() {
        assert_eq!(seg, &vec![i as u8; lens[i]], "segment {i}");
    }
}

/// Completion callbacks run exactly once; ownership decides who gets the descriptor
/// back.
pub fn ownership_and_callbacks(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let tag = Tag(Tag::USR.0 + 2);
    let received = Arc::new(AtomicUsize::new(0));
    let r = received.clone();
    p.module
        .register_am(
            tag,
            Box::new(move |_, _| {
                r.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .expect("register_am");
    p.barrier();
    const ROUNDS: usize = 50;
    let owned_calls = Arc::new(AtomicUsize::new(0));
    let kept_calls = Arc::new(AtomicUsize::new(0));
    let returned = Arc::new(AtomicUsize::new(0));
    for _ in 0..ROUNDS {
        // The transport owns it: the callback sees no descriptor.
        let mut des = alloc_retry(p, 8, DesFlags::OWNERSHIP | DesFlags::ALWAYS_CALLBACK);
        let c = owned_calls.clone();
        des.set_callback(Box::new(move |_, done| {
            assert!(done.descriptor.is_none(), "owned descriptor handed back");
            done.status.expect("send status");
            c.fetch_add(1, Ordering::SeqCst);
        }));
        send_all(p, des, tag);

        // The caller keeps it: it comes back exactly once, here or in the callback.
        let mut des = alloc_retry(p, 8, DesFlags::empty());
        let (c, back) = (kept_calls.clone(), returned.clone());
        des.set_callback(Box::new(move |m, done| {
            c.fetch_add(1, Ordering::SeqCst);
            let d = done.descriptor.expect("kept descriptor comes back");
            back.fetch_add(1, Ordering::SeqCst);
            m.free(d).expect("free");
        }));
        match p.module.send(p.endpoint, des, tag) {
            Ok(SendOutcome::Done(Some(d))) => {
                returned.fetch_add(1, Ordering::SeqCst);
                p.module.free(d).expect("free");
            }
            Ok(SendOutcome::Done(None)) => panic!("kept descriptor lost"),
            Ok(SendOutcome::Queued) => {}
            Err(e) => panic!("send: {}", e.error),
        }
    }
    p.wait("every send completion", || {
        owned_calls.load(Ordering::SeqCst) >= ROUNDS
            && returned.load(Ordering::SeqCst) >= ROUNDS
            && received.load(Ordering::SeqCst) >= 2 * ROUNDS
    });
    p.barrier();
    for _ in 0..100 {
        p.module.progress();
    }
    assert_eq!(
        owned_calls.load(Ordering::SeqCst),
        ROUNDS,
        "ALWAYS_CALLBACK ran once each"
    );
    assert_eq!(
        returned.load(Ordering::SeqCst),
        ROUNDS,
        "kept descriptors came back once each"
    );
    assert!(kept_calls.load(Ordering::SeqCst) <= ROUNDS);
    assert_eq!(received.load(Ordering::SeqCst), 2 * ROUNDS);

    // A failed send gives the descriptor back untouched.
    let des = alloc_retry(p, 4, DesFlags::empty());
    let err = p
        .module
        .send(p.endpoint, des, Tag(1))
        .expect_err("reserved tag refused");
    assert!(matches!(err.error, Error::BadTag { .. }), "{}", err.error);
    assert_eq!(err.descriptor.len(), 4);
    p.module
        .free(err.descriptor)
        .expect("free after failed send");
}
