//! What a module offers: limits, alignments, performance hints and flags
//! (Open MPI: the `btl_*` fields at the top of `mca_btl_base_module_t`).

use crate::Result;
use rbtl_config::{Config, Registry, Value};

bitflags::bitflags! {
    /// Capabilities of a module (Open MPI: `MCA_BTL_FLAGS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct BtlFlags: u32 {
        /// Two-sided sends with active-message tags (`MCA_BTL_FLAGS_SEND`).
        const SEND = 1 << 0;
        /// One-sided put (`MCA_BTL_FLAGS_PUT`).
        const PUT = 1 << 1;
        /// One-sided get (`MCA_BTL_FLAGS_GET`).
        const GET = 1 << 2;
        /// `prepare_src` may point a segment at the caller's memory instead of copying
        /// (`MCA_BTL_FLAGS_SEND_INPLACE`).
        const SEND_INPLACE = 1 << 3;
        /// Non-fetching atomics (`MCA_BTL_FLAGS_ATOMIC_OPS`).
        const ATOMIC_OPS = 1 << 4;
        /// Fetching atomics and compare-swap (`MCA_BTL_FLAGS_ATOMIC_FOPS`).
        const ATOMIC_FOPS = 1 << 5;
        /// Put/get need both buffers registered through `register_mem`.
        const REGISTRATION_REQUIRED = 1 << 6;
        /// A put's completion means the data is visible at the target
        /// (`MCA_BTL_FLAGS_RDMA_REMOTE_COMPLETION`).
        const RDMA_REMOTE_COMPLETION = 1 << 7;
        /// Put, get and atomics on a remote handle the target has deregistered are
        /// refused at the call, because the module sees the target's registrations
        /// (`self`, `sm`). Elsewhere (`openib`) the device refuses them with an error
        /// completion, which also ends a reliable connection.
        const REMOTE_HANDLES_CHECKED = 1 << 8;
        /// The transport chooses every registration's key and refuses requested ones
        /// with [`Error::KeyRejected`](crate::Error::KeyRejected) (libfabric:
        /// `FI_MR_PROV_KEY`; `openib`, whose device assigns remote keys). Without it,
        /// a requested key is honoured while no live registration of the module holds
        /// it.
        const PROVIDER_KEYS = 1 << 9;
        /// A put or get flagged [`RdmaFlags::UNATTENDED`](crate::RdmaFlags::UNATTENDED)
        /// completes without the target process taking part (`sm`: by cross-memory
        /// attach whatever its size, unless the kernel refuses it, when it goes
        /// through the rings as any other; not under `btl_sm_rdma = copy`). Open MPI's
        /// one-sided component asks the same of a BTL's put and get (`osc/rdma` over
        /// `vader` with a single-copy mechanism).
        const UNATTENDED_RDMA = 1 << 10;
        /// A put or get may name the peer's memory by its address alone
        /// ([`Remote::unregistered`](crate::Remote::unregistered)): the kernel, not
        /// a registration, checks the access (`sm` by cross-memory attach, unless
        /// `btl_sm_rdma = copy`; cleared where a peer and this process cannot both
        /// attach to each other).
        /// Open MPI's `vader` with cross-memory attach registers nothing.
        const UNREGISTERED_REMOTE = 1 << 11;
    }
}

bitflags::bitflags! {
    /// Which atomic operations a module supports (Open MPI: `MCA_BTL_ATOMIC_SUPPORTS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AtomicFlags: u32 {
        /// Add.
        const ADD = 1 << 0;
        /// Bitwise and.
        const AND = 1 << 1;
        /// Bitwise or.
        const OR = 1 << 2;
        /// Bitwise xor.
        const XOR = 1 << 3;
        /// Swap.
        const SWAP = 1 << 4;
        /// Compare-and-swap.
        const CSWAP = 1 << 5;
        /// Operations on 64-bit words (always set when any is).
        const U64 = 1 << 6;
        /// The same operations on 32-bit words too, with
        /// [`AtomicWidth::W32`](crate::AtomicWidth::W32)
        /// (`MCA_BTL_ATOMIC_SUPPORTS_32BIT`).
        const U32 = 1 << 7;
        /// The operations are atomic with respect to the processor's atomic
        /// instructions on the same memory at the target (`MCA_BTL_ATOMIC_SUPPORTS_GLOB`):
        /// the target's own `fetch_add` on a word, say, mixes with the transport's adds
        /// to it without losing either. Transports whose target applies atomics with
        /// the processor's instructions have it; a network adapter only where it
        /// says so (`IBV_ATOMIC_GLOB`).
        const GLOB = 1 << 8;
    }
}

/// Largest serialised registration handle (Open MPI's limit too).
pub const MAX_HANDLE_SIZE: usize = 256;

/// Limits and hints of one module. The performance fields are hints used to order and
/// stripe modules; the limits are enforced by the module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    /// Largest message the upper layer should send eagerly (`btl_eager_limit`). A
    /// module may lower it while it runs, never below 16 KiB + 64 (`sm`, where its
    /// start-up probe chose it, while copies through its rings run slow): the message
    /// layer reads it again for larger messages.
    pub eager_limit: usize,
    /// Largest first fragment of a rendezvous message (`btl_rndv_eager_limit`).
    pub rndv_eager_limit: usize,
    /// Largest fragment `alloc`/`prepare_src` hand out (`btl_max_send_size`).
    pub max_send_size: usize,
    /// Largest single put (`btl_put_limit`); larger ones are refused with
    /// [`Error::NotAvailable`](crate::Error::NotAvailable).
    pub put_limit: usize,
    /// Required alignment of put addresses (local and remote) and sizes, a power of
    /// two, 1 for none (`btl_put_alignment`).
    pub put_alignment: usize,
    /// Largest single get (`btl_get_limit`).
    pub get_limit: usize,
    /// Required alignment of get addresses and sizes (`btl_get_alignment`).
    pub get_alignment: usize,
    /// Higher wins when several modules reach a peer (`btl_exclusivity`).
    pub exclusivity: u32,
    /// Latency hint in microseconds (`btl_latency`).
    pub latency: u32,
    /// Bandwidth hint in Mbit/s (`btl_bandwidth`).
    pub bandwidth: u32,
    /// What the module can do.
    pub flags: BtlFlags,
    /// Which atomics it supports.
    pub atomic_flags: AtomicFlags,
    /// Bytes of the serialised handle of a one-range registration
    /// (`btl_registration_handle_size`); a vectored registration's may be longer, never
    /// more than [`MAX_HANDLE_SIZE`].
    pub registration_handle_size: usize,
    /// Transfers below this size are worth naming the peer's side by its address
    /// alone, where the module can ([`BtlFlags::UNREGISTERED_REMOTE`]); from this
    /// size on a registration lets the module choose a faster way that needs it (`sm`
    /// under `btl_sm_rdma = auto`: the rings). A hint; 0 where the flag is unset.
    pub unregistered_remote_below: usize,
    /// From this size on, an [`RdmaFlags::UNATTENDED`](crate::RdmaFlags::UNATTENDED)
    /// transfer is worth it against a message the peer's process answers: the upper
    /// layer's choice for work it could do either way (an accumulate read, combined
    /// and written back from the origin, or shipped to the target). A hint;
    /// `usize::MAX` where [`BtlFlags::UNATTENDED_RDMA`] is unset.
    pub unattended_from: usize,
}

/// Exclusivity levels (Open MPI: `MCA_BTL_EXCLUSIVITY_*`).
pub mod exclusivity {
    /// Ordinary network transports.
    pub const DEFAULT: u32 = 1024;
    /// Transports between processes on one node.
    pub const HIGH: u32 = 0x10000;
    /// The process to itself.
    pub const SELF: u32 = 0x20000;
}

impl Attributes {
    /// Register the tunable attributes of component `name` as parameters
    /// `btl_<name>_<field>`, with `defaults` as their defaults.
    pub fn register_params(
        reg: &mut Registry,
        name: &str,
        defaults: &Attributes,
    ) -> rbtl_config::Result<()> {
        let p = |f: &str| format!("btl_{name}_{f}");
        reg.register(
            &p("eager_limit"),
            Value::Size(defaults.eager_limit),
            "largest message sent eagerly by the upper layer",
        )?
        .register(
            &p("rndv_eager_limit"),
            Value::Size(defaults.rndv_eager_limit),
            "largest first fragment of a rendezvous message",
        )?
        .register(
            &p("max_send_size"),
            Value::Size(defaults.max_send_size),
            "largest send fragment",
        )?
        .register(
            &p("put_limit"),
            Value::Size(defaults.put_limit),
            "largest single put; larger ones are refused (the upper layer splits them)",
        )?
        .register(
            &p("put_alignment"),
            Value::Size(defaults.put_alignment),
            "required alignment of put addresses and sizes, a power of two (1: none)",
        )?
        .register(
            &p("get_limit"),
            Value::Size(defaults.get_limit),
            "largest single get; larger ones are refused (the upper layer splits them)",
        )?
        .register(
            &p("get_alignment"),
            Value::Size(defaults.get_alignment),
            "required alignment of get addresses and sizes, a power of two (1: none)",
        )?
        .register(
            &p("exclusivity"),
            Value::Int(defaults.exclusivity.into()),
            "priority when several transports reach a peer (higher wins)",
        )?
        .register(
            &p("latency"),
            Value::Int(defaults.latency.into()),
            "latency hint, microseconds",
        )?
        .register(
            &p("bandwidth"),
            Value::Int(defaults.bandwidth.into()),
            "bandwidth hint, Mbit/s",
        )?;
        Ok(())
    }

    /// `defaults` with the values of component `name`'s parameters from `config`.
    pub fn from_config(config: &Config, name: &str, defaults: &Attributes) -> Result<Attributes> {
        let p = |f: &str| format!("btl_{name}_{f}");
        let int = |f: &str| -> Result<u32> {
            let v = config.int(&p(f))?;
            u32::try_from(v)
                .map_err(|_| crate::Error::NotAvailable(format!("{} = {v} is out of range", p(f))))
        };
        let mut a = defaults.clone();
        a.eager_limit = config.size(&p("eager_limit"))?;
        a.rndv_eager_limit = config.size(&p("rndv_eager_limit"))?;
        a.max_send_size = config.size(&p("max_send_size"))?;
        a.put_limit = config.size(&p("put_limit"))?;
        a.get_limit = config.size(&p("get_limit"))?;
        let alignment = |f: &str| -> Result<usize> {
            match config.size(&p(f))? {
                0 => Ok(1),
                v if v.is_power_of_two() => Ok(v),
                v => Err(crate::Error::NotAvailable(format!(
                    "{} = {v} is not a power of two: use 1 (none), 2, 4, 8, ...",
                    p(f)
                ))),
            }
        };
        a.put_alignment = alignment("put_alignment")?;
        a.get_alignment = alignment("get_alignment")?;
        if a.put_limit == 0 || a.get_limit == 0 {
            return Err(crate::Error::NotAvailable(format!(
                "btl_{name}_put_limit and btl_{name}_get_limit must be at least 1"
            )));
        }
        a.exclusivity = int("exclusivity")?;
        a.latency = int("latency")?;
        a.bandwidth = int("bandwidth")?;
        if a.eager_limit > a.max_send_size || a.rndv_eager_limit > a.max_send_size {
            return Err(crate::Error::NotAvailable(format!(
                "btl_{name}: eager_limit ({}) and rndv_eager_limit ({}) must not exceed max_send_size ({})",
                a.eager_limit, a.rndv_eager_limit, a.max_send_size
            )));
        }
        Ok(a)
    }
}

impl Attributes {
    /// What of `access` a module with these attributes registers: all of it, but atomic
    /// access only where the module has atomics (a registration asking for more is
    /// refused with [`Error::AccessNotSupported`](crate::Error::AccessNotSupported)).
    pub fn registrable(&self, access: rbtl_rcache::Access) -> rbtl_rcache::Access {
        if self
            .flags
            .intersects(BtlFlags::ATOMIC_OPS | BtlFlags::ATOMIC_FOPS)
        {
            access
        } else {
            access - rbtl_rcache::Access::ATOMIC
        }
    }

    /// For transports, first thing in `put` (`put` true) or `get`: refuse with
    /// [`Error::NotAvailable`](crate::Error::NotAvailable) a transfer over the limit, or
    /// one whose local address, remote address or size is not a multiple of the
    /// alignment. The contract decides these before looking at the handles.
    #[inline]
    pub fn check_transfer(&self, put: bool, local: usize, remote: u64, size: usize) -> Result<()> {
        let (limit, align) = if put {
            (self.put_limit, self.put_alignment)
        } else {
            (self.get_limit, self.get_alignment)
        };
        let misaligned = (local as u64 | remote | size as u64) & (align.max(1) as u64 - 1) != 0;
        if size <= limit && !misaligned {
            return Ok(());
        }
        let what = if put { "put" } else { "get" };
        Err(crate::Error::NotAvailable(if size > limit {
            format!("a {what} of {size} bytes exceeds this transport's {what}_limit of {limit}: split it")
        } else {
            format!(
                "a {what} of {size} bytes at local {local:#x} and remote {remote:#x} is not \
                 aligned to this transport's {what}_alignment of {align}"
            )
        }))
    }
}
