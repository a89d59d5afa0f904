//! The `tcp` transport: processes on any IP network (Open MPI: `btl/tcp`; UCX:
//! `tl/tcp`).
//!
//! # Addresses and connections
//!
//! A module listens on one ephemeral port per chosen address ([`interfaces`]:
//! `btl_tcp_if_include` / `btl_tcp_if_exclude`, by name or by network of either
//! family; by default every up interface but loopback, loopback only when nothing else
//! is up; never an IPv6 link-local or IPv4-mapped address) and publishes in the modex
//! its module id and, per listener, the family, interface, address, prefix length,
//! port and a random secret ([`published`]). Connections are made on first use,
//! without blocking; frames queue until the handshake is over (`handshake`): the
//! connector's first frame carries the listener's secret, its rank and the link index,
//! which the acceptor checks (the secret in constant time) before it acts on anything
//! the connection says. Connections that fail this (strangers, scans, stalled halves)
//! are closed and counted ([`TcpModule::refused`]) and never make a rank look dead.
//! When both sides connect the same link at once, the connection initiated by the
//! lower rank wins. All of this is the same over IPv4 and IPv6.
//!
//! Each peer has `btl_tcp_links` links per pair of interfaces the two ranks share
//! (`pairing`: one pair per interface; the most pairs on one network, then the most
//! pairs in all, an exact assignment (`assignment`); a pair connects over IPv4 where
//! both of its interfaces have it, over IPv6 otherwise). Active messages
//! all go on the first link, so they keep their order; a put or get goes in one chunk
//! per link (at most `btl_tcp_rdma_chunk` bytes each), striped over all links.
//!
//! # IP families
//!
//! `btl_tcp_disable_family` ([`family`]) is Open MPI's parameter: 0 uses both
//! families, 4 IPv6 only, 6 IPv4 only. Its default is 0, Open MPI's default where it
//! is built with IPv6: a network of IPv6 only works without a setting, while links
//! between interfaces that both have IPv4 stay IPv4, and a node with IPv4 only never
//! sees an IPv6 address (a peer's IPv6 addresses pair with nothing of its). An IPv6
//! address that cannot be bound (still in duplicate address detection) is left out
//! with a warning rather than failing the module.
//!
//! Sockets take `TCP_NODELAY` (`btl_tcp_nodelay`, on by default), buffer sizes
//! (`btl_tcp_sndbuf`, `btl_tcp_rcvbuf`: 0 leaves them to the kernel's autotuning) and a
//! congestion control algorithm (`btl_tcp_congestion_control`: empty, the default,
//! keeps the system's). The algorithm is checked when the module opens, so that one
//! the kernel lacks, or keeps from unprivileged processes, is an error then with the
//! list of those it has or allows. An algorithm that paces its sending (as `bbr`
//! does, with a timer per burst when the interface has no pacing queue discipline)
//! costs the sending processor time that bulk transfers on a fast network feel;
//! `docs/performance.md` has the figures.
//!
//! # Frames
//!
//! Every frame is an 8-byte header and a body ([`wire`]); a small message costs one
//! `send` at the sender (header and payload gathered on the stack) and one `recv` at
//! the receiver, as raw TCP does (`readiness`: while a module's only connections
//! are a few links, progress reads them directly and asks `epoll` only now and then).
//! Large put and get data is read straight into place.
//!
//! # One-sided operations and progress
//!
//! Put, get and atomics are active messages that the target applies in its
//! `progress`, after checking each against its own table of live registrations
//! (bounds, access, liveness): a refusal comes back to the origin's completion callback
//! as the same typed error, with the target memory unchanged (`rdma`). So, as with
//! `sm`'s copy path, the target must be progressing for them to complete. A progress
//! thread would spare that, but would add a handoff between threads to every operation
//! and locking on the module for every call; this transport keeps everything on the
//! caller's thread instead (`docs/performance.md` has Open MPI's tcp with and without
//! its progress thread).
//!
//! `flush` waits for the answers to the operations it covers for as long as the peers
//! it waits for answer (each answer, one per put or get chunk and per atomic, restarts
//! that peer's count, and so do a get's data streaming in and a put's data going out
//! on a link that had stopped taking bytes: a chunk may stream for longer than the
//! timeout. The room a put's data needs comes from the peer's kernel while the peer's
//! receive buffer has some, then only from the peer's reading, so a stopped peer is
//! counted silent at most as late as what the two buffers hold takes to cross); once
//! every one of them has sent none for
//! `btl_tcp_flush_timeout` (milliseconds, default 60 s, at least 1), it returns
//! [`Error::PeerTimeout`] naming them, after running the
//! callbacks of what did complete. A stopped or hung process, or one that never calls
//! progress, is such a peer: its kernel still acknowledges our bytes, so no socket
//! error would ever end the wait. Its operations stay pending and complete if it
//! answers later (a later flush waits again), or fail with `PeerFailed` when its link
//! breaks or the caller removes it with `del_procs`. (UCX's `ud` ends such an
//! endpoint itself after `UCX_UD_TIMEOUT`; here the caller decides, and loses nothing
//! by waiting.)
//!
//! A blocking receive from one source with one tag may be handed to the module
//! ([`Module::expect`]): the message is then copied from the link's buffer into the
//! receiver's, from progress, without a callback. Over loopback that saves nothing
//! measurable next to the kernel's part (`docs/performance.md`).
//!
//! A reset or closed link to a peer after its handshake, or a frame from it that
//! fails validation, ends that peer: its pending operations and queued sends complete
//! with [`Error::PeerFailed`](rbtl_btl::Error), which the error callback also
//! reports; other peers go on. So does a link that is not up within
//! `btl_tcp_connect_timeout` of being needed (a peer that accepted our connection
//! and never answered it, or declined ours and never connected itself); a handshake
//! the peer closed unanswered (it expired ours while this process did not progress)
//! is made again, twice at most.
//!
//! # Layout
//!
//! [`TcpModule`] (`module.rs`) is the contract's face and runs the user's callbacks;
//! below it the engine (`engine.rs`) owns the registrations, the send path, the
//! one-sided operations and the end of failed peers (`failures.rs`). The folders:
//! `connections/` (`net`: the table of peers' links and how they come up;
//! [`acceptor`], `attempt`, `handshake`; `readiness`, `conn`, `slot`: one link and its
//! writing side; `link`: its byte streams; the interfaces and their pairing),
//! [`wire`] (the frame format, and beside it `reader`, which walks the links in
//! progress, `sink`, data read into place, and `sends`), and `onesided/` (the put, get
//! and atomic protocol, its bookkeeping in `rdma`).
//!
//! # Crates
//!
//! Sockets are made with `socket2` (either family, `IPV6_V6ONLY` on IPv6 listeners,
//! binding before connecting, buffer sizes, no-delay, congestion control, `accept4`,
//! `send`/`sendmsg` with `MSG_NOSIGNAL`, `recv`, into registered memory too); the
//! listeners' secrets come from `getrandom` through `rustix`; the host's addresses
//! come from `getifaddrs` through `libc` ([`interfaces`]: neither `socket2` nor
//! `rustix` has it). Readiness comes from `mio`, whose
//! `Poll` is edge-triggered `epoll` here: asked with a zero timeout, it is one
//! `epoll_wait` when nothing is ready and no work per idle link, however many peers.
//! A link is read until a read comes back short (the kernel's buffer is empty then,
//! and new data raises a new edge) or would block, so a small message costs one read.
//! `rustix` would offer the same calls, but `mio` carries the registration and
//! edge-triggered semantics that the module would otherwise write itself.

#![warn(missing_docs)]

mod connections;
mod engine;
mod failures;
mod module;
mod onesided;
pub mod wire;

pub use connections::{acceptor, family, interfaces, published};
use connections::{
    assignment, attempt, conn, handshake, link, net, pairing, peer, readiness, slot, sockets,
};
use wire::{reader, sends, sink};

pub use module::{TcpModule, MAX_CHUNK};
pub use sockets::LinkBytes;

use handshake::Refusal;
use rbtl_btl::{
    exclusivity, AtomicFlags, Attributes, BtlFlags, Component, Error, Modex, Module, Result,
};
use rbtl_config::{Config, Registry, Value};
use std::time::Duration;

const NAME: &str = "tcp";
const MODEX_KEY: &str = "btl.tcp";
/// The parameter of [`Settings::flush_timeout`].
pub const FLUSH_TIMEOUT_PARAM: &str = "btl_tcp_flush_timeout";

/// Default attributes of the `tcp` transport.
pub fn default_attributes() -> Attributes {
    Attributes {
        // 64 KiB of payload and room for an upper layer's match header: such a
        // message sent whole costs less than a rendezvous' extra round trip
        // (measured: see docs/performance.md).
        eager_limit: (64 << 10) + 64,
        rndv_eager_limit: 64 << 10,
        max_send_size: 128 << 10,
        put_limit: usize::MAX,
        put_alignment: 1,
        get_limit: usize::MAX,
        get_alignment: 1,
        // Below `sm`: within a node, shared memory wins.
        exclusivity: exclusivity::DEFAULT,
        latency: 100,
        bandwidth: 10_000,
        flags: BtlFlags::SEND
            | BtlFlags::PUT
            | BtlFlags::GET
            | BtlFlags::ATOMIC_OPS
            | BtlFlags::ATOMIC_FOPS
            | BtlFlags::RDMA_REMOTE_COMPLETION,
        atomic_flags: AtomicFlags::all(),
        registration_handle_size: rbtl_btl::transport_kit::keytable::HANDLE_SIZE,
        unregistered_remote_below: 0,
        unattended_from: usize::MAX,
    }
}

/// Tunables of a `tcp` module.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Links per peer and pair of interfaces.
    pub links: usize,
    /// Socket options.
    pub sockets: sockets::Options,
    /// Most bytes per put or get chunk (a transfer is shared out over the links).
    pub rdma_chunk: usize,
    /// How long an accepted connection has to send its HELLO.
    pub handshake_timeout: Duration,
    /// How long a link has to come up once this side needs it (our connection
    /// accepted and answered, or the peer's own after it declined ours).
    pub connect_timeout: Duration,
    /// How long `flush` waits for peers that send no answer to its operations before
    /// it returns [`Error::PeerTimeout`] (the operations stay pending).
    pub flush_timeout: Duration,
    /// Bytes of each link's receive buffer.
    pub rx_bytes: usize,
    /// Most descriptors outstanding.
    pub max_frags: usize,
    /// Most live registrations.
    pub max_registrations: usize,
    /// Registration cache options.
    pub rcache: rbtl_rcache::Options,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            links: 1,
            sockets: sockets::Options {
                nodelay: true,
                sndbuf: 0,
                rcvbuf: 0,
                congestion: None,
            },
            rdma_chunk: 512 << 10,
            handshake_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(60),
            flush_timeout: Duration::from_secs(60),
            rx_bytes: 256 << 10,
            max_frags: 256,
            max_registrations: 4096,
            rcache: rbtl_rcache::Options::default(),
        }
    }
}

/// Connections closed before they proved they belong to the job, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refused {
    /// Closed before a whole HELLO.
    pub closed: u64,
    /// No whole HELLO before the deadline.
    pub stalled: u64,
    /// Bytes that were not a HELLO.
    pub garbage: u64,
    /// A HELLO with a wrong secret.
    pub wrong_secret: u64,
    /// A HELLO naming no rank of the job (or this process, or no link).
    pub bad_identity: u64,
    /// Closed unheard to make room for newer connections.
    pub crowded: u64,
}

impl Refused {
    /// Count one.
    pub fn count(&mut self, why: Refusal) {
        *match why {
            Refusal::Closed => &mut self.closed,
            Refusal::Stalled => &mut self.stalled,
            Refusal::Garbage => &mut self.garbage,
            Refusal::WrongSecret => &mut self.wrong_secret,
            Refusal::BadIdentity => &mut self.bad_identity,
            Refusal::Crowded => &mut self.crowded,
        } += 1;
    }

    /// All of them.
    pub fn total(&self) -> u64 {
        self.closed
            + self.stalled
            + self.garbage
            + self.wrong_secret
            + self.bad_identity
            + self.crowded
    }
}

/// The parameter that chooses the congestion control algorithm.
const CONGESTION_PARAM: &str = "btl_tcp_congestion_control";

/// The algorithm `name` asks for (`None` for the empty name: the system's), once this
/// process has been seen to be allowed to use it.
fn congestion(name: &str) -> Result<Option<sockets::Congestion>> {
    if name.is_empty() {
        return Ok(None);
    }
    let sysctl = |file: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{file}"))
            .map_or_else(|_| "(unreadable)".to_string(), |s| s.trim().to_string())
    };
    let Some(algorithm) = sockets::Congestion::new(name) else {
        return Err(Error::NotAvailable(format!(
            "{CONGESTION_PARAM} = {name:?}: not an algorithm's name (1 to 15 characters, no spaces); \
             available: {}",
            sysctl("tcp_available_congestion_control")
        )));
    };
    match sockets::try_congestion(&algorithm) {
        Ok(()) => Ok(Some(algorithm)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(Error::NotAvailable(format!(
            "{CONGESTION_PARAM} = {name}: the kernel has no such algorithm; available: {} \
             (others may load as the module tcp_{name}, which needs privileges)",
            sysctl("tcp_available_congestion_control")
        ))),
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => Err(Error::NotAvailable(format!(
            "{CONGESTION_PARAM} = {name}: not allowed to unprivileged processes; allowed: {} \
             (an administrator can add it to net.ipv4.tcp_allowed_congestion_control)",
            sysctl("tcp_allowed_congestion_control")
        ))),
        Err(source) => Err(Error::Os {
            call: "setsockopt(TCP_CONGESTION)",
            source,
        }),
    }
}

/// The `tcp` component: one module per process, over the chosen interfaces.
#[derive(Debug, Default)]
pub struct TcpComponent {
    /// Why the last `init` made no module.
    closed: Option<String>,
}

impl TcpComponent {
    /// The module the configuration asks for, publishing its addresses in `modex`;
    /// `None` when no interface is chosen.
    pub fn open(config: &Config, modex: &mut dyn Modex) -> Result<Option<TcpModule>> {
        Ok(TcpComponent::open_or_why(config, modex)?.map_err(drop).ok())
    }

    /// [`TcpComponent::open`], or why no interface is chosen.
    fn open_or_why(config: &Config, modex: &mut dyn Modex) -> Result<Result<TcpModule, String>> {
        let attrs = Attributes::from_config(config, NAME, &default_attributes())?;
        use rbtl_btl::transport_kit::at_least_one;
        let millis = |name: &str, what: &str| {
            at_least_one(config, name, what).map(|n| Duration::from_millis(n as u64))
        };
        let settings = Settings {
            links: at_least_one(config, "btl_tcp_links", "1 to 64 links per peer and interface")?,
            sockets: sockets::Options {
                nodelay: config.bool("btl_tcp_nodelay")?,
                sndbuf: config.size("btl_tcp_sndbuf")?,
                rcvbuf: config.size("btl_tcp_rcvbuf")?,
                congestion: congestion(config.str(CONGESTION_PARAM)?)?,
            },
            rdma_chunk: config.size("btl_tcp_rdma_chunk")?,
            handshake_timeout: millis(
                "btl_tcp_handshake_timeout",
                "the milliseconds an accepted connection has to prove it belongs to the job",
            )?,
            connect_timeout: millis(
                "btl_tcp_connect_timeout",
                "the milliseconds a link has to come up",
            )?,
            flush_timeout: millis(
                FLUSH_TIMEOUT_PARAM,
                "the milliseconds flush waits for a peer that does not answer (a large value to wait longer)",
            )?,
            rx_bytes: Settings::default().rx_bytes,
            max_frags: at_least_one(config, "btl_tcp_free_list_max", "the send descriptors outstanding at once")?,
            max_registrations: at_least_one(
                config,
                "btl_tcp_max_registrations",
                "the registrations alive at once",
            )?,
            rcache: rbtl_btl::transport_kit::rcache_params::options(config)?,
        };
        if settings.links > 64 {
            return Err(Error::ParamOutOfRange {
                name: "btl_tcp_links".into(),
                value: settings.links as i64,
                allowed: "give 1 to 64 links per peer and interface".into(),
            });
        }
        if settings.rdma_chunk == 0 || settings.rdma_chunk > MAX_CHUNK {
            return Err(Error::ParamOutOfRange {
                name: "btl_tcp_rdma_chunk".into(),
                value: i64::try_from(settings.rdma_chunk).unwrap_or(i64::MAX),
                allowed: format!("give 1 to {MAX_CHUNK} bytes"),
            });
        }
        let (chosen, why) = interfaces::chosen_or_why(config)?;
        if let Some(why) = why {
            tracing::info!("tcp {why}; the transport stays closed");
            return Ok(Err(why));
        }
        tracing::debug!(?chosen, "tcp: listening");
        Ok(Ok(TcpModule::new(attrs, settings, &chosen, modex)?))
    }
}

impl Component for TcpComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "any IP network: sockets, put/get/atomics applied by the target"
    }

    fn register_params(&self, registry: &mut Registry) -> rbtl_config::Result<()> {
        Attributes::register_params(registry, NAME, &default_attributes())?;
        let d = Settings::default();
        registry
            .register(
                "btl_tcp_if_include",
                Value::List(Vec::new()),
                "interfaces to use, by name (eth0) or network (10.1.0.0/16, 2001:db8::/32); not with btl_tcp_if_exclude",
            )?
            .register(
                "btl_tcp_if_exclude",
                Value::List(Vec::new()),
                "interfaces not to use, by name or network (default: all up interfaces but loopback, loopback only if nothing else is up)",
            )?
            .register(
                family::DISABLE_FAMILY_PARAM,
                Value::Int(0),
                "0: IPv4 and IPv6 (a pair of interfaces uses IPv4 where both have it); 4: no IPv4 (IPv6 only); 6: no IPv6 (IPv4 only)",
            )?
            .register("btl_tcp_links", Value::Int(d.links as i64), "connections per peer and pair of interfaces")?
            .register("btl_tcp_nodelay", Value::Bool(d.sockets.nodelay), "disable Nagle's algorithm (TCP_NODELAY)")?
            .register("btl_tcp_sndbuf", Value::Size(0), "socket send buffer bytes (0: the system's default)")?
            .register("btl_tcp_rcvbuf", Value::Size(0), "socket receive buffer bytes (0: the system's default)")?
            .register(
                CONGESTION_PARAM,
                Value::Str(String::new()),
                "the kernel's congestion control algorithm for every connection (TCP_CONGESTION: reno, cubic, bbr...; \
                 empty: the system's, net.ipv4.tcp_congestion_control)",
            )?
            .register(
                "btl_tcp_rdma_chunk",
                Value::Size(d.rdma_chunk),
                "most bytes per put/get chunk: a transfer goes in one chunk per link (none under 64 KiB), more where chunks would be larger than this",
            )?
            .register(
                "btl_tcp_handshake_timeout",
                Value::Int(d.handshake_timeout.as_millis() as i64),
                "milliseconds an accepted connection has to prove it belongs to the job",
            )?
            .register(
                "btl_tcp_connect_timeout",
                Value::Int(d.connect_timeout.as_millis() as i64),
                "milliseconds a link has to come up once needed (a peer that accepts the connection but never answers fails then)",
            )?
            .register(
                FLUSH_TIMEOUT_PARAM,
                Value::Int(d.flush_timeout.as_millis() as i64),
                "milliseconds flush waits while the peers it waits for answer none of its puts, gets and atomics; \
                 then it fails with PeerTimeout naming them and the operations stay pending (at least 1; \
                 a peer that answers, however slowly, restarts its count)",
            )?
            .register(
                "btl_tcp_free_list_max",
                Value::Int(d.max_frags as i64),
                "most send descriptors outstanding at once",
            )?
            .register(
                "btl_tcp_max_registrations",
                Value::Int(d.max_registrations as i64),
                "most memory registrations alive at once",
            )?;
        Ok(())
    }

    fn init(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>> {
        match TcpComponent::open_or_why(config, modex)? {
            Ok(m) => {
                self.closed = None;
                Ok(vec![Box::new(m)])
            }
            Err(why) => {
                self.closed = Some(why);
                Ok(Vec::new())
            }
        }
    }

    fn closed_why(&self) -> Option<String> {
        self.closed.clone()
    }
}
