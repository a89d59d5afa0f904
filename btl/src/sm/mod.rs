//! The `sm` transport: processes on one node (Open MPI: `btl/vader`, later `btl/sm`).
//!
//! Each process owns a shared segment (see [`segment`]) holding one lock-free message
//! ring per possible sender ([`ring`]): sends are copied straight into the receiver's
//! ring and polled out of it, with no system call and no lock; messages of up to 104
//! bytes travel inside one slot. Put and get are checked against the target's
//! registration in its key table (which lives in its segment), then take one of two
//! paths (`btl_sm_rdma`):
//!
//! * `copy`: copied through the rings in chunks, pipelined, and checked again by the
//!   target (module `wire`); like `tcp`, the target must be progressing. Measured
//!   here, this beats cross-memory attach at every size while the host keeps the two
//!   cores near each other (1 MiB latency 38 us against 81 us; bandwidth 30-37 GB/s
//!   against 12-13 GB/s), as Open MPI's vader without CMA beats vader with it. When the
//!   host places them far apart, copying falls to 3-5 GB/s and `cma` wins.
//! * `cma`: single copy by the kernel with `process_vm_writev`/`readv`; no target
//!   progress needed.
//! * `auto` (the default): `copy`, switching per peer to `cma` while copies into the
//!   rings run slow (module [`path`]), and staying with `copy` where the kernel
//!   refuses cross-memory attach (ptrace restrictions).
//!
//! Atomics are applied by the target (as vader emulates them). A peer that dies is
//! noticed through a pidfd while idle, and reported through the error callback; its
//! operations complete with an error.
//!
//! Segments are unlinked as soon as every local peer has mapped them, so a crash
//! leaves nothing in `/dev/shm`; stale ones of crashed owners are removed at start.

mod cma;
mod heap;
pub mod path;
mod rdma;
pub mod ring;
pub mod segment;
mod wire;

use crate::keytable::{self, KeyTableView};
use crate::registrations::{NoPin, Reg, Registrations};
use crate::send_frags::SendFrags;
use crate::AmTable;
use crate::{
    exclusivity, AmCallback, AtomicFlags, AtomicOp, Attributes, BtlFlags, Component, DesFlags,
    Descriptor, Endpoint, Error, ErrorCallback, ErrorEvent, Expected, ExpectedSlot, MemHandle,
    Modex, Module, ModuleId, Order, Proc, RdmaCallback, RdmaCompletion, Received, RemoteHandle,
    Result, SendCompletion, SendError, SendOutcome, SendiOutcome, SharedMem, Tag, MAX_SEGMENTS,
};
use rbtl_config::{Config, Registry, Value};
use rbtl_mpool::SharedRegion;
use rbtl_rcache::{Access, Rcache};
use ring::{Consumer, Producer, RingLayout};
use segment::Layout;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

const NAME: &str = "sm";
const MODEX_KEY: &str = "btl.sm";
/// Idle progress calls between two looks at the peers' liveness. A look costs a
/// system call per peer: at this interval a rank that only polls makes one about every
/// half millisecond, and a ping-pong every few thousand round trips (at 1 << 12 the
/// calls took about 1% of `osu latency`'s time).
const LIVENESS_INTERVAL: u32 = 1 << 16;
/// Most messages taken from one ring per progress call.
const BATCH: usize = 32;

/// Bytes per chunk when a put or get of `len` bytes copies through the rings: about a
/// quarter of it, so that copying in at one end and out at the other overlap, but at
/// least 64 KiB (or `most`, if smaller) and at most `most`. Fewer, larger chunks cost
/// fewer round trips: 4 MiB `osu bw` went from 29-31 GB/s with 64 KiB chunks to 33-37
/// with 512 KiB ones, while 128-512 KiB transfers keep the pipelining of small chunks.
fn chunk_for(len: usize, most: usize) -> usize {
    const LEAST: usize = 64 << 10;
    (len / 4)
        .next_multiple_of(4096)
        .clamp(LEAST.min(most), most)
}

/// Default attributes of the `sm` transport.
pub fn default_attributes() -> Attributes {
    Attributes {
        // 16 KiB of payload and room for an upper layer's match header: copying such
        // a message in and out costs less than a rendezvous' extra round trip (`osu
        // latency`: 4 KiB 0.68 us eager against 1.23 through rendezvous, 16 KiB 1.13
        // against 2.07).
        eager_limit: (16 << 10) + 64,
        rndv_eager_limit: 32 << 10,
        max_send_size: 32 << 10,
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
    /// copies into the rings run below [`Settings::cma_below`].
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
    /// Data bytes per ring.
    pub ring_bytes: usize,
    /// Most live registrations.
    pub max_registrations: usize,
    /// Put/get path.
    pub rdma: RdmaPath,
    /// Under [`RdmaPath::Auto`], the rate of copies into a ring (MB/s) below which
    /// large transfers go by cross-memory attach.
    pub cma_below: u64,
    /// Largest chunk when put/get copy through the rings (a transfer goes in about four
    /// chunks of at least 64 KiB).
    pub copy_chunk: usize,
    /// Most descriptors outstanding.
    pub max_frags: usize,
    /// Registration cache options.
    pub rcache: rbtl_rcache::Options,
    /// Directory of the segments.
    pub shm_dir: std::path::PathBuf,
    /// Bytes of the segment's heap for [`Module::alloc_shared`].
    pub heap_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ring_slots: 64,
            ring_bytes: 2 << 20,
            max_registrations: 4096,
            rdma: RdmaPath::Auto,
            cma_below: 8000,
            copy_chunk: 512 << 10,
            max_frags: 256,
            rcache: rbtl_rcache::Options::default(),
            shm_dir: rbtl_mpool::shm_dir(),
            heap_bytes: 32 << 20,
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
            .register("btl_sm_ring_bytes", Value::Size(d.ring_bytes), "data bytes per sender ring (rounded up to a power of two)")?
            .register(
                "btl_sm_max_registrations",
                Value::Int(d.max_registrations as i64),
                "most memory registrations alive at once",
            )?
            .register(
                "btl_sm_rdma",
                Value::Str("auto".into()),
                "put/get path: copy (through the rings; the target must progress), cma (cross-memory attach), \
                 or auto (the rings, and cross-memory attach where the kernel allows it while copies into the rings run below btl_sm_cma_below)",
            )?
            .register(
                "btl_sm_cma_below",
                Value::Int(d.cma_below as i64),
                "under btl_sm_rdma=auto: the rate of copies into a ring (MB/s) below which transfers of 64 KiB and more go by cross-memory attach",
            )?
            .register(
                "btl_sm_heap_size",
                Value::Size(d.heap_bytes),
                "bytes of each process's segment that windows can share for direct loads and stores",
            )?
            .register(
                "btl_sm_copy_chunk",
                Value::Size(d.copy_chunk),
                "largest chunk when put/get copy through the rings (a transfer goes in about four, of at least 64 KiB; at most a quarter of btl_sm_ring_bytes)",
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
        let count = |name: &str| {
            usize::try_from(config.int(name)?)
                .map_err(|_| Error::NotAvailable(format!("{name} must be >= 0")))
        };
        let settings = Settings {
            ring_slots: count("btl_sm_ring_slots")?,
            ring_bytes: config.size("btl_sm_ring_bytes")?,
            max_registrations: count("btl_sm_max_registrations")?,
            rdma: RdmaPath::parse(config.str("btl_sm_rdma")?)?,
            cma_below: count("btl_sm_cma_below")? as u64,
            copy_chunk: config.size("btl_sm_copy_chunk")?,
            max_frags: count("btl_sm_free_list_max")?,
            rcache: crate::rcache_params::options(config)?,
            shm_dir: config.str(crate::component::SHM_DIR_PARAM)?.into(),
            heap_bytes: config.size("btl_sm_heap_size")?,
        };
        Ok(vec![Box::new(SmModule::new(attrs, settings, modex)?)])
    }
}

/// Something waiting for room in a peer's ring, in order.
enum Outbound {
    Desc {
        descriptor: Descriptor,
        tag: Tag,
    },
    Bytes {
        tag: u8,
        bytes: Vec<u8>,
    },
    /// Our local bytes going to the peer's memory (a put by copy).
    Put {
        req: u64,
        local: usize,
        remote: u64,
        len: usize,
        sent: usize,
        handle: RemoteHandle,
    },
    /// Our own registered bytes going back to a peer that asked (a get by copy); the
    /// registration is checked again before each chunk, as it may go meanwhile.
    Get {
        req: u64,
        addr: usize,
        len: usize,
        sent: usize,
        handle: RemoteHandle,
    },
}

enum Pending {
    Put,
    Get {
        local: usize,
        size: usize,
        received: usize,
    },
    Atomic {
        result: Option<usize>,
    },
}

struct Op {
    endpoint: Endpoint,
    local: usize,
    size: usize,
    what: Pending,
    callback: RdmaCallback,
}

enum Done {
    Send {
        callback: crate::SendCallback,
        endpoint: Endpoint,
        descriptor: Descriptor,
        status: Result<()>,
    },
    Rdma(RdmaCallback, RdmaCompletion),
    /// A failure for the error callback (run from progress, never inside a call).
    Error(ErrorEvent),
}

struct Peer {
    rank: u32,
    pid: i32,
    /// Where the peer's segment is mapped in the peer, and here.
    remote_base: u64,
    local_base: usize,
    pidfd: Option<std::os::fd::OwnedFd>,
    module: ModuleId,
    _segment: SharedRegion,
    table: KeyTableView,
    producer: Producer,
    consumer: Consumer,
    outbound: VecDeque<Outbound>,
    /// A receive callback of this ring is running (it may call progress).
    busy: bool,
    /// Copy-mode puts from this peer whose chunks the registration refused, with the
    /// first refusal's code, until their last chunk.
    put_refused: HashMap<u64, u32>,
    /// Removed by `del_procs`: nothing more is taken from its ring.
    removed: bool,
    /// Cross-memory attach is allowed with it (`cma`, or `auto` where the kernel lets).
    cma_ok: bool,
    /// Our copies into the ring towards it (puts), and its copies into the ring
    /// towards us as it reports them (gets).
    out_speed: path::RingSpeed,
    in_speed: path::RingSpeed,
    /// The `auto` choice for puts and for gets.
    put_path: path::Choice,
    get_path: path::Choice,
    failed: Option<String>,
}

/// The `sm` module.
pub struct SmModule {
    id: ModuleId,
    rank: u32,
    node: String,
    attrs: Attributes,
    settings: Settings,
    layout: Layout,
    segment: Arc<SharedRegion>,
    attach_expected: u32,
    regs: Arc<Registrations>,
    rcache: Arc<Rcache<NoPin>>,
    frags: SendFrags,
    peers: Vec<Peer>,
    am: AmTable,
    /// The receive posted with `Module::expect`.
    expected: ExpectedSlot,
    error_cb: Option<ErrorCallback>,
    done: VecDeque<Done>,
    ops: HashMap<u64, Op>,
    next_req: u64,
    idle: u32,
    /// What of the segment's heap is handed out.
    heap: heap::Heap,
}

/// Copy a descriptor into a ring, keeping its segment cut; false when the ring is full.
fn push_descriptor(producer: &mut Producer, des: &Descriptor, tag: Tag) -> bool {
    let mut lens = [0usize; MAX_SEGMENTS];
    let n = des.segment_count();
    for (slot, len) in lens.iter_mut().zip(des.segment_lens()) {
        *slot = len;
    }
    // One segment needs no segment table.
    let lens = if n > 1 { &lens[..n] } else { &[] };
    producer.push(tag.0, &[des.bytes()], lens)
}

/// This machine: host name and boot id, so that only processes sharing `/dev/shm`
/// and memory count as local.
fn node_id() -> String {
    let mut host = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length.
    let rc = unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
    let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
    let host = if rc == 0 {
        String::from_utf8_lossy(&host[..end]).into_owned()
    } else {
        String::new()
    };
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{host}/{}", boot.trim())
}

fn pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative return is a descriptor we now own.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process behind `pidfd` (or `pid`) has ended.
fn has_exited(pid: i32, pidfd: Option<&std::os::fd::OwnedFd>) -> bool {
    use std::os::fd::AsRawFd;
    match pidfd {
        Some(fd) => {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, no wait.
            unsafe { libc::poll(&mut p, 1, 0) > 0 }
        }
        None => {
            // SAFETY: signal 0 only checks for existence.
            let rc = unsafe { libc::kill(pid, 0) };
            rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

impl SmModule {
    /// Create this process's segment and publish it in the modex.
    pub fn new(
        attrs: Attributes,
        mut settings: Settings,
        modex: &mut dyn Modex,
    ) -> Result<SmModule> {
        let ring = RingLayout {
            nslots: settings.ring_slots.max(2).next_power_of_two(),
            data_bytes: settings.ring_bytes.max(4096).next_power_of_two(),
        };
        if attrs.max_send_size + 64 > ring.max_message(MAX_SEGMENTS) {
            return Err(Error::NotAvailable(format!(
                "btl_sm_ring_bytes ({}) must exceed max_send_size ({}) with room to spare",
                ring.data_bytes, attrs.max_send_size
            )));
        }
        // A ring holds several chunks in flight.
        settings.copy_chunk = settings.copy_chunk.min(ring.data_bytes / 4).max(4096);
        match rbtl_mpool::cleanup_stale_in(&settings.shm_dir) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(?removed, "removed stale segments")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(%e, "could not look for stale segments"),
        }
        let layout = Layout {
            nranks: modex.size() as usize,
            ring,
            registrations: settings.max_registrations.max(1),
            heap_bytes: settings.heap_bytes,
        };
        let segment = Arc::new(SharedRegion::create_in(
            &settings.shm_dir,
            &format!("sm.{}", modex.rank()),
            layout.bytes(),
        )?);
        let id = ModuleId::fresh();
        // SAFETY: the segment is ours, mapped and at least one page long.
        unsafe { segment::header(segment.as_ptr()) }.init(id.0, layout.nranks);
        // SAFETY: the table area is inside our fresh (zeroed) segment, page-aligned and
        // used for nothing else; `regs` keeps the segment mapped (handles outliving the
        // module keep it too).
        let regs = unsafe {
            Registrations::new(
                segment.as_ptr().add(layout.table_offset()),
                layout.registrations,
                segment.clone(),
            )
        };
        let mut blob = wire::Writer::default()
            .u64(id.0)
            .u64(u64::from(std::process::id()))
            .u64(segment.as_ptr() as u64);
        for w in layout.encode() {
            blob = blob.u64(w);
        }
        let mut blob = blob.0;
        let node = node_id();
        blob.extend_from_slice(segment.name().as_bytes());
        blob.push(0);
        blob.extend_from_slice(node.as_bytes());
        modex.publish(MODEX_KEY, &blob)?;
        Ok(SmModule {
            id,
            rank: modex.rank(),
            node,
            frags: SendFrags::new(id, attrs.max_send_size, settings.max_frags)?,
            rcache: Rcache::new(NoPin, settings.rcache.clone()),
            attrs,
            settings,
            layout,
            segment,
            attach_expected: 0,
            regs,
            peers: Vec::new(),
            am: AmTable::default(),
            error_cb: None,
            done: VecDeque::new(),
            ops: HashMap::new(),
            next_req: 1,
            idle: 0,
            heap: heap::Heap::new(layout.heap_bytes),
            expected: ExpectedSlot::default(),
        })
    }

    /// The name of this process's segment (for tests and diagnostics).
    pub fn segment_name(&self) -> &str {
        self.segment.name()
    }

    /// Whether put/get to `endpoint` may use cross-memory attach.
    pub fn uses_cma(&self, endpoint: Endpoint) -> Option<bool> {
        self.peers.get(endpoint.0 as usize).map(|p| p.cma_ok)
    }

    fn connect(&self, proc_: &Proc, blob: &[u8]) -> Result<Option<Peer>> {
        let r = wire::Reader(blob);
        if blob.len() < 56 {
            return Err(Error::Modex(format!(
                "sm blob of rank {} is {} bytes",
                proc_.rank,
                blob.len()
            )));
        }
        let module = ModuleId(r.u64(0));
        let pid = r.u64(8) as i32;
        let probe = r.u64(16);
        let layout = Layout::decode([r.u64(24), r.u64(32), r.u64(40), r.u64(48)]);
        let rest = &blob[56..];
        let nul = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..nul]).into_owned();
        let node = String::from_utf8_lossy(rest.get(nul + 1..).unwrap_or_default()).into_owned();
        if node != self.node {
            return Ok(None);
        }
        if layout != self.layout {
            return Err(Error::Modex(format!(
                "rank {} runs sm with another layout ({layout:?} vs {:?}): give every rank the same btl_sm_* parameters",
                proc_.rank, self.layout
            )));
        }
        let segment = SharedRegion::open_in(&self.settings.shm_dir, &name)?;
        let base = segment.as_ptr();
        // SAFETY: an opened segment is mapped for its whole length, at least a page.
        let header = unsafe { segment::header(base) };
        if !header.is_of(module.0) {
            return Err(Error::Modex(format!(
                "segment {name} of rank {} is not its sm segment",
                proc_.rank
            )));
        }
        header
            .attached
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let me = self.rank as usize;
        let peer = proc_.rank as usize;
        // SAFETY: both layouts are equal, so these offsets lie inside the two mapped
        // segments; we are the only producer of our ring in the peer's segment and the
        // only consumer of the peer's ring in ours; the segments live in `Peer` and
        // `self` for as long as the rings are used.
        let (producer, consumer, table) = unsafe {
            (
                Producer::new(base.add(layout.ring_offset(me)), layout.ring),
                Consumer::new(
                    self.segment.as_ptr().add(layout.ring_offset(peer)),
                    layout.ring,
                ),
                KeyTableView::new(base.add(layout.table_offset()), layout.registrations),
            )
        };
        let cma_ok = match self.settings.rdma {
            RdmaPath::Copy => false,
            RdmaPath::Cma => true,
            RdmaPath::Auto => {
                let ok = cma::works_with(pid, probe);
                if !ok {
                    // `auto` uses cross-memory attach only where it helps: its absence
                    // is no cause for a warning.
                    tracing::debug!(
                        rank = proc_.rank,
                        "cross-memory attach refused: put/get copy through the rings"
                    );
                }
                ok
            }
        };
        Ok(Some(Peer {
            rank: proc_.rank,
            pid,
            remote_base: probe,
            local_base: base as usize,
            pidfd: pidfd(pid),
            module,
            _segment: segment,
            table,
            producer,
            consumer,
            outbound: VecDeque::new(),
            busy: false,
            put_refused: HashMap::new(),
            removed: false,
            cma_ok,
            out_speed: path::RingSpeed::default(),
            in_speed: path::RingSpeed::default(),
            put_path: path::Choice::default(),
            get_path: path::Choice::default(),
            failed: None,
        }))
    }

    fn peer(&self, ep: Endpoint) -> Result<&Peer> {
        let p = self
            .peers
            .get(ep.0 as usize)
            .ok_or(Error::UnknownEndpoint(ep.0))?;
        match &p.failed {
            Some(why) => Err(Error::PeerFailed {
                rank: p.rank,
                why: why.clone(),
            }),
            None => Ok(p),
        }
    }

    fn new_descriptor(
        &mut self,
        ep: Endpoint,
        size: usize,
        order: Order,
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.peer(ep)?;
        self.frags.alloc(ep, size, order, flags)
    }

    /// Queue the completion of a descriptor that went out (or failed); `immediate`
    /// sends without ALWAYS_CALLBACK hand a kept descriptor straight back.
    fn finish_send(
        &mut self,
        mut des: Descriptor,
        immediate: bool,
        status: Result<()>,
    ) -> Option<Descriptor> {
        let owned = des.flags.contains(DesFlags::OWNERSHIP);
        if immediate && !des.flags.contains(DesFlags::ALWAYS_CALLBACK) {
            if owned {
                self.frags.recycle(des);
                return None;
            }
            return Some(des);
        }
        match des.take_callback() {
            Some(callback) => self.done.push_back(Done::Send {
                callback,
                endpoint: des.endpoint(),
                descriptor: des,
                status,
            }),
            None => self.frags.recycle(des),
        }
        None
    }

    /// Push what waits for peer `i`'s ring, in order, as far as room allows.
    #[inline(never)]
    fn drain_outbound(&mut self, i: usize) -> usize {
        let mut n = 0;
        let (view, id) = (self.regs.view(), self.id);
        let most = self.settings.copy_chunk;
        loop {
            let peer = &mut self.peers[i];
            let Some(front) = peer.outbound.front_mut() else {
                break;
            };
            let (producer, speed) = (&mut peer.producer, &mut peer.out_speed);
            let pushed = match front {
                Outbound::Desc { descriptor, tag } => push_descriptor(producer, descriptor, *tag),
                Outbound::Bytes { tag, bytes } => producer.push(*tag, &[bytes], &[]),
                Outbound::Put {
                    req,
                    local,
                    remote,
                    len,
                    sent,
                    handle,
                } => {
                    let mut ok = true;
                    let chunk = chunk_for(*len, most);
                    while ok && (*sent < *len || *len == 0) {
                        let l = chunk.min(*len - *sent);
                        let last = u64::from(*sent + l == *len);
                        let hdr = wire::Writer::default()
                            .u64(*req)
                            .u64(*remote + *sent as u64)
                            .u64(last)
                            .handle(handle)
                            .0;
                        // SAFETY: the local range was checked against its registration
                        // when the put was started; the caller keeps it alive until the
                        // completion (register_mem's contract).
                        let data =
                            unsafe { std::slice::from_raw_parts((*local + *sent) as *const u8, l) };
                        ok = speed.timed(l, || producer.push(wire::PUT_DATA, &[&hdr, data], &[]));
                        if ok {
                            *sent += l;
                            if *len == 0 {
                                break;
                            }
                        }
                    }
                    ok
                }
                Outbound::Get {
                    req,
                    addr,
                    len,
                    sent,
                    handle,
                } => {
                    let mut ok = true;
                    let chunk = chunk_for(*len, most);
                    while ok && *sent < *len {
                        let l = chunk.min(*len - *sent);
                        let at = (*addr + *sent) as u64;
                        if let Err(e) = view.check(id, handle, at, l, crate::GET_REMOTE) {
                            // Deregistered meanwhile: refuse the rest.
                            let code = u64::from(wire::status_code(&e));
                            let hdr = wire::Writer::default()
                                .u64(*req)
                                .u64(*sent as u64)
                                .u64(code)
                                .u64(0)
                                .0;
                            ok = producer.push(wire::GET_DATA, &[&hdr], &[]);
                            if ok {
                                *sent = *len;
                            }
                            break;
                        }
                        // The rate of our copies into this ring rides along: the
                        // receiver chooses the path of its next gets by it.
                        let hdr = wire::Writer::default()
                            .u64(*req)
                            .u64(*sent as u64)
                            .u64(0)
                            .u64(speed.to_wire())
                            .0;
                        // SAFETY: the range was checked just now against our own live
                        // registration with remote-read access.
                        let data =
                            unsafe { std::slice::from_raw_parts((*addr + *sent) as *const u8, l) };
                        ok = speed.timed(l, || producer.push(wire::GET_DATA, &[&hdr, data], &[]));
                        if ok {
                            *sent += l;
                        }
                    }
                    ok
                }
            };
            if !pushed {
                break;
            }
            n += 1;
            if let Some(Outbound::Desc { descriptor, .. }) = self.peers[i].outbound.pop_front() {
                self.finish_send(descriptor, false, Ok(()));
            }
        }
        n
    }

    /// Queue a failure for the error callback, which runs from progress.
    fn report(&mut self, i: Option<usize>, error: Error) {
        let event = ErrorEvent {
            endpoint: i.map(|i| Endpoint(i as u32)),
            rank: i.map(|i| self.peers[i].rank),
            error,
        };
        self.done.push_back(Done::Error(event));
    }

    fn deliver_error(&mut self, event: &ErrorEvent) {
        match &mut self.error_cb {
            Some(cb) => cb(event),
            None => tracing::error!(?event, "sm"),
        }
    }

    /// Take up to [`BATCH`] messages from peer `i`'s ring, stopping after one that
    /// fills the expected receive: how many, and whether that happened.
    fn poll_peer(&mut self, i: usize) -> (usize, bool) {
        let mut n = 0;
        while n < BATCH {
            let peer = &self.peers[i];
            if peer.busy || peer.removed {
                break;
            }
            let Some(rec) = peer.consumer.peek() else {
                break;
            };
            if self.expected.is_posted() && self.fill_expected(i, &rec) {
                // A blocking receive ended: its caller often answers the same peer.
                self.peers[i].producer.prepare_next();
                self.peers[i].consumer.release(rec);
                return (n + 1, true);
            }
            let delivered = if rec.segment_count() == 1 {
                // SAFETY: used before the record is released below.
                let one = [unsafe { rec.payload() }];
                self.dispatch(i, rec.tag, &one)
            } else {
                let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
                // SAFETY: as above.
                let nseg = unsafe { rec.segments(&mut segs) };
                self.dispatch(i, rec.tag, &segs[..nseg])
            };
            if !delivered {
                break;
            }
            self.peers[i].consumer.release(rec);
            n += 1;
        }
        (n, false)
    }

    /// Fill the expected receive with `rec`, from peer `i`, if it is the one; whether
    /// it was.
    #[inline(always)]
    fn fill_expected(&mut self, i: usize, rec: &ring::Record) -> bool {
        let (ep, tag) = (Endpoint(i as u32), Tag(rec.tag));
        // SAFETY (both): the record is not released yet; the receive's buffer is valid
        // as `Module::expect` requires.
        if rec.segment_count() == 1 {
            unsafe { self.expected.fill(ep, tag, &[rec.payload()]) }
        } else {
            let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
            let nseg = unsafe { rec.segments(&mut segs) };
            unsafe { self.expected.fill(ep, tag, &segs[..nseg]) }
        }
    }

    /// Hand a message from peer `i` to its callback (or to the transport's own
    /// protocol); false when its callback is running further up the stack (it called
    /// progress), so the message must wait.
    #[inline(always)]
    fn dispatch(&mut self, i: usize, tag: u8, segs: &[&[u8]]) -> bool {
        let tag = Tag(tag);
        if tag.is_reserved() {
            self.internal(i, tag.0, segs);
        } else {
            let Some(mut cb) = self.am.take(tag) else {
                if !self.am.is_registered(tag) {
                    self.report(
                        Some(i),
                        Error::BadTag {
                            tag,
                            why: "a message arrived for it, but no receive callback is registered; dropped",
                        },
                    );
                    return true;
                }
                // Its callback is running further up the stack.
                return false;
            };
            self.peers[i].busy = true;
            cb(
                self,
                &Received {
                    endpoint: Endpoint(i as u32),
                    tag,
                    segments: segs,
                },
            );
            self.peers[i].busy = false;
            self.am.restore(tag, cb);
        }
        true
    }

    #[cold]
    #[inline(never)]
    fn check_liveness(&mut self) {
        for i in 0..self.peers.len() {
            let p = &self.peers[i];
            if p.failed.is_none() && has_exited(p.pid, p.pidfd.as_ref()) {
                self.fail_peer(i, format!("process {} ended", p.pid));
            }
        }
        if self.attach_expected > 0 && !self.segment.is_unlinked() {
            self.unlink_when_attached();
        }
    }

    fn unlink_when_attached(&mut self) {
        // SAFETY: our own mapped segment.
        let header = unsafe { segment::header(self.segment.as_ptr()) };
        if header.attached.load(std::sync::atomic::Ordering::Acquire) >= self.attach_expected {
            if let Err(e) = self.segment.unlink() {
                tracing::warn!(%e, "could not unlink the sm segment");
            }
        }
    }

    /// Peer `i` is gone: fail what involves it and tell the upper layer.
    fn fail_peer(&mut self, i: usize, why: String) {
        self.end_peer(i, why.clone());
        let rank = self.peers[i].rank;
        self.report(Some(i), Error::PeerFailed { rank, why });
    }

    /// Fail every operation and queued send involving peer `i`.
    fn end_peer(&mut self, i: usize, why: String) {
        let rank = self.peers[i].rank;
        self.peers[i].failed = Some(why.clone());
        let err = || Error::PeerFailed {
            rank,
            why: why.clone(),
        };
        let ep = Endpoint(i as u32);
        let reqs: Vec<u64> = self
            .ops
            .iter()
            .filter(|(_, op)| op.endpoint == ep)
            .map(|(r, _)| *r)
            .collect();
        for req in reqs {
            self.complete_op(req, Err(err()));
        }
        let queued: Vec<Outbound> = self.peers[i].outbound.drain(..).collect();
        for o in queued {
            if let Outbound::Desc { descriptor, .. } = o {
                self.finish_send(descriptor, false, Err(err()));
            }
        }
    }

    #[inline(never)]
    fn run_done(&mut self) -> usize {
        let n = self.done.len();
        for _ in 0..n {
            match self.done.pop_front() {
                Some(Done::Send {
                    callback,
                    endpoint,
                    descriptor,
                    status,
                }) => {
                    if descriptor.flags.contains(DesFlags::OWNERSHIP) {
                        callback(
                            self,
                            SendCompletion {
                                endpoint,
                                descriptor: None,
                                status,
                            },
                        );
                        self.frags.recycle(descriptor);
                    } else {
                        callback(
                            self,
                            SendCompletion {
                                endpoint,
                                descriptor: Some(descriptor),
                                status,
                            },
                        );
                    }
                }
                Some(Done::Rdma(cb, done)) => cb(self, done),
                Some(Done::Error(event)) => self.deliver_error(&event),
                None => break,
            }
        }
        n
    }
}

impl Module for SmModule {
    fn name(&self) -> &str {
        NAME
    }

    fn id(&self) -> ModuleId {
        self.id
    }

    fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        let mut out = Vec::with_capacity(procs.len());
        for p in procs {
            if p.rank == self.rank {
                out.push(None);
                continue;
            }
            if let Some(i) = self.peers.iter().position(|q| q.rank == p.rank) {
                out.push(Some(Endpoint(i as u32)));
                continue;
            }
            let Some(blob) = modex.lookup(p.rank, MODEX_KEY)? else {
                out.push(None);
                continue;
            };
            match self.connect(p, &blob)? {
                Some(peer) => {
                    self.peers.push(peer);
                    self.attach_expected += 1;
                    out.push(Some(Endpoint(self.peers.len() as u32 - 1)));
                }
                None => out.push(None),
            }
        }
        self.unlink_when_attached();
        Ok(out)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        for &ep in endpoints {
            let i = ep.0 as usize;
            let p = self.peers.get(i).ok_or(Error::UnknownEndpoint(ep.0))?;
            if !p.removed {
                self.end_peer(i, "removed by del_procs".into());
                self.peers[i].removed = true;
            }
        }
        Ok(())
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.error_cb = Some(callback);
    }

    unsafe fn register_mem(
        &mut self,
        _endpoint: Option<Endpoint>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<MemHandle> {
        self.regs.register(self.id, &self.rcache, base, len, access)
    }

    fn deregister_mem(&mut self, handle: &mut MemHandle) -> Result<()> {
        handle.release(self.id)
    }

    fn alloc(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        size: usize,
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.new_descriptor(endpoint, size, order, flags)
    }

    fn prepare_src(
        &mut self,
        endpoint: Endpoint,
        order: Order,
        reserve: usize,
        data: &[&[u8]],
        flags: DesFlags,
    ) -> Result<Descriptor> {
        self.peer(endpoint)?;
        self.frags
            .prepare_src(endpoint, order, reserve, data, flags)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.frags.free(descriptor)
    }

    fn send(
        &mut self,
        endpoint: Endpoint,
        descriptor: Descriptor,
        tag: Tag,
    ) -> Result<SendOutcome, SendError> {
        let checked = descriptor
            .check_owner(self.id)
            .and_then(|_| self.peer(endpoint).map(|_| ()))
            .and_then(|_| crate::am_table::check_not_reserved(tag));
        if let Err(error) = checked {
            return Err(SendError { error, descriptor });
        }
        let peer = &mut self.peers[endpoint.0 as usize];
        let pushed =
            peer.outbound.is_empty() && push_descriptor(&mut peer.producer, &descriptor, tag);
        if pushed {
            Ok(SendOutcome::Done(self.finish_send(
                descriptor,
                true,
                Ok(()),
            )))
        } else {
            peer.outbound.push_back(Outbound::Desc { descriptor, tag });
            Ok(SendOutcome::Queued)
        }
    }

    #[inline]
    fn sendi(
        &mut self,
        endpoint: Endpoint,
        header: &[u8],
        payload: &[u8],
        _order: Order,
        _flags: DesFlags,
        tag: Tag,
    ) -> Result<SendiOutcome> {
        crate::am_table::check_not_reserved(tag)?;
        let size = header.len() + payload.len();
        if size > self.attrs.max_send_size {
            return Err(Error::TooLarge(format!(
                "{size} bytes exceed max_send_size {}",
                self.attrs.max_send_size
            )));
        }
        // (`let else`, not `ok_or`: that builds and drops an error on every send.)
        let Some(peer) = self.peers.get_mut(endpoint.0 as usize) else {
            return Err(Error::UnknownEndpoint(endpoint.0));
        };
        let pushed = |p: &mut ring::Producer| {
            if size <= ring::INLINE_MAX {
                p.push_small(tag.0, header, payload)
            } else {
                p.push(tag.0, &[header, payload], &[])
            }
        };
        if peer.failed.is_none() && peer.outbound.is_empty() && pushed(&mut peer.producer) {
            return Ok(SendiOutcome::Sent);
        }
        self.peer(endpoint)?;
        Err(Error::OutOfResource("sm ring full"))
    }

    fn put(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.rdma(
            cma::Direction::Write,
            endpoint,
            local,
            remote,
            local_handle,
            remote_handle,
            size,
            callback,
        )
    }

    fn get(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.rdma(
            cma::Direction::Read,
            endpoint,
            local,
            remote,
            local_handle,
            remote_handle,
            size,
            callback,
        )
    }

    fn atomic_op(
        &mut self,
        endpoint: Endpoint,
        remote: u64,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        self.atomic(
            endpoint,
            None,
            remote,
            remote_handle,
            wire::op_code(op),
            operand,
            0,
            callback,
        )
    }

    fn atomic_fop(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        op: AtomicOp,
        operand: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let result = Some((local, local_handle));
        self.atomic(
            endpoint,
            result,
            remote,
            remote_handle,
            wire::op_code(op),
            operand,
            0,
            callback,
        )
    }

    fn atomic_cswap(
        &mut self,
        endpoint: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        compare: u64,
        value: u64,
        _flags: u32,
        _order: Order,
        callback: RdmaCallback,
    ) -> Result<()> {
        let result = Some((local, local_handle));
        self.atomic(
            endpoint,
            result,
            remote,
            remote_handle,
            wire::CSWAP,
            value,
            compare,
            callback,
        )
    }

    fn alloc_shared(&mut self, len: usize) -> Result<Option<SharedMem>> {
        let Some(start) = self.heap.alloc(len) else {
            tracing::info!(
                len,
                free = self.heap.largest_free(),
                "sm heap cannot hold it: raise btl_sm_heap_size"
            );
            return Ok(None);
        };
        // SAFETY: [heap_offset + start, + len) lies inside our segment's heap.
        let ptr = unsafe { self.segment.as_ptr().add(self.layout.heap_offset() + start) };
        Ok(Some(SharedMem { ptr, len }))
    }

    fn free_shared(&mut self, mem: SharedMem) -> Result<()> {
        let unknown = || Error::UnknownSharedMemory {
            addr: mem.ptr as usize,
            len: mem.len,
        };
        let heap = self.segment.as_ptr() as usize + self.layout.heap_offset();
        let start = (mem.ptr as usize).checked_sub(heap).ok_or_else(unknown)?;
        if !self.heap.free(start, mem.len) {
            return Err(unknown());
        }
        Ok(())
    }

    fn map_remote(
        &mut self,
        endpoint: Endpoint,
        remote: u64,
        remote_handle: &RemoteHandle,
        len: usize,
        access: Access,
    ) -> Result<Option<*mut u8>> {
        let peer = self.peer(endpoint)?;
        peer.table
            .check(peer.module, remote_handle, remote, len, access)?;
        let heap = peer.remote_base + self.layout.heap_offset() as u64;
        if remote < heap || remote + len as u64 > heap + self.layout.heap_bytes as u64 {
            return Ok(None);
        }
        // The range lies inside the peer's heap, inside its segment, which is mapped
        // here at `local_base` for as long as the module lives.
        Ok(Some(
            (peer.local_base + (remote - peer.remote_base) as usize) as *mut u8,
        ))
    }

    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        if let Some(ep) = endpoint {
            self.peers
                .get(ep.0 as usize)
                .ok_or(Error::UnknownEndpoint(ep.0))?;
        }
        while self.pending_on(endpoint) {
            if self.progress() == 0 {
                // The peer serving the operation may need this processor.
                std::thread::yield_now();
            }
        }
        // Completed operations' callbacks run before flush returns.
        while self.done.iter().any(|d| matches!(d, Done::Rdma(..))) {
            self.run_done();
        }
        Ok(())
    }

    unsafe fn expect(&mut self, e: Expected) -> bool {
        let i = e.endpoint.0 as usize;
        if self.peers.get(i).is_none_or(|p| p.removed) {
            return false;
        }
        self.expected.post(&e);
        true
    }

    fn take_expected(&mut self) -> Option<usize> {
        self.expected.take()
    }

    fn cancel_expected(&mut self) {
        self.expected.cancel();
    }

    fn progress(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.peers.len() {
            let (taken, filled) = self.poll_peer(i);
            n += taken;
            if filled {
                // The caller learns of it before any later message is delivered.
                return n;
            }
            if !self.peers[i].outbound.is_empty() {
                n += self.drain_outbound(i);
            }
        }
        if !self.done.is_empty() {
            n += self.run_done();
        }
        if n == 0 {
            self.idle += 1;
            if self.idle >= LIVENESS_INTERVAL {
                self.idle = 0;
                self.check_liveness();
            }
        }
        n
    }
}

impl Drop for SmModule {
    fn drop(&mut self) {
        // Peers' segments unmap with `peers`; ours is unlinked (if it still has a name)
        // and unmapped with `segment`.
        self.peers.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_for;

    #[test]
    fn a_transfer_goes_in_about_four_chunks_within_bounds() {
        const K: usize = 1024;
        assert_eq!(chunk_for(100 * K, 512 * K), 64 * K, "at least 64 KiB");
        assert_eq!(chunk_for(1024 * K, 512 * K), 256 * K, "a quarter");
        assert_eq!(chunk_for(1000 * K, 512 * K), 252 * K, "whole pages");
        assert_eq!(chunk_for(4096 * K, 512 * K), 512 * K, "at most the largest");
        assert_eq!(
            chunk_for(1024 * K, 32 * K),
            32 * K,
            "a small ring's largest"
        );
    }
}
