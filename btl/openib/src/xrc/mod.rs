//! The `xrc` connection method (Open MPI: `btl_openib_xrc.c` and the XRC parts of
//! `connect/btl_openib_connect_udcm.c`): one XRC initiator per remote node, shared by
//! every peer there; in each node one XRC domain, shared by the processes of the node
//! through a file (`ibv_open_xrcd` with `O_CREAT`); in it, each process's XRC shared
//! receive queue, through which all its receives come, and the targets that the
//! initiators of other nodes' processes connect to. Every work request to a peer names
//! its receive queue.
//!
//! - `engine`, `inbound`, `room`: which initiator serves a peer, which receive queue a
//!   send names, what happens to the peers of a node when its connection fails, peers
//!   waiting while their node connects, the targets held for other processes. Plain
//!   Rust with no verbs calls, driven through the `Device` trait; tested with a fake
//!   device (`fake`, `scenarios`) because no device here has XRC.
//! - `device`: the verbs resources and the `Device` that carries the engine's requests
//!   out on them. It has never run: soft-RoCE and siw have no XRC.
//! - Here: the component (`query` refuses devices without XRC, saying why) and the
//!   module, which feeds the engine the transport's peers and the channel's messages
//!   (the handshake of `rbtl_cpc::xrc` travels over the same kind of TCP channel as
//!   `oob`'s), and applies what it reports to the transport's peers.
//!
//! The node a peer runs on is the one `add_procs` gave (`Proc::node`); a peer whose node
//! is unknown is a node of its own. The domain file is named by a token of the job
//! (the one published by its lowest rank offering `xrc`) and the device, in
//! `/dev/shm`; every process of a node opens it while in `add_procs`, and removes its
//! name when the module is dropped.
//!
//! Its priority is below `oob`'s and `rdma_cm`'s: it is chosen only when asked for
//! (`btl_openib_cpc_include=xrc`, or a higher `btl_openib_cpc_xrc_priority`).

pub mod device;
pub mod engine;
#[cfg(test)]
mod fake;
pub mod inbound;
pub mod room;
#[cfg(test)]
mod scenarios;

pub use device::XrcResources;

use crate::channel::Channel;
use crate::core::{cpc_error, Core};
use crate::peer::XrcPath;
use crate::secret::{self, Secret};
use device::Verbs;
use engine::{DeviceError, Engine, Event};
use rbtl_config::{Config, Registry, Value};
use rbtl_cpc::xrc::Message;
use rbtl_cpc::{ConnectionHost, CpcComponent, CpcModule, Error, PortInfo, Unusable};
use std::collections::BTreeMap;
use std::time::Duration;

/// The CPC's name.
pub const NAME: &str = "xrc";

/// Receive buffers of each process's XRC shared receive queue.
pub const SRQ_DEPTH: &str = "btl_openib_cpc_xrc_srq_depth";

/// Below `oob` (50) and `rdma_cm` (30): chosen only when asked for.
const PRIORITY: u8 = 10;

/// The component.
pub struct XrcComponent;

/// Why a device has no XRC: the refusal of a domain, when it can be had.
fn no_xrc(device: &str) -> Unusable {
    let probe = rbtl_verbs::Context::open(device).and_then(|c| rbtl_verbs::Xrcd::open(&c));
    Unusable::NoXrc {
        detail: probe.err().map(|e| e.to_string()),
    }
}

impl CpcComponent<Core> for XrcComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn register_params(&self, reg: &mut Registry) -> Result<(), Error> {
        reg.register(
            SRQ_DEPTH,
            Value::Int(256),
            "receive buffers in each process's XRC shared receive queue, through which \
             every message of peers connected by xrc arrives",
        )?;
        Ok(())
    }

    fn query(&mut self, _: &Config, port: &PortInfo) -> Result<Box<dyn CpcModule<Core>>, Error> {
        if !port.xrc {
            return Err(Error::Unusable {
                cpc: NAME,
                device: port.device.clone(),
                port: port.port,
                why: no_xrc(&port.device),
            });
        }
        Ok(Box::new(XrcModule::new()?))
    }
}

/// A change of the module's peers, for the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Added(u32),
    Forgotten(u32),
}

/// The module on one port.
pub struct XrcModule {
    channel: Channel,
    /// This process's token (published); the lowest rank's names the domain file.
    token: Secret,
    /// The peers' tokens.
    tokens: BTreeMap<u32, Secret>,
    /// Made on first use, with the transport's queue sizes.
    engine: Option<Engine>,
    /// Peers added or forgotten since the engine last heard, in order.
    changes: Vec<Change>,
    /// Messages from peers not added yet.
    early: Vec<(u32, Message)>,
    /// Why this process has no XRC resources, once opening them failed.
    unusable: Option<std::sync::Arc<DeviceError>>,
}

impl XrcModule {
    fn new() -> Result<XrcModule, Error> {
        Ok(XrcModule {
            channel: Channel::listen(NAME)?,
            token: secret::fresh(NAME)?,
            tokens: BTreeMap::new(),
            engine: None,
            changes: Vec::new(),
            early: Vec::new(),
            unusable: None,
        })
    }

    /// The job's token: that of the lowest rank offering `xrc`, this one included (the
    /// same in every process of the job).
    fn job_token(&self, me: u32) -> Secret {
        match self.tokens.first_key_value() {
            Some((&rank, token)) if rank < me => *token,
            _ => self.token,
        }
    }

    /// Run `f` on the engine with the device, and apply what it reports.
    fn drive(&mut self, core: &mut Core, f: impl FnOnce(&mut Engine, &mut Verbs) -> Vec<Event>) {
        let token = self.job_token(core.rank);
        let engine = self
            .engine
            .get_or_insert_with(|| Engine::new(core.caps.max_send_wr, core.max_qp_wr));
        let mut dev = Verbs {
            core,
            channel: &mut self.channel,
            token,
            unusable: &mut self.unusable,
        };
        let events = f(engine, &mut dev);
        apply(core, events);
    }

    /// Tell the engine of peers added (with their nodes) and forgotten, and of
    /// initiators that broke; open the node's domain when peers were added.
    fn sync(&mut self, core: &mut Core) {
        if self.engine.is_some() && self.changes.is_empty() && core.xrc_broken.is_empty() {
            return;
        }
        let changes = std::mem::take(&mut self.changes);
        let broken = std::mem::take(&mut core.xrc_broken);
        self.drive(core, |engine, dev| {
            let mut events = Vec::new();
            let added = changes.iter().any(|c| matches!(c, Change::Added(_)));
            for c in changes {
                match c {
                    Change::Added(rank) => {
                        let node = dev.core.node_of(rank).map(String::from);
                        engine.add_peer(rank, node.as_deref());
                    }
                    Change::Forgotten(rank) => events.extend(engine.forget(rank, dev)),
                }
            }
            for (node, why) in broken {
                events.extend(engine.on_broken(node, &why, dev));
            }
            if added {
                // Failing, it is remembered and each peer's connection fails with it.
                let _ = dev.resources();
            }
            events
        });
    }
}

/// Apply the engine's events to the transport's peers.
fn apply(core: &mut Core, events: Vec<Event>) {
    for e in events {
        match e {
            Event::Up { rank, route, quota } => {
                let initiator = core
                    .xrc
                    .as_ref()
                    .and_then(|x| x.initiators.get(route.node)?.as_ref());
                let path = XrcPath {
                    node: route.node,
                    srqn: route.srqn,
                    max_inline: initiator.map_or(0, |i| i.caps.max_inline),
                };
                core.xrc_connected(rank, path, quota);
            }
            Event::Failed { rank, why } => core.failed(rank, why),
            Event::Serve { qpn, rank } => {
                if let (Some(&ep), Some(x)) = (core.by_rank.get(&rank), core.xrc.as_mut()) {
                    x.receives.serve(qpn, ep);
                }
            }
            Event::Unserve { qpn } => {
                if let Some(x) = core.xrc.as_mut() {
                    x.receives.unserve(qpn);
                }
            }
        }
    }
}

impl CpcModule<Core> for XrcModule {
    fn name(&self) -> &'static str {
        NAME
    }

    fn priority(&self) -> u8 {
        PRIORITY
    }

    fn modex_blob(&self) -> Vec<u8> {
        let mut b = self.token.to_vec();
        b.extend(self.channel.blob());
        b
    }

    fn endpoint_init(&mut self, peer: u32, blob: &[u8]) -> Result<(), Error> {
        let token = secret::read(blob).ok_or_else(|| {
            cpc_error(format!(
                "xrc: rank {peer}'s address is {} bytes",
                blob.len()
            ))
        })?;
        self.channel.add_peer(peer, &blob[secret::LEN..])?;
        self.tokens.insert(peer, token);
        self.changes.push(Change::Added(peer));
        Ok(())
    }

    fn start_connect(&mut self, peer: u32, core: &mut Core) -> Result<(), Error> {
        self.sync(core);
        self.drive(core, |engine, dev| engine.start(peer, dev));
        Ok(())
    }

    fn progress(&mut self, core: &mut Core) -> usize {
        self.sync(core);
        let (bodies, closed) = self.channel.poll();
        let mut got = std::mem::take(&mut self.early);
        for (rank, body) in bodies {
            match Message::decode(&body) {
                Some(m) => got.push((rank, m)),
                None => tracing::warn!(rank, "xrc: a malformed message ignored"),
            }
        }
        let mut n = closed.len();
        for (rank, m) in got {
            if !self.channel.knows(rank) {
                self.early.push((rank, m));
                continue;
            }
            n += 1;
            core.heard(rank);
            self.drive(core, |engine, dev| engine.on_message(rank, m, dev));
        }
        for (rank, why) in closed {
            let why = why.to_string();
            self.drive(core, |engine, dev| engine.on_peer_gone(rank, &why, dev));
        }
        n
    }

    fn time_out(&mut self, peer: u32, waited: Duration, core: &mut Core) {
        self.sync(core);
        self.drive(core, |engine, dev| engine.time_out(peer, waited, dev));
    }

    fn endpoint_finalize(&mut self, peer: u32) {
        self.changes.push(Change::Forgotten(peer));
        self.channel.remove_peer(peer);
    }

    fn finalize(&mut self) {
        self.channel.close();
        self.engine = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(xrc: bool) -> PortInfo {
        PortInfo {
            device: "no_such_device0".into(),
            port: 1,
            ip_addresses: Vec::new(),
            xrc,
        }
    }

    /// Without XRC on the device, `query` refuses and says why; with it, it accepts
    /// (the module needs the device only once peers are added).
    #[test]
    fn query_refuses_a_device_without_xrc_and_accepts_one_with_it() {
        let config = Config::defaults(&Registry::default());
        let Err(e) = XrcComponent.query(&config, &port(false)) else {
            panic!("accepted a device without XRC");
        };
        let text = e.to_string();
        assert!(
            text.contains("xrc cannot run on no_such_device0:1")
                && text.contains("the device has no XRC domains"),
            "{text}"
        );
        let module = XrcComponent.query(&config, &port(true)).unwrap();
        assert_eq!(module.name(), NAME);
        assert!(module.priority() < 30, "chosen only when asked for");
    }

    /// The blob is the token then the channel's; peers' tokens choose the job's.
    #[test]
    fn the_lowest_ranks_token_names_the_domain_for_the_whole_job() {
        let (mut a, b, c) = (
            XrcModule::new().unwrap(),
            XrcModule::new().unwrap(),
            XrcModule::new().unwrap(),
        );
        assert_ne!(a.token, b.token);
        a.endpoint_init(5, &b.modex_blob()).unwrap();
        assert_eq!(a.job_token(3), a.token, "rank 3 is the lowest");
        a.endpoint_init(1, &c.modex_blob()).unwrap();
        assert_eq!(a.job_token(3), c.token);
        assert_eq!(
            a.changes,
            vec![Change::Added(5), Change::Added(1)],
            "the engine hears of both"
        );
        let e = a.endpoint_init(2, &[0; 5]).unwrap_err();
        assert!(e.to_string().contains("rank 2's address is 5 bytes"), "{e}");
        let f = device::domain_file(&c.token, "mlx5_0");
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("rbtl-xrc-") && name.ends_with("-mlx5_0"),
            "{name}"
        );
        assert_eq!(name.len(), "rbtl-xrc-".len() + 32 + "-mlx5_0".len());
    }
}
