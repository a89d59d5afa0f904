//! The `oob` connection method (Open MPI: `btl_openib_connect_oob.c`): queue-pair
//! number, PSN, LID, GID and MTU travel over the job's out-of-band channel, here a TCP
//! connection between the two processes (`channel`: each listens on an ephemeral
//! port published in the modex, and hears only those who know its secret). The
//! handshake itself is `rbtl_cpc::oob`. A handshake not done by its deadline is given
//! up: its queue pair goes, and a late answer only fails the peer again. A peer removed
//! (`del_procs`) hears `Removed` before the channel to it closes.

use crate::channel::{Channel, ChannelError, Ended};
use crate::core::Core;
use rbtl_btl::PeerFailure;
use rbtl_config::Config;
use rbtl_cpc::oob::{initiates, Action, Handshake, Message, QpInfo};
use rbtl_cpc::{ConnectionHost, CpcComponent, CpcModule, Error, Failure, PortInfo};
use rbtl_verbs::{Qp, QpEndpoint};
use std::collections::HashMap;
use std::time::Duration;

/// The CPC's name.
pub const NAME: &str = "oob";

/// A connection `oob` could not make or keep, in the words of what refused it.
fn broken(what: impl std::fmt::Display) -> Failure {
    Failure::broken(NAME, what)
}

/// The component.
pub struct OobComponent;

impl CpcComponent<Core> for OobComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn query(&mut self, _: &Config, _: &PortInfo) -> Result<Box<dyn CpcModule<Core>>, Error> {
        Ok(Box::new(OobModule::listen()?))
    }
}

#[derive(Default)]
struct OobPeer {
    handshake: Option<Handshake>,
    qp: Option<Qp>,
}

/// The module on one port.
pub struct OobModule {
    channel: Channel,
    /// This process's rank, once a call told it.
    me: Option<u32>,
    peers: HashMap<u32, OobPeer>,
    /// Messages from peers not added yet.
    early: Vec<(u32, Message)>,
}

impl OobModule {
    /// A module listening on an ephemeral port of every address, with a fresh secret.
    fn listen() -> Result<OobModule, Error> {
        Ok(OobModule {
            channel: Channel::listen(NAME)?,
            me: None,
            peers: HashMap::new(),
            early: Vec::new(),
        })
    }

    fn send(&mut self, rank: u32, me: u32, m: Message) -> Result<(), Failure> {
        self.me = Some(me);
        self.channel.send(rank, me, &m.encode()).map_err(broken)
    }

    /// Make the peer's queue pair and handshake if not yet there.
    fn ensure(&mut self, rank: u32, core: &mut Core) -> Result<(), Failure> {
        let peer = self
            .peers
            .get_mut(&rank)
            .ok_or_else(|| broken("no such peer"))?;
        if peer.handshake.is_some() {
            return Ok(());
        }
        let mut qp = core.new_qp().map_err(broken)?;
        core.post_receives(rank, &mut qp).map_err(broken)?;
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

    fn act(&mut self, rank: u32, actions: Vec<Action>, core: &mut Core) -> Result<(), Failure> {
        for a in actions {
            match a {
                Action::Send(m) => self.send(rank, core.rank, m)?,
                Action::Connect(remote) => {
                    let peer = self
                        .peers
                        .get_mut(&rank)
                        .ok_or_else(|| broken("no such peer"))?;
                    let qp = peer.qp.as_mut().ok_or_else(|| broken("no queue pair"))?;
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
                        .map_err(broken)?;
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

    fn on_message(&mut self, rank: u32, m: Message, core: &mut Core) {
        if !self.peers.contains_key(&rank) {
            self.early.push((rank, m));
            return;
        }
        core.heard(rank);
        let r = self.ensure(rank, core).and_then(|_| {
            let hs = self.peers.get_mut(&rank).and_then(|p| p.handshake.as_mut());
            let actions = hs.map(|h| h.on_message(m)).unwrap_or_default();
            self.act(rank, actions, core)
        });
        if let Err(why) = r {
            core.failed(rank, why);
        }
    }

    /// The messages that arrived, and the ranks whose connection ended, with why.
    fn read_incoming(&mut self) -> (Vec<(u32, Message)>, Ended) {
        let (bodies, closed) = self.channel.poll();
        let mut got = Vec::with_capacity(bodies.len());
        for (rank, body) in bodies {
            match Message::decode(&body) {
                Some(m) => got.push((rank, m)),
                None => tracing::warn!(rank, "oob: a malformed message ignored"),
            }
        }
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
        self.channel.blob()
    }

    fn endpoint_init(&mut self, peer: u32, blob: &[u8]) -> Result<(), Error> {
        self.channel.add_peer(peer, blob)?;
        self.peers.insert(peer, OobPeer::default());
        Ok(())
    }

    fn start_connect(&mut self, peer: u32, core: &mut Core) -> Result<(), Error> {
        self.ensure(peer, core)?;
        let actions = self
            .peers
            .get_mut(&peer)
            .and_then(|p| p.handshake.as_mut())
            .map(|h| h.start())
            .unwrap_or_default();
        Ok(self.act(peer, actions, core)?)
    }

    fn progress(&mut self, core: &mut Core) -> usize {
        self.me = Some(core.rank);
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
        for (rank, why) in closed {
            match why {
                // The connection lives as long as the peer's process.
                ChannelError::Closed => {
                    core.ended.push((rank, PeerFailure::Ended(why.to_string())))
                }
                other => core.failed(rank, broken(other)),
            }
        }
        n
    }

    fn time_out(&mut self, peer: u32, waited: Duration, core: &mut Core) {
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        let actions = match p.handshake.as_mut() {
            Some(h) => h.time_out(waited),
            None => return,
        };
        if actions.is_empty() {
            return;
        }
        p.qp = None;
        if let Err(why) = self.act(peer, actions, core) {
            core.failed(peer, why);
        }
    }

    fn endpoint_finalize(&mut self, peer: u32) {
        // Said on the connection the handshake used, so that the peer does not take
        // its closing for the end of this process. (Where it is not made, nothing was.)
        if let Some(me) = self.me.filter(|_| self.channel.is_connected(peer)) {
            if let Err(why) = self.channel.send(peer, me, &Message::Removed.encode()) {
                tracing::debug!(peer, %why, "oob: telling a removed peer failed");
            }
        }
        self.peers.remove(&peer);
        self.channel.remove_peer(peer);
    }

    fn finalize(&mut self) {
        self.peers.clear();
        self.channel.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob is the channel's; a peer's blob makes it a peer, a cut one is refused.
    #[test]
    fn peers_come_from_the_channel_blob() {
        let m = OobModule::listen().unwrap();
        let blob = m.modex_blob();
        let mut peer = OobModule::listen().unwrap();
        peer.endpoint_init(0, &blob).unwrap();
        assert!(peer.peers.contains_key(&0) && peer.channel.knows(0));
        assert!(peer.endpoint_init(1, &blob[..5]).is_err());
        assert!(!peer.peers.contains_key(&1));
        peer.endpoint_finalize(0);
        assert!(!peer.channel.knows(0));
    }
}
