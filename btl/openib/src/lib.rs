//! The `openib` transport: the BTL contract over verbs devices (InfiniBand, RoCE),
//! one module per active port (Open MPI: `btl/openib`).
//!
//! - Sends: per-peer reliable-connected queue pairs, fragments from free lists
//!   registered once per chunk, a trailer carrying tag, segment lengths and returned
//!   credits ([`flow`] keeps senders within the receive buffers posted for them), and
//!   inline sends below the device's inline limit.
//! - Put and get are RDMA write and read, at most the port's largest message
//!   (`max_msg_sz`, which caps `btl_openib_put_limit` and `btl_openib_get_limit`);
//!   atomics the device's fetch-add and compare-swap, 32-bit ones emulated with
//!   compare-swap steps on the 8-byte word around them; their callbacks run after the
//!   work completion. Remote handles ([`remote_key`]) carry bounds and access, so
//!   out-of-range or unpermitted accesses are refused before they reach the wire; a
//!   wrong key is refused by the device, with an error completion (which, as in RC
//!   transports, also ends the connection).
//! - Registrations: one memory region per range, so a vectored registration's handle
//!   lists each range's remote key; the device chooses the keys
//!   ([`BtlFlags::PROVIDER_KEYS`]), so a requested key is refused with
//!   [`Error::KeyRejected`].
//! - Connections are made on first use by a connection method (CPC) chosen per peer:
//!   `oob` (over TCP between the processes), `rdma_cm` (over the port's IP address),
//!   or, only when asked for, `xrc` ([`xrc`]: one XRC initiator per remote node shared
//!   by its peers, receives through the process's XRC shared receive queue; devices
//!   without XRC, such as soft-RoCE, refuse it, and it has never run on hardware).
//!   What is sent while a connection is set up waits and goes out in order.
//!
//! Registrations go through a registration cache that follows the memory monitor
//! (`rbtl_rcache::monitor`, userfaultfd) and is watched by `rbtl_rcache::auto`. Unlike
//! on one node, a cached registration of memory that was freed and mapped again would
//! point the device at the old pages; the monitor invalidates it whoever unmaps the
//! memory, so `btl_openib_leave_pinned` defaults to on where the monitor runs (and off,
//! with the reason logged, where it does not). Registered pages are kept out of fork
//! children (`MADV_DONTFORK`), so a parent that forks keeps the pages the device uses.
//!
//! Every connection method waits for the peer's own progress (its answer on the
//! out-of-band channel, its accept), so a connection has `btl_openib_connect_timeout`
//! from when it is first needed to come up (as `tcp`'s links): past it, the peer fails,
//! what waits for it fails with `PeerFailed` saying so, and the error callback hears;
//! other peers go on. Until then `flush` waits for such a peer only while it answers
//! its handshake: once every peer it still waits for is one whose connection has been
//! silent for `btl_openib_flush_timeout`, flush returns `PeerTimeout` naming them, as
//! `tcp`'s does, and their operations stay pending (they go out if the connection comes
//! up, or fail at its deadline). Once connected, the devices complete operations (a dead
//! node's fail after the queue pair's retries), but not all of them always: a stopped
//! peer that no longer refills its shared receive queue leaves the send it cannot take
//! retried without end, and everything posted behind it waiting. So flush gives up the
//! same way on connected peers from which no completion has come for the timeout; the
//! caller may flush again, or remove them (`del_procs`), which fails their work at once.
//!
//! Parameters: `btl_openib_*` (the attributes, `recv_depth`, `rdma_depth`,
//! `max_inline_data`, `free_list_max`, `leave_pinned`, `connect_timeout`,
//! `flush_timeout`), and the CPC selection `btl_openib_cpc_include`,
//! `btl_openib_cpc_exclude`, `btl_openib_cpc_<name>_priority` (and `xrc`'s
//! `btl_openib_cpc_xrc_srq_depth`).

#![warn(missing_docs)]

mod address;
mod buffers;
mod channel;
mod core;
pub mod flow;
mod module;
pub mod oob;
mod peer;
pub mod rdma_cm;
pub mod remote_key;
mod secret;
mod srq;
pub mod wire;
pub mod xrc;

use crate::buffers::{registered_frags, Control};
use crate::core::{cq_entries, Core, PortDesc, Settings};
use crate::srq::SharedReceives;
pub use module::OpenibModule;
use rbtl_btl::transport_kit::AmTable;
use rbtl_btl::{
    exclusivity, AtomicFlags, Attributes, BtlFlags, Component, Error, Modex, Module, ModuleId,
    Result,
};
use rbtl_config::{Config, Registry, Value};
use rbtl_cpc::select;
use rbtl_cpc::{CpcComponent, PortInfo};
use rbtl_verbs::{Context, DeviceAttr, QpCaps, VerbsRegistrar};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// The transport's name.
pub const NAME: &str = "openib";

/// The parameter of the time a connection has to come up, in milliseconds.
pub use rbtl_cpc::deadline::CONNECT_TIMEOUT_PARAM;

/// The parameter of the time `flush` waits for peers whose connection is silent, in
/// milliseconds.
pub const FLUSH_TIMEOUT_PARAM: &str = "btl_openib_flush_timeout";

/// The default of both timeouts.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The component: finds active ports and makes a module for each.
pub struct OpenibComponent {
    cpcs: Vec<Box<dyn CpcComponent<Core>>>,
}

impl Default for OpenibComponent {
    fn default() -> Self {
        OpenibComponent {
            cpcs: vec![
                Box::new(oob::OobComponent),
                Box::new(rdma_cm::RdmaCmComponent),
                Box::new(xrc::XrcComponent),
            ],
        }
    }
}

fn default_attributes() -> Attributes {
    Attributes {
        eager_limit: 12 * 1024,
        rndv_eager_limit: 12 * 1024,
        max_send_size: 16 * 1024,
        // Capped by each port's largest message (`max_msg_sz`) when its module is made.
        put_limit: 1 << 30,
        put_alignment: 1,
        get_limit: 1 << 30,
        get_alignment: 1,
        exclusivity: exclusivity::DEFAULT,
        latency: 10,
        bandwidth: 10_000,
        flags: BtlFlags::SEND
            | BtlFlags::PUT
            | BtlFlags::GET
            | BtlFlags::REGISTRATION_REQUIRED
            | BtlFlags::RDMA_REMOTE_COMPLETION
            | BtlFlags::PROVIDER_KEYS,
        atomic_flags: AtomicFlags::empty(),
        registration_handle_size: remote_key::REMOTE_KEY_LEN,
        unregistered_remote_below: 0,
        unattended_from: usize::MAX,
    }
}

/// A timeout parameter in milliseconds, at least 1 (`what` it bounds, for the refusal).
fn timeout(config: &Config, name: &str, what: &str) -> Result<Duration> {
    match u64::try_from(config.int(name)?) {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(Error::NotAvailable(format!(
            "{name} = {}: give the milliseconds {what} (at least 1; a large value to wait \
             longer)",
            config.int(name)?
        ))),
    }
}

fn not_available(what: &str, e: impl std::fmt::Display) -> Error {
    Error::NotAvailable(format!("openib: {what}: {e}"))
}

/// The IPv4 addresses in a port's GID table (RoCE GIDs of the form `::ffff:a.b.c.d`),
/// with their indices.
fn ipv4_gids(ctx: &Context, port: u8, len: i32) -> Vec<(u8, Ipv4Addr, [u8; 16])> {
    (0..len.min(256))
        .filter_map(|i| Some((i as u8, ctx.query_gid(port, i).ok()?)))
        .filter_map(|(i, g)| {
            let v6 = std::net::Ipv6Addr::from(g);
            v6.to_ipv4_mapped().map(|v4| (i, v4, g))
        })
        .collect()
}

impl Component for OpenibComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "verbs devices (InfiniBand, RoCE): RDMA put/get/atomics, connection methods oob, rdma_cm and xrc"
    }

    fn register_params(&self, reg: &mut Registry) -> rbtl_config::Result<()> {
        Attributes::register_params(reg, NAME, &default_attributes())?;
        reg.register(
            "btl_openib_recv_depth",
            Value::Int(32),
            "receive buffers posted per peer (and send credits towards it)",
        )?
        .register(
            "btl_openib_rdma_depth",
            Value::Int(64),
            "puts, gets and atomics in flight per peer",
        )?
        .register(
            "btl_openib_free_list_max",
            Value::Int(256),
            "most send fragments (registered, max_send_size each); beyond, sends wait in \
             the upper layer",
        )?
        .register(
            "btl_openib_leave_pinned",
            Value::Bool(rbtl_rcache::monitor::status().is_running()),
            "keep device registrations after their last handle is released; the default \
             is on where the memory monitor runs (rbtl_info says), off elsewhere, where \
             setting it is safe only when freed memory is reported to the cache \
             (rbtl_rcache::auto)",
        )?
        .register(
            "btl_openib_srq_depth",
            Value::Int(0),
            "receive buffers in one queue shared by every peer, whatever the job's size \
             (0: btl_openib_recv_depth buffers per peer, with credit flow control)",
        )?
        .register(
            "btl_openib_max_inline_data",
            Value::Size(128),
            "largest send carried inline in the work request (0: never)",
        )?
        .register(
            CONNECT_TIMEOUT_PARAM,
            Value::Int(DEFAULT_TIMEOUT.as_millis() as i64),
            "milliseconds a connection has to come up once needed: then the peer fails, and \
             what waits for it fails with PeerFailed (a peer that is stopped, hung or not \
             calling progress never answers the handshake; at least 1)",
        )?
        .register(
            FLUSH_TIMEOUT_PARAM,
            Value::Int(DEFAULT_TIMEOUT.as_millis() as i64),
            "milliseconds flush waits while none of the peers it waits for answers (a \
             handshake message while connecting, a completion once connected); then it \
             fails with PeerTimeout naming them and the operations stay pending (at least 1)",
        )?;
        select::register_params(reg, &self.cpcs).map_err(|e| match e {
            rbtl_cpc::Error::Config(c) => c,
            other => panic!("registering CPC parameters: {other}"),
        })
    }

    fn init(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>> {
        let attrs = Attributes::from_config(config, NAME, &default_attributes())?;
        let names: Vec<&str> = self.cpcs.iter().map(|c| c.name()).collect();
        select::allowed(config, &names).map_err(|e| not_available("configuration", e))?;
        let count = |name: &str| {
            u32::try_from(config.int(name)?)
                .ok()
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::NotAvailable(format!("{name} must be at least 1")))
        };
        let settings = Settings {
            recv_depth: count("btl_openib_recv_depth")?,
            rsv_depth: 4,
            rdma_depth: count("btl_openib_rdma_depth")?,
            free_list_max: count("btl_openib_free_list_max")? as usize,
            max_inline: config
                .size("btl_openib_max_inline_data")?
                .min(u32::MAX as usize) as u32,
            srq_depth: u32::try_from(config.int("btl_openib_srq_depth")?).map_err(|_| {
                Error::NotAvailable("openib: btl_openib_srq_depth must be 0 or more".into())
            })?,
            xrc_srq_depth: count(xrc::SRQ_DEPTH)?,
            connect_timeout: timeout(config, CONNECT_TIMEOUT_PARAM, "a connection has to come up")?,
            flush_timeout: timeout(
                config,
                FLUSH_TIMEOUT_PARAM,
                "flush waits for peers whose connection does not answer",
            )?,
        };
        let devices = match rbtl_verbs::cm_devices() {
            Ok(d) => d,
            Err(e) => {
                tracing::debug!("openib: no devices: {e}");
                return Ok(Vec::new());
            }
        };
        let mut modules: Vec<Box<dyn Module>> = Vec::new();
        let mut refused = Vec::new();
        for ctx in devices {
            let dev = ctx
                .query_device()
                .map_err(|e| not_available(ctx.name(), e))?;
            for port in 1..=dev.ports {
                let pa = ctx
                    .query_port(port)
                    .map_err(|e| not_available(ctx.name(), e))?;
                if !pa.active {
                    continue;
                }
                let v4 = ipv4_gids(&ctx, port, pa.gid_table_len);
                let (gid_index, gid) = match (pa.ethernet, v4.first()) {
                    (true, Some(&(i, _, g))) => (i, g),
                    _ => (
                        0,
                        ctx.query_gid(port, 0)
                            .map_err(|e| not_available(ctx.name(), e))?,
                    ),
                };
                let info = PortInfo {
                    device: ctx.name().to_string(),
                    port,
                    ip_addresses: v4.iter().map(|&(_, a, _)| IpAddr::V4(a)).collect(),
                    xrc: rbtl_verbs::Xrcd::open(&ctx).is_ok(),
                };
                let usable = match select::select_for_port(config, &mut self.cpcs, &info) {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::warn!("openib: {e}");
                        refused.push(e.to_string());
                        continue;
                    }
                };
                let port = PortDesc {
                    num: port,
                    gid_index,
                    lid: pa.lid,
                    gid,
                    mtu: pa.mtu_enum as u8,
                };
                let mut a = attrs.clone();
                // One RDMA write or read carries at most the port's largest message.
                let most = usize::try_from(pa.max_msg_sz).unwrap_or(usize::MAX).max(1);
                a.put_limit = a.put_limit.min(most);
                a.get_limit = a.get_limit.min(most);
                if dev.atomics {
                    a.flags |= BtlFlags::ATOMIC_OPS | BtlFlags::ATOMIC_FOPS;
                    // 32-bit ones emulated with 64-bit compare-swap (module::emu32).
                    a.atomic_flags =
                        AtomicFlags::ADD | AtomicFlags::CSWAP | AtomicFlags::U64 | AtomicFlags::U32;
                    if dev.atomics_global {
                        a.atomic_flags |= AtomicFlags::GLOB;
                    }
                }
                // Peers connected by xrc receive through one more queue.
                let xrc = usable.iter().any(|u| u.0.name() == xrc::NAME);
                let found = FoundPort {
                    ctx: &ctx,
                    dev: &dev,
                    port,
                    attrs: a,
                    xrc,
                };
                let core = new_core(found, config, settings, modex)?;
                let mut subnet = [0; 8];
                subnet.copy_from_slice(&gid[..8]);
                let key = format!("{NAME}.{}", modules.len());
                let module = OpenibModule::new(core, usable, key.clone(), subnet);
                modex.publish(&key, &module.modex_blob())?;
                modules.push(Box::new(module));
            }
        }
        if modules.is_empty() && !refused.is_empty() {
            return Err(Error::NotAvailable(format!(
                "openib: {}",
                refused.join("; ")
            )));
        }
        Ok(modules)
    }
}

/// One active port of a device, as `init` found it: what a module over it is made of.
struct FoundPort<'a> {
    ctx: &'a Context,
    dev: &'a DeviceAttr,
    port: PortDesc,
    /// The transport's attributes, bounded by what the port carries.
    attrs: Attributes,
    /// Whether a peer may connect by xrc (one more receive queue to size for).
    xrc: bool,
}

fn new_core(
    found: FoundPort,
    config: &Config,
    settings: Settings,
    modex: &dyn Modex,
) -> Result<Core> {
    let FoundPort {
        ctx,
        dev,
        port,
        attrs,
        xrc,
    } = found;
    let e = |what: &str| {
        let what = what.to_string();
        move |e: rbtl_verbs::Error| not_available(&what, e)
    };
    let pd = ctx.alloc_pd().map_err(e("ibv_alloc_pd"))?;
    let caps = QpCaps {
        max_send_wr: settings.recv_depth + settings.rsv_depth + settings.rdma_depth,
        max_recv_wr: settings.recv_depth + settings.rsv_depth,
        max_inline: settings.max_inline,
    };
    let (per_peer, mut shared) = cq_entries(caps, &settings);
    if xrc {
        shared += settings.xrc_srq_depth as usize;
    }
    let depth = (per_peer * modex.size().max(2) as usize + shared)
        .min(usize::try_from(dev.max_cqe).unwrap_or(0).max(1));
    let cq = ctx.create_cq(depth as i32).map_err(e("ibv_create_cq"))?;
    let mut options = rbtl_btl::transport_kit::rcache_params::options(config)?;
    options.leave_pinned =
        rbtl_btl::transport_kit::rcache_params::leave_pinned(config, "btl_openib_leave_pinned")?;
    let rcache = rbtl_rcache::Rcache::new(VerbsRegistrar::new(pd.clone()), options);
    rbtl_rcache::auto::watch(&rcache);
    let send_frags = registered_frags(&pd, attrs.max_send_size, settings.free_list_max)?;
    let mut recv_frags = registered_frags(&pd, attrs.max_send_size, 0)?;
    let shared = match settings.srq_depth {
        0 => None,
        n => Some(SharedReceives::new(&pd, &mut recv_frags, n)?),
    };
    let control = Control::new(&pd, modex.size() as usize)?;
    Ok(Core {
        id: ModuleId::fresh(),
        rank: modex.rank(),
        ctx: ctx.clone(),
        max_qp_wr: u32::try_from(dev.max_qp_wr).unwrap_or(0).max(1),
        attrs,
        settings,
        port,
        pd,
        cq,
        cq_depth: depth,
        caps,
        rcache,
        send_frags,
        recv_frags,
        shared,
        xrc: None,
        xrc_broken: Vec::new(),
        peers: Vec::new(),
        by_rank: Default::default(),
        posted: Vec::new(),
        free_ids: Vec::new(),
        sent: Vec::new(),
        am: AmTable::default(),
        on_error: None,
        done: Default::default(),
        ready: Vec::new(),
        to_repost: Vec::new(),
        connecting: 0,
        deadlines: rbtl_cpc::deadline::Deadlines::new(settings.connect_timeout),
        answers: Default::default(),
        control,
        ended: Default::default(),
    })
}
