//! One handle over the most ranges a registration takes, each a separate allocation,
//! with puts and gets anywhere inside every range.

use crate::buffer::{grantable, snapshot, Bytes};
use crate::pattern::{fill, pattern};
use crate::rdma::ALL;
use crate::Peer;
use rbtl_btl::{
    BtlFlags, Error, Local, MemHandle, MemRange, Module, RdmaCallback, RegRequest, Remote,
    RemoteHandle, Transfer, MAX_RANGES,
};

/// A key no transport would choose by itself early on (another than the other checks').
const KEY: u64 = 0x6b65_795f_0000_0011;
/// The lengths of the target's ranges: a byte, odd sizes, pages and more than a page.
const LENGTHS: [usize; MAX_RANGES] = [1, 100, 4096, 5000, 8195, 777, 65536, 12345];
/// Transfers each side makes into the other's ranges.
const TRANSFERS: usize = 64;
/// Seeds of the ranges' first contents.
const FIRST: usize = 100;

// A seeded generator: the same transfers on every run.
use rbtl_testkit::rng::Xorshift as Rng;

fn register(m: &mut dyn Module, req: &RegRequest) -> rbtl_btl::Result<MemHandle> {
    // SAFETY: the check keeps the memory of `req` alive (and unmoved) until the handle
    // it gets back is dropped, which happens first.
    unsafe { m.register(req) }
}

/// The target's ranges as the peer needs them: count, then base and length of each,
/// then the handle.
fn advertise(ranges: &[MemRange], h: &MemHandle) -> Vec<u8> {
    let mut v = (ranges.len() as u32).to_le_bytes().to_vec();
    for r in ranges {
        v.extend_from_slice(&(r.base as u64).to_le_bytes());
        v.extend_from_slice(&(r.len as u64).to_le_bytes());
    }
    v.extend_from_slice(h.remote().as_bytes());
    v
}

fn ranges_of(b: &[u8]) -> (Vec<(u64, usize)>, RemoteHandle) {
    let n = u32::from_le_bytes(b[..4].try_into().expect("count")) as usize;
    let word = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("word"));
    let ranges = (0..n)
        .map(|i| (word(4 + 16 * i), word(12 + 16 * i) as usize))
        .collect();
    let h = RemoteHandle::from_bytes(&b[4 + 16 * n..]).expect("handle");
    (ranges, h)
}

/// A registration of [`MAX_RANGES`] separate allocations under one handle; the peer
/// puts into and gets from random places of random sizes in every range (each transfer
/// inside one range and within the module's limits and alignments), checking each get
/// against what the range then holds, and the target ends holding exactly what the
/// peer's puts left. Where the transport honours requested keys, the registration is
/// made under one and carries it; where it chooses its keys
/// ([`BtlFlags::PROVIDER_KEYS`]), the request with a key is refused with
/// [`Error::KeyRejected`] and registers nothing, and the same request without it is
/// made.
pub fn vectored_transfers_anywhere(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let ep = p.endpoint;
    let access = grantable(p.module, ALL);
    let mut mems: Vec<Bytes> = LENGTHS.iter().map(|&l| Bytes::new(l)).collect();
    for (i, mem) in mems.iter_mut().enumerate() {
        fill(mem, FIRST + i);
    }
    let ranges: Vec<MemRange> = mems
        .iter_mut()
        .map(|m| MemRange::new(m.as_mut_ptr() as usize, m.len()))
        .collect();
    let plain = RegRequest::vectored(&ranges, access).endpoint(Some(ep));
    let keyed = register(p.module, &plain.requested_key(KEY));
    let th = if attrs.flags.contains(BtlFlags::PROVIDER_KEYS) {
        assert!(
            matches!(keyed, Err(Error::KeyRejected { key: KEY, .. })),
            "a transport that chooses its keys refuses one for a vectored request: {keyed:?}"
        );
        register(p.module, &plain).expect("the same request without a key")
    } else {
        let h = keyed.expect("a vectored registration under a requested key");
        assert_eq!(h.key(), KEY, "the handle carries the requested key");
        h
    };
    assert_eq!(th.ranges(), &ranges[..], "the handle lists its ranges");
    let max = *LENGTHS.iter().max().expect("ranges");
    let mut local = Bytes::new(max + 8);
    let lbase = local.as_mut_ptr() as usize;
    let lh = register(p.module, &RegRequest::new(lbase, max + 8, access)).expect("register");
    let (theirs, rh) = ranges_of(&p.swap(&advertise(&ranges, &th)));
    assert_eq!(theirs.len(), MAX_RANGES);
    // What the peer's ranges hold, as this side's transfers leave them.
    let mut mirror: Vec<Vec<u8>> = LENGTHS
        .iter()
        .enumerate()
        .map(|(i, &l)| (0..l).map(|j| pattern(FIRST + i, j)).collect())
        .collect();
    // (The allocations start 8-byte aligned: larger alignments are the limits check's.)
    let (put_ok, get_ok) = (
        attrs.flags.contains(BtlFlags::PUT) && attrs.put_alignment <= 8,
        attrs.flags.contains(BtlFlags::GET) && attrs.get_alignment <= 8,
    );
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut puts = Vec::new();
    for t in 0..TRANSFERS {
        let put = match (put_ok, get_ok) {
            (true, true) => rng.below(2) == 0,
            (put, get) if put || get => put,
            _ => break,
        };
        let (limit, align) = match put {
            true => (attrs.put_limit, attrs.put_alignment),
            false => (attrs.get_limit, attrs.get_alignment),
        };
        let i = rng.below(MAX_RANGES);
        let (raddr, rlen) = theirs[i];
        let most = rlen.min(limit) / align * align;
        if most == 0 {
            continue;
        }
        let len = (1 + rng.below(most)).div_ceil(align) * align;
        let off = rng.below((rlen - len) / align + 1) * align;
        let lo = rng.below((max + 8 - len) / align + 1) * align;
        let seed = 1000 + t;
        if put {
            fill(&mut local[lo..lo + len], seed);
        }
        let r = raddr + off as u64;
        let cb: RdmaCallback = Box::new(move |_, c| c.status.expect("a transfer in one range"));
        let posted = if put {
            p.module.put(
                &Transfer::new(ep, Local::new(lbase + lo, &lh), Remote::new(r, &rh), len),
                cb,
            )
        } else {
            p.module.get(
                &Transfer::new(ep, Local::new(lbase + lo, &lh), Remote::new(r, &rh), len),
                cb,
            )
        };
        posted.unwrap_or_else(|e| panic!("{len} bytes at {off} of range {i}: {e}"));
        p.module.flush(Some(ep)).expect("flush");
        let want = &mut mirror[i][off..off + len];
        if put {
            want.copy_from_slice(&local[lo..lo + len]);
            puts.push([i, off, len, seed]);
        } else {
            // SAFETY: our own live buffer, after the flush that completed the get.
            let got = unsafe { snapshot(lbase + lo, len) };
            assert!(
                got == *want,
                "a get of {len} bytes at {off} of range {i} read what the range holds"
            );
        }
    }
    // Our ranges as the peer's puts left them, nothing else changed.
    let encoded: Vec<u8> = puts
        .iter()
        .flat_map(|put| put.iter().flat_map(|&w| (w as u32).to_le_bytes()))
        .collect();
    let peer_puts = p.swap(&encoded);
    let mut want: Vec<Vec<u8>> = LENGTHS
        .iter()
        .enumerate()
        .map(|(i, &l)| (0..l).map(|j| pattern(FIRST + i, j)).collect())
        .collect();
    for c in peer_puts.chunks(16) {
        let w = |k: usize| u32::from_le_bytes(c[4 * k..4 * k + 4].try_into().unwrap()) as usize;
        let (i, off, len, seed) = (w(0), w(1), w(2), w(3));
        for (k, b) in want[i][off..off + len].iter_mut().enumerate() {
            *b = pattern(seed, k);
        }
    }
    for (i, r) in ranges.iter().enumerate() {
        // SAFETY: our own live range, after the exchange that follows the peer's flush.
        let got = unsafe { snapshot(r.base, r.len) };
        let first_bad = got.iter().zip(&want[i]).position(|(g, w)| g != w);
        assert!(
            first_bad.is_none(),
            "range {i} differs at byte {first_bad:?}"
        );
    }
    p.barrier();
    drop((th, lh));
}
