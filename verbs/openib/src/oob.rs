//! The `oob` connection method (Open MPI: `btl_openib_connect_oob.c`): queue-pair
//! number, PSN, LID, GID and MTU travel over the job's out-of-band channel, here a TCP
//! connection between the two processes (each listens on an ephemeral port published
//! in the modex). The handshake itself is `rbtl_cpc::oob`.

use crate::core::{cpc_error, Core};
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
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .and_then(|l| l.set_nonblocking(true).map(|_| l))
            .map_err(|e| cpc_error(format!("oob: listening: {e}")))?;
        Ok(Box::new(OobModule {
            port: listener.local_addr().map(|a| a.port()).unwrap_or(0),
            listener,
            peers: HashMap::new(),
            incoming: Vec::new(),
            early: Vec::new(),
        }))
    }
}

struct OobPeer {
    addrs: Vec<SocketAddrV4>,
    out: Option<TcpStream>,
    handshake: Option<Handshake>,
    qp: Option<Qp>,
}

/// An accepted connection: bytes read so far, and whose it is once a message said.
struct Incoming {
    stream: TcpStream,
    buf: Vec<u8>,
    rank: Option<u32>,
}

/// The module on one port.
pub struct OobModule {
    listener: TcpListener,
    port: u16,
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
    fn send(&mut self, rank: u32, me: u32, m: Message) -> Result<(), String> {
        let peer = self.peers.get_mut(&rank).ok_or("no such peer")?;
        if peer.out.is_none() {
            let mut last = String::from("no address");
            for a in &peer.addrs {
                match TcpStream::connect_timeout(&(*a).into(), Duration::from_secs(2)) {
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
    /// it does).
    fn read_incoming(&mut self) -> (Vec<(u32, Message)>, Vec<u32>) {
        while let Ok((stream, _)) = self.listener.accept() {
            let _ = stream.set_nonblocking(true);
            self.incoming.push(Incoming {
                stream,
                buf: Vec::new(),
                rank: None,
            });
        }
        let mut got = Vec::new();
        let mut closed = Vec::new();
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
            while let Some(&len) = c.buf.first() {
                let total = 5 + usize::from(len);
                if c.buf.len() < total {
                    break;
                }
                let rank = u32::from_le_bytes(c.buf[1..5].try_into().expect("4 bytes"));
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
        let (port, ips) = blob.split_at_checked(2).ok_or_else(bad)?;
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
