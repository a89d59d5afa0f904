//! The check of 32-bit atomics (`AtomicWidth::W32`) on the peer's memory.

use crate::buffer::Buffer;
use crate::rdma::{counting, ALL};
use crate::{remote_of, Peer};
use rbtl_btl::{
    AtomicFlags, AtomicKind, AtomicOp, AtomicWidth, BtlFlags, Error, Local, Order, Remote,
    RemoteAtomic,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The peer's target words (byte offset, value before the check), in pairs that share
/// an 8-byte word, so that each operation's neighbour shows it was left alone.
const START: [(usize, u32); 8] = [
    (0, 0x0102_0304),  // the neighbour of the counter
    (4, 0),            // the fetch-add counter, the high half
    (8, u32::MAX),     // wraps to 0 without carrying into its neighbour
    (12, 0x7fff_ffff), // i32::MAX: +1 is i32::MIN, then -1 (sign-extended) again
    (16, 5),           // compare-swap that does not match
    (20, 0xffff_fffe), // -2: compare-swap with a sign-extended compare
    (24, 0),           // a non-fetching add
    (28, 0xdead_beef), // its neighbour
];

fn word(b: &Buffer, off: usize) -> u32 {
    u32::from_ne_bytes(b.snapshot()[off..off + 4].try_into().unwrap())
}

/// Add, fetch-add and compare-swap on the peer's 32-bit words, where the module lists
/// `AtomicFlags::U32` (refused with `NotSupported` where it does not): fetch-adds count
/// exactly and fetch 4 bytes only; a word wraps without touching its neighbour; a
/// sign-extended operand or compare value works as its low 32 bits; a compare-swap
/// that does not match changes nothing; a 32-bit word that is not 4-byte aligned is
/// `Misaligned`.
pub fn atomics_32bit(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    let ep = p.endpoint;
    if !attrs.flags.contains(BtlFlags::ATOMIC_FOPS) {
        return;
    }
    let results = Buffer::new(p.module, ep, 256, ALL);
    if !attrs.atomic_flags.contains(AtomicFlags::U32) {
        let r = p.module.atomic(
            &RemoteAtomic::new(
                ep,
                Remote::new(results.addr(0) as u64, results.handle.remote()),
                AtomicKind::Op(AtomicOp::Add, 1),
            )
            .fetching(Local::new(results.addr(0), &results.handle))
            .of_width(AtomicWidth::W32),
            Box::new(|_, _| {}),
        );
        assert!(matches!(r, Err(Error::NotSupported(_))), "{r:?}");
        return;
    }
    let mut target = Buffer::new(p.module, ep, 64, ALL);
    for (off, v) in START {
        target.mem[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    let (raddr, rh) = remote_of(&p.swap(&target.advertise()));
    let at = |off: usize| raddr + off as u64;
    // SAFETY: nobody writes `results` but the atomics below, started after this.
    unsafe { std::ptr::write_bytes(results.addr(0) as *mut u8, 0xaa, 256) };
    let done = Arc::new(AtomicUsize::new(0));
    let any = Order::ANY;
    let rl = &results.handle;

    // A fetching 32-bit atomic on the peer's word at `off`, its result in the 8-byte
    // slot `slot` of `results`.
    let fetching = |p: &mut Peer<'_>, off: usize, kind: AtomicKind, slot: usize| {
        p.module
            .atomic(
                &RemoteAtomic::new(ep, Remote::new(at(off), &rh), kind)
                    .fetching(Local::new(results.addr(8 * slot), rl))
                    .of_width(AtomicWidth::W32)
                    .ordered(any),
                counting(&done),
            )
            .unwrap_or_else(|e| panic!("32-bit {kind:?}: {e:?}"));
    };

    // Fetch-adds on the high half of word 0, each result in its own slot.
    const N: usize = 20;
    for i in 0..N {
        fetching(p, 4, AtomicKind::Op(AtomicOp::Add, 1), i);
    }
    p.module.flush(Some(ep)).expect("flush");
    assert_eq!(done.load(Ordering::SeqCst), N);
    let mut fetched: Vec<u32> = (0..N).map(|i| word(&results, 8 * i)).collect();
    fetched.sort_unstable();
    assert_eq!(
        fetched,
        (0..N as u32).collect::<Vec<_>>(),
        "fetch-add results"
    );
    let untouched = (0..N).all(|i| word(&results, 8 * i + 4) == 0xaaaa_aaaa);
    assert!(untouched, "a 32-bit fetch wrote more than 4 bytes");

    // Wrapping and signs, each fetched into slot 0.
    let signed = |v: i32| i64::from(v) as u64;
    let fetched = |p: &mut Peer<'_>, off: usize, kind: AtomicKind| -> u32 {
        fetching(p, off, kind, 0);
        p.module.flush(Some(ep)).expect("flush");
        word(&results, 0)
    };
    let fop = |p: &mut Peer<'_>, off: usize, operand: u64| {
        fetched(p, off, AtomicKind::Op(AtomicOp::Add, operand))
    };
    assert_eq!(fop(p, 8, 1), u32::MAX);
    assert_eq!(fop(p, 8, 0), 0, "u32::MAX + 1 wrapped to 0");
    assert_eq!(fop(p, 12, 1), 0x7fff_ffff);
    assert_eq!(
        fop(p, 12, signed(-1)),
        0x8000_0000,
        "i32::MAX + 1 is i32::MIN"
    );
    let cswap = |p: &mut Peer<'_>, off: usize, compare: u64, value: u64| {
        fetched(p, off, AtomicKind::CompareSwap { compare, value })
    };
    assert_eq!(cswap(p, 16, 1, 9), 5, "no match: the old value");
    assert_eq!(cswap(p, 16, 5, 6), 5, "a match: the old value");
    assert_eq!(cswap(p, 20, signed(-2), signed(-3)), 0xffff_fffe);
    if attrs.flags.contains(BtlFlags::ATOMIC_OPS) {
        let cb = counting(&done);
        p.module
            .atomic(
                &RemoteAtomic::new(
                    ep,
                    Remote::new(at(24), &rh),
                    AtomicKind::Op(AtomicOp::Add, 7),
                )
                .of_width(AtomicWidth::W32)
                .ordered(any),
                cb,
            )
            .expect("32-bit add");
        p.module.flush(Some(ep)).expect("flush");
    }
    let misaligned = p.module.atomic(
        &RemoteAtomic::new(
            ep,
            Remote::new(at(2), &rh),
            AtomicKind::Op(AtomicOp::Add, 1),
        )
        .fetching(Local::new(results.addr(0), rl))
        .of_width(AtomicWidth::W32)
        .ordered(any),
        Box::new(|_, _| panic!("a misaligned atomic completed")),
    );
    assert!(
        matches!(misaligned, Err(Error::Misaligned(_))),
        "{misaligned:?}"
    );
    p.barrier();
    // Our words as the peer left them.
    let add = if attrs.flags.contains(BtlFlags::ATOMIC_OPS) {
        7
    } else {
        0
    };
    let expected = [
        (0, 0x0102_0304),
        (4, N as u32),
        (8, 0),
        (12, 0x7fff_ffff),
        (16, 6),
        (20, 0xffff_fffd),
        (24, add),
        (28, 0xdead_beef),
    ];
    for (off, want) in expected {
        assert_eq!(word(&target, off), want, "32-bit word at offset {off}");
    }
    p.barrier();
}
