//! The out-of-band channel of the `oob` and `xrc` connection methods: a TCP
//! connection from each process to each peer it talks to (each listens on an
//! ephemeral port of every address, published in the modex), carrying short framed
//! messages, each naming its sender's rank. A connection lives as long as its
//! process, so its closing (seen from either end) says the process ended.
//!
//! The listener is reachable from the whole network, so it takes only connections
//! that open with its secret, random bytes published in the modex next to its
//! port. Anything else is closed unheard (a stranger could otherwise claim a rank,
//! and by closing make that rank look dead). A connection speaks for the first rank
//! it names, and for no other.
//!
//! Nothing here blocks. Connecting goes on across calls (`send`, `poll`), one address
//! of the peer after the other, each given [`CONNECT_TIMEOUT`]; what the socket does
//! not take at once waits in the connection's own buffer and goes out on later calls,
//! so a peer that stops reading, or a node that does not answer, holds up nothing
//! here.

use crate::core::cpc_error;
use crate::secret::{self, Secret};
use rbtl_cpc::Error;
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long making a connection to one of a peer's addresses may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The ranks whose connection ended, each with why.
pub type Ended = Vec<(u32, String)>;

/// Why a peer's connection closed.
const ENDED: &str = "its out-of-band connection closed: the process ended";

/// Where a peer listens, and our connection to it once made.
struct Outgoing {
    addrs: Vec<SocketAddrV4>,
    /// What its listener wants to hear first.
    secret: Secret,
    out: Option<TcpStream>,
    /// While `out` is connecting: to which address, since when, and why the addresses
    /// before it failed.
    connecting: Option<Connecting>,
    /// Bytes for `out` that its socket has not taken yet, in order (the secret first).
    unsent: Vec<u8>,
}

/// A connection under way.
struct Connecting {
    index: usize,
    since: Instant,
    failed: Vec<String>,
}

/// Why a connection to a peer ended.
enum Failure {
    /// No address of its could be reached: why, for each.
    Unreachable(String),
    /// Writing to it failed.
    Write(std::io::Error),
}

impl Failure {
    fn describe(&self, cpc: &str, rank: u32) -> String {
        match self {
            Failure::Unreachable(why) => format!("{cpc}: cannot reach rank {rank} ({why})"),
            Failure::Write(e) => format!("{cpc}: writing to rank {rank}: {e}"),
        }
    }
}

/// A non-blocking connection to `a`, under way or made.
fn start_connect(a: SocketAddrV4) -> std::io::Result<TcpStream> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_nonblocking(true)?;
    match s.connect(&SocketAddr::V4(a).into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(s.into())
}

impl Outgoing {
    /// Start connecting to the addresses from `index` on (`failed`: why the ones
    /// before failed); `Err` when none is left.
    fn connect_from(&mut self, mut index: usize, mut failed: Vec<String>) -> Result<(), Failure> {
        while let Some(&a) = self.addrs.get(index) {
            match start_connect(a) {
                Ok(s) => {
                    self.out = Some(s);
                    self.connecting = Some(Connecting {
                        index,
                        since: Instant::now(),
                        failed,
                    });
                    return Ok(());
                }
                Err(e) => failed.push(format!("{a}: {e}")),
            }
            index += 1;
        }
        self.out = None;
        self.connecting = None;
        Err(Failure::Unreachable(if failed.is_empty() {
            "no address".into()
        } else {
            failed.join("; ")
        }))
    }

    /// Whether `out` is connected: a connection under way is checked, and moves to the
    /// next address when this one failed or has not answered within
    /// [`CONNECT_TIMEOUT`].
    fn connected(&mut self) -> Result<bool, Failure> {
        let (Some(out), Some(c)) = (self.out.as_ref(), self.connecting.as_ref()) else {
            return Ok(self.out.is_some());
        };
        let why = match out.take_error() {
            Ok(None) if out.peer_addr().is_ok() => {
                let _ = out.set_nodelay(true);
                self.connecting = None;
                return Ok(true);
            }
            Ok(None) if c.since.elapsed() < CONNECT_TIMEOUT => return Ok(false),
            Ok(None) => format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            Ok(Some(e)) | Err(e) => e.to_string(),
        };
        let Connecting {
            index, mut failed, ..
        } = self.connecting.take().expect("looked at above");
        failed.push(format!("{}: {why}", self.addrs[index]));
        self.connect_from(index + 1, failed).map(|()| false)
    }

    /// Write what the socket takes now of `unsent`, once connected; `Err` when the
    /// connection failed.
    fn write_unsent(&mut self) -> Result<(), Failure> {
        if !self.connected()? {
            return Ok(());
        }
        let out = self.out.as_mut().expect("connected");
        let mut done = 0;
        while done < self.unsent.len() {
            match out.write(&self.unsent[done..]) {
                Ok(0) => return Err(Failure::Write(ErrorKind::WriteZero.into())),
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(Failure::Write(e)),
            }
        }
        self.unsent.drain(..done);
        Ok(())
    }

    /// Close the connection, dropping what it had not sent.
    fn close(&mut self) {
        self.out = None;
        self.connecting = None;
        self.unsent.clear();
    }
}

/// An accepted connection: bytes read so far, whether it opened with the secret, and
/// whose it is once a message said.
struct Incoming {
    stream: TcpStream,
    buf: Vec<u8>,
    trusted: bool,
    rank: Option<u32>,
}

/// One connection method's channel on one port.
pub struct Channel {
    /// The connection method, for messages.
    cpc: &'static str,
    listener: TcpListener,
    port: u16,
    secret: Secret,
    peers: HashMap<u32, Outgoing>,
    incoming: Vec<Incoming>,
}

/// Whether the other end closed `stream`, a connection we opened and only write to
/// (its process ended): a peek finds its end, or an error other than "nothing yet".
fn closed_by_peer(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    // SAFETY: a live socket and a writable 1-byte buffer; MSG_PEEK leaves any data in
    // place and MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => true,
        n if n > 0 => false,
        _ => !matches!(
            std::io::Error::last_os_error().kind(),
            ErrorKind::WouldBlock | ErrorKind::Interrupted
        ),
    }
}

/// This host's IPv4 addresses, loopback last.
fn local_addresses() -> Vec<Ipv4Addr> {
    let mut out = Vec::new();
    let mut ifs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifs) } != 0 {
        return vec![Ipv4Addr::LOCALHOST];
    }
    let mut p = ifs;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null()
            // SAFETY: a non-null address of the node.
            && i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET
            && ifa.ifa_flags & libc::IFF_UP as u32 != 0
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
        }
        p = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once.
    unsafe { libc::freeifaddrs(ifs) };
    out.sort_by_key(|a| a.is_loopback());
    out.dedup();
    out
}

impl Channel {
    /// A channel listening on an ephemeral port of every address, with a fresh secret.
    pub fn listen(cpc: &'static str) -> Result<Channel, Error> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|l| l.set_nonblocking(true).map(|_| l))
            .map_err(|e| cpc_error(format!("{cpc}: listening: {e}")))?;
        Ok(Channel {
            cpc,
            port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
            listener,
            secret: secret::fresh(cpc)?,
            peers: HashMap::new(),
            incoming: Vec::new(),
        })
    }

    /// What peers need to reach this channel: port, secret, addresses.
    pub fn blob(&self) -> Vec<u8> {
        let mut b = self.port.to_le_bytes().to_vec();
        b.extend_from_slice(&self.secret);
        for a in local_addresses() {
            b.extend_from_slice(&a.octets());
        }
        b
    }

    /// Learn where `rank` listens, from its [`blob`](Channel::blob).
    pub fn add_peer(&mut self, rank: u32, blob: &[u8]) -> Result<(), Error> {
        let bad = || {
            cpc_error(format!(
                "{}: rank {rank}'s address is {} bytes",
                self.cpc,
                blob.len()
            ))
        };
        let (port, rest) = blob.split_at_checked(2).ok_or_else(bad)?;
        let secret = secret::read(rest).ok_or_else(bad)?;
        let ips = &rest[secret::LEN..];
        if ips.len() % 4 != 0 {
            return Err(bad());
        }
        let port = u16::from_le_bytes([port[0], port[1]]);
        let addrs = ips
            .chunks(4)
            .map(|c| SocketAddrV4::new(Ipv4Addr::new(c[0], c[1], c[2], c[3]), port))
            .collect();
        self.peers.insert(
            rank,
            Outgoing {
                addrs,
                secret,
                out: None,
                connecting: None,
                unsent: Vec::new(),
            },
        );
        Ok(())
    }

    /// Whether `rank` was added.
    pub fn knows(&self, rank: u32) -> bool {
        self.peers.contains_key(&rank)
    }

    /// Whether our connection to `rank` is made (what `send` writes goes out now).
    pub fn is_connected(&self, rank: u32) -> bool {
        self.peers
            .get(&rank)
            .is_some_and(|p| p.out.is_some() && p.connecting.is_none())
    }

    /// Forget `rank` (and close our connection to it, after what it had taken).
    pub fn remove_peer(&mut self, rank: u32) {
        self.peers.remove(&rank);
    }

    /// Send `body` (at most 255 bytes) to `rank`, as `me`, connecting first if
    /// needed.
    pub fn send(&mut self, rank: u32, me: u32, body: &[u8]) -> Result<(), String> {
        let cpc = self.cpc;
        let len = u8::try_from(body.len())
            .map_err(|_| format!("{cpc}: a message of {} bytes", body.len()))?;
        let peer = self
            .peers
            .get_mut(&rank)
            .ok_or_else(|| format!("{cpc}: rank {rank} is not a peer"))?;
        if peer.out.is_none() {
            peer.unsent = peer.secret.to_vec();
            peer.connect_from(0, Vec::new())
                .map_err(|f| f.describe(cpc, rank))?;
        }
        peer.unsent.push(len);
        peer.unsent.extend_from_slice(&me.to_le_bytes());
        peer.unsent.extend_from_slice(body);
        peer.write_unsent().map_err(|f| {
            peer.close();
            f.describe(cpc, rank)
        })
    }

    /// Go on connecting and write what waits to go out, then read what accepted
    /// connections have: the complete message bodies with their sender, and the ranks
    /// whose connection ended with why: closed, theirs to us or ours to them (their
    /// process ended: a connection lives as long as it does; a rank may be named
    /// twice), failed while we wrote to it, or never made (no address answered).
    /// Connections that do not open with the secret, or that speak for a second rank,
    /// are closed and count for nothing.
    pub fn poll(&mut self) -> (Vec<(u32, Vec<u8>)>, Ended) {
        let mut closed = Vec::new();
        let cpc = self.cpc;
        for (&rank, peer) in self.peers.iter_mut() {
            let why = match peer.write_unsent() {
                Err(f) => Some(f.describe(cpc, rank)),
                Ok(())
                    if peer.connecting.is_none()
                        && peer.out.as_ref().is_some_and(closed_by_peer) =>
                {
                    Some(ENDED.to_string())
                }
                Ok(()) => None,
            };
            if let Some(why) = why {
                peer.close();
                closed.push((rank, why));
            }
        }
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(true);
            self.incoming.push(Incoming {
                stream,
                buf: Vec::new(),
                trusted: false,
                rank: None,
            });
        }
        let mut got = Vec::new();
        let (own, cpc) = (self.secret, self.cpc);
        self.incoming.retain_mut(|c| {
            let mut chunk = [0u8; 256];
            let open = loop {
                match c.stream.read(&mut chunk) {
                    Ok(0) => break false,
                    Ok(n) => c.buf.extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break true,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break false,
                }
            };
            if !c.trusted && c.buf.len() >= secret::LEN {
                if c.buf[..secret::LEN] != own {
                    let from = c.stream.peer_addr().ok();
                    tracing::warn!(?from, "{cpc}: a connection without the job's secret closed");
                    return false;
                }
                c.trusted = true;
                c.buf.drain(..secret::LEN);
            }
            while let Some(&len) = c.buf.first().filter(|_| c.trusted) {
                let total = 5 + usize::from(len);
                if c.buf.len() < total {
                    break;
                }
                let rank = u32::from_le_bytes(c.buf[1..5].try_into().expect("4 bytes"));
                if c.rank.is_some_and(|r| r != rank) {
                    tracing::warn!(rank, "{cpc}: a connection that spoke for two ranks closed");
                    return false;
                }
                got.push((rank, c.buf[5..total].to_vec()));
                c.rank = Some(rank);
                c.buf.drain(..total);
            }
            if !open {
                closed.extend(c.rank.map(|r| (r, ENDED.to_string())));
            }
            open
        });
        (got, closed)
    }

    /// Close everything.
    pub fn close(&mut self) {
        self.peers.clear();
        self.incoming.clear();
    }
}

#[cfg(test)]
mod tests {
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

    /// The ranks of `closed`, each checked to have ended as a process does.
    fn ended(closed: &[(u32, String)]) -> Vec<u32> {
        for (_, why) in closed {
            assert_eq!(why, ENDED);
        }
        closed.iter().map(|c| c.0).collect()
    }

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
        let (_, closed) = read_until(&mut c, |h| !h.1.is_empty());
        assert_eq!(ended(&closed), vec![3]);
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
        assert!(e.contains("256 bytes"), "{e}");
        assert!(a.send(7, 0, &[1]).unwrap_err().contains("not a peer"));
        let (got, _) = read_until(&mut b, |h| h.0.len() == 3);
        let want: Vec<(u32, Vec<u8>)> = (0..3u8).map(|i| (0, vec![i; 40])).collect();
        assert_eq!(got, want);
        drop(a);
        let (_, closed) = read_until(&mut b, |h| !h.1.is_empty());
        assert_eq!(ended(&closed), vec![0]);
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
        assert_eq!(a.poll(), (vec![], vec![]), "alive and silent");
        drop(b);
        let (_, closed) = read_until(&mut a, |h| !h.1.is_empty());
        assert_eq!(ended(&closed), vec![1]);
        // Refused: at once, or on a later poll.
        let e = match a.send(1, 0, &[8]) {
            Err(e) => e,
            Ok(()) => read_until(&mut a, |h| !h.1.is_empty()).1[0].1.clone(),
        };
        assert!(e.contains("cannot reach rank 1"), "{e}");
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
        assert!(
            why.contains("cannot reach rank 1") && why.contains("no answer within 2 s"),
            "{why}"
        );
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
}
