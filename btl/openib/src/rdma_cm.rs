//! The `rdma_cm` connection method (Open MPI: `btl_openib_connect_rdmacm.c`): each
//! module listens with librdmacm on its port's IP address; connections are made by
//! address and route resolution and connect/accept, with the rank and queue-pair
//! number in the private data. Who initiates, and how crossing requests end, is
//! `rbtl_cpc::rdma_cm`. Usable only on a port with an IPv4 address. A connect request
//! must carry the listener's secret (random bytes published in the modex next to
//! its address) after its hello, or it is refused. A connection not up by its deadline
//! is given up: its identifiers (destroyed, so the kernel refuses what the peer sends
//! on them later) and queue pairs go.

use crate::core::{cpc_error, Core};
use crate::secret::{self, Secret};
use crate::srq::SharedReceives;
use rbtl_config::Config;
use rbtl_cpc::rdma_cm::{initiates, Action, Connection, Event, Hello, Kind};
use rbtl_cpc::{ConnectionHost, CpcComponent, CpcModule, Error, Failure, PortInfo, Unusable};
use rbtl_verbs::{CmEventKind, CmId, EventChannel, Qp};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddrV4};
use std::time::Duration;

/// The CPC's name.
pub const NAME: &str = "rdma_cm";

/// A connection `rdma_cm` could not make or keep, in the words of what refused it.
fn broken(what: impl std::fmt::Display) -> Failure {
    Failure::broken(NAME, what)
}

const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The hello of a connect request whose private data carries `own` secret after it
/// (the listener's address is in the network's reach; its secret only in the job's).
fn admit(own: &Secret, private_data: &[u8]) -> Option<Hello> {
    let hello = Hello::decode(private_data)?;
    (secret::read(private_data.get(Hello::LEN..)?)? == *own).then_some(hello)
}

/// The component.
pub struct RdmaCmComponent;

impl CpcComponent<Core> for RdmaCmComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&mut self, _: &Config, port: &PortInfo) -> Result<Box<dyn CpcModule<Core>>, Error> {
        let unusable = |why: Unusable| Error::Unusable {
            cpc: NAME,
            device: port.device.clone(),
            port: port.port,
            why,
        };
        let ip = port
            .ip_addresses
            .iter()
            .find_map(|a| match a {
                IpAddr::V4(v4) => Some(*v4),
                IpAddr::V6(_) => None,
            })
            .ok_or_else(|| unusable(Unusable::NoIpv4Address))?;
        let refused = |e: rbtl_verbs::Error| unusable(Unusable::Refused(e.to_string()));
        let channel = EventChannel::new().map_err(refused)?;
        let listener = CmId::new(&channel).map_err(refused)?;
        listener
            .bind(SocketAddrV4::new(ip, 0))
            .and_then(|_| listener.listen(64))
            .map_err(refused)?;
        let me = SocketAddrV4::new(ip, listener.local_port());
        Ok(Box::new(RdmaCmModule {
            channel,
            _listener: listener,
            me,
            secret: secret::fresh(NAME)?,
            peers: HashMap::new(),
            ids: HashMap::new(),
            early: Vec::new(),
        }))
    }
}

struct CmPeer {
    addr: SocketAddrV4,
    /// What its listener wants in a connect request's private data.
    secret: Secret,
    conn: Connection,
    /// Our connection attempt (an ask or a real one), with its kind.
    active: Option<(CmId, Kind)>,
    /// The accepted connection.
    passive: Option<CmId>,
    /// The queue pair until the connection is up.
    qp: Option<Qp>,
    /// The queue pair of an ask, until the peer rejects it.
    ask_qp: Option<Qp>,
}

/// The module on one port.
pub struct RdmaCmModule {
    channel: EventChannel,
    _listener: CmId,
    me: SocketAddrV4,
    /// What a connect request must carry after its hello.
    secret: Secret,
    peers: HashMap<u32, CmPeer>,
    /// Which peer each identifier serves.
    ids: HashMap<usize, u32>,
    /// Connect requests from peers not added yet.
    early: Vec<(CmId, Hello)>,
}

impl RdmaCmModule {
    fn hello(&self, core: &Core, kind: Kind, qpn: u32) -> Vec<u8> {
        Hello {
            rank: core.rank,
            kind,
            qpn,
        }
        .encode()
    }

    fn act(
        &mut self,
        rank: u32,
        actions: Vec<Action>,
        request: &mut Option<CmId>,
        core: &mut Core,
    ) -> Result<(), Failure> {
        for a in actions {
            match a {
                Action::Connect(kind) => {
                    let peer = self
                        .peers
                        .get_mut(&rank)
                        .ok_or_else(|| broken("no such peer"))?;
                    let id = CmId::new(&self.channel).map_err(broken)?;
                    id.resolve_addr(peer.addr, RESOLVE_TIMEOUT)
                        .map_err(broken)?;
                    self.ids.insert(id.key(), rank);
                    peer.active = Some((id, kind));
                }
                Action::Accept => {
                    let id = request
                        .take()
                        .ok_or_else(|| broken("accept without a request"))?;
                    // (A request the peer gave up on while this process did not
                    // progress fails here.)
                    let accepting = |e: rbtl_verbs::Error| {
                        broken(format!(
                            "accepting its connect request: {e} (did it give up on it?)"
                        ))
                    };
                    let mut qp = id
                        .create_qp(
                            &core.pd,
                            &core.cq,
                            core.shared.as_ref().and_then(SharedReceives::srq),
                            core.caps,
                        )
                        .map_err(accepting)?;
                    core.post_receives(rank, &mut qp).map_err(broken)?;
                    let hello = self.hello(core, Kind::Connect, qp.qpn());
                    id.accept(&hello).map_err(accepting)?;
                    let peer = self
                        .peers
                        .get_mut(&rank)
                        .ok_or_else(|| broken("no such peer"))?;
                    peer.qp = Some(qp);
                    self.ids.insert(id.key(), rank);
                    peer.passive = Some(id);
                }
                Action::Reject => {
                    let id = request
                        .as_ref()
                        .ok_or_else(|| broken("reject without a request"))?;
                    let hello = self.hello(core, Kind::Ask, 0);
                    id.reject(&hello).map_err(broken)?;
                }
                Action::Up => {
                    let qp = self.peers.get_mut(&rank).and_then(|p| p.qp.take());
                    core.connected_on(NAME, rank, qp)?;
                }
                Action::Fail(why) => return Err(why),
            }
        }
        Ok(())
    }

    fn on_event(&mut self, rank: u32, e: Event, request: &mut Option<CmId>, core: &mut Core) {
        if let Err(why) = self.step(rank, e, request, core) {
            core.failed(rank, why);
        }
    }

    /// Event `e` of peer `rank` through its connection, and what it says to do:
    /// why the connection gave up, if it did (nothing for a peer not known).
    fn step(
        &mut self,
        rank: u32,
        e: Event,
        request: &mut Option<CmId>,
        core: &mut Core,
    ) -> Result<(), Failure> {
        let Some(peer) = self.peers.get_mut(&rank) else {
            return Ok(());
        };
        let actions = peer.conn.on(e);
        self.act(rank, actions, request, core)
    }

    /// Our active identifier's route is resolved: connect on it.
    fn route_resolved(&mut self, rank: u32, core: &mut Core) -> Result<(), Failure> {
        let caps = core.caps;
        let peer = self
            .peers
            .get_mut(&rank)
            .ok_or_else(|| broken("no such peer"))?;
        let (id, kind) = peer
            .active
            .as_ref()
            .ok_or_else(|| broken("no connection attempt"))?;
        let kind = *kind;
        let mut qp = id
            .create_qp(
                &core.pd,
                &core.cq,
                core.shared.as_ref().and_then(SharedReceives::srq),
                caps,
            )
            .map_err(broken)?;
        if kind == Kind::Connect {
            core.post_receives(rank, &mut qp).map_err(broken)?;
        }
        let peer = self
            .peers
            .get_mut(&rank)
            .ok_or_else(|| broken("no such peer"))?;
        let mut hello = Hello {
            rank: core.rank,
            kind,
            qpn: qp.qpn(),
        }
        .encode();
        hello.extend_from_slice(&peer.secret);
        let (id, _) = peer
            .active
            .as_ref()
            .ok_or_else(|| broken("no connection attempt"))?;
        id.connect(&hello).map_err(broken)?;
        if kind == Kind::Connect {
            peer.qp = Some(qp);
        } else {
            // An ask's queue pair only carries the request; it goes with the attempt.
            peer.ask_qp = Some(qp);
        }
        Ok(())
    }

    fn on_request(&mut self, id: CmId, hello: Hello, core: &mut Core) {
        if !self.peers.contains_key(&hello.rank) {
            self.early.push((id, hello));
            return;
        }
        core.heard(hello.rank);
        self.on_event(hello.rank, Event::Request(hello.kind), &mut Some(id), core);
    }
}

impl CpcModule<Core> for RdmaCmModule {
    fn name(&self) -> &'static str {
        NAME
    }

    fn priority(&self) -> u8 {
        30
    }

    fn modex_blob(&self) -> Vec<u8> {
        let mut b = self.me.ip().octets().to_vec();
        b.extend_from_slice(&self.me.port().to_le_bytes());
        b.extend_from_slice(&self.secret);
        b
    }

    fn endpoint_init(&mut self, peer: u32, blob: &[u8]) -> Result<(), Error> {
        let bad = || {
            cpc_error(format!(
                "rdma_cm: rank {peer}'s address is {} bytes",
                blob.len()
            ))
        };
        let (b, rest): (&[u8; 6], _) = blob.split_first_chunk().ok_or_else(bad)?;
        let secret = secret::read(rest)
            .filter(|_| rest.len() == secret::LEN)
            .ok_or_else(bad)?;
        let addr = SocketAddrV4::new(
            [b[0], b[1], b[2], b[3]].into(),
            u16::from_le_bytes([b[4], b[5]]),
        );
        self.peers.insert(
            peer,
            CmPeer {
                addr,
                secret,
                conn: Connection::new(initiates(self.me, addr)),
                active: None,
                passive: None,
                qp: None,
                ask_qp: None,
            },
        );
        Ok(())
    }

    fn start_connect(&mut self, peer: u32, core: &mut Core) -> Result<(), Error> {
        let p = self
            .peers
            .get_mut(&peer)
            .ok_or_else(|| cpc_error(format!("rdma_cm: rank {peer} is not a peer")))?;
        let actions = p.conn.on(Event::Start);
        Ok(self.act(peer, actions, &mut None, core)?)
    }

    fn progress(&mut self, core: &mut Core) -> usize {
        let mut n = 0;
        if !self.early.is_empty() {
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early)
                .into_iter()
                .partition(|(_, h)| self.peers.contains_key(&h.rank));
            self.early = later;
            for (id, hello) in now {
                n += 1;
                self.on_request(id, hello, core);
            }
        }
        loop {
            let ev = match self.channel.try_next() {
                Ok(Some(ev)) => ev,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("rdma_cm: reading events: {e}");
                    break;
                }
            };
            n += 1;
            if let CmEventKind::ConnectRequest(id) = ev.kind {
                match admit(&self.secret, &ev.private_data) {
                    Some(hello) => self.on_request(id, hello, core),
                    None => {
                        tracing::warn!(
                            "rdma_cm: a connect request without the job's secret refused"
                        );
                        let _ = id.reject(&[]);
                    }
                }
                continue;
            }
            let Some(&rank) = self.ids.get(&ev.id) else {
                continue;
            };
            if matches!(ev.kind, CmEventKind::Established | CmEventKind::Rejected) {
                // The peer's own doing: its accept, its librdmacm's answer to ours, or
                // its refusal.
                core.heard(rank);
            }
            let step = match ev.kind {
                CmEventKind::AddrResolved => self
                    .peers
                    .get(&rank)
                    .and_then(|p| p.active.as_ref())
                    .ok_or_else(|| broken("no connection attempt"))
                    .and_then(|(id, _)| id.resolve_route(RESOLVE_TIMEOUT).map_err(broken)),
                CmEventKind::RouteResolved => self.route_resolved(rank, core),
                CmEventKind::Established => {
                    self.on_event(rank, Event::Established, &mut None, core);
                    Ok(())
                }
                CmEventKind::Rejected => {
                    // The attempt ends: forget its identifier (and an ask's queue pair).
                    self.ids.remove(&ev.id);
                    let mut kind = Kind::Connect;
                    if let Some(p) = self.peers.get_mut(&rank) {
                        if let Some((id, k)) = p.active.take() {
                            if id.key() == ev.id {
                                kind = k;
                                p.ask_qp = None;
                            } else {
                                p.active = Some((id, k));
                            }
                        }
                    }
                    self.on_event(rank, Event::Rejected(kind), &mut None, core);
                    Ok(())
                }
                CmEventKind::Disconnected => {
                    // What the peer sent before it went may lie in the completion
                    // queue behind a full poll: it fails once that is delivered.
                    if let Err(why) = self.step(rank, Event::Disconnected, &mut None, core) {
                        core.ended.push((rank, crate::core::peer_failure(why)));
                    }
                    Ok(())
                }
                CmEventKind::Other(what) => Err(broken(format!("{what} (status {})", ev.status))),
                CmEventKind::ConnectRequest(_) => Ok(()),
            };
            if let Err(why) = step {
                core.failed(rank, why);
            }
        }
        n
    }

    fn time_out(&mut self, peer: u32, waited: Duration, core: &mut Core) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let actions = p.conn.time_out(waited);
        if actions.is_empty() {
            return;
        }
        // Queue pairs before their identifiers (each keeps its identifier alive anyway).
        p.qp = None;
        p.ask_qp = None;
        for id in p
            .active
            .take()
            .map(|a| a.0)
            .into_iter()
            .chain(p.passive.take())
        {
            self.ids.remove(&id.key());
        }
        if let Err(why) = self.act(peer, actions, &mut None, core) {
            core.failed(peer, why);
        }
    }

    fn endpoint_finalize(&mut self, peer: u32) {
        if let Some(p) = self.peers.remove(&peer) {
            for id in p.active.iter().map(|a| &a.0).chain(&p.passive) {
                // The peer hears of it (a disconnect event) and fails this process;
                // an identifier never connected has nothing to say.
                if p.conn.is_up() {
                    if let Err(e) = id.disconnect() {
                        tracing::debug!(peer, %e, "rdma_cm: disconnecting a removed peer");
                    }
                }
                self.ids.remove(&id.key());
            }
        }
    }

    fn finalize(&mut self) {
        self.peers.clear();
        self.ids.clear();
        self.early.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port without an IP address is refused before any device is touched.
    #[test]
    fn unusable_on_a_port_without_an_ip_address() {
        let port = PortInfo {
            device: "mlx5_0".into(),
            port: 1,
            ip_addresses: Vec::new(),
            xrc: false,
        };
        let config = rbtl_config::Registry::new().builder().build().unwrap();
        let e = RdmaCmComponent
            .query(&config, &port)
            .err()
            .expect("refused");
        let text = e.to_string();
        assert!(
            matches!(
                e,
                Error::Unusable {
                    cpc: "rdma_cm",
                    why: Unusable::NoIpv4Address,
                    ..
                }
            ) && text.contains("no IPv4 address"),
            "{text}"
        );
    }

    #[test]
    fn only_requests_carrying_the_secret_are_admitted() {
        let own = [7u8; secret::LEN];
        let hello = Hello {
            rank: 3,
            kind: Kind::Connect,
            qpn: 0x42,
        };
        let mut data = hello.encode();
        data.extend_from_slice(&own);
        data.resize(56, 0);
        assert_eq!(admit(&own, &data), Some(hello));
        let mut wrong = data.clone();
        wrong[Hello::LEN] ^= 1;
        assert_eq!(admit(&own, &wrong), None, "a wrong secret");
        assert_eq!(admit(&own, &data[..Hello::LEN + 3]), None, "a short one");
        assert_eq!(admit(&own, &hello.encode()), None, "none at all");
    }
}
