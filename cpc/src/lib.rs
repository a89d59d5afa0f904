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
        why: String,
    },
    /// Connecting failed.
    #[error("{cpc}: {why}")]
    Connect {
        /// The CPC.
        cpc: &'static str,
        /// What failed.
        why: String,
    },
    /// The configuration allows no CPC, names an unknown one, or two peers share none.
    #[error("{0}")]
    Selection(String),
    /// A parameter problem.
    #[error(transparent)]
    Config(#[from] rbtl_config::Error),
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
    /// Connecting to `peer` failed: what is queued for it fails with `why`.
    fn failed(&mut self, peer: u32, why: String);
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
    /// Register `btl_openib_cpc_<name>_*` parameters.
    fn register_params(&self, registry: &mut Registry) -> Result<(), Error>;
    /// Whether it can run on `port`, and if so a module for it.
    fn query(&mut self, config: &Config, port: &PortInfo) -> Result<Box<dyn CpcModule<H>>, Error>;
}
