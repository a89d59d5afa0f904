//! Connection pseudo-components (CPCs): how the `openib` transport connects a queue
//! pair to a peer (Open MPI: `opal/mca/btl/openib/connect/connect.h`).
//!
//! Each CPC is asked per device port whether it can run there ([`CpcComponent::query`]);
//! the usable ones publish a blob in the modex, and per peer both sides pick the
//! highest-priority CPC they share ([`select`]). This crate holds the interface, the
//! selection, and each CPC's connection logic as a state machine with no I/O
//! ([`oob`], [`rdma_cm`], [`xrc`]), and the deadline every connection must meet
//! ([`deadline`]); the `openib` transport drives them over a real device. No device
//! here has XRC: the `xrc` handshake, and the transport's logic around it, are tested
//! without one, and the transport's XRC path has never run on hardware.

#![warn(missing_docs)]

pub mod deadline;
#[cfg(test)]
mod fuzz;
pub mod oob;
pub mod rdma_cm;
pub mod select;
pub mod xrc;

use rbtl_config::{Config, Registry};

/// What a CPC needs to know about a device port to decide whether it can run there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    /// Device name (`rxe0`, `mlx5_0`).
    pub device: String,
    /// Port number, from 1.
    pub port: u8,
    /// IP addresses configured on the port's netdev (needed by `rdma_cm`).
    pub ip_addresses: Vec<std::net::IpAddr>,
    /// Whether the device supports XRC (needed by `xrc`).
    pub xrc: bool,
}

/// Why a CPC cannot run on a port, or failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CPC cannot run on this port (Open MPI: `OPAL_ERR_NOT_SUPPORTED` from query).
    #[error("{cpc} cannot run on {device}:{port}: {why}")]
    Unusable {
        /// The CPC.
        cpc: &'static str,
        /// The device.
        device: String,
        /// The port.
        port: u8,
        /// Why.
        why: Unusable,
    },
    /// Connecting failed in the transport's own calls (a queue pair, a listener, the
    /// device refused); a handshake's own failures are [`Failure`]s.
    #[error("{cpc}: {why}")]
    Connect {
        /// The CPC.
        cpc: &'static str,
        /// What failed, in the device's or the system's words.
        why: String,
    },
    /// A handshake failed as it started.
    #[error(transparent)]
    Failed(#[from] Failure),
    /// The configuration allows no CPC, names an unknown one, or two peers share none.
    #[error(transparent)]
    Selection(#[from] Selection),
    /// A parameter problem.
    #[error(transparent)]
    Config(#[from] rbtl_config::Error),
}

/// Why a CPC cannot run on a port.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    /// `rdma_cm` addresses peers by IPv4: the port's netdev has none.
    #[error("the port has no IPv4 address")]
    NoIpv4Address,
    /// `xrc` needs XRC domains, which the device does not have.
    #[error("the device has no XRC domains{}", detail.as_ref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NoXrc {
        /// What the device said when asked for one, if it said anything.
        detail: Option<String>,
    },
    /// The device or the connection manager refused what the CPC needs there (its
    /// words).
    #[error("{0}")]
    Refused(String),
}

/// How the configuration's or the peers' choice of CPC went wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Selection {
    /// Both the include and the exclude list are set.
    #[error("{} ({}) and {} ({}) cannot both be set", select::INCLUDE, include.join(","), select::EXCLUDE, exclude.join(","))]
    IncludeAndExclude {
        /// The include list.
        include: Vec<String>,
        /// The exclude list.
        exclude: Vec<String>,
    },
    /// A list names a CPC that does not exist.
    #[error("unknown connection method `{name}`; valid ones: {}", valid.join(", "))]
    Unknown {
        /// The name given.
        name: String,
        /// The CPCs there are.
        valid: Vec<String>,
    },
    /// No allowed CPC can run on the port: each one's reason.
    #[error("no connection method can run on {device}:{port} (allowed: {}): {}", allowed.join(","), why_not.join("; "))]
    NoneUsable {
        /// The device.
        device: String,
        /// The port.
        port: u8,
        /// The CPCs the configuration allows.
        allowed: Vec<String>,
        /// Why each could not run, in the allowed order.
        why_not: Vec<String>,
    },
    /// A peer's list of CPCs in the modex is malformed.
    #[error("malformed connection-method list ({len} bytes)")]
    Malformed {
        /// Its length.
        len: usize,
    },
    /// This process and the peer offer no CPC in common.
    #[error("no connection method in common with rank {peer}: this side offers [{}], the peer offers [{}]; make {}/{} agree", ours.join(","), theirs.join(","), select::INCLUDE, select::EXCLUDE)]
    NoneInCommon {
        /// The peer.
        peer: u32,
        /// What this process offers.
        ours: Vec<String>,
        /// What the peer offers.
        theirs: Vec<String>,
    },
}

impl Failure {
    /// A [`Failure::Broken`] of `cpc`, in `what`'s words.
    pub fn broken(cpc: &'static str, what: impl std::fmt::Display) -> Failure {
        Failure::Broken {
            cpc,
            what: what.to_string(),
        }
    }
}

/// Why connecting to one peer failed, as a handshake reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The connection was not up by its deadline ([`deadline`]).
    #[error("{cpc}: the connection was not up within {} ms: {waiting_for} (a peer that is stopped, hung, or not calling progress answers nothing; raise {} if it is only slow)", waited.as_millis(), deadline::CONNECT_TIMEOUT_PARAM)]
    TimedOut {
        /// The CPC.
        cpc: &'static str,
        /// How long it had.
        waited: std::time::Duration,
        /// What it was waiting for.
        waiting_for: String,
    },
    /// The peer removed this process (`del_procs`): it takes nothing more from it.
    #[error("{cpc}: the peer removed this process (del_procs): it takes nothing more from it")]
    Removed {
        /// The CPC.
        cpc: &'static str,
    },
    /// The peer broke the handshake: a message or event out of turn.
    #[error("{cpc}: {what}")]
    Protocol {
        /// The CPC.
        cpc: &'static str,
        /// What came, and when.
        what: String,
    },
    /// The peer, the device or the connection manager ended the connection or refused
    /// it.
    #[error("{cpc}: {what}")]
    Broken {
        /// The CPC.
        cpc: &'static str,
        /// What happened.
        what: String,
    },
}

/// What the transport offers a CPC while it connects (Open MPI: the endpoint
/// functions a CPC calls back). `Qp` is the transport's queue pair.
pub trait ConnectionHost {
    /// The transport's queue pair.
    type Qp;
    /// This process's rank.
    fn rank(&self) -> u32;
    /// Post receive buffers on `peer`'s new queue pair before the peer may send.
    fn post_receives(&mut self, peer: u32, qp: &mut Self::Qp) -> Result<(), Error>;
    /// The connection to `peer` is up on `qp`: queued fragments may go out.
    fn connected(&mut self, peer: u32, qp: Self::Qp);
    /// The connection to `peer` is up on the queue pair the CPC `cpc` kept for it
    /// ([`ConnectionHost::connected`]); without one (the CPC lost it), the connection
    /// is broken instead.
    fn connected_on(
        &mut self,
        cpc: &'static str,
        peer: u32,
        qp: Option<Self::Qp>,
    ) -> Result<(), Failure> {
        self.connected(
            peer,
            qp.ok_or_else(|| Failure::broken(cpc, "no queue pair"))?,
        );
        Ok(())
    }
    /// Connecting to `peer` failed: what is queued for it fails with `why`.
    fn failed(&mut self, peer: u32, why: Failure);
    /// Something only `peer`'s own progress makes (a handshake message, its accept of
    /// a connect request) arrived from it: it is alive and answering.
    fn heard(&mut self, peer: u32);
}

/// One usable CPC on one port: its priority, what it publishes in the modex, and the
/// connections it makes for the transport `H`.
pub trait CpcModule<H: ConnectionHost + ?Sized>: Send {
    /// The CPC's name.
    fn name(&self) -> &'static str;
    /// Higher wins when both sides offer several.
    fn priority(&self) -> u8;
    /// What the peer needs to connect with this CPC (published in the modex).
    fn modex_blob(&self) -> Vec<u8>;
    /// Prepare per-peer state from the peer's blob (Open MPI: `cbm_endpoint_init`).
    fn endpoint_init(&mut self, peer: u32, peer_blob: &[u8]) -> Result<(), Error>;
    /// Begin connecting to `peer` (Open MPI: `cbm_start_connect`); the host hears of
    /// the outcome through `connected` or `failed`.
    fn start_connect(&mut self, peer: u32, host: &mut H) -> Result<(), Error>;
    /// Drive the CPC's own I/O (messages, connection events); how many it handled.
    fn progress(&mut self, host: &mut H) -> usize;
    /// `peer`'s connection was not up within `waited` of being wanted
    /// ([`deadline`]): give it up, release what it holds, and fail it through
    /// `host`, saying what it was waiting for. A late answer from the peer changes
    /// nothing then. Nothing happens for a peer that is up or failed.
    fn time_out(&mut self, peer: u32, waited: std::time::Duration, host: &mut H);
    /// Forget `peer` (Open MPI: `cbm_endpoint_finalize`).
    fn endpoint_finalize(&mut self, peer: u32);
    /// Release everything (Open MPI: `cbm_finalize`).
    fn finalize(&mut self);
}

/// A CPC's factory.
pub trait CpcComponent<H: ConnectionHost + ?Sized>: Send {
    /// The CPC's name (`oob`, `rdma_cm`, `xrc`).
    fn name(&self) -> &'static str;
    /// Register `btl_openib_cpc_<name>_*` parameters; none by default.
    fn register_params(&self, _registry: &mut Registry) -> Result<(), Error> {
        Ok(())
    }
    /// Whether it can run on `port`, and if so a module for it.
    fn query(&mut self, config: &Config, port: &PortInfo) -> Result<Box<dyn CpcModule<H>>, Error>;
}
