//! A peer on this node: the card each process publishes for the others, what
//! connecting to it maps (its segment, the rings both ways, its key table), what waits
//! for room in its ring, which way put and get go with it, and whether its process
//! still lives.

use super::component::{RdmaPath, Settings};
use super::copy_protocol::{chunk_for, Outgoing};
use super::liveness::Process;
use super::path::{Choice, RingSpeed, Rings, MEASURED_MIN, PROBE_EVERY};
use super::ring::{Consumer, Producer};
use super::segment::{self, Layout};
use super::{cma, wire};
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::{Descriptor, Error, ModuleId, PeerFailure, Proc, RemoteHandle, Result, Tag};
use rbtl_mpool::SharedRegion;
use rbtl_rcache::Access;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Whether `auto` weighs transfers of `size` bytes: compares the paths for them, and
/// times their copies (smaller ones go through the rings, unmeasured).
fn weighed(settings: &Settings, size: usize) -> bool {
    settings.rdma == RdmaPath::Auto && size >= MEASURED_MIN
}

/// The modex key of the card.
pub(super) const MODEX_KEY: &str = "btl.sm";

/// Bytes of a card before the node's id: module id, pid, the segment's address in its
/// owner, the layout (four words), the segment's descriptor, the slot and whether it
/// reads peers' memory by address (u64 each).
pub(super) const CARD_FIXED: usize = 80;

/// What this process publishes under [`MODEX_KEY`] for its peers: its module's id, its
/// pid, where its segment is mapped (an address valid in both processes, which probes
/// cross-memory attach), the segment's layout and descriptor (peers open it through
/// `/proc/<pid>/fd/<fd>`), its slot (its place among the node's ranks: which ring of
/// each peer's segment it writes), whether it may read a peer's memory by address alone
/// (by cross-memory attach: not under `btl_sm_rdma = copy`), and this node's id.
pub(super) fn card(
    id: ModuleId,
    segment: &SharedRegion,
    (layout, slot): (&Layout, usize),
    reads_by_address: bool,
    node: &str,
) -> Vec<u8> {
    let fd = segment
        .fd()
        .expect("the sm segment is unnamed: it has a descriptor");
    let mut blob = wire::Writer::default()
        .u64(id.0)
        .u64(u64::from(std::process::id()))
        .u64(segment.as_ptr() as u64);
    for w in layout.encode() {
        blob = blob.u64(w);
    }
    let mut blob = blob
        .u64(fd as u64)
        .u64(slot as u64)
        .u64(u64::from(reads_by_address))
        .0;
    blob.extend_from_slice(node.as_bytes());
    blob
}

/// A peer's card, read.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Card {
    pub module: ModuleId,
    pub pid: i32,
    /// Where its segment is mapped in it.
    pub probe: u64,
    pub layout: Layout,
    /// Its descriptor of its segment.
    pub fd: i32,
    /// Its place among the node's ranks.
    pub slot: u64,
    /// It may read our memory by address alone.
    pub reads_by_address: bool,
    pub node: String,
}

impl Card {
    /// Read the card of rank `rank` from `blob`: a [`Error::Modex`] for one that is
    /// not a card (short, or with a pid or descriptor out of range).
    pub fn parse(rank: u32, blob: &[u8]) -> Result<Card> {
        let bad = |why: String| Error::Modex(format!("sm card of rank {rank}: {why}"));
        if blob.len() < CARD_FIXED {
            return Err(bad(format!("{} bytes, less than {CARD_FIXED}", blob.len())));
        }
        let r = wire::Reader(blob);
        let pid = i32::try_from(r.u64(8))
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| bad(format!("pid {} out of range", r.u64(8))))?;
        let fd = i32::try_from(r.u64(56))
            .ok()
            .filter(|&f| f >= 0)
            .ok_or_else(|| bad(format!("descriptor {} out of range", r.u64(56))))?;
        Ok(Card {
            module: ModuleId(r.u64(0)),
            pid,
            probe: r.u64(16),
            layout: Layout::decode([r.u64(24), r.u64(32), r.u64(40), r.u64(48)]),
            fd,
            slot: r.u64(64),
            reads_by_address: r.u64(72) != 0,
            node: String::from_utf8_lossy(&blob[CARD_FIXED..]).into_owned(),
        })
    }
}

/// Something waiting for room in a peer's ring, in order.
pub(super) enum Outbound {
    /// A send's descriptor.
    Desc { descriptor: Descriptor, tag: Tag },
    /// A message or a transfer of the transport's own protocol.
    Protocol(Outgoing),
}

/// A process on this node, connected: its segment mapped here, our ring in it and its
/// ring in ours.
pub(super) struct Peer {
    pub rank: u32,
    /// Its place among the node's ranks: its ring in our segment, its flag in ours.
    pub slot: usize,
    pub pid: i32,
    /// Where the peer's segment is mapped in the peer, and here.
    remote_base: u64,
    local_base: usize,
    /// Its process, to tell whether it still runs.
    process: Process,
    pub module: ModuleId,
    _segment: SharedRegion,
    pub table: KeyTableView,
    pub producer: Producer,
    pub consumer: Consumer,
    pub outbound: VecDeque<Outbound>,
    /// The data of the peer's gets that we serve by copy ([`Outgoing::Get`]), pushed
    /// after what `outbound` holds, a chunk of each in turn (see `drain_outbound`).
    pub serving: VecDeque<Outgoing>,
    /// When we last had data of the peer's gets to serve: it then reads from us while
    /// we may read from it.
    pub last_served: Option<Instant>,
    /// A receive callback of this ring is running (it may call progress).
    pub busy: bool,
    /// Copy-mode puts from this peer whose chunks the registration refused, with the
    /// first refusal's code, until their last chunk.
    pub put_refused: HashMap<u64, u32>,
    /// Removed by `del_procs`: nothing more is taken from its ring.
    pub removed: bool,
    /// Cross-memory attach is allowed with it (`cma`, or `auto` where the kernel lets).
    pub cma_ok: bool,
    /// It may read our memory by address alone (its card says so).
    pub reads_by_address: bool,
    /// Our copies into the ring towards it (puts), and its copies into the ring
    /// towards us as it reports them (gets).
    pub out_speed: RingSpeed,
    pub in_speed: RingSpeed,
    /// Our copies out of its ring (the data of our gets).
    pub out_of_ring_speed: RingSpeed,
    /// The `auto` choice for puts and for gets.
    put_path: Choice,
    get_path: Choice,
    /// Why it is gone, once it is: its operations fail from then on.
    pub failed: Option<PeerFailure>,
    /// Our flag in its segment: set once it removed us.
    removed_us: segment::RemovedFlag,
}

impl Peer {
    /// Connect to the process `proc_` from its card `blob`: `None` when it runs on
    /// another node. `me` is our slot (our place among the node's ranks), `node` our
    /// node's id, `layout` and `segment` our own segment's.
    pub fn connect(
        proc_: &Proc,
        blob: &[u8],
        me: usize,
        node: &str,
        layout: &Layout,
        segment: &SharedRegion,
        settings: &Settings,
    ) -> Result<Option<Peer>> {
        let Card {
            module,
            pid,
            probe,
            layout: their_layout,
            fd,
            slot,
            reads_by_address,
            node: their_node,
        } = Card::parse(proc_.rank, blob)?;
        if their_node != node {
            return Ok(None);
        }
        if their_layout != *layout {
            return Err(Error::Modex(format!(
                "rank {} runs sm with another layout ({their_layout:?} vs {layout:?}): give every rank the same btl_sm_* parameters",
                proc_.rank
            )));
        }
        let peer = usize::try_from(slot).unwrap_or(usize::MAX);
        if me >= layout.nranks || peer >= layout.nranks || peer == me {
            return Err(Error::Modex(format!(
                "rank {} has sm slot {slot} and this process {me}, of {}: each rank of a \
                 node needs a slot of its own",
                proc_.rank, layout.nranks
            )));
        }
        let their_segment = SharedRegion::open_of_process(pid as u32, fd)?;
        if their_segment.len() < layout.bytes() {
            return Err(Error::Modex(format!(
                "the sm segment of rank {} is {} bytes, less than its layout's {}",
                proc_.rank,
                their_segment.len(),
                layout.bytes()
            )));
        }
        let base = their_segment.as_ptr();
        // SAFETY: the segment is mapped for its whole length, which holds the layout,
        // whose header comes first.
        let header = unsafe { segment::header(base) };
        if !header.is_of(module.0) {
            return Err(Error::Modex(format!(
                "descriptor {fd} of process {pid} (rank {}) is not its sm segment",
                proc_.rank
            )));
        }
        // SAFETY: both layouts are equal and hold both ranks, and both segments are
        // at least as long as the layout, so these offsets lie inside them; we are the
        // only producer of our ring in the peer's segment and the only consumer of the
        // peer's ring in ours; the segments live in `Peer` and the module for as long
        // as the rings, the table view and the flag are used.
        let (producer, consumer, table, removed_us) = unsafe {
            (
                Producer::new(base.add(layout.ring_offset(me)), layout.ring),
                Consumer::new(segment.as_ptr().add(layout.ring_offset(peer)), layout.ring),
                KeyTableView::new(base.add(layout.table_offset()), layout.registrations),
                segment::RemovedFlag::new(base, layout, me),
            )
        };
        let cma_ok = match settings.rdma {
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
            slot: peer,
            pid,
            remote_base: probe,
            local_base: base as usize,
            process: Process::new(pid),
            module,
            _segment: their_segment,
            table,
            producer,
            consumer,
            outbound: VecDeque::new(),
            serving: VecDeque::new(),
            last_served: None,
            busy: false,
            put_refused: HashMap::new(),
            removed: false,
            cma_ok,
            reads_by_address,
            out_speed: RingSpeed::default(),
            in_speed: RingSpeed::default(),
            out_of_ring_speed: RingSpeed::default(),
            put_path: Choice::default(),
            get_path: Choice::default(),
            failed: None,
            removed_us,
        }))
    }

    /// Whether a put (`Write`) or get (`Read`) of `size` bytes goes by cross-memory
    /// attach. `cma_ok` holds the setting (`copy` never, `cma` always, `auto` where the
    /// kernel allows); `auto` then chooses by the rings' speed and that of earlier
    /// cross-memory attach copies ([`path`](super::path)).
    pub fn goes_by_cma(&mut self, dir: cma::Direction, size: usize, settings: &Settings) -> bool {
        if !self.cma_ok || settings.rdma != RdmaPath::Auto {
            return self.cma_ok;
        }
        if !weighed(settings, size) {
            // Through the rings (as `via_cma` says too), without reading the clock:
            // the common case of small transfers.
            return false;
        }
        let slow_below = settings.cma_below as f64 / 1000.0;
        let now = Instant::now();
        let rings = Rings {
            chunks: size.div_ceil(chunk_for(size, settings.copy_chunk).max(1)),
            // Copies into the ring, and out of it: for a put the peer copies out, at a
            // rate we do not hear, taken as that of our copies in.
            speeds: match dir {
                cma::Direction::Write => (self.out_speed, self.out_speed),
                cma::Direction::Read => (self.in_speed, self.out_of_ring_speed),
            },
            both_ways: self
                .last_served
                .is_some_and(|t| now.duration_since(t) < PROBE_EVERY),
        };
        self.path(dir).via_cma(size, rings, slow_below, now)
    }

    /// When a cross-memory attach copy of `size` bytes starts, where `auto` weighs it
    /// (else `None`: the clock is not read).
    pub fn cma_timer(settings: &Settings, size: usize) -> Option<Instant> {
        weighed(settings, size).then(Instant::now)
    }

    /// The rate of copies into the rings both ways, GB/s: the slower of ours and the
    /// peer's (as its data's headers tell).
    pub fn rings_gbs(&self) -> f64 {
        self.out_speed.gbs().min(self.in_speed.gbs())
    }

    /// Count a cross-memory attach copy of `size` bytes that started at `start` (from
    /// [`Peer::cma_timer`]; `None`: not weighed).
    pub fn observe_cma(&mut self, dir: cma::Direction, size: usize, start: Option<Instant>) {
        if let Some(start) = start {
            let now = Instant::now();
            self.path(dir)
                .observe_cma(size, now.duration_since(start), now);
        }
    }

    fn path(&mut self, dir: cma::Direction) -> &mut Choice {
        match dir {
            cma::Direction::Write => &mut self.put_path,
            cma::Direction::Read => &mut self.get_path,
        }
    }

    /// Where `[remote, +len)` of the peer, checked against its registration `handle`
    /// for `access`, is mapped here: `None` when it lies outside the peer's heap
    /// (`layout` is both segments').
    pub fn map_heap(
        &self,
        remote: u64,
        handle: &RemoteHandle,
        len: usize,
        access: Access,
        layout: &Layout,
    ) -> Result<Option<*mut u8>> {
        self.table.check(self.module, handle, remote, len, access)?;
        // (Checked sums: the base comes from the peer's card.)
        let heap = self.remote_base.checked_add(layout.heap_offset() as u64);
        let heap_end = heap.and_then(|h| h.checked_add(layout.heap_bytes as u64));
        let end = remote.checked_add(len as u64);
        let inside = match (heap, heap_end, end) {
            (Some(heap), Some(heap_end), Some(end)) => remote >= heap && end <= heap_end,
            _ => false,
        };
        if !inside {
            return Ok(None);
        }
        // The range lies inside the peer's heap, inside its segment, which is mapped
        // here at `local_base` for as long as the peer is kept.
        Ok(Some(
            (self.local_base + (remote - self.remote_base) as usize) as *mut u8,
        ))
    }

    /// Whether the peer removed us (`del_procs`): it takes nothing more from us.
    pub fn removed_us(&self) -> bool {
        self.removed_us.is_set()
    }

    /// Whether the peer's process has ended (see `liveness.rs`).
    pub fn has_exited(&self) -> bool {
        self.process.has_exited()
    }

    /// Watch `process` in place of the peer's own (a test's stand-in for a peer whose
    /// process ended while its segment stays mapped).
    #[cfg(test)]
    pub(crate) fn watch(&mut self, process: Process) {
        self.process = process;
    }
}

/// This machine: host name and boot id, so that only processes sharing `/dev/shm`
/// and memory count as local.
pub(super) fn node_id() -> String {
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
