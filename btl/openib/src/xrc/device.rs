//! The verbs side of XRC, kept thin: this process's XRC resources (the node's domain,
//! opened through a file every process of the node opens; this process's XRC shared
//! receive queue with its buffers; the initiators by node; the targets it made or
//! opened), and the [`Device`] the engine drives, which does each of its requests
//! with one or two `rbtl_verbs` calls and sends its messages over the channel.
//!
//! No device this project runs on has XRC, so this file has never run: every decision
//! is the engine's (tested with a fake device), and what is here only carries them out.

use super::engine::{Device, DeviceError, NodeId};
use crate::channel::Channel;
use crate::core::Core;
use crate::srq::SharedReceives;
use rbtl_cpc::oob::QpInfo;
use rbtl_cpc::xrc::Message;
use rbtl_mpool::FreeList;
use rbtl_verbs::{Mr, QpCaps, QpEndpoint, XrcInitiator, XrcSrq, XrcTarget, Xrcd};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the domain files go: a node-local directory every process of the node sees.
fn domain_dir() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// The file through which the processes of a node share their XRC domain on
/// `device`: named by the job's `token` (the same in every process of the job), so
/// that jobs do not share domains.
pub fn domain_file(token: &[u8], device: &str) -> PathBuf {
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    domain_dir().join(format!("rbtl-xrc-{hex}-{device}"))
}

/// This process's XRC resources on one port.
pub struct XrcResources {
    path: PathBuf,
    /// Held open while the domain is (Open MPI closes it with the domain).
    _file: std::fs::File,
    domain: Xrcd,
    /// This process's XRC SRQ number.
    pub srqn: u32,
    /// Receives through this process's XRC SRQ, by the target they came through.
    pub receives: SharedReceives,
    /// The initiator of each node, by the engine's node number.
    pub initiators: Vec<Option<XrcInitiator>>,
    /// Initiators that serve no one any more; work posted on them may still complete.
    retired: Vec<XrcInitiator>,
    /// Targets made or opened here, by number.
    targets: HashMap<u32, XrcTarget>,
}

impl XrcResources {
    /// Open the node's domain through the file named by `token`, and make this
    /// process's XRC SRQ with `core.settings.xrc_srq_depth` buffers posted.
    pub fn open(core: &mut Core, token: &[u8]) -> Result<XrcResources, DeviceError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = domain_file(token, core.ctx.name());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| DeviceError::DomainFile {
                path: path.clone(),
                source,
            })?;
        let domain = Xrcd::open_file(&core.ctx, &file)?;
        let depth = core.settings.xrc_srq_depth;
        let srq = XrcSrq::create(&core.ctx, &core.pd, &domain, &core.cq, depth)?;
        let srqn = srq.srq_num()?;
        let receives = SharedReceives::new_xrc(srq, &mut core.recv_frags, depth)?;
        tracing::debug!(path = %path.display(), srqn, "openib: xrc domain open");
        Ok(XrcResources {
            path,
            _file: file,
            domain,
            srqn,
            receives,
            initiators: Vec::new(),
            retired: Vec::new(),
            targets: HashMap::new(),
        })
    }

    /// Release everything: queue pairs, then the receive queue (its buffers back to
    /// `list`), then the domain; the file's name goes (every process of the node
    /// opened it in `add_procs`, and the domain lives on in those that still use it).
    pub fn release(self, list: &mut FreeList<Mr>) {
        let XrcResources {
            path,
            _file,
            domain,
            receives,
            initiators,
            retired,
            targets,
            ..
        } = self;
        drop((initiators, retired, targets));
        receives.release(list);
        drop(domain);
        let _ = std::fs::remove_file(path);
    }
}

/// What the engine's requests need: the module's core and the channel.
pub struct Verbs<'a> {
    /// The module's resources (and its XRC ones, once open).
    pub core: &'a mut Core,
    /// The out-of-band channel.
    pub channel: &'a mut Channel,
    /// The job's token, naming the domain file.
    pub token: [u8; 16],
    /// Why this process has no XRC resources, once opening them failed.
    pub unusable: &'a mut Option<Arc<DeviceError>>,
}

impl Verbs<'_> {
    /// The XRC resources, opened on first use.
    pub fn resources(&mut self) -> Result<&mut XrcResources, DeviceError> {
        if self.core.xrc.is_none() {
            if let Some(why) = self.unusable.as_ref() {
                return Err(DeviceError::Unusable(why.clone()));
            }
            match XrcResources::open(self.core, &self.token) {
                Ok(x) => self.core.xrc = Some(x),
                Err(why) => {
                    tracing::warn!(%why, "openib: no xrc resources");
                    let why = Arc::new(why);
                    *self.unusable = Some(why.clone());
                    return Err(DeviceError::Unusable(why));
                }
            }
        }
        Ok(self.core.xrc.as_mut().expect("opened above"))
    }

    /// This port's address for a queue pair numbered `qpn`.
    fn info(&self, qpn: u32) -> QpInfo {
        let port = &self.core.port;
        QpInfo {
            qpn,
            psn: qpn & 0xff_ffff,
            lid: port.lid,
            gid: port.gid,
            mtu: port.mtu,
        }
    }

    /// The remote end `remote`, and the path MTU towards it (the smaller of the two).
    fn remote(&self, remote: &QpInfo) -> (QpEndpoint, u32) {
        let to = QpEndpoint {
            qpn: remote.qpn,
            psn: remote.psn,
            lid: remote.lid,
            gid: remote.gid,
        };
        (to, u32::from(remote.mtu.min(self.core.port.mtu)))
    }
}

impl Device for Verbs<'_> {
    fn srqn(&mut self) -> Result<u32, DeviceError> {
        Ok(self.resources()?.srqn)
    }

    fn create_initiator(&mut self, node: NodeId, depth: u32) -> Result<(QpInfo, u32), DeviceError> {
        self.resources()?;
        let c = &*self.core;
        let caps = QpCaps {
            max_send_wr: depth,
            max_recv_wr: 0,
            max_inline: c.settings.max_inline,
        };
        let (num, gid_index) = (c.port.num, c.port.gid_index);
        let mut ini = XrcInitiator::create(&c.ctx, &c.pd, &c.cq, caps, num, gid_index)
            .and_then(|mut i| i.to_init().map(|_| i))?;
        ini.caps.max_inline = ini.caps.max_inline.min(c.settings.max_inline);
        let (info, granted) = (self.info(ini.qpn()), ini.caps.max_send_wr);
        let x = self.resources()?;
        if x.initiators.len() <= node {
            x.initiators.resize_with(node + 1, || None);
        }
        if let Some(old) = x.initiators[node].replace(ini) {
            x.retired.push(old);
        }
        Ok((info, granted))
    }

    fn connect_initiator(&mut self, node: NodeId, target: &QpInfo) -> Result<(), DeviceError> {
        let (to, mtu) = self.remote(target);
        let ini = self
            .resources()?
            .initiators
            .get_mut(node)
            .and_then(Option::as_mut)
            .ok_or(DeviceError::NoInitiator { node })?;
        let psn = ini.qpn() & 0xff_ffff;
        ini.to_rtr(&to, mtu).and_then(|_| ini.to_rts(psn))?;
        Ok(())
    }

    fn retire_initiator(&mut self, node: NodeId) {
        if let Some(x) = self.core.xrc.as_mut() {
            if let Some(old) = x.initiators.get_mut(node).and_then(Option::take) {
                x.retired.push(old);
            }
        }
    }

    fn create_target(&mut self, initiator: &QpInfo) -> Result<QpInfo, DeviceError> {
        let (from, mtu) = self.remote(initiator);
        let (num, gid_index) = (self.core.port.num, self.core.port.gid_index);
        let ctx = self.core.ctx.clone();
        let x = self.resources()?;
        let t = XrcTarget::create(&ctx, &x.domain, num, gid_index)
            .and_then(|mut t| t.to_init(Core::qp_access()).map(|_| t))
            .and_then(|mut t| t.to_rtr(&from, mtu).map(|_| t))?;
        let qpn = t.qpn();
        x.targets.insert(qpn, t);
        Ok(self.info(qpn))
    }

    fn open_target(&mut self, qpn: u32) -> Result<(), DeviceError> {
        let ctx = self.core.ctx.clone();
        let x = self.resources()?;
        let t = XrcTarget::open(&ctx, &x.domain, qpn)?;
        x.targets.insert(qpn, t);
        Ok(())
    }

    fn drop_target(&mut self, qpn: u32) {
        if let Some(x) = self.core.xrc.as_mut() {
            x.targets.remove(&qpn);
        }
    }

    fn send(&mut self, rank: u32, m: Message) -> Result<(), DeviceError> {
        Ok(self.channel.send(rank, self.core.rank, &m.encode())?)
    }
}
