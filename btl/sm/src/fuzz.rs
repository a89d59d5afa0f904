//! What a broken or hostile peer on the node can hand the `sm` transport, fuzzed (with
//! `proptest`, random and structured-but-wrong inputs): its card in the modex, and the
//! messages of the copy protocol it writes into our ring. Nothing panics, a malformed
//! input gets a typed error, and no write lands outside the memory a registration or
//! an operation of ours names. (The ring's own records are fuzzed beside the ring.)
//!
//! Longer runs: `PROPTEST_CASES=100000 cargo test -p rbtl-sm fuzz`.

use super::component::{RdmaPath, Settings};
use super::copy_protocol::CopyProtocol;
use super::own_segment::OwnSegment;
use super::peer::{self, Card, Peer, CARD_FIXED};
use super::ring::RingLayout;
use super::segment::Layout;
use super::wire::{self, Message};
use proptest::collection::vec;
use proptest::prelude::*;
use rbtl_btl::transport_kit::keytable::{KeyTable, KeyTableView, HANDLE_SIZE};
use rbtl_btl::transport_kit::Done;
use rbtl_btl::{Endpoint, Error, ModuleId, Proc, RemoteHandle};
use rbtl_rcache::Access;
use std::collections::VecDeque;

/// Words where arithmetic goes wrong: small, near a power of two, near the top.
fn word() -> impl Strategy<Value = u64> {
    prop_oneof![
        0..64u64,
        (4096 - 16)..(4096 + 16u64),
        (u64::MAX - 64)..=u64::MAX,
        (u64::from(u32::MAX) - 8)..(u64::from(u32::MAX) + 8),
        any::<u64>(),
    ]
}

const LAYOUT: Layout = Layout {
    nranks: 2,
    ring: RingLayout {
        nslots: 16,
        data_bytes: 64 << 10,
    },
    registrations: 8,
    heap_bytes: 0,
};

/// This process's segment (rank 0 of two), its module id, and rank 1 connected to it:
/// this same process, through its own card (the rings loop back).
fn looped_peer() -> (OwnSegment, ModuleId, Peer) {
    let own = OwnSegment::create(0, LAYOUT).unwrap();
    let id = ModuleId::fresh();
    own.stamp(id);
    let node = peer::node_id();
    // Rank 1 writes the ring of slot 1 in our segment; we, slot 0, write its ring 0.
    let blob = peer::card(id, own.region(), (&LAYOUT, 1), true, &node);
    let settings = Settings {
        rdma: RdmaPath::Copy,
        ..Settings::default()
    };
    let rank1 = Proc {
        rank: 1,
        node: node.clone(),
    };
    let p = Peer::connect(&rank1, &blob, 0, &node, &LAYOUT, own.region(), &settings)
        .unwrap()
        .expect("on this node");
    (own, id, p)
}

/// Bytes with guards of `GUARD` bytes each side, which nothing may write.
struct Guarded(Vec<u8>);

const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xEE;

impl Guarded {
    fn new(len: usize) -> Guarded {
        Guarded(vec![GUARD_BYTE; len + 2 * GUARD])
    }

    fn addr(&self) -> usize {
        self.0.as_ptr() as usize + GUARD
    }

    fn guards_intact(&self) -> bool {
        let n = self.0.len();
        self.0[..GUARD]
            .iter()
            .chain(&self.0[n - GUARD..])
            .all(|&b| b == GUARD_BYTE)
    }
}

/// An address a hostile message names: relative to our registration (in and around
/// it), or any word.
#[derive(Clone, Copy, Debug)]
enum Aim {
    Registration(i64),
    Word(u64),
}

/// The handle a hostile message carries: our registration's, one byte of it changed,
/// or any bytes.
#[derive(Clone, Debug)]
enum HandleBytes {
    Valid,
    Flipped(usize, u8),
    Raw(Vec<u8>),
}

/// A protocol message as a hostile peer may build it: a tag (the protocol's, or
/// another), its header fields (some aimed at our registration and operations), and
/// the data, whole or cut.
#[derive(Clone, Debug)]
struct Hostile {
    tag: u8,
    req: u64,
    addr: Aim,
    third: u64,
    fourth: u64,
    fifth: u64,
    handle: HandleBytes,
    data: Vec<u8>,
    cut: usize,
    split: bool,
}

fn hostile() -> impl Strategy<Value = Hostile> {
    let tag = prop_oneof![1..=6u8, any::<u8>()];
    // Requests: our pending get (2) and atomic (3), or anything.
    let req = prop_oneof![2..=3u64, word()];
    let addr = prop_oneof![
        (-16..600i64).prop_map(Aim::Registration),
        Just(Aim::Registration(512 - 8)),
        (0..400u64).prop_map(Aim::Word),
        word().prop_map(Aim::Word),
    ];
    let status = prop_oneof![Just(0u64), Just(1), word()];
    let handle = prop_oneof![
        Just(HandleBytes::Valid),
        (0..HANDLE_SIZE, 1..=255u8).prop_map(|(i, x)| HandleBytes::Flipped(i, x)),
        vec(any::<u8>(), 0..80).prop_map(HandleBytes::Raw),
    ];
    (
        (tag, req, addr, status, word(), word()),
        handle,
        vec(any::<u8>(), 0..700),
        0..200usize,
        any::<bool>(),
    )
        .prop_map(
            |((tag, req, addr, third, fourth, fifth), handle, data, cut, split)| Hostile {
                tag,
                req,
                addr,
                third,
                fourth,
                fifth,
                handle,
                data,
                cut,
                split,
            },
        )
}

impl Hostile {
    /// Its segments, aimed at `t`: a header laid out as the tag's (fields in order,
    /// handle after them), maybe cut short, then the data in the same segment or a
    /// second one.
    fn segments(&self, t: &Target) -> Vec<Vec<u8>> {
        let addr = match self.addr {
            Aim::Registration(off) => (t.registered.addr() as u64).wrapping_add_signed(off),
            Aim::Word(w) => w,
        };
        let fields = [self.req, addr, self.third, self.fourth, self.fifth];
        let words = match self.tag {
            wire::PUT_DATA | wire::GET_REQ => 3,
            wire::ATOMIC_REQ => 5,
            _ => 4,
        };
        let mut header: Vec<u8> = fields[..words]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        match &self.handle {
            HandleBytes::Valid => header.extend_from_slice(t.handle.as_bytes()),
            HandleBytes::Flipped(i, x) => {
                let mut h = t.handle.as_bytes().to_vec();
                h[*i] ^= x;
                header.extend_from_slice(&h);
            }
            HandleBytes::Raw(raw) => header.extend_from_slice(raw),
        }
        if self.cut < 8 {
            header.truncate(header.len().saturating_sub(self.cut * 3));
        }
        if self.split {
            vec![header, self.data.clone()]
        } else {
            header.extend_from_slice(&self.data);
            vec![header]
        }
    }
}

proptest! {
    #![proptest_config(rbtl_testkit::fuzz::config(1000))]

    /// Any bytes as any tag: a message of the protocol whose fields are the bytes, or
    /// `NotAvailable`.
    #[test]
    fn wire_decoding_reads_or_refuses_any_bytes(
        tag in any::<u8>(),
        segs in vec(vec(any::<u8>(), 0..120), 0..4),
    ) {
        let segs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
        match wire::decode(tag, &segs) {
            Ok(m) => {
                let head = segs[0];
                let u64_at = |i: usize| u64::from_le_bytes(head[i..i + 8].try_into().unwrap());
                prop_assert!((wire::PUT_DATA..=wire::ATOMIC_RESP).contains(&tag));
                match m {
                    Message::PutData { req, handle, data, .. } => {
                        prop_assert_eq!(req, u64_at(0));
                        prop_assert_eq!(handle.len(), HANDLE_SIZE);
                        let rest = &head[wire::PUT_HEADER..];
                        prop_assert!(data == rest || segs.get(1) == Some(&data));
                    }
                    Message::GetReq { len, handle, .. } => {
                        prop_assert_eq!(len, u64_at(16));
                        prop_assert_eq!(handle, &head[24..]);
                    }
                    Message::GetData { offset, .. } => prop_assert_eq!(offset, u64_at(8)),
                    Message::AtomicReq { op, .. } => prop_assert_eq!(op, u64_at(32)),
                    Message::PutAck { req, .. } | Message::AtomicResp { req, .. } => {
                        prop_assert_eq!(req, u64_at(0))
                    }
                }
            }
            Err(Error::NotAvailable(why)) => prop_assert!(why.contains("malformed")),
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }

    /// Any bytes as a card: read, or `Modex`; what is read round-trips.
    #[test]
    fn cards_are_read_or_refused(blob in vec(any::<u8>(), 0..200), rank in any::<u32>()) {
        match Card::parse(rank, &blob) {
            Ok(card) => {
                prop_assert!(blob.len() >= CARD_FIXED && card.pid > 0 && card.fd >= 0);
                prop_assert_eq!(card.node, String::from_utf8_lossy(&blob[CARD_FIXED..]));
            }
            Err(Error::Modex(why)) => {
                let named = format!("rank {}", rank);
                prop_assert!(why.contains(&named), "{}", why)
            }
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }
}

proptest! {
    #![proptest_config(rbtl_testkit::fuzz::config(256))]

    /// A real card with bytes changed, truncated or extended (its pid stays ours, so
    /// that only this process's descriptors are opened): connecting either succeeds,
    /// finds another node, or fails with a typed error.
    #[test]
    fn connecting_to_a_damaged_card_fails_cleanly(
        flips in vec((0..200usize, any::<u8>()), 0..6),
        fd in prop_oneof![Just(None), (0..64u64).prop_map(Some), word().prop_map(Some)],
        cut in prop_oneof![Just(None), (0..88usize).prop_map(Some)],
        extra in vec(any::<u8>(), 0..8),
    ) {
        let own = OwnSegment::create(0, LAYOUT).unwrap();
        let id = ModuleId::fresh();
        own.stamp(id);
        let node = peer::node_id();
        let mut blob = peer::card(id, own.region(), (&LAYOUT, 1), true, &node);
        for (at, x) in flips {
            // Not the pid (bytes 8..16): another process's descriptors are not ours to
            // open.
            let at = at % blob.len();
            if !(8..16).contains(&at) {
                blob[at] ^= x;
            }
        }
        if let Some(fd) = fd {
            blob[56..64].copy_from_slice(&fd.to_le_bytes());
        }
        if let Some(cut) = cut {
            blob.truncate(cut);
        }
        blob.extend_from_slice(&extra);
        let settings = Settings { rdma: RdmaPath::Copy, ..Settings::default() };
        let rank1 = Proc { rank: 1, node: node.clone() };
        match Peer::connect(&rank1, &blob, 0, &node, &LAYOUT, own.region(), &settings) {
            Ok(_) => {}
            Err(Error::Modex(_) | Error::Mpool(_)) => {}
            Err(e) => prop_assert!(false, "unexpected error {:?}", e),
        }
    }
}

/// Set up for a stream of hostile messages: a registered buffer of ours (512 bytes,
/// remote read, write and atomics), a get of ours pending (request 2, 300 bytes into
/// `get_into`) and an atomic whose result goes to `result` (request 3).
struct Target {
    _own: OwnSegment,
    peer: Peer,
    copy: CopyProtocol,
    _table: KeyTable,
    registered: Guarded,
    handle: RemoteHandle,
    get_into: Guarded,
    result: Guarded,
}

fn target() -> Target {
    let (own, id, mut peer) = looped_peer();
    let mut registered = Guarded::new(512);
    for b in &mut registered.0[GUARD..GUARD + 512] {
        *b = 0;
    }
    // SAFETY: the table area of our own segment, used by nothing else in this test
    // (no `Registrations` of the module exists here); the segment outlives the table.
    let mut table = unsafe { KeyTable::new(own.region().as_ptr().add(LAYOUT.table_offset()), 8) };
    let access = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::ATOMIC;
    let range = [rbtl_btl::MemRange::new(registered.addr(), 512)];
    let handle = table
        .insert(id, &range, access, None)
        .expect("room in the table")
        .remote;
    let view: KeyTableView = table.view();
    let mut copy = CopyProtocol::new(id, view, 16 << 10);
    let (get_into, result) = (Guarded::new(300), Guarded::new(8));
    let mut done = VecDeque::new();
    let ep = Endpoint(0);
    // The origin's side as the module would have checked it: its own registrations.
    let local = |addr, len| {
        let range = [rbtl_btl::MemRange::new(addr, len)];
        rbtl_btl::MemHandle::new(id, 0, &range, Access::LOCAL_WRITE, handle, Box::new(()))
    };
    let (into, res) = (local(get_into.addr(), 300), local(result.addr(), 8));
    let remote = rbtl_btl::Remote::new(0x1000, &handle);
    let get = rbtl_btl::Transfer::new(
        ep,
        rbtl_btl::Local::new(get_into.addr(), &into),
        remote,
        300,
    );
    copy.start_get(&mut peer, (&get, &handle), Box::new(|_, _| {}), &mut done);
    let cas = rbtl_btl::AtomicKind::CompareSwap {
        compare: 0,
        value: 1,
    };
    let cas = rbtl_btl::RemoteAtomic::new(ep, remote, cas)
        .fetching(rbtl_btl::Local::new(result.addr(), &res));
    copy.start_atomic(&mut peer, (&cas, &handle), Box::new(|_, _| {}));
    Target {
        _own: own,
        peer,
        copy,
        _table: table,
        registered,
        handle,
        get_into,
        result,
    }
}

#[test]
fn the_fuzzed_target_accepts_well_formed_messages() {
    // The set-up the fuzzing below relies on: valid messages do reach the memory.
    let mut t = target();
    let mut done = VecDeque::new();
    let mut put = wire::Writer::default()
        .u64(99)
        .u64(t.registered.addr() as u64 + 8)
        .u64(1)
        .handle(&t.handle)
        .0;
    put.extend_from_slice(&[7; 4]);
    t.copy
        .on_message(&mut t.peer, wire::PUT_DATA, &[&put], &mut done)
        .unwrap();
    assert_eq!(&t.registered.0[GUARD + 8..GUARD + 12], &[7; 4]);
    let chunk = wire::Writer::default().u64(2).u64(0).u64(0).u64(0).0;
    t.copy
        .on_message(&mut t.peer, wire::GET_DATA, &[&chunk, &[5; 300]], &mut done)
        .unwrap();
    assert!(t.get_into.0[GUARD..GUARD + 300].iter().all(|&b| b == 5));
    assert!(matches!(done.pop_front(), Some(Done::Rdma(_, c)) if c.status.is_ok()));
    assert!(t.registered.guards_intact() && t.get_into.guards_intact());
}

proptest! {
    #![proptest_config(rbtl_testkit::fuzz::config(1000))]

    /// Streams of hostile messages: no panic, a typed error for a malformed one, and no
    /// byte written outside our registration, the pending get's buffer or the atomic's
    /// result.
    #[test]
    fn hostile_protocol_messages_write_only_where_they_may(msgs in vec(hostile(), 1..12)) {
        let mut t = target();
        let mut done = VecDeque::new();
        for m in msgs {
            let segs = m.segments(&t);
            let segs: Vec<&[u8]> = segs.iter().map(Vec::as_slice).collect();
            match t.copy.on_message(&mut t.peer, m.tag, &segs, &mut done) {
                Ok(_) | Err(Error::NotAvailable(_)) => {}
                Err(e) => prop_assert!(false, "unexpected error {:?}", e),
            }
            t.peer.outbound.clear();
            t.peer.serving.clear();
            prop_assert!(t.registered.guards_intact(), "write outside the registration");
            prop_assert!(t.get_into.guards_intact(), "write outside the get's buffer");
            prop_assert!(t.result.guards_intact(), "write outside the atomic's result");
        }
    }
}
