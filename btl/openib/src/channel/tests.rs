//! The out-of-band channel's tests: strangers, members, two channels through their
//! blobs, peers that end or stop reading, and any bytes on a member's connection.

use super::*;

fn frame(rank: u32, body: &[u8]) -> Vec<u8> {
    let mut f = vec![body.len() as u8];
    f.extend_from_slice(&rank.to_le_bytes());
    f.extend_from_slice(body);
    f
}

/// Connect to the channel's listener and write `bytes`; the stream, still open.
fn connect(c: &Channel, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, c.port)).unwrap();
    s.write_all(bytes).unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// Whether the channel has closed its end of `s`.
fn closed_by_channel(s: &mut TcpStream) -> bool {
    match s.read(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

type Heard = (Vec<(u32, Vec<u8>)>, Ended);

/// What the channel reads from its connections until `done` holds (or 5 s pass).
fn read_until(c: &mut Channel, mut done: impl FnMut(&Heard) -> bool) -> Heard {
    let mut heard: Heard = (Vec::new(), Vec::new());
    for _ in 0..500 {
        let (g, cl) = c.poll();
        heard.0.extend(g);
        heard.1.extend(cl);
        if done(&heard) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    heard
}

/// The ranks of the first connections the channel reports closed, each checked to
/// have ended as a process does.
fn read_ended(c: &mut Channel) -> Vec<u32> {
    let (_, closed) = read_until(c, |h| !h.1.is_empty());
    for (_, why) in &closed {
        assert!(matches!(why, ChannelError::Closed), "{why}");
    }
    closed.iter().map(|c| c.0).collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// A member's connection carrying any frames (for up to three ranks) and then
    /// any bytes is heard as its whole frames, in order, up to the first that speaks
    /// for another rank (the connection is then closed, as no death) or the first
    /// incomplete one (which waits).
    #[test]
    fn a_members_stream_is_heard_as_its_whole_frames(
        frames in proptest::collection::vec(
            (0..3u32, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)),
            0..6,
        ),
        tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
    ) {
        let mut c = Channel::listen("test").unwrap();
        let mut bytes = c.secret.to_vec();
        for (rank, body) in &frames {
            bytes.extend(frame(*rank, body));
        }
        bytes.extend_from_slice(&tail);
        // What a reader of the format hears: length, rank, body, while whole and
        // from the first rank.
        let (mut want, mut rest, mut first, mut lied) = (Vec::new(), &bytes[secret::LEN..], None, false);
        while let Some(&len) = rest.first() {
            let total = 5 + usize::from(len);
            if rest.len() < total {
                break;
            }
            let rank = u32::from_le_bytes(rest[1..5].try_into().unwrap());
            if first.is_some_and(|f| f != rank) {
                lied = true;
                break;
            }
            first = Some(rank);
            want.push((rank, rest[5..total].to_vec()));
            rest = &rest[total..];
        }
        let mut s = connect(&c, &bytes);
        let (mut got, closed) = read_until(&mut c, |h| {
            h.0.len() >= want.len() && (!lied || closed_by_channel(&mut s))
        });
        std::thread::sleep(Duration::from_millis(20));
        got.extend(c.poll().0);
        proptest::prop_assert_eq!(got, want);
        proptest::prop_assert!(closed.is_empty(), "{closed:?}");
        proptest::prop_assert_eq!(closed_by_channel(&mut s), lied);
    }
}

#[test]
fn a_connection_without_the_secret_is_closed_unheard() {
    let mut c = Channel::listen("test").unwrap();
    let mut bytes = vec![0u8; secret::LEN];
    bytes.extend(frame(3, &[1]));
    let mut s = connect(&c, &bytes);
    let (got, closed) = read_until(&mut c, |_| closed_by_channel(&mut s));
    assert!(
        closed_by_channel(&mut s),
        "the stranger's connection is still open"
    );
    assert!(got.is_empty(), "a stranger's message was taken: {got:?}");
    assert!(
        closed.is_empty(),
        "a stranger's close made rank 3 look dead"
    );
    assert!(
        c.incoming.is_empty(),
        "the stranger's connection is still kept"
    );
}

#[test]
fn a_member_is_heard_and_its_close_reports_its_rank() {
    let mut c = Channel::listen("test").unwrap();
    let mut bytes = c.secret.to_vec();
    bytes.extend(frame(3, &[1, 2]));
    let s = connect(&c, &bytes);
    let (got, _) = read_until(&mut c, |h| !h.0.is_empty());
    assert_eq!(got, vec![(3, vec![1, 2])]);
    drop(s);
    assert_eq!(read_ended(&mut c), vec![3]);
}

#[test]
fn a_connection_speaks_for_one_rank_only() {
    let mut c = Channel::listen("test").unwrap();
    let mut bytes = c.secret.to_vec();
    bytes.extend(frame(3, &[1]));
    bytes.extend(frame(4, &[4]));
    let mut s = connect(&c, &bytes);
    let (got, closed) = read_until(&mut c, |_| closed_by_channel(&mut s));
    assert_eq!(got, vec![(3, vec![1])]);
    assert!(
        closed.is_empty(),
        "a connection closed for lying is no death"
    );
}

/// Two channels talk through what they publish: bodies arrive whole and in
/// order, with the sender's rank; an oversized body is refused before it goes.
#[test]
fn two_channels_exchange_messages_through_their_blobs() {
    let mut a = Channel::listen("test").unwrap();
    let mut b = Channel::listen("test").unwrap();
    a.add_peer(1, &b.blob()).unwrap();
    for i in 0..3u8 {
        a.send(1, 0, &[i; 40]).unwrap();
    }
    let e = a.send(1, 0, &[0; 256]).unwrap_err();
    assert!(matches!(e, ChannelError::TooLong { len: 256, .. }), "{e}");
    assert!(matches!(
        a.send(7, 0, &[1]),
        Err(ChannelError::NotAPeer { rank: 7, .. })
    ));
    let (got, _) = read_until(&mut b, |h| h.0.len() == 3);
    let want: Vec<(u32, Vec<u8>)> = (0..3u8).map(|i| (0, vec![i; 40])).collect();
    assert_eq!(got, want);
    drop(a);
    assert_eq!(read_ended(&mut b), vec![0]);
}

/// A process that only ever heard from us ends: the connection we opened to it
/// says so (else a request to it would wait for an answer forever).
#[test]
fn the_end_of_a_peer_that_never_wrote_is_seen_on_our_connection() {
    let mut a = Channel::listen("test").unwrap();
    let mut b = Channel::listen("test").unwrap();
    a.add_peer(1, &b.blob()).unwrap();
    a.send(1, 0, &[7]).unwrap();
    let (got, _) = read_until(&mut b, |h| !h.0.is_empty());
    assert_eq!(got, vec![(0, vec![7])]);
    let (got, closed) = a.poll();
    assert!(got.is_empty() && closed.is_empty(), "alive and silent");
    drop(b);
    assert_eq!(read_ended(&mut a), vec![1]);
    // Refused: at once, or on a later poll.
    let e = match a.send(1, 0, &[8]) {
        Err(e) => e,
        Ok(()) => read_until(&mut a, |h| !h.1.is_empty()).1.remove(0).1,
    };
    let ChannelError::Unreachable { rank: 1, tried, .. } = &e else {
        panic!("{e}");
    };
    assert!(
        tried
            .iter()
            .all(|(_, e)| e.kind() == ErrorKind::ConnectionRefused),
        "{e}"
    );
}

/// A peer whose listener takes no more connections (its backlog full: the kernel
/// drops the handshake) holds up nothing: sends return at once, and once its
/// address has not answered for [`CONNECT_TIMEOUT`], a poll reports the rank as
/// unreachable, saying why.
#[test]
fn a_peer_that_does_not_answer_the_connection_holds_up_nothing() {
    let full = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    full.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())
        .unwrap();
    full.listen(0).unwrap();
    let at = full.local_addr().unwrap().as_socket_ipv4().unwrap();
    // Fill its backlog with connections it never accepts (the kernel completes
    // as many handshakes as the backlog holds, then drops the rest).
    let mut filling = Vec::new();
    for _ in 0..4 {
        if let Ok(s) = start_connect(at) {
            filling.push(s);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut a = Channel::listen("test").unwrap();
    let mut blob = at.port().to_le_bytes().to_vec();
    blob.extend_from_slice(&[0; secret::LEN]);
    blob.extend_from_slice(&Ipv4Addr::LOCALHOST.octets());
    a.add_peer(1, &blob).unwrap();
    let started = Instant::now();
    a.send(1, 0, &[1]).unwrap();
    assert!(a.peers[&1].connecting.is_some(), "still connecting");
    assert!(started.elapsed() < CONNECT_TIMEOUT / 2, "the send waited");
    let (_, closed) = read_until(&mut a, |h| !h.1.is_empty());
    let waited = started.elapsed();
    assert_eq!(closed.len(), 1, "{closed:?}");
    let (rank, why) = &closed[0];
    assert_eq!(*rank, 1);
    let ChannelError::Unreachable { tried, .. } = why else {
        panic!("{why}");
    };
    assert!(
        tried.len() == 1 && tried[0].1.kind() == ErrorKind::TimedOut,
        "{why}"
    );
    assert!(why.to_string().contains("no answer within 2 s"), "{why}");
    assert!(waited >= CONNECT_TIMEOUT, "given up after {waited:?}");
    assert!(a.peers[&1].out.is_none() && a.peers[&1].unsent.is_empty());
}

/// A peer that stops reading holds up no send: what its socket does not take
/// waits here, and arrives whole and in order once it reads again.
#[test]
fn sends_to_a_peer_that_stops_reading_do_not_block() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // A send that blocks would hang this test: end the process instead.
    let over = Arc::new(AtomicBool::new(false));
    let watched = over.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(120));
        if !watched.load(Ordering::Relaxed) {
            eprintln!("sends_to_a_peer_that_stops_reading_do_not_block: still running");
            std::process::abort();
        }
    });
    let mut a = Channel::listen("test").unwrap();
    let mut b = Channel::listen("test").unwrap();
    a.add_peer(1, &b.blob()).unwrap();
    // `b` does not poll meanwhile, so nothing reads: once connected, the kernel's
    // buffers fill.
    let mut sent = 0u32;
    while a.peers[&1].connecting.is_some() || a.peers[&1].unsent.is_empty() {
        assert!(sent < 1_000_000, "the socket took {sent} messages");
        a.send(1, 0, &[sent.to_le_bytes(), [0xa5; 4]].concat())
            .unwrap();
        sent += 1;
    }
    for _ in 0..100 {
        a.send(1, 0, &[sent.to_le_bytes(), [0xa5; 4]].concat())
            .unwrap();
        sent += 1;
    }
    assert!(
        a.poll().1.is_empty(),
        "a peer that does not read is not closed"
    );
    let mut got = Vec::new();
    for _ in 0..10_000 {
        if got.len() == sent as usize {
            break;
        }
        a.poll();
        got.extend(b.poll().0);
    }
    assert_eq!(got.len(), sent as usize, "every message arrived");
    for (i, (rank, body)) in got.into_iter().enumerate() {
        assert_eq!(rank, 0);
        assert_eq!(body, [(i as u32).to_le_bytes(), [0xa5; 4]].concat());
    }
    assert!(a.peers[&1].unsent.is_empty());
    over.store(true, Ordering::Relaxed);
}

#[test]
fn the_blob_carries_port_secret_and_addresses() {
    let c = Channel::listen("test").unwrap();
    let blob = c.blob();
    assert_eq!(u16::from_le_bytes([blob[0], blob[1]]), c.port);
    assert_eq!(&blob[2..2 + secret::LEN], &c.secret);
    assert_eq!((blob.len() - 2 - secret::LEN) % 4, 0);
    let mut peer = Channel::listen("test").unwrap();
    peer.add_peer(0, &blob).unwrap();
    assert_eq!(peer.peers[&0].secret, c.secret);
    assert!(peer.knows(0));
    let e = peer.add_peer(1, &blob[..2 + secret::LEN - 1]).unwrap_err();
    assert!(e.to_string().contains("rank 1's address"), "{e}");
    assert_ne!(peer.secret, c.secret, "every listener draws its own secret");
}
