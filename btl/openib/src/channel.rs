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
pub type Ended = Vec<(u32, ChannelError)>;

/// Why a message could not go to a peer, or why its connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The body does not fit one frame.
    #[error("{cpc}: a message of {len} bytes (at most 255)")]
    TooLong {
        /// The connection method.
        cpc: &'static str,
        /// Its length.
        len: usize,
    },
    /// The rank was never added (or was removed).
    #[error("{cpc}: rank {rank} is not a peer")]
    NotAPeer {
        /// The connection method.
        cpc: &'static str,
        /// The rank.
        rank: u32,
    },
    /// None of its addresses took a connection: each address with why (`TimedOut`:
    /// no answer within [`CONNECT_TIMEOUT`]).
    #[error("{cpc}: cannot reach rank {rank} ({})", tried_text(tried))]
    Unreachable {
        /// The connection method.
        cpc: &'static str,
        /// The rank.
        rank: u32,
        /// Each address tried, with its error.
        tried: Vec<(SocketAddrV4, std::io::Error)>,
    },
    /// Writing to its connection failed.
    #[error("{cpc}: writing to rank {rank}: {source}")]
    Write {
        /// The connection method.
        cpc: &'static str,
        /// The rank.
        rank: u32,
        /// The socket's error.
        source: std::io::Error,
    },
    /// Its connection closed, from its end or ours: the process ended (a connection
    /// lives as long as its process).
    #[error("its out-of-band connection closed: the process ended")]
    Closed,
}

fn tried_text(tried: &[(SocketAddrV4, std::io::Error)]) -> String {
    if tried.is_empty() {
        return "no address".into();
    }
    let each: Vec<String> = tried.iter().map(|(a, e)| format!("{a}: {e}")).collect();
    each.join("; ")
}

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
    failed: Vec<(SocketAddrV4, std::io::Error)>,
}

/// Why a connection to a peer ended.
enum Failure {
    /// No address of its could be reached: why, for each.
    Unreachable(Vec<(SocketAddrV4, std::io::Error)>),
    /// Writing to it failed.
    Write(std::io::Error),
}

impl Failure {
    fn for_peer(self, cpc: &'static str, rank: u32) -> ChannelError {
        match self {
            Failure::Unreachable(tried) => ChannelError::Unreachable { cpc, rank, tried },
            Failure::Write(source) => ChannelError::Write { cpc, rank, source },
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
    fn connect_from(
        &mut self,
        mut index: usize,
        mut failed: Vec<(SocketAddrV4, std::io::Error)>,
    ) -> Result<(), Failure> {
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
                Err(e) => failed.push((a, e)),
            }
            index += 1;
        }
        self.out = None;
        self.connecting = None;
        Err(Failure::Unreachable(failed))
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
            Ok(None) => std::io::Error::new(
                ErrorKind::TimedOut,
                format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
            ),
            Ok(Some(e)) | Err(e) => e,
        };
        let Connecting {
            index, mut failed, ..
        } = self.connecting.take().expect("looked at above");
        failed.push((self.addrs[index], why));
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
    pub fn send(&mut self, rank: u32, me: u32, body: &[u8]) -> Result<(), ChannelError> {
        let cpc = self.cpc;
        let len = u8::try_from(body.len()).map_err(|_| ChannelError::TooLong {
            cpc,
            len: body.len(),
        })?;
        let peer = self
            .peers
            .get_mut(&rank)
            .ok_or(ChannelError::NotAPeer { cpc, rank })?;
        if peer.out.is_none() {
            peer.unsent = peer.secret.to_vec();
            peer.connect_from(0, Vec::new())
                .map_err(|f| f.for_peer(cpc, rank))?;
        }
        peer.unsent.push(len);
        peer.unsent.extend_from_slice(&me.to_le_bytes());
        peer.unsent.extend_from_slice(body);
        peer.write_unsent().map_err(|f| {
            peer.close();
            f.for_peer(cpc, rank)
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
                Err(f) => Some(f.for_peer(cpc, rank)),
                Ok(())
                    if peer.connecting.is_none()
                        && peer.out.as_ref().is_some_and(closed_by_peer) =>
                {
                    Some(ChannelError::Closed)
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
                closed.extend(c.rank.map(|r| (r, ChannelError::Closed)));
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
mod tests;
