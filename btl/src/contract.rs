//! The contract suite: checks every transport runs, against itself (`self`) or across
//! processes (`sm`, `tcp`, `openib`). Each check is symmetric: both sides run the same
//! code, each acting on its peer, and meet through an exchange over the transport
//! itself ([`EXCHANGE_TAG`]), so the same function serves a process talking to itself
//! and two processes. A failed check panics with what it saw.

use crate::{
    rdma_flags, Access, AtomicFlags, AtomicOp, BtlFlags, DesFlags, Descriptor, Endpoint, Error,
    Expected, MemHandle, Module, Order, RemoteHandle, SendOutcome, SendiOutcome, Tag, MAX_SEGMENTS,
};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tag the suite's own exchange uses; [`all_tags`] covers every other one but
/// [`NOBODY_TAG`].
pub const EXCHANGE_TAG: Tag = Tag(0xff);
/// The tag that no check registers ([`unregistered_tag`] sends on it).
pub const NOBODY_TAG: Tag = Tag(0xfe);

/// Exchange messages received, with the endpoint they came from.
type Inbox = Arc<Mutex<Vec<(Endpoint, Vec<u8>)>>>;

/// One side of a pair under test, with the exchange the checks meet through: bytes
/// sent to the peer on [`EXCHANGE_TAG`], progressing until the peer's arrive (for
/// `self`, the peer is this process and gets its own bytes back).
pub struct Peer<'a> {
    /// The module under test.
    pub module: &'a mut dyn Module,
    /// The endpoint of the peer.
    pub endpoint: Endpoint,
    inbox: Inbox,
}

impl<'a> Peer<'a> {
    /// Set up the exchange on `module` towards `endpoint`.
    pub fn new(module: &'a mut dyn Module, endpoint: Endpoint) -> Peer<'a> {
        let inbox: Inbox = Arc::default();
        let i = inbox.clone();
        module
            .register_am(
                EXCHANGE_TAG,
                Box::new(move |_, r| i.lock().unwrap().push((r.endpoint, r.to_vec()))),
            )
            .expect("register the exchange tag");
        Peer {
            module,
            endpoint,
            inbox,
        }
    }

    fn swap(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.send_exchange(bytes);
        let inbox = self.inbox.clone();
        let ep = self.endpoint;
        self.wait("the peer's exchange", || {
            inbox.lock().unwrap().iter().any(|(e, _)| *e == ep)
        });
        self.take_exchange().expect("a message from the peer")
    }

    /// Send `bytes` to the peer's exchange (progressing only until they are out).
    fn send_exchange(&mut self, bytes: &[u8]) {
        let ep = self.endpoint;
        let des = retry(self, "exchange", |m| {
            m.prepare_src(ep, Order::ANY, 0, &[bytes], DesFlags::OWNERSHIP)
        });
        assert_eq!(des.len(), bytes.len(), "exchange fits one fragment");
        send_all(self, des, EXCHANGE_TAG);
    }

    /// The peer's oldest exchange message that has arrived, if any.
    fn take_exchange(&mut self) -> Option<Vec<u8>> {
        let mut v = self.inbox.lock().unwrap();
        let i = v.iter().position(|(e, _)| *e == self.endpoint)?;
        Some(v.remove(i).1)
    }

    fn barrier(&mut self) {
        self.swap(&[]);
    }

    /// Progress until `done` holds, yielding the processor while nothing happens (the
    /// peer may share it); a hang guard fails the check after 60 s of it.
    fn wait(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            idle_progress(self.module);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{}: still waiting for {what} after 60 s",
                self.module.name()
            );
        }
    }
}

/// Progress once; give the processor away if nothing happened (the peer may need it).
fn idle_progress(m: &mut dyn Module) {
    if m.progress() == 0 {
        std::thread::yield_now();
    }
}

/// Run every check of the suite between `module` and the peer behind `endpoint` (which
/// runs it too). Other peers of the module must not run the suite with this process
/// at the same time.
pub fn run_all(module: &mut dyn Module, endpoint: Endpoint) {
    let p = &mut Peer::new(module, endpoint);
    unregistered_tag(p);
    sends_every_size(p);
    all_tags(p);
    callbacks_may_progress(p);
    segments(p);
    ownership_and_callbacks(p);
    expected_receive(p);
    put_get_every_alignment(p);
    flush_completes_everything(p);
    atomics(p);
    remote_access_is_checked(p);
    p.barrier();
}

/// The byte at `i` of a test message of `len` bytes.
fn pattern(len: usize, i: usize) -> u8 {
    (i.wrapping_mul(31) ^ len.wrapping_mul(7)) as u8
}

fn fill(buf: &mut [u8], seed: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
}

fn matches_pattern(buf: &[u8], seed: usize) -> bool {
    buf.iter().enumerate().all(|(i, &b)| b == pattern(seed, i))
}

/// Sizes worth sending: all up to 64, and around every power of two and the limits.
pub fn interesting_sizes(eager: usize, max: usize) -> Vec<usize> {
    let mut sizes: Vec<usize> = (0..=64).collect();
    let mut p = 128;
    while p <= max {
        sizes.extend([p - 1, p, p + 1]);
        p *= 2;
    }
    sizes.extend([eager.saturating_sub(1), eager, eager + 1, max - 1, max]);
    sizes.retain(|&s| s <= max);
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Send `des`, retrying after progress while the transport is out of resources, and
/// take back a descriptor that comes back at once.
fn send_all(p: &mut Peer<'_>, des: Descriptor, tag: Tag) {
    send_progressing(p, des, tag, &mut idle_progress);
}

/// [`send_all`], progressing through `progress`.
fn send_progressing(
    p: &mut Peer<'_>,
    mut des: Descriptor,
    tag: Tag,
    progress: &mut impl FnMut(&mut dyn Module),
) {
    let start = Instant::now();
    loop {
        match p.module.send(p.endpoint, des, tag) {
            Ok(SendOutcome::Done(Some(back))) => {
                p.module.free(back).expect("free a returned descriptor");
                return;
            }
            Ok(_) => return,
            Err(e) if matches!(e.error, Error::OutOfResource(_)) => {
                des = e.descriptor;
                progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "send stuck");
            }
            Err(e) => panic!("send on tag {tag}: {}", e.error),
        }
    }
}

/// Run `op` until the transport stops answering `OutOfResource`, progressing between
/// tries.
fn retry<T>(
    p: &mut Peer<'_>,
    what: &str,
    mut op: impl FnMut(&mut dyn Module) -> Result<T, Error>,
) -> T {
    let start = Instant::now();
    loop {
        match op(&mut *p.module) {
            Ok(v) => return v,
            Err(Error::OutOfResource(_)) => {
                idle_progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "{what} stuck");
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// Send `header` then `payload` through `sendi`, or the descriptor it hands back,
/// retrying after progress while the transport is out of resources.
fn sendi_all(p: &mut Peer<'_>, header: &[u8], payload: &[u8], tag: Tag) {
    sendi_progressing(p, header, payload, tag, idle_progress);
}

/// [`sendi_all`], progressing through `progress`.
fn sendi_progressing(
    p: &mut Peer<'_>,
    header: &[u8],
    payload: &[u8],
    tag: Tag,
    mut progress: impl FnMut(&mut dyn Module),
) {
    let (ep, start) = (p.endpoint, Instant::now());
    let mut des = loop {
        match p
            .module
            .sendi(ep, header, payload, Order::ANY, DesFlags::empty(), tag)
        {
            Ok(SendiOutcome::Sent) => return,
            Ok(SendiOutcome::Descriptor(d)) => break d,
            Err(Error::OutOfResource(_)) => {
                progress(p.module);
                assert!(start.elapsed() < Duration::from_secs(60), "sendi stuck");
            }
            Err(e) => panic!("sendi on tag {tag}: {e}"),
        }
    };
    des.flags |= DesFlags::OWNERSHIP;
    send_progressing(p, des, tag, &mut progress);
}

fn alloc_retry(p: &mut Peer<'_>, size: usize, flags: DesFlags) -> Descriptor {
    let ep = p.endpoint;
    retry(p, "alloc", |m| m.alloc(ep, Order::ANY, size, flags))
}

/// An expected receive ([`Module::expect`]), where the transport has them, takes the
/// first message that carries its key and fits its room, short or long, with no
/// callback, and the progress call that fills it returns right after it. Messages
/// with another key, a matching one too long, and the ones after it reach the callback
/// in order; a withdrawn receive takes nothing.
pub fn expected_receive(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let tag = Tag(Tag::USR.0 + 3);
    let got: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let g = got.clone();
    p.module
        .register_am(
            tag,
            Box::new(move |_, r| g.lock().unwrap().push(r.to_vec())),
        )
        .expect("register");
    let (key, other) = ([1, 2, 3, 4], [1, 2, 3, 5]);
    let ep = p.endpoint;
    for (round, cap) in [16, 1000].into_iter().enumerate() {
        let len = cap - 4;
        let mut buf = vec![0u8; cap];
        let e = Expected {
            endpoint: ep,
            tag,
            key,
            buf: buf.as_mut_ptr(),
            cap,
        };
        // SAFETY: `buf` outlives the receive: it is taken or withdrawn below, before
        // `buf` is read or dropped.
        let posted = unsafe { p.module.expect(e) };
        // Both sides have posted before either sends.
        let peer_posted = p.swap(&[u8::from(posted)]) == [1];
        assert_eq!(posted, peer_posted, "both sides run the same transport");
        if !posted {
            return;
        }
        let data: Vec<u8> = (0..cap + 1).map(|i| pattern(cap, i)).collect();
        // From here every progress call is followed by a look at the receive, noting
        // how many messages had reached the callback when it filled. The peer sends
        // only once it has this side's go, which leaves after the last call that is not
        // watched.
        let mut filled = None;
        p.send_exchange(&[]);
        let start = Instant::now();
        while p.take_exchange().is_none() {
            progress_watching(p.module, &mut filled, &got);
            assert!(start.elapsed() < Duration::from_secs(60), "the peer's go");
        }
        let sends = [
            (other, &data[..4]),
            (key, &data[..]),
            (key, &data[..len]),
            (key, &data[..3]),
        ];
        for (head, body) in sends {
            sendi_progressing(p, &head, body, tag, |m| {
                progress_watching(m, &mut filled, &got)
            });
        }
        let start = Instant::now();
        while filled.is_none() {
            progress_watching(p.module, &mut filled, &got);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "round {round}: the expected receive still waits after 60 s"
            );
        }
        let (filled, before) = filled.expect("filled");
        assert_eq!(
            before, 2,
            "round {round}: the call that filled the receive returned right after it"
        );
        assert_eq!(filled, len, "round {round}: its length");
        assert_eq!(buf[..len], data[..len], "round {round}: its bytes");
        assert!(
            buf[len..].iter().all(|&b| b == 0),
            "round {round}: nothing more"
        );
        assert_eq!(p.module.take_expected(), None, "round {round}: taken once");
        p.wait("the messages around the expected one", || {
            got.lock().unwrap().len() == 3
        });
        let expect_got = [
            [&other[..], &data[..4]].concat(),
            [&key[..], &data].concat(),
            [&key[..], &data[..3]].concat(),
        ];
        assert_eq!(
            *got.lock().unwrap(),
            expect_got,
            "round {round}: the other messages reach the callback, in order"
        );
        got.lock().unwrap().clear();
        p.barrier();
    }
    // An endpoint the module does not know is refused.
    let mut buf = vec![0u8; 16];
    let stranger = Expected {
        endpoint: Endpoint(u32::MAX),
        tag,
        key,
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
    };
    // SAFETY: refused, so nothing is posted; `buf` outlives the call anyway.
    assert!(
        !unsafe { p.module.expect(stranger) },
        "{}: an expected receive from an unknown endpoint is refused",
        p.module.name()
    );
    // Withdrawn: a matching message goes to the callback, the buffer stays untouched.
    let e = Expected {
        endpoint: ep,
        tag,
        key,
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
    };
    // SAFETY: withdrawn at once, before `buf` is read or dropped.
    assert!(unsafe { p.module.expect(e) }, "posted as before");
    p.module.cancel_expected();
    p.barrier();
    sendi_all(p, &key, &[9; 8], tag);
    p.wait("a message for a withdrawn receive", || {
        got.lock().unwrap().len() == 1
    });
    assert_eq!(
        p.module.take_expected(),
        None,
        "a withdrawn receive takes nothing"
    );
    assert!(buf.iter().all(|&b| b == 0), "nor writes its buffer");
    p.barrier();
}

/// Progress once; if that filled the expected receive, note its length and how many
/// messages `got` holds.
fn progress_watching(
    m: &mut dyn Module,
    filled: &mut Option<(usize, usize)>,
    got: &Mutex<Vec<Vec<u8>>>,
) {
    idle_progress(m);
    if let Some(len) = m.take_expected() {
        assert!(filled.is_none(), "an expected receive is filled once");
        *filled = Some((len, got.lock().unwrap().len()));
    }
}

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
            .sendi(ep, &[], &[1], Order::ANY, DesFlags::empty(), NOBODY_TAG)
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
        let mut des = retry(p, "prepare_src", |m| {
            m.prepare_src(
                ep,
                Order::ANY,
                reserve,
                &[&msg[reserve..]],
                DesFlags::OWNERSHIP,
            )
        });
        assert_eq!(des.len(), size, "prepare_src packed all of {size} bytes");
        des.segment_mut(0)[..reserve].copy_from_slice(&msg[..reserve]);
        send_all(p, des, tag);
        expected.push(size);

        if size <= attrs.eager_limit {
            let split = size / 3;
            let (h, b) = msg.split_at(split);
            let out = retry(p, "sendi", |m| {
                m.sendi(ep, h, b, Order::ANY, DesFlags::empty(), tag)
            });
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
            m.sendi(ep, &bytes, &[], Order::ANY, DesFlags::empty(), tag)
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
    let got: Arc<Mutex<Vec<Vec<Vec<u8>>>>> = Arc::default();
    let g = got.clone();
    p.module
        .register_am(
            tag,
            Box::new(move |_, r| {
                g.lock()
                    .unwrap()
                    .push(r.segments.iter().map(|s| s.to_vec()).collect());
            }),
        )
        .expect("register_am");
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

/// A registered buffer and what the peer needs to reach it.
pub struct Buffer {
    /// The memory.
    pub mem: Vec<u8>,
    /// Its registration.
    pub handle: MemHandle,
}

impl Buffer {
    /// Allocate `len` bytes filled by `fill` and register them for `access`.
    pub fn new(m: &mut dyn Module, ep: Endpoint, len: usize, access: Access) -> Buffer {
        let mut mem = vec![0u8; len];
        // SAFETY: `mem` lives in the returned Buffer, whose `handle` is dropped with it
        // (field order), and its heap block does not move while the Vec is not resized.
        let handle = unsafe { m.register_mem(Some(ep), mem.as_mut_ptr() as usize, len, access) }
            .expect("register_mem");
        Buffer { mem, handle }
    }

    /// Address of byte `off`.
    pub fn addr(&self, off: usize) -> usize {
        self.mem.as_ptr() as usize + off
    }

    /// What the peer needs: address then handle bytes.
    pub fn advertise(&self) -> Vec<u8> {
        let mut v = (self.addr(0) as u64).to_le_bytes().to_vec();
        v.extend_from_slice(self.handle.remote().as_bytes());
        v
    }

    /// Read volatile-ly (peers write into it behind the compiler's back).
    pub fn snapshot(&self) -> Vec<u8> {
        // SAFETY: reading our own live buffer through a raw pointer, after a barrier
        // that orders the peer's writes before this read.
        (0..self.mem.len())
            .map(|i| unsafe { std::ptr::read_volatile(self.mem.as_ptr().add(i)) })
            .collect()
    }
}

/// The peer's buffer as advertised.
pub fn remote_of(bytes: &[u8]) -> (u64, RemoteHandle) {
    let addr = u64::from_le_bytes(bytes[..8].try_into().expect("address"));
    (addr, RemoteHandle::from_bytes(&bytes[8..]).expect("handle"))
}

/// A completion callback that checks the status and counts into `done`.
fn counting(done: &Arc<AtomicUsize>) -> crate::RdmaCallback {
    let done = done.clone();
    Box::new(move |_, c| {
        c.status.expect("rdma status");
        done.fetch_add(1, Ordering::SeqCst);
    })
}

/// Case `case`'s slot after a put or get of `size` bytes at `off`: the pattern there
/// if the operation was accepted, and zeros everywhere else.
fn check_slot(slot: &[u8], off: usize, size: usize, landed: bool, case: usize, what: &str) {
    if landed {
        assert!(
            matches_pattern(&slot[off..off + size], case),
            "{what} case {case} data"
        );
    }
    assert!(
        slot[..off].iter().all(|&b| b == 0),
        "{what} case {case} wrote before its range"
    );
    assert!(
        slot[off + size..].iter().all(|&b| b == 0),
        "{what} case {case} wrote past its range"
    );
}

const ALL: Access = Access::all();
const SLOT: usize = 4096 + 16;
const ALIGN_SIZES: [usize; 5] = [1, 7, 8, 100, 4096];

/// Put and get at every local and remote alignment 0..8 and several sizes; data lands
/// exactly where asked and nowhere else; callbacks run once each.
pub fn put_get_every_alignment(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let cases: Vec<(usize, usize, usize)> = (0..8)
        .flat_map(|lo| (0..8).flat_map(move |ro| ALIGN_SIZES.map(|s| (lo, ro, s))))
        .collect();
    let len = cases.len() * SLOT;
    let ep = p.endpoint;
    let mut local = Buffer::new(p.module, ep, len, ALL);
    let target = Buffer::new(p.module, ep, len, ALL);
    // Phase 1: put into the peer's target buffer, slot by case.
    if attrs.flags.contains(BtlFlags::PUT) {
        for (i, &(lo, _, size)) in cases.iter().enumerate() {
            fill(&mut local.mem[i * SLOT + lo..i * SLOT + lo + size], i);
        }
        let peer = p.swap(&target.advertise());
        let (raddr, rh) = remote_of(&peer);
        let mut expected = 0;
        let done = Arc::new(AtomicUsize::new(0));
        for (i, &(lo, ro, size)) in cases.iter().enumerate() {
            let l = local.addr(i * SLOT + lo);
            let r = raddr + (i * SLOT + ro) as u64;
            let cb = counting(&done);
            let res = p.module.put(
                ep,
                l,
                r,
                &local.handle,
                &rh,
                size,
                rdma_flags::NONE,
                Order::ANY,
                cb,
            );
            let aligned = (l | r as usize | size) % attrs.put_alignment == 0;
            match res {
                Ok(()) => expected += 1,
                Err(Error::NotAvailable(_)) if !aligned || size > attrs.put_limit => {}
                Err(e) => panic!("put lo={lo} ro={ro} size={size}: {e}"),
            }
        }
        p.module.flush(Some(ep)).expect("flush");
        assert_eq!(
            done.load(Ordering::SeqCst),
            expected,
            "one put callback each"
        );
        p.barrier();
        let got = target.snapshot();
        for (i, &(_, ro, size)) in cases.iter().enumerate() {
            let landed = (ro | size) % attrs.put_alignment == 0 && size <= attrs.put_limit;
            check_slot(&got[i * SLOT..(i + 1) * SLOT], ro, size, landed, i, "put");
        }
    }
    // Phase 2: get from the peer's buffer, whose slots hold patterns.
    if attrs.flags.contains(BtlFlags::GET) {
        let source = Buffer::new(p.module, ep, len, ALL);
        // SAFETY: nobody has the address of `source` yet; plain writes are fine.
        let src = unsafe { std::slice::from_raw_parts_mut(source.addr(0) as *mut u8, len) };
        for (i, &(_, ro, size)) in cases.iter().enumerate() {
            fill(&mut src[i * SLOT + ro..i * SLOT + ro + size], i);
        }
        local.mem.fill(0);
        let peer = p.swap(&source.advertise());
        let (raddr, rh) = remote_of(&peer);
        let done = Arc::new(AtomicUsize::new(0));
        let mut ok = vec![false; cases.len()];
        for (i, &(lo, ro, size)) in cases.iter().enumerate() {
            let l = local.addr(i * SLOT + lo);
            let r = raddr + (i * SLOT + ro) as u64;
            let cb = counting(&done);
            let aligned = (l | r as usize | size) % attrs.get_alignment == 0;
            match p.module.get(
                ep,
                l,
                r,
                &local.handle,
                &rh,
                size,
                rdma_flags::NONE,
                Order::ANY,
                cb,
            ) {
                Ok(()) => ok[i] = true,
                Err(Error::NotAvailable(_)) if !aligned || size > attrs.get_limit => {}
                Err(e) => panic!("get lo={lo} ro={ro} size={size}: {e}"),
            }
        }
        p.module.flush(Some(ep)).expect("flush");
        let expected = ok.iter().filter(|&&o| o).count();
        assert_eq!(
            done.load(Ordering::SeqCst),
            expected,
            "one get callback each"
        );
        let got = local.snapshot();
        for (i, &(lo, _, size)) in cases.iter().enumerate() {
            check_slot(&got[i * SLOT..(i + 1) * SLOT], lo, size, ok[i], i, "get");
        }
        p.barrier();
        drop(source);
    }
    drop(target);
}

/// Many puts in flight, then one flush: every callback has run and all data is there.
pub fn flush_completes_everything(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.contains(BtlFlags::PUT) {
        return;
    }
    const N: usize = 256;
    const SIZE: usize = 1024;
    let ep = p.endpoint;
    let mut local = Buffer::new(p.module, ep, N * SIZE, ALL);
    let target = Buffer::new(p.module, ep, N * SIZE, ALL);
    fill(&mut local.mem, N);
    let peer = p.swap(&target.advertise());
    let (raddr, rh) = remote_of(&peer);
    let done = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        let off = i * SIZE;
        let (l, r, h) = (local.addr(off), raddr + off as u64, &local.handle);
        // A refused put drops its callback: each try gets a fresh one.
        retry(p, "put", |m| {
            m.put(
                ep,
                l,
                r,
                h,
                &rh,
                SIZE,
                rdma_flags::NONE,
                Order::ANY,
                counting(&done),
            )
        });
    }
    p.module.flush(None).expect("flush");
    assert_eq!(done.load(Ordering::SeqCst), N, "flush ran every callback");
    p.barrier();
    assert!(
        matches_pattern(&target.snapshot(), N),
        "all data visible after flush"
    );
    p.barrier();
}

/// Fetch-add, compare-swap and the other atomics on the peer's u64 words.
pub fn atomics(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.contains(BtlFlags::ATOMIC_FOPS) {
        let b = Buffer::new(p.module, p.endpoint, 64, ALL);
        let refused = p.module.atomic_op(
            p.endpoint,
            b.addr(0) as u64,
            b.handle.remote(),
            AtomicOp::Add,
            1,
            0,
            Order::ANY,
            Box::new(|_, _| {}),
        );
        assert!(matches!(
            refused,
            Err(Error::NotSupported(_)) | Err(Error::BadRemoteHandle(_))
        ));
        return;
    }
    const N: usize = 100;
    let ep = p.endpoint;
    let results = Buffer::new(p.module, ep, N * 8, ALL);
    let target = Buffer::new(p.module, ep, 64, ALL);
    let peer = p.swap(&target.advertise());
    let (raddr, rh) = remote_of(&peer);
    let done = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        p.module
            .atomic_fop(
                ep,
                results.addr(i * 8),
                raddr,
                &results.handle,
                &rh,
                AtomicOp::Add,
                1,
                0,
                Order::ANY,
                counting(&done),
            )
            .expect("atomic_fop");
        p.module.flush(Some(ep)).expect("flush");
    }
    assert_eq!(done.load(Ordering::SeqCst), N);
    let mut fetched: Vec<u64> = results
        .snapshot()
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    fetched.sort_unstable();
    assert_eq!(
        fetched,
        (0..N as u64).collect::<Vec<_>>(),
        "fetch-add results"
    );
    p.barrier();
    let word = |b: &Buffer, i: usize| {
        u64::from_ne_bytes(b.snapshot()[i * 8..i * 8 + 8].try_into().unwrap())
    };
    assert_eq!(word(&target, 0), N as u64, "counter after fetch-adds");
    p.barrier();

    // Compare-swap: a mismatch leaves the word, a match replaces it.
    for (compare, value) in [(1, 5), (N as u64, 777)] {
        p.module
            .atomic_cswap(
                ep,
                results.addr(0),
                raddr,
                &results.handle,
                &rh,
                compare,
                value,
                0,
                Order::ANY,
                Box::new(|_, c| c.status.expect("cswap status")),
            )
            .expect("atomic_cswap");
        p.module.flush(Some(ep)).expect("flush");
        assert_eq!(word(&results, 0), N as u64, "cswap fetched the old value");
    }
    p.barrier();
    assert_eq!(word(&target, 0), 777, "cswap stored");
    p.barrier();

    // Non-fetching operations on word 1: those the module lists apply, the others are
    // refused.
    if attrs.flags.contains(BtlFlags::ATOMIC_OPS) {
        let w1 = raddr + 8;
        let mut expected = 0u64;
        for (op, flag, operand) in [
            (AtomicOp::Swap, AtomicFlags::SWAP, 0b1100u64),
            (AtomicOp::Or, AtomicFlags::OR, 0b0011),
            (AtomicOp::And, AtomicFlags::AND, 0b0110),
            (AtomicOp::Xor, AtomicFlags::XOR, 0b1111),
            (AtomicOp::Add, AtomicFlags::ADD, 100),
        ] {
            let r = p.module.atomic_op(
                ep,
                w1,
                &rh,
                op,
                operand,
                0,
                Order::ANY,
                Box::new(|_, c| c.status.expect("op")),
            );
            if !attrs.atomic_flags.contains(flag) {
                assert!(matches!(r, Err(Error::NotSupported(_))), "{op:?}: {r:?}");
                continue;
            }
            r.expect("atomic_op");
            p.module.flush(Some(ep)).expect("flush");
            let w = AtomicU64::new(expected);
            op.apply(&w, operand);
            expected = w.into_inner();
        }
        p.barrier();
        assert_eq!(word(&target, 1), expected);
        p.barrier();
    }
    let misaligned = p.module.atomic_op(
        ep,
        raddr + 4,
        &rh,
        AtomicOp::Add,
        1,
        0,
        Order::ANY,
        Box::new(|_, _| {}),
    );
    assert!(
        matches!(misaligned, Err(Error::Misaligned(_))),
        "{misaligned:?}"
    );
    p.barrier();
}

/// Put and get outside the remote registration, without the access they need, or with
/// a malformed handle (or a deregistered one, where the module checks that at the
/// call) are refused, and the target is unchanged.
pub fn remote_access_is_checked(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.intersects(BtlFlags::PUT | BtlFlags::GET) {
        return;
    }
    const LEN: usize = 4096;
    let ep = p.endpoint;
    let local = Buffer::new(p.module, ep, LEN, ALL);
    let read_only = Buffer::new(p.module, ep, LEN, Access::LOCAL_READ | Access::REMOTE_READ);
    let write_only = Buffer::new(
        p.module,
        ep,
        LEN,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    );
    let mut dead = Buffer::new(p.module, ep, LEN, ALL);
    for b in [&read_only, &write_only, &dead] {
        // SAFETY: no operation is in flight on these buffers yet.
        let m = unsafe { std::slice::from_raw_parts_mut(b.addr(0) as *mut u8, LEN) };
        fill(m, 3);
    }
    let mut ad = read_only.advertise();
    ad.extend(write_only.advertise());
    ad.extend(dead.advertise());
    let hs = 8 + read_only.handle.remote().as_bytes().len();
    p.module
        .deregister_mem(&mut dead.handle)
        .expect("deregister");
    let peer = p.swap(&ad);
    let (ro, ro_h) = remote_of(&peer[..hs]);
    let (wo, wo_h) = remote_of(&peer[hs..2 * hs]);
    let (dd, dd_h) = remote_of(&peer[2 * hs..]);
    let l = local.addr(0);
    let nop = || -> crate::RdmaCallback { Box::new(|_, _| panic!("refused operation completed")) };
    let put = |m: &mut dyn Module, r: u64, h: &RemoteHandle, size: usize| {
        m.put(ep, l, r, &local.handle, h, size, 0, Order::ANY, nop())
    };
    if attrs.flags.contains(BtlFlags::PUT) {
        let e = put(p.module, wo + LEN as u64 - 8, &wo_h, 16);
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "remote", .. })),
            "past the end: {e:?}"
        );
        let e = put(p.module, wo - 1, &wo_h, 8);
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "remote", .. })),
            "before: {e:?}"
        );
        let e = put(p.module, ro, &ro_h, 8);
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "remote", .. })),
            "read-only: {e:?}"
        );
        if attrs.flags.contains(BtlFlags::REMOTE_HANDLES_CHECKED) {
            let e = put(p.module, dd, &dd_h, 8);
            assert!(
                matches!(e, Err(Error::BadRemoteHandle(_))),
                "deregistered: {e:?}"
            );
        }
        let garbage = RemoteHandle::from_bytes(&[7; 5]).unwrap();
        let e = put(p.module, wo, &garbage, 8);
        assert!(
            matches!(
                e,
                Err(Error::MalformedHandle(_)) | Err(Error::BadRemoteHandle(_))
            ),
            "garbage: {e:?}"
        );
        let e = p.module.put(
            ep,
            l + LEN - 4,
            wo,
            &local.handle,
            &wo_h,
            8,
            0,
            Order::ANY,
            nop(),
        );
        assert!(
            matches!(e, Err(Error::OutOfRange { side: "local", .. })),
            "local past end: {e:?}"
        );
    }
    if attrs.flags.contains(BtlFlags::GET) {
        let e = p
            .module
            .get(ep, l, wo, &local.handle, &wo_h, 8, 0, Order::ANY, nop());
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "remote", .. })),
            "write-only: {e:?}"
        );
        let e = p.module.get(
            ep,
            l,
            ro + LEN as u64,
            &local.handle,
            &ro_h,
            1,
            0,
            Order::ANY,
            nop(),
        );
        assert!(
            matches!(e, Err(Error::OutOfRange { .. })),
            "get past end: {e:?}"
        );
        let e = p.module.get(
            ep,
            read_only.addr(0),
            ro,
            &read_only.handle,
            &ro_h,
            8,
            0,
            Order::ANY,
            nop(),
        );
        assert!(
            matches!(e, Err(Error::AccessDenied { side: "local", .. })),
            "get into a local buffer without LOCAL_WRITE: {e:?}"
        );
    }
    p.module.flush(None).expect("flush");
    p.barrier();
    for b in [&read_only, &write_only] {
        assert!(
            matches_pattern(&b.snapshot(), 3),
            "refused operations left the target unchanged"
        );
    }
    p.barrier();
}
