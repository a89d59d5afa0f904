//! The checks of registration in libfabric's terms: a requested key (honoured and in
//! the handle, or refused by a transport that chooses its keys), a key in use, one
//! handle over several ranges, and requests refused with their own errors.

use crate::buffer::{grantable, Bytes};
use crate::pattern::{fill, pattern};
use crate::rdma::ALL;
use crate::{remote_of, Peer};
use rbtl_btl::{
    Access, BtlFlags, Error, Local, MemHandle, MemRange, Module, RdmaCallback, RegRequest, Remote,
    Transfer, MAX_RANGES,
};
use std::sync::{Arc, Mutex};

/// A key no transport would choose by itself early on.
const KEY: u64 = 0x6b65_795f_0000_0007;

/// Register `req`; the memory it names must outlive the handle.
fn register(m: &mut dyn Module, req: &RegRequest) -> rbtl_btl::Result<MemHandle> {
    // SAFETY: every caller keeps the memory of `req` alive (and unmoved) until the
    // handle it gets back is dropped, which happens first in each check.
    unsafe { m.register(req) }
}

/// A registration asking for a key: where the transport honours requested keys, the
/// handle carries it, a second request for it is refused with `KeyInUse` (and takes
/// nothing), keys the transport chooses meanwhile are other ones, the peer reaches the
/// memory through the handle, and once deregistered the key can be had again. Where
/// the transport chooses its keys (`BtlFlags::PROVIDER_KEYS`), the request is refused
/// with `KeyRejected`.
pub fn requested_keys(p: &mut Peer<'_>) {
    const LEN: usize = 256;
    let attrs = p.module.attributes().clone();
    let ep = p.endpoint;
    let access = grantable(p.module, ALL);
    let mut mem = Bytes::new(LEN);
    let mut other = Bytes::new(LEN);
    let (base, other_base) = (mem.as_mut_ptr() as usize, other.as_mut_ptr() as usize);
    let asked = RegRequest::new(base, LEN, access)
        .endpoint(Some(ep))
        .requested_key(KEY);
    let got = register(p.module, &asked);
    if attrs.flags.contains(BtlFlags::PROVIDER_KEYS) {
        assert!(
            matches!(got, Err(Error::KeyRejected { key: KEY, .. })),
            "a transport that chooses its keys refuses a requested one: {got:?}"
        );
        let h = register(p.module, &RegRequest::new(base, LEN, access)).expect("register");
        assert!(h.is_live() && h.len() == LEN);
        p.barrier();
        return;
    }
    let mut h = got.expect("a requested key is honoured");
    assert_eq!(h.key(), KEY, "the handle carries the requested key");
    let again = register(
        p.module,
        &RegRequest::new(other_base, LEN, access).requested_key(KEY),
    );
    assert!(
        matches!(again, Err(Error::KeyInUse(KEY))),
        "a key in use: {again:?}"
    );
    let chosen: Vec<MemHandle> = (0..4)
        .map(|_| register(p.module, &RegRequest::new(other_base, LEN, access)).unwrap())
        .collect();
    let mut keys: Vec<u64> = chosen.iter().map(MemHandle::key).collect();
    keys.push(KEY);
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), 5, "live registrations have distinct keys");
    // The peer puts into the memory registered under the requested key.
    if attrs.flags.contains(BtlFlags::PUT) {
        let mut ad = (base as u64).to_le_bytes().to_vec();
        ad.extend_from_slice(h.remote().as_bytes());
        let (raddr, rh) = remote_of(&p.swap(&ad));
        fill(&mut other[..64], 41);
        let status: Arc<Mutex<Option<rbtl_btl::Result<()>>>> = Arc::default();
        let s = status.clone();
        let cb: RdmaCallback = Box::new(move |_, c| *s.lock().unwrap() = Some(c.status));
        let lh = &chosen[0];
        p.module
            .put(
                &Transfer::new(ep, Local::new(other_base, lh), Remote::new(raddr, &rh), 64),
                cb,
            )
            .expect("put into the registration of the requested key");
        p.module.flush(Some(ep)).expect("flush");
        assert!(matches!(*status.lock().unwrap(), Some(Ok(()))));
        p.barrier();
        let landed = h.len() == LEN && (0..64).all(|i| mem_byte(base, i) == pattern(41, i));
        assert!(
            landed,
            "the peer's put landed in the memory of the requested key"
        );
    }
    p.module.deregister_mem(&mut h).expect("deregister");
    let h2 = register(
        p.module,
        &RegRequest::new(other_base, LEN, access).requested_key(KEY),
    )
    .expect("a deregistered key can be requested again");
    assert_eq!(h2.key(), KEY);
    p.barrier();
    drop((h2, chosen, h));
}

/// Byte `i` at `base`, read volatile-ly (a peer may have written it).
fn mem_byte(base: usize, i: usize) -> u8 {
    // SAFETY: the callers' buffers are live and at least `i + 1` bytes long.
    unsafe { std::ptr::read_volatile((base + i) as *const u8) }
}

/// Requests no transport registers, each refused with its own error and leaving
/// nothing registered: no access at all, atomic access where the module has no
/// atomics, no range or more than `MAX_RANGES`, a range of zero bytes, a range past
/// the address space. (A refused request with a requested key does not take the key.)
pub fn registration_refusals(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let mut mem = Bytes::new(4096);
    let base = mem.as_mut_ptr() as usize;
    let keyed = !attrs.flags.contains(BtlFlags::PROVIDER_KEYS);
    let with_key = |r: RegRequest| if keyed { r.requested_key(KEY) } else { r };
    let refused = register(
        p.module,
        &with_key(RegRequest::new(base, 64, Access::empty())),
    );
    assert!(
        matches!(refused, Err(Error::AccessNotSupported { .. })),
        "no access: {refused:?}"
    );
    let atomics = BtlFlags::ATOMIC_OPS | BtlFlags::ATOMIC_FOPS;
    if !attrs.flags.intersects(atomics) {
        let r = register(p.module, &RegRequest::new(base, 64, Access::ATOMIC));
        assert!(
            matches!(r, Err(Error::AccessNotSupported { .. })),
            "atomic access without atomics: {r:?}"
        );
    }
    let none = register(p.module, &RegRequest::vectored(&[], ALL));
    assert!(
        matches!(none, Err(Error::TooManyRanges { count: 0, .. })),
        "{none:?}"
    );
    let many: Vec<MemRange> = (0..=MAX_RANGES)
        .map(|i| MemRange::new(base + 64 * i, 64))
        .collect();
    let r = register(p.module, &RegRequest::vectored(&many, ALL));
    assert!(
        matches!(r, Err(Error::TooManyRanges { count, max: MAX_RANGES }) if count == MAX_RANGES + 1),
        "{r:?}"
    );
    let access = grantable(p.module, ALL);
    let empty_range = [MemRange::new(base, 64), MemRange::new(base + 128, 0)];
    let r = register(p.module, &RegRequest::vectored(&empty_range, access));
    assert!(matches!(r, Err(Error::ZeroLength)), "{r:?}");
    let wrapping = [MemRange::new(base, 64), MemRange::new(usize::MAX - 8, 64)];
    let r = register(p.module, &RegRequest::vectored(&wrapping, access));
    assert!(matches!(r, Err(Error::Overflow { .. })), "{r:?}");
    if keyed {
        let h = register(
            p.module,
            &RegRequest::new(base, 64, access).requested_key(KEY),
        )
        .expect("a refused request took no key");
        assert_eq!(h.key(), KEY);
    }
}

/// The ranges of the checks' vectored target, as (offset, length) in a 4 KiB buffer:
/// two that touch, then one after a gap.
const TARGET_RANGES: [(usize, usize); 3] = [(0, 1024), (1024, 1024), (3072, 1024)];
/// The local side's ranges, touching.
const LOCAL_RANGES: [(usize, usize); 2] = [(0, 2048), (2048, 2048)];
/// Bytes each transfer of the check moves.
const CHUNK: usize = 64;

/// One handle over several ranges, on both sides: the handle lists the ranges; puts
/// and gets reach every range, at its start and its end; accesses across two ranges
/// (touching or not), in a gap, before the first or past the last are refused (at the
/// call, or by the target with an error completion) and leave the target unchanged;
/// a local access across the local handle's ranges is refused too.
pub fn vectored_registration(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let ep = p.endpoint;
    let access = grantable(p.module, ALL);
    let ranges = |mem: &mut Bytes, offs: &[(usize, usize)]| -> Vec<MemRange> {
        let base = mem.as_mut_ptr() as usize;
        offs.iter()
            .map(|&(o, l)| MemRange::new(base + o, l))
            .collect()
    };
    let mut target = Bytes::new(4096);
    fill(&mut target, 9);
    let tranges = ranges(&mut target, &TARGET_RANGES);
    let th = register(p.module, &RegRequest::vectored(&tranges, access))
        .expect("a vectored registration");
    assert_eq!(th.ranges(), &tranges[..], "the handle lists its ranges");
    assert_eq!(th.len(), 3 * 1024);
    let mut local = Bytes::new(4096);
    let lranges = ranges(&mut local, &LOCAL_RANGES);
    let lh = register(p.module, &RegRequest::vectored(&lranges, access)).unwrap();
    let lbase = local.as_ptr() as usize;
    let tbase = target.as_ptr() as usize;
    let mut ad = (tbase as u64).to_le_bytes().to_vec();
    ad.extend_from_slice(th.remote().as_bytes());
    let (raddr, rh) = remote_of(&p.swap(&ad));
    let fits = |put: bool| {
        let (limit, align) = match put {
            true => (attrs.put_limit, attrs.put_alignment),
            false => (attrs.get_limit, attrs.get_alignment),
        };
        CHUNK <= limit && CHUNK % align == 0
    };
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let expect_refused = |what: &'static str| -> RdmaCallback {
        let e = errors.clone();
        Box::new(move |_, c| {
            if c.status.is_ok() {
                e.lock().unwrap().push(format!("{what} completed"));
            }
        })
    };
    let ok = || -> RdmaCallback { Box::new(|_, c| c.status.expect("vectored transfer")) };
    // Where the puts land in the peer's target (offset, pattern seed).
    let mut puts = Vec::new();
    if attrs.flags.contains(BtlFlags::GET) && fits(false) {
        // Gets from the middle of each range, into the local ranges.
        for (i, &(off, _)) in TARGET_RANGES.iter().enumerate() {
            let at = 512 + i * CHUNK;
            let r = raddr + (off + 256) as u64;
            p.module
                .get(
                    &Transfer::new(ep, Local::new(lbase + at, &lh), Remote::new(r, &rh), CHUNK),
                    ok(),
                )
                .expect("get from a range");
        }
        p.module.flush(Some(ep)).expect("flush");
        for (i, &(off, _)) in TARGET_RANGES.iter().enumerate() {
            let at = 512 + i * CHUNK;
            let want: Vec<u8> = (off + 256..off + 256 + CHUNK)
                .map(|j| pattern(9, j))
                .collect();
            // SAFETY: our own live buffer, after the flush that completed the gets.
            let got = unsafe { crate::buffer::snapshot(lbase + at, CHUNK) };
            assert_eq!(got, want, "get from range {i}");
        }
        let r = raddr + 1024 - 32;
        let e = p.module.get(
            &Transfer::new(ep, Local::new(lbase, &lh), Remote::new(r, &rh), CHUNK),
            expect_refused("get across"),
        );
        assert!(
            e.is_ok() || matches!(e, Err(Error::OutOfRange { .. })),
            "{e:?}"
        );
    }
    if attrs.flags.contains(BtlFlags::PUT) && fits(true) {
        // Puts at the start and the end of every range, from both local ranges.
        for (i, &(off, len)) in TARGET_RANGES.iter().enumerate() {
            for (j, at) in [off, off + len - CHUNK].into_iter().enumerate() {
                let seed = 20 + 2 * i + j;
                let src = LOCAL_RANGES[j].0 + 64 * i;
                fill(&mut local[src..src + CHUNK], seed);
                let r = raddr + at as u64;
                p.module
                    .put(
                        &Transfer::new(
                            ep,
                            Local::new(lbase + src, &lh),
                            Remote::new(r, &rh),
                            CHUNK,
                        ),
                        ok(),
                    )
                    .expect("put into a range");
                puts.push((at, seed));
            }
        }
        // Across the two touching ranges, in the gap, past the last, before the first.
        let refusals = [
            (raddr + 1024 - 32, "across"),
            (raddr + 2048 + 512, "gap"),
            (raddr + 4096 - 32, "past"),
            (raddr - CHUNK as u64, "before"),
        ];
        for (r, what) in refusals {
            let e = p.module.put(
                &Transfer::new(ep, Local::new(lbase, &lh), Remote::new(r, &rh), CHUNK),
                expect_refused(what),
            );
            assert!(
                e.is_ok() || matches!(e, Err(Error::OutOfRange { .. })),
                "{what}: {e:?}"
            );
        }
        let local_across = p.module.put(
            &Transfer::new(
                ep,
                Local::new(lbase + 2048 - 32, &lh),
                Remote::new(raddr, &rh),
                CHUNK,
            ),
            expect_refused("local across"),
        );
        assert!(
            matches!(local_across, Err(Error::OutOfRange { side: "local", .. })),
            "{local_across:?}"
        );
    }
    p.module.flush(None).expect("flush");
    assert!(
        errors.lock().unwrap().is_empty(),
        "{:?}",
        errors.lock().unwrap()
    );
    // Our target as the peer left it: its puts where they belong, nothing else changed.
    let peer_puts = p.swap(&encode(&puts));
    let mut want: Vec<u8> = (0..4096).map(|j| pattern(9, j)).collect();
    for (at, seed) in decode(&peer_puts) {
        for k in 0..CHUNK {
            want[at + k] = pattern(seed, k);
        }
    }
    // SAFETY: our own live buffer, after the exchange that follows the peer's flush.
    let got = unsafe { crate::buffer::snapshot(tbase, 4096) };
    let first_bad = got.iter().zip(&want).position(|(g, w)| g != w);
    assert!(first_bad.is_none(), "target differs at byte {first_bad:?}");
    p.barrier();
    drop((th, lh));
}

fn encode(puts: &[(usize, usize)]) -> Vec<u8> {
    puts.iter()
        .flat_map(|&(a, s)| [(a as u32).to_le_bytes(), (s as u32).to_le_bytes()].concat())
        .collect()
}

fn decode(b: &[u8]) -> Vec<(usize, usize)> {
    b.chunks(8)
        .map(|c| {
            let w = |i: usize| u32::from_le_bytes(c[i..i + 4].try_into().unwrap()) as usize;
            (w(0), w(4))
        })
        .collect()
}
