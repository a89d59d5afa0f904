//! Every atomic operation at both widths, from every rank at once, each operation on
//! one word of rank 0's, checked against a reference computed from what every rank
//! sent (the pairwise checks run one origin at a time).

use crate::buffer::{snapshot, Bytes};
use crate::rdma::{counting, ALL};
use crate::remote_of;
use crate::retry::{idle_progress, retry_on};
use rbtl_btl::{
    AtomicFlags, AtomicKind, AtomicOp, AtomicWidth, BtlFlags, Endpoint, Local, Module,
    RdmaCallback, Remote, RemoteAtomic, RemoteHandle,
};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rounds of each operation per rank and width.
const ROUNDS: usize = 40;
/// The operations, each on a word of its own (compare-and-swap as `None`), and the
/// flag that lists each.
const OPS: [(Option<AtomicOp>, AtomicFlags); 6] = [
    (Some(AtomicOp::Add), AtomicFlags::ADD),
    (Some(AtomicOp::And), AtomicFlags::AND),
    (Some(AtomicOp::Or), AtomicFlags::OR),
    (Some(AtomicOp::Xor), AtomicFlags::XOR),
    (Some(AtomicOp::Swap), AtomicFlags::SWAP),
    (None, AtomicFlags::CSWAP),
];
/// Bytes of a word's slot at rank 0: the word, then guard bytes no operation may touch.
const SLOT: usize = 16;
const GUARD: u8 = 0x5a;
/// The byte a fetch result starts as: a 32-bit fetch leaves the four after it.
const UNWRITTEN: u8 = 0xaa;
/// Adds rank 0 makes itself with the processor's instructions, during the others',
/// where the module's atomics are atomic with them ([`AtomicFlags::GLOB`]), and each
/// one's value.
const LOCAL_ADDS: u64 = 2000;
const LOCAL_ADD: u64 = 0x1_0001;
/// The last word of rank 0's area counts the ranks that are done.
const DONE_AT: usize = 2 * OPS.len() * SLOT;

/// The widths: (bits, width).
const WIDTHS: [(u32, AtomicWidth); 2] = [(64, AtomicWidth::W64), (32, AtomicWidth::W32)];

/// Meet the other ranks: give this rank's bytes, get every rank's, by rank (a
/// barrier as well).
pub type Meet<'a> = &'a mut dyn FnMut(&[u8]) -> Vec<Vec<u8>>;

fn mask(bits: u32) -> u64 {
    if bits == 64 {
        u64::MAX
    } else {
        (1 << bits) - 1
    }
}

/// Offset of the word of operation `o` at width `w` (an index of [`WIDTHS`]).
fn slot(o: usize, w: usize) -> usize {
    (w * OPS.len() + o) * SLOT
}

/// The word's value before the check: near a carry out of the low 32 bits for add
/// and compare-and-swap (a 32-bit word wraps, a 64-bit one carries).
fn initial(o: usize, bits: u32) -> u64 {
    let v = match OPS[o].0 {
        Some(AtomicOp::Add) => 0xffff_fff0,
        Some(AtomicOp::And) => u64::MAX,
        Some(AtomicOp::Or) => 0,
        Some(AtomicOp::Xor) => 0x0123_4567_89ab_cdef,
        Some(AtomicOp::Swap) => 0x5eed,
        None => 0xffff_fff8,
    };
    v & mask(bits)
}

/// A well-mixed number for (rank, round, operation) (splitmix64).
fn mix(rank: usize, round: usize, o: usize) -> u64 {
    let mut z =
        ((rank as u64) << 40 | (round as u64) << 8 | o as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The operand of `rank`'s round `i` of operation `o` at width `bits`: and clears one
/// bit, or sets one, swap stores a value no other swap stores.
fn operand(o: usize, rank: usize, i: usize, bits: u32) -> u64 {
    let h = mix(rank, i, o);
    let bit = 1u64 << (h % u64::from(bits));
    let v = match OPS[o].0 {
        Some(AtomicOp::And) => !bit,
        Some(AtomicOp::Or) => bit,
        Some(AtomicOp::Swap) => (rank as u64 + 1) << 40 | (rank as u64 + 1) << 16 | (i as u64 + 1),
        _ => h,
    };
    v & mask(bits)
}

/// What the module lists of `o` at width `w`.
fn listed(m: &dyn Module, o: usize, w: usize) -> bool {
    let a = m.attributes().atomic_flags;
    a.contains(OPS[o].1) && (w == 0 || a.contains(AtomicFlags::U32))
}

/// Every rank that reaches rank 0 through `m` (`eps[0]`; itself too over `self`)
/// applies every operation the module lists, `ROUNDS` (40) times at each width, to one
/// word per operation and width at rank 0, all at once: add, and, or and xor
/// alternating fetching and not (where the module has both), swap fetching, and
/// increments by compare-and-swap loops. Rank 0 then checks each word against its
/// reference (the operands of every rank folded; for swap, the values fetched and
/// left are the values stored and the first; for compare-and-swap, the count of
/// successes and each old value claimed once; for add, with rank 0's own adds by the
/// processor's instructions where the module says its atomics mix with those,
/// [`AtomicFlags::GLOB`]), that no operation touched the bytes
/// beside its word, and every origin that its 32-bit fetches wrote 4 bytes.
/// `eps` is by rank, `me` this rank, `meet` the other ranks' bytes.
pub fn atomics_on_shared_words(
    m: &mut dyn Module,
    eps: &[Option<Endpoint>],
    me: usize,
    meet: Meet<'_>,
) {
    if !m.attributes().flags.contains(BtlFlags::ATOMIC_FOPS) {
        return;
    }
    // Rank 0's area, initialised; every rank says whether it takes part.
    let mut area = Bytes::new(DONE_AT + 8);
    let area_handle = (me == 0).then(|| {
        for (w, &(bits, _)) in WIDTHS.iter().enumerate() {
            for o in 0..OPS.len() {
                let at = slot(o, w);
                area[at..at + SLOT].fill(GUARD);
                let v = initial(o, bits);
                let bytes = (bits / 8) as usize;
                area[at..at + bytes].copy_from_slice(&v.to_ne_bytes()[..bytes]);
            }
        }
        // SAFETY: `area` outlives the handle, dropped at the end of this function
        // before it (declared after it), and its heap block does not move.
        unsafe { m.register_mem(None, area.as_mut_ptr() as usize, area.len(), ALL) }
            .expect("register rank 0's words")
    });
    let origin = eps.first().copied().flatten();
    let mut mine = vec![u8::from(origin.is_some())];
    if let Some(h) = &area_handle {
        mine.extend_from_slice(&(area.as_ptr() as u64).to_le_bytes());
        mine.extend_from_slice(h.remote().as_bytes());
    }
    let all = meet(&mine);
    let origins: Vec<usize> = (0..all.len())
        .filter(|&r| all[r].first() == Some(&1))
        .collect();
    let (raddr, rh) = remote_of(&all[0][1..]);
    let fetched = origin.map(|ep| apply_all(m, ep, me, raddr, &rh));
    let mut local_adds = 0;
    if me == 0 {
        // Progress (applying what the transport applies here) until every origin is
        // done; meanwhile, where the module's atomics are atomic with the processor's,
        // add to the add words here too.
        let start = Instant::now();
        let done_at = area.as_ptr() as usize + DONE_AT;
        // SAFETY: our own live area; origins add to its last word.
        let done = || u64::from_ne_bytes(unsafe { snapshot(done_at, 8) }.try_into().unwrap());
        let glob = m.attributes().atomic_flags.contains(AtomicFlags::GLOB);
        let base = area.as_mut_ptr();
        while done() < origins.len() as u64 || (glob && local_adds < LOCAL_ADDS) {
            if glob && local_adds < LOCAL_ADDS {
                // SAFETY: the add words of our own live area, aligned (slots are 16
                // bytes apart from an aligned start), which every process reaches
                // only atomically meanwhile.
                unsafe { add_here(m, base, LOCAL_ADD) };
                local_adds += 1;
            }
            idle_progress(m);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{}: origins still busy after 60 s",
                m.name()
            );
        }
    }
    let all = meet(&fetched.unwrap_or_default());
    if me == 0 {
        // SAFETY: our own live area, no longer written (every origin is done).
        let now = unsafe { snapshot(area.as_ptr() as usize, area.len()) };
        check_words(m, &now, &origins, &all, local_adds * LOCAL_ADD);
    }
    drop(area_handle);
}

/// Add `v` to the add word of each width the module lists in the area at `base`, with
/// the processor's atomic instructions.
///
/// # Safety
///
/// `base` is rank 0's live area, aligned to 8, whose words are reached only
/// atomically.
unsafe fn add_here(m: &dyn Module, base: *mut u8, v: u64) {
    let add = 0;
    if listed(m, add, 0) {
        // SAFETY: the caller's contract.
        let w = unsafe { AtomicU64::from_ptr(base.add(slot(add, 0)).cast()) };
        w.fetch_add(v, Ordering::AcqRel);
    }
    if listed(m, add, 1) {
        // SAFETY: the caller's contract.
        let w = unsafe { AtomicU32::from_ptr(base.add(slot(add, 1)).cast()) };
        w.fetch_add(v as u32, Ordering::AcqRel);
    }
}

/// Issue rank `me`'s operations on rank 0's words at `raddr` and wait for them; tell
/// rank 0 this rank is done. What the swaps fetched and the old values of the
/// successful compare-and-swaps, by width: `ROUNDS` u64 each.
fn apply_all(
    m: &mut dyn Module,
    ep: Endpoint,
    me: usize,
    raddr: u64,
    rh: &RemoteHandle,
) -> Vec<u8> {
    let name = m.name().to_string();
    let both = m.attributes().flags.contains(BtlFlags::ATOMIC_OPS);
    let mut results = Bytes::new((ROUNDS * OPS.len() * WIDTHS.len() + 1) * 8);
    results.fill(UNWRITTEN);
    // SAFETY: `results` outlives the handle (dropped at the end of this function,
    // declared after it) and does not move.
    let rl = unsafe { m.register_mem(Some(ep), results.as_mut_ptr() as usize, results.len(), ALL) }
        .expect("register the results");
    let at = |o: usize, w: usize| raddr + slot(o, w) as u64;
    let result = |o: usize, w: usize, i: usize| ((w * OPS.len() + o) * ROUNDS + i) * 8;
    let done = Arc::new(AtomicUsize::new(0));
    let mut issued = 0;
    for i in 0..ROUNDS {
        for (w, &(bits, width)) in WIDTHS.iter().enumerate() {
            for (o, &(op, _)) in OPS.iter().enumerate() {
                let Some(op) = op.filter(|_| listed(m, o, w)) else {
                    continue;
                };
                let v = operand(o, me, i, bits);
                let local = results.as_ptr() as usize + result(o, w, i);
                let fetch = op == AtomicOp::Swap || i % 2 == 0 || !both;
                let word = Remote::new(at(o, w), rh);
                let a = RemoteAtomic::new(ep, word, AtomicKind::Op(op, v)).of_width(width);
                let a = if fetch {
                    a.fetching(Local::new(local, &rl))
                } else {
                    a
                };
                retry(m, |m, cb| m.atomic(&a, cb), &done);
                issued += 1;
            }
        }
    }
    m.flush(Some(ep)).expect("flush");
    assert_eq!(
        done.load(Ordering::SeqCst),
        issued,
        "{name}: every atomic completed"
    );
    // Increments by compare-and-swap, one at a time: each success claims an old value.
    let cs = OPS.len() - 1;
    let mut claimed = vec![Vec::new(); WIDTHS.len()];
    for (w, &(bits, width)) in WIDTHS.iter().enumerate() {
        if !listed(m, cs, w) {
            continue;
        }
        let local = results.as_ptr() as usize + result(cs, w, 0);
        let mut guess = initial(cs, bits);
        let mut tries = 0;
        while claimed[w].len() < ROUNDS {
            let next = guess.wrapping_add(1) & mask(bits);
            retry(
                m,
                |m, cb| {
                    m.atomic(
                        &RemoteAtomic::new(
                            ep,
                            Remote::new(at(cs, w), rh),
                            AtomicKind::CompareSwap {
                                compare: guess,
                                value: next,
                            },
                        )
                        .fetching(Local::new(local, &rl))
                        .of_width(width),
                        cb,
                    )
                },
                &done,
            );
            m.flush(Some(ep)).expect("flush");
            // SAFETY: our own live results, written by the completed compare-and-swap.
            let b = unsafe { snapshot(local, 8) };
            let old = if bits == 64 {
                u64::from_ne_bytes(b.try_into().unwrap())
            } else {
                assert_eq!(
                    b[4..],
                    [UNWRITTEN; 4],
                    "{name}: a 32-bit compare-and-swap wrote 8 bytes"
                );
                u64::from(u32::from_ne_bytes(b[..4].try_into().unwrap()))
            };
            if old == guess {
                claimed[w].push(old);
                guess = next;
            } else {
                guess = old;
            }
            tries += 1;
            assert!(
                tries < 1_000_000,
                "{name}: compare-and-swap increments made no headway"
            );
        }
    }
    // Every 32-bit fetch wrote 4 bytes.
    // SAFETY: our own live results, every fetch completed.
    let after = unsafe { snapshot(results.as_ptr() as usize, results.len()) };
    for o in 0..cs {
        for i in (0..ROUNDS).filter(|_| listed(m, o, 1)) {
            let r = result(o, 1, i);
            assert_eq!(
                after[r + 4..r + 8],
                [UNWRITTEN; 4],
                "{name}: a 32-bit fetch wrote 8 bytes"
            );
        }
    }
    // This rank is done: the last word at rank 0 counts it.
    let (count, local) = (
        raddr + DONE_AT as u64,
        results.as_ptr() as usize + results.len() - 8,
    );
    retry(
        m,
        |m, cb| {
            if both {
                m.atomic(
                    &RemoteAtomic::new(
                        ep,
                        Remote::new(count, rh),
                        AtomicKind::Op(AtomicOp::Add, 1),
                    ),
                    cb,
                )
            } else {
                m.atomic(
                    &RemoteAtomic::new(
                        ep,
                        Remote::new(count, rh),
                        AtomicKind::Op(AtomicOp::Add, 1),
                    )
                    .fetching(Local::new(local, &rl)),
                    cb,
                )
            }
        },
        &done,
    );
    m.flush(Some(ep)).expect("flush");
    // What rank 0 checks: the swaps' fetches, then the claimed old values, by width.
    let swap = OPS.len() - 2;
    let mut out = Vec::new();
    for (w, claimed) in claimed.iter().enumerate() {
        for i in 0..ROUNDS {
            let r = result(swap, w, i);
            let v = if w == 0 {
                u64::from_ne_bytes(after[r..r + 8].try_into().unwrap())
            } else {
                u64::from(u32::from_ne_bytes(after[r..r + 4].try_into().unwrap()))
            };
            out.extend_from_slice(&v.to_le_bytes());
        }
        for i in 0..ROUNDS {
            let v = claimed.get(i).copied().unwrap_or(0);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    drop(rl);
    out
}

/// Run one atomic (`op` with a counting callback), trying again after progress while
/// the transport is out of resources.
fn retry(
    m: &mut dyn Module,
    mut op: impl FnMut(&mut dyn Module, RdmaCallback) -> rbtl_btl::Result<()>,
    done: &Arc<AtomicUsize>,
) {
    retry_on(m, "an atomic", |m| op(m, counting(done)));
}

/// Rank 0's words `now` against the reference from `origins` and what they sent
/// (`all`, by rank).
fn check_words(m: &dyn Module, now: &[u8], origins: &[usize], all: &[Vec<u8>], here: u64) {
    let name = m.name();
    let u64_at = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    for (w, &(bits, _)) in WIDTHS.iter().enumerate() {
        let bytes = (bits / 8) as usize;
        for (o, &(op, _)) in OPS.iter().enumerate() {
            let at = slot(o, w);
            let mut word = [0u8; 8];
            word[..bytes].copy_from_slice(&now[at..at + bytes]);
            let word = u64::from_ne_bytes(word);
            assert!(
                now[at + bytes..at + SLOT].iter().all(|&b| b == GUARD),
                "{name}: an operation on word {o} ({bits}-bit) touched the bytes beside it"
            );
            let init = initial(o, bits);
            if !listed(m, o, w) {
                assert_eq!(
                    word, init,
                    "{name}: word {o} ({bits}-bit) changed though not listed"
                );
                continue;
            }
            let sent = |r: usize, k: usize| u64_at(&all[r], w * 2 * ROUNDS + k);
            match op {
                Some(AtomicOp::Swap) => {
                    let mut stored: Vec<u64> = vec![init];
                    let mut seen = vec![word];
                    for &r in origins {
                        stored.extend((0..ROUNDS).map(|i| operand(o, r, i, bits)));
                        seen.extend((0..ROUNDS).map(|i| sent(r, i)));
                    }
                    stored.sort_unstable();
                    seen.sort_unstable();
                    assert_eq!(
                        seen, stored,
                        "{name}: swaps ({bits}-bit): fetched and left are not the values stored"
                    );
                }
                Some(op) => {
                    // Rank 0's own adds, where it made them.
                    let mut want = if op == AtomicOp::Add {
                        init.wrapping_add(here) & mask(bits)
                    } else {
                        init
                    };
                    for &r in origins {
                        for i in 0..ROUNDS {
                            want = op.value(want, operand(o, r, i, bits)) & mask(bits);
                        }
                    }
                    assert_eq!(
                        word,
                        want,
                        "{name}: {op:?} ({bits}-bit) from {} ranks",
                        origins.len()
                    );
                }
                None => {
                    let total = (origins.len() * ROUNDS) as u64;
                    let mut olds: Vec<u64> = Vec::new();
                    for &r in origins {
                        olds.extend((0..ROUNDS).map(|i| sent(r, ROUNDS + i)));
                    }
                    let mut want: Vec<u64> = (0..total)
                        .map(|k| init.wrapping_add(k) & mask(bits))
                        .collect();
                    olds.sort_unstable();
                    want.sort_unstable();
                    assert_eq!(
                        olds, want,
                        "{name}: compare-and-swap increments ({bits}-bit): each old value once"
                    );
                    assert_eq!(
                        word,
                        init.wrapping_add(total) & mask(bits),
                        "{name}: compare-and-swap increments ({bits}-bit)"
                    );
                }
            }
        }
    }
}
