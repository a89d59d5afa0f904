//! The `oob` connection method (Open MPI: `btl_openib_connect_oob.c`): queue-pair
//! number, PSN, LID, GID and MTU travel over the job's out-of-band channel, here a TCP
//! connection between the two processes (each listens on an ephemeral port published
//! in the modex). The handshake itself is `rbtl_cpc::oob`.
//!
//! The listener is reachable from the whole network, so it takes only connections
//! that open with its secret, random bytes published in the modex next to its
//! port. Anything else is closed unheard (a stranger could otherwise claim a rank,
//! and by closing make that rank look dead). A connection speaks for the first rank
//! it names, and for no other.

use crate::core::{cpc_error, Core};
use crate::secret::{self, Secret};
use rbtl_config::{Config, Registry};
use rbtl_cpc::oob::{initiates, Action, Handshake, Message, QpInfo};
use rbtl_cpc::{ConnectionHost, CpcComponent, CpcModule, Error, PortInfo};
use rbtl_verbs::{Qp, QpEndpoint};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::time::Duration;

/// The CPC's name.
pub const NAME: &str = "oob";

/// The component.
pub struct OobComponent;

impl CpcComponent<Core> for OobComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn register_params(&self, _: &mut Registry) -> Result<(), Error> {
        Ok(())
    }

    fn query(&mut self, _: &Config, _: &PortInfo) -> Result<Box<dyn CpcModule<Core>>, Error> {
        Ok(Box::new(OobModule::listen()?))
    }
}

struct OobPeer {
    addrs: Vec<SocketAddrV4>,
    /// What its listener wants to hear first.
    secret: Secret,
    out: Option<TcpStream>,
    handshake: Option<Handshake>,
    qp: Option<Qp>,
}

/// An accepted connection: bytes read so far, whether it opened with the secret, and
/// whose it is once a message said.
struct Incoming {
    stream: TcpStream,
    buf: Vec<u8>,
    trusted: bool,
    rank: Option<u32>,
}

/// The module on one port.
pub struct OobModule {
    listener: TcpListener,
    port: u16,
    secret: Secret,
    peers: HashMap<u32, OobPeer>,
    incoming: Vec<Incoming>,
    /// Messages from peers not added yet.
    early: Vec<(u32, Message)>,
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

impl OobModule {
    /// A module listening on an ephemeral port of every address, with a fresh secret.
    fn listen() -> Result<OobModule, Error> {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|l| l.set_nonblocking(true).map(|_| l))
            .map_err(|e| cpc_error(format!("oob: listening: {e}")))?;
        Ok(OobModule {
            port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
            listener,
            secret: secret::fresh(NAME)?,
            peers: HashMap::new(),
            incoming: Vec::new(),
            early: Vec::new(),
        })
    }

    fn send(&mut self, rank: u32, me: u32, m: Message) -> Result<(), String> {
        let peer = self.peers.get_mut(&rank).ok_or("no such peer")?;
        if peer.out.is_none() {
            let mut last = String::from("no address");
            for a in &peer.addrs {
                let opened = TcpStream::connect_timeout(&(*a).into(), Duration::from_secs(2))
                    .and_then(|mut s| s.write_all(&peer.secret).map(|_| s));
                match opened {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        peer.out = Some(s);
                        break;
                    }
                    Err(e) => last = format!("{a}: {e}"),
                }
            }
            if peer.out.is_none() {
                return Err(format!("oob: cannot reach rank {rank} ({last})"));
            }
        }
        let body = m.encode();
        let mut frame = Vec::with_capacity(5 + body.len());
        frame.push(body.len() as u8);
        frame.extend_from_slice(&me.to_le_bytes());
        frame.extend_from_slice(&body);
        let out = peer.out.as_mut().expect("connected above");
        out.write_all(&frame)
            .map_err(|e| format!("oob: writing to rank {rank}: {e}"))
    }

    /// Make the peer's queue pair and handshake if not yet there.
    fn ensure(&mut self, rank: u32, core: &mut Core) -> Result<(), String> {
        let peer = self.peers.get_mut(&rank).ok_or("no such peer")?;
        if peer.handshake.is_some() {
            return Ok(());
        }
        let mut qp = core.new_qp().map_err(|e| e.to_string())?;
        core.post_receives(rank, &mut qp)
            .map_err(|e| e.to_string())?;
        let info = QpInfo {
            qpn: qp.qpn(),
            psn: qp.qpn() & 0xff_ffff,
            lid: core.port.lid,
            gid: core.port.gid,
            mtu: core.port.mtu,
        };
        peer.handshake = Some(Handshake::new(initiates(core.rank, rank), info));
        peer.qp = Some(qp);
        Ok(())
    }

    fn act(&mut self, rank: u32, actions: Vec<Action>, core: &mut Core) -> Result<(), String> {
        for a in actions {
            match a {
                Action::Send(m) => self.send(rank, core.rank, m)?,
                Action::Connect(remote) => {
                    let peer = self.peers.get_mut(&rank).ok_or("no such peer")?;
                    let qp = peer.qp.as_mut().ok_or("no queue pair")?;
                    let mtu = remote.mtu.min(core.port.mtu);
                    let to = QpEndpoint {
                        qpn: remote.qpn,
                        psn: remote.psn,
                        lid: remote.lid,
                        gid: remote.gid,
                    };
                    let psn = qp.qpn() & 0xff_ffff;
                    qp.to_rtr(&to, u32::from(mtu))
                        .and_then(|_| qp.to_rts(psn))
                        .map_err(|e| e.to_string())?;
                }
                Action::Up => {
                    let qp = self
                        .peers
                        .get_mut(&rank)
                        .and_then(|p| p.qp.take())
                        .ok_or("no queue pair")?;
                    core.connected(rank, qp);
                }
                Action::Fail(why) => return Err(why),
            }
        }
        Ok(())
    }

    fn on_message(&mut self, rank: u32, m: Message, core: &mut Core) {
        if !self.peers.contains_key(&rank) {
            self.early.push((rank, m));
            return;
        }
        let r = self.ensure(rank, core).and_then(|_| {
            let hs = self.peers.get_mut(&rank).and_then(|p| p.handshake.as_mut());
            let actions = hs.map(|h| h.on_message(m)).unwrap_or_default();
            self.act(rank, actions, core)
        });
        if let Err(why) = r {
            core.failed(rank, why);
        }
    }

    /// Read what accepted connections have: the complete messages, and the ranks
    /// whose connection closed (their process ended: the connection lives as long as
    /// it does). Connections that do not open with the secret, or that speak for a
    /// second rank, are closed and count for nothing.
    fn read_incoming(&mut self) -> (Vec<(u32, Message)>, Vec<u32>) {
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
        let mut closed = Vec::new();
        let own = self.secret;
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
                    tracing::warn!(?from, "oob: a connection without the job's secret closed");
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
                    tracing::warn!(rank, "oob: a connection that spoke for two ranks closed");
                    return false;
                }
                match Message::decode(&c.buf[5..total]) {
                    Some(m) => got.push((rank, m)),
                    None => tracing::warn!(rank, "oob: a malformed message ignored"),
                }
                c.rank = Some(rank);
                c.buf.drain(..total);
            }
            if !open {
                closed.extend(c.rank);
            }
            open
        });
        (got, closed)
    }
}

impl CpcModule<Core> for OobModule {
    fn name(&self) -> &'static str {
        NAME
    }

    fn priority(&self) -> u8 {
        50
    }

    fn modex_blob(&self) -> Vec<u8> {
        let mut b = self.port.to_le_bytes().to_vec();
        b.extend_from_slice(&self.secret);
        for a in local_addresses() {
            b.extend_from_slice(&a.octets());
        }
        b
    }

    fn endpoint_init(&mut self, peer: u32, blob: &[u8]) -> Result<(), Error> {
        let bad = || {
            cpc_error(format!(
                "oob: rank {peer}'s address is {} bytes",
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
            peer,
            OobPeer {
                addrs,
                secret,
                out: None,
                handshake: None,
                qp: None,
            },
        );
        Ok(())
    }

    fn start_connect(&mut self, peer: u32, core: &mut Core) -> Result<(), Error> {
        self.ensure(peer, core).map_err(cpc_error)?;
        let actions = self
            .peers
            .get_mut(&peer)
            .and_then(|p| p.handshake.as_mut())
            .map(|h| h.start())
            .unwrap_or_default();
        self.act(peer, actions, core).map_err(cpc_error)
    }

    fn progress(&mut self, core: &mut Core) -> usize {
        let (mut got, closed) = self.read_incoming();
        if !self.early.is_empty() {
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early)
                .into_iter()
                .partition(|(r, _)| self.peers.contains_key(r));
            self.early = later;
            got.extend(now);
        }
        let n = got.len() + closed.len();
        for (rank, m) in got {
            self.on_message(rank, m, core);
        }
        for rank in closed {
            core.failed(
                rank,
                "its out-of-band connection closed: the process ended".into(),
            );
        }
        n
    }

    fn endpoint_finalize(&mut self, peer: u32) {
        self.peers.remove(&peer);
    }

    fn finalize(&mut self) {
        self.peers.clear();
        self.incoming.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(rank: u32, m: &Message) -> Vec<u8> {
        let body = m.encode();
        let mut f = vec![body.len() as u8];
        f.extend_from_slice(&rank.to_le_bytes());
        f.extend_from_slice(&body);
        f
    }

    /// Connect to the module's listener and write `bytes`; the stream, still open.
    fn connect(m: &OobModule, bytes: &[u8]) -> TcpStream {
        let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, m.port)).unwrap();
        s.write_all(bytes).unwrap();
        s.set_nonblocking(true).unwrap();
        s
    }

    /// Whether the module has closed its end of `s`.
    fn closed_by_module(s: &mut TcpStream) -> bool {
        match s.read(&mut [0u8; 1]) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != ErrorKind::WouldBlock,
        }
    }

    /// What the module reads from its connections until `done` holds (or 5 s pass).
    fn read_until(
        m: &mut OobModule,
        mut done: impl FnMut(&[(u32, Message)], &[u32]) -> bool,
    ) -> (Vec<(u32, Message)>, Vec<u32>) {
        let (mut got, mut closed) = (Vec::new(), Vec::new());
        for _ in 0..500 {
            let (g, c) = m.read_incoming();
            got.extend(g);
            closed.extend(c);
            if done(&got, &closed) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (got, closed)
    }

    #[test]
    fn a_connection_without_the_secret_is_closed_unheard() {
        let mut m = OobModule::listen().unwrap();
        let mut bytes = vec![0u8; secret::LEN];
        bytes.extend(frame(3, &Message::Ask));
        let mut s = connect(&m, &bytes);
        let (got, closed) = read_until(&mut m, |_, _| closed_by_module(&mut s));
        assert!(
            closed_by_module(&mut s),
            "the stranger's connection is still open"
        );
        assert!(got.is_empty(), "a stranger's message was taken: {got:?}");
        assert!(
            closed.is_empty(),
            "a stranger's close made rank 3 look dead"
        );
        assert!(
            m.incoming.is_empty(),
            "the stranger's connection is still kept"
        );
    }

    #[test]
    fn a_member_is_heard_and_its_close_reports_its_rank() {
        let mut m = OobModule::listen().unwrap();
        let mut bytes = m.secret.to_vec();
        bytes.extend(frame(3, &Message::Ask));
        let s = connect(&m, &bytes);
        let (got, _) = read_until(&mut m, |got, _| !got.is_empty());
        assert!(matches!(got.as_slice(), [(3, Message::Ask)]), "{got:?}");
        drop(s);
        let (_, closed) = read_until(&mut m, |_, closed| !closed.is_empty());
        assert_eq!(closed, vec![3]);
    }

    #[test]
    fn a_connection_speaks_for_one_rank_only() {
        let mut m = OobModule::listen().unwrap();
        let mut bytes = m.secret.to_vec();
        bytes.extend(frame(3, &Message::Ask));
        bytes.extend(frame(4, &Message::Ready));
        let mut s = connect(&m, &bytes);
        let (got, closed) = read_until(&mut m, |_, _| closed_by_module(&mut s));
        assert!(matches!(got.as_slice(), [(3, Message::Ask)]), "{got:?}");
        assert!(
            closed.is_empty(),
            "a connection closed for lying is no death"
        );
    }

    #[test]
    fn the_modex_blob_carries_port_secret_and_addresses() {
        let m = OobModule::listen().unwrap();
        let blob = m.modex_blob();
        assert_eq!(u16::from_le_bytes([blob[0], blob[1]]), m.port);
        assert_eq!(&blob[2..2 + secret::LEN], &m.secret);
        assert_eq!((blob.len() - 2 - secret::LEN) % 4, 0);
        let mut peer = OobModule::listen().unwrap();
        peer.endpoint_init(0, &blob).unwrap();
        assert_eq!(peer.peers[&0].secret, m.secret);
        assert!(peer.endpoint_init(1, &blob[..2 + secret::LEN - 1]).is_err());
        assert_ne!(peer.secret, m.secret, "every listener draws its own secret");
    }
}
