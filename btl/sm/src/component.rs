//! The `sm` component: its attributes, its tunables (`btl_sm_*`) and the one module
//! per process it makes.

use super::module::SmModule;
use rbtl_btl::transport_kit::keytable;
use rbtl_btl::{
    exclusivity, AtomicFlags, Attributes, BtlFlags, Component, Error, Modex, Module, Result,
};
use rbtl_config::{Config, Registry, Source, Value};

pub(super) const NAME: &str = "sm";
/// The parameter of [`Settings::flush_timeout`].
pub const FLUSH_TIMEOUT_PARAM: &str = "btl_sm_flush_timeout";

/// The default eager limit: 16 KiB of payload and room for an upper layer's match
/// header: copying such a message in and out costs less than a rendezvous' extra round
/// trip (measured: see docs/performance.md). Under `btl_sm_rdma=auto` the start-up
/// probe raises it where cross-memory attach is slow, and slow rings bring it back
/// (`by_address.rs`).
pub const DEFAULT_EAGER_LIMIT: usize = (16 << 10) + 64;

/// Default attributes of the `sm` transport.
pub fn default_attributes() -> Attributes {
    Attributes {
        eager_limit: DEFAULT_EAGER_LIMIT,
        rndv_eager_limit: 32 << 10,
        // The largest eager limit the probe sets.
        max_send_size: crate::by_address::EAGER_LIMIT_SLOW,
        put_limit: usize::MAX,
        put_alignment: 1,
        get_limit: usize::MAX,
        get_alignment: 1,
        exclusivity: exclusivity::HIGH,
        latency: 1,
        bandwidth: 200_000,
        flags: BtlFlags::SEND
            | BtlFlags::PUT
            | BtlFlags::GET
            | BtlFlags::ATOMIC_OPS
            | BtlFlags::ATOMIC_FOPS
            | BtlFlags::RDMA_REMOTE_COMPLETION
            | BtlFlags::REMOTE_HANDLES_CHECKED,
        atomic_flags: AtomicFlags::all(),
        registration_handle_size: keytable::HANDLE_SIZE,
        unregistered_remote_below: 0,
        unattended_from: usize::MAX,
    }
}

/// How put and get move bytes (`btl_sm_rdma`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RdmaPath {
    /// Copied through the rings; the target must progress.
    Copy,
    /// Cross-memory attach only (an error where it is refused).
    Cma,
    /// Through the rings, or by cross-memory attach (where the kernel allows it) while
    /// copies into the rings run below [`Settings::cma_below`], or below 2 MiB where
    /// it measured faster for the size (`path.rs`).
    Auto,
}

impl RdmaPath {
    fn parse(s: &str) -> Result<RdmaPath> {
        match s {
            "copy" => Ok(RdmaPath::Copy),
            "cma" => Ok(RdmaPath::Cma),
            "auto" => Ok(RdmaPath::Auto),
            other => Err(Error::NotAvailable(format!(
                "btl_sm_rdma = `{other}`; valid values: copy, cma, auto"
            ))),
        }
    }
}

/// Tunables of an `sm` module.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Slots per ring. Few by default: a ring's slots are used in turn, and a
    /// ping-pong keeps its small messages in the first-level cache only while both
    /// directions' slots fit there (64 slots: 8 KiB per ring); a window of 64 small
    /// messages still goes out without waiting.
    pub ring_slots: usize,
    /// Data bytes per ring, at most.
    pub ring_bytes: usize,
    /// Data bytes of all rings of one segment together, shared among the node's other
    /// ranks: each ring gets `ring_bytes`, or less (a power of two, never less than
    /// what the largest send needs) where they are many, so that a node's memory grows
    /// linearly with its ranks.
    pub rings_budget: usize,
    /// Most live registrations.
    pub max_registrations: usize,
    /// Put/get path.
    pub rdma: RdmaPath,
    /// Under [`RdmaPath::Auto`], the rate of copies into a ring (MB/s) below which
    /// large transfers go by cross-memory attach.
    pub cma_below: u64,
    /// Under [`RdmaPath::Auto`], the size below which transfers are worth naming a
    /// peer's memory by address alone (`btl_sm_by_address_below`); `None`: measured at
    /// start-up (`by_address.rs`).
    pub by_address_below: Option<usize>,
    /// Largest chunk when put/get copy through the rings (a transfer goes in about four
    /// chunks of at least 64 KiB).
    pub copy_chunk: usize,
    /// Most descriptors outstanding.
    pub max_frags: usize,
    /// Registration cache options.
    pub rcache: rbtl_rcache::Options,
    /// Bytes of the segment's heap for [`Module::alloc_shared`]; 0: sized by the
    /// machine's memory and the node's ranks (see `own_segment::auto_heap`).
    pub heap_bytes: usize,
    /// How long `flush` waits for peers that reply to none of its copy-protocol
    /// operations before it returns [`Error::PeerTimeout`] (they stay pending).
    pub flush_timeout: std::time::Duration,
    /// The eager limit is the start-up probe's (`btl_sm_rdma = auto`,
    /// `btl_sm_eager_limit` not given): every rank of a node takes its first rank's
    /// when it first meets it (`by_address::node_eager_limit`).
    pub eager_by_probe: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ring_slots: 64,
            ring_bytes: 2 << 20,
            rings_budget: 64 << 20,
            max_registrations: 4096,
            rdma: RdmaPath::Auto,
            cma_below: 8000,
            by_address_below: None,
            copy_chunk: 512 << 10,
            max_frags: 256,
            rcache: rbtl_rcache::Options::default(),
            heap_bytes: 0,
            flush_timeout: std::time::Duration::from_secs(60),
            eager_by_probe: false,
        }
    }
}

/// The `sm` component: one module per process, reaching the other processes on its
/// node.
#[derive(Debug, Default)]
pub struct SmComponent;

impl Component for SmComponent {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "processes on one node: shared-memory rings, cross-memory-attach put/get"
    }

    fn register_params(&self, registry: &mut Registry) -> rbtl_config::Result<()> {
        Attributes::register_params(registry, NAME, &default_attributes())?;
        let d = Settings::default();
        registry
            .register("btl_sm_ring_slots", Value::Int(d.ring_slots as i64), "message slots per sender ring (rounded up to a power of two)")?
            .register("btl_sm_ring_bytes", Value::Size(d.ring_bytes), "data bytes per sender ring, at most (rounded up to a power of two)")?
            .register(
                "btl_sm_rings_size",
                Value::Size(d.rings_budget),
                "data bytes of a process's rings together, shared among the node's other ranks: each ring gets \
                 btl_sm_ring_bytes or less where the ranks are many (a power of two, at least what the largest send needs)",
            )?
            .register(
                "btl_sm_max_registrations",
                Value::Int(d.max_registrations as i64),
                "most memory registrations alive at once",
            )?
            .register(
                "btl_sm_rdma",
                Value::Str("auto".into()),
                "put/get path: copy (through the rings; the target must progress), cma (cross-memory attach), \
                 or auto (the rings, and cross-memory attach where the kernel allows it while copies into the rings run below btl_sm_cma_below, \
                 or below 2 MiB where it measured faster for the size; where cross-memory attach copies slower than \
                 btl_sm_by_address_below's ratio at start-up, or not at all, an eager limit of 64 KiB + 64 unless btl_sm_eager_limit \
                 is given, every rank of a node taking its first rank's, and the default while copies into the rings run below btl_sm_cma_below)",
            )?
            .register(
                "btl_sm_cma_below",
                Value::Int(d.cma_below as i64),
                "under btl_sm_rdma=auto: the rate of copies into a ring (MB/s) below which transfers of 16 KiB and more go by cross-memory attach \
                 (and messages above the default eager limit by rendezvous, where the start-up probe chose the limit)",
            )?
            .register(
                crate::by_address::PARAM,
                Value::Str("auto".into()),
                "under btl_sm_rdma=auto: transfers below this size may name a peer's memory by address alone (cross-memory attach, \
                 no registration; larger ones are registered, so that the rings may carry them); auto: 1 MiB where this \
                 process's cross-memory attach copies run at 0.4 of memcpy's rate or more, measured at start-up, else 0",
            )?
            .register(
                "btl_sm_heap_size",
                Value::Size(d.heap_bytes),
                "bytes of each process's segment that windows can share for direct loads and stores (backed as used; \
                 a larger window gets pages of its process, reached through the transport); 0: the node's ranks' \
                 heaps together a quarter of the machine's memory, each from 32 MiB to 1 GiB",
            )?
            .register(
                "btl_sm_copy_chunk",
                Value::Size(d.copy_chunk),
                "largest chunk when put/get copy through the rings (a transfer goes in about four, of at least 64 KiB; at most a quarter of btl_sm_ring_bytes)",
            )?
            .register(
                FLUSH_TIMEOUT_PARAM,
                Value::Int(d.flush_timeout.as_millis() as i64),
                "milliseconds flush waits while the peers it waits for reply to none of its atomics and puts/gets \
                 through the rings; then it fails with PeerTimeout naming them and the operations stay pending \
                 (at least 1; a peer that replies, however slowly, restarts its count)",
            )?
            .register(
                "btl_sm_free_list_max",
                Value::Int(d.max_frags as i64),
                "most send descriptors outstanding at once",
            )?;
        Ok(())
    }

    fn init(&mut self, config: &Config, modex: &mut dyn Modex) -> Result<Vec<Box<dyn Module>>> {
        let attrs = Attributes::from_config(config, NAME, &default_attributes())?;
        use rbtl_btl::transport_kit::{at_least_one, count};
        let settings = Settings {
            ring_slots: count(config, "btl_sm_ring_slots")?,
            ring_bytes: config.size("btl_sm_ring_bytes")?,
            rings_budget: config.size("btl_sm_rings_size")?,
            max_registrations: at_least_one(
                config,
                "btl_sm_max_registrations",
                "the registrations alive at once",
            )?,
            rdma: RdmaPath::parse(config.str("btl_sm_rdma")?)?,
            cma_below: count(config, "btl_sm_cma_below")? as u64,
            by_address_below: crate::by_address::parse(config.str(crate::by_address::PARAM)?)?,
            copy_chunk: config.size("btl_sm_copy_chunk")?,
            max_frags: at_least_one(config, "btl_sm_free_list_max", "the send descriptors outstanding at once")?,
            rcache: rbtl_btl::transport_kit::rcache_params::options(config)?,
            heap_bytes: config.size("btl_sm_heap_size")?,
            flush_timeout: std::time::Duration::from_millis(at_least_one(
                config,
                FLUSH_TIMEOUT_PARAM,
                "the milliseconds flush waits for a peer that does not reply (a large value to wait longer)",
            )? as u64),
            eager_by_probe: false,
        };
        let (mut attrs, mut settings) = (attrs, settings);
        if settings.rdma != RdmaPath::Copy {
            attrs.flags |= BtlFlags::UNATTENDED_RDMA | BtlFlags::UNREGISTERED_REMOTE;
            (attrs.unregistered_remote_below, attrs.unattended_from) = match settings.rdma {
                RdmaPath::Auto => {
                    let chosen = crate::by_address::auto();
                    let given = config.value("btl_sm_eager_limit")?.1 != &Source::Default;
                    if let (Some(limit), false) = (chosen.eager_limit, given) {
                        attrs.eager_limit = limit.min(attrs.max_send_size);
                    }
                    settings.eager_by_probe = !given;
                    let below = settings.by_address_below;
                    (
                        below.unwrap_or(chosen.by_address_below),
                        chosen.unattended_from,
                    )
                }
                _ => (usize::MAX, crate::by_address::UNATTENDED_FROM_FAST),
            };
            crate::cma::let_peers_attach();
        }
        Ok(vec![Box::new(SmModule::new(attrs, settings, modex)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::{default_attributes, Settings, SmComponent, SmModule};
    use rbtl_btl::transport_kit::init_with;
    use rbtl_btl::{Error, Module};

    /// Sizes that overflow the segment's layout are refused with a typed error.
    #[test]
    fn sizes_past_the_address_space_are_refused() {
        for (name, value) in [
            ("btl_sm_ring_bytes", "9223372036854775809"),
            ("btl_sm_ring_slots", "9223372036854775807"),
            ("btl_sm_heap_size", "18446744073709551615"),
        ] {
            let made = init_with(&mut SmComponent, name, value);
            assert!(
                matches!(made, Err(Error::NotAvailable(_))),
                "{name} = {value}: {:?}",
                made.map(|m| m.len())
            );
        }
    }

    /// A job whose launcher placed `local` on this node (ranks of a job of `size`).
    struct Placed {
        rank: u32,
        size: u32,
        local: Option<Vec<u32>>,
    }

    impl rbtl_btl::Modex for Placed {
        fn rank(&self) -> u32 {
            self.rank
        }
        fn size(&self) -> u32 {
            self.size
        }
        fn publish(&mut self, _: &str, _: &[u8]) -> rbtl_btl::Result<()> {
            Ok(())
        }
        fn fence(&mut self) -> rbtl_btl::Result<()> {
            Ok(())
        }
        fn lookup(&mut self, _: u32, _: &str) -> rbtl_btl::Result<Option<Vec<u8>>> {
            Ok(None)
        }
        fn local_ranks(&self) -> Option<Vec<u32>> {
            self.local.clone()
        }
    }

    fn module(rank: u32, size: u32, local: Option<Vec<u32>>, settings: Settings) -> SmModule {
        let mut modex = Placed { rank, size, local };
        SmModule::new(default_attributes(), settings, &mut modex).unwrap()
    }

    /// Rings are one per rank of the node where the launcher says which (else one
    /// per rank of the job), each of `btl_sm_ring_bytes`, or of its share of
    /// `btl_sm_rings_size` where the ranks are many, never below what the largest send
    /// needs: a node's memory grows linearly with its ranks.
    #[test]
    fn rings_are_one_per_rank_of_the_node_within_the_budget() {
        let d = Settings::default;
        // Ranks 4 and 9 of 1,000 on this node: rank 9 is the second, of two rings.
        assert_eq!(
            module(9, 1000, Some(vec![4, 9]), d()).rings(),
            (1, 2, 2 << 20)
        );
        // The launcher says nothing: one ring per rank of the job.
        assert_eq!(module(3, 4, None, d()).rings(), (3, 4, 2 << 20));
        // 129 ranks on the node: 64 MiB over 128 senders.
        let many: Vec<u32> = (0..129).collect();
        assert_eq!(module(0, 129, Some(many), d()).rings(), (0, 129, 512 << 10));
        // A budget of 1 MiB over 63 senders: the least that holds a send of
        // max_send_size (64 KiB + 64).
        let slim = Settings {
            rings_budget: 1 << 20,
            heap_bytes: 1 << 20,
            ..d()
        };
        let crowd: Vec<u32> = (0..64).collect();
        assert_eq!(module(0, 64, Some(crowd), slim).rings(), (0, 64, 128 << 10));
    }

    /// By default (`btl_sm_heap_size = 0`) a process's heap is its share of a quarter of
    /// the machine's memory, the same for every rank of the node; a size given is kept.
    #[test]
    fn the_heap_is_sized_by_the_machine_unless_given() {
        let d = Settings::default;
        let auto = crate::own_segment::auto_heap(crate::own_segment::memory_total(), 2);
        let mut first = module(0, 2, Some(vec![0, 1]), d());
        assert_eq!(first.heap_bytes(), auto);
        assert_eq!(module(1, 2, Some(vec![0, 1]), d()).heap_bytes(), auto);
        // A window of 64 MiB (OSU's one-sided bandwidth tests at 1 MiB) is shared
        // wherever the machine has 512 MiB or more.
        let big = 64 << 20;
        assert_eq!(first.alloc_shared(big).unwrap().is_some(), auto >= big);
        let given = Settings {
            heap_bytes: 3 << 20,
            ..d()
        };
        assert_eq!(module(0, 2, Some(vec![0, 1]), given).heap_bytes(), 3 << 20);
    }

    /// A node's segments that could outgrow the machine when fully used are refused,
    /// before anything is made, saying what to lower.
    #[test]
    fn segments_beyond_the_machines_memory_are_refused() {
        let settings = Settings {
            heap_bytes: 1 << 46,
            ..Settings::default()
        };
        let mut modex = Placed {
            rank: 0,
            size: 2,
            local: Some(vec![0, 1]),
        };
        match SmModule::new(default_attributes(), settings, &mut modex) {
            Err(Error::NotAvailable(why)) => assert!(
                why.contains("more than this machine's") && why.contains("btl_sm_heap_size"),
                "{why}"
            ),
            other => panic!("{:?}", other.map(|m| m.rings())),
        }
    }

    /// flush always has a way out: a timeout of 0 is refused, not taken as "never";
    /// nor can the pools be sized to nothing.
    #[test]
    fn zero_timeouts_and_limits_are_refused_by_name() {
        for name in [
            super::FLUSH_TIMEOUT_PARAM,
            "btl_sm_free_list_max",
            "btl_sm_max_registrations",
        ] {
            match init_with(&mut SmComponent, name, "0") {
                Err(Error::ParamOutOfRange {
                    name: refused,
                    value: 0,
                    allowed,
                }) => {
                    assert_eq!(refused, name);
                    assert!(allowed.contains("at least 1"), "{allowed}");
                }
                other => panic!("{name} = 0: {:?}", other.map(|m| m.len())),
            }
        }
    }
}
