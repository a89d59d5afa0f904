//! The check of atomic operations on the peer's memory.

use crate::rdma::{counting, ALL};
use crate::{remote_of, Buffer, Peer};
use rbtl_btl::{AtomicFlags, AtomicKind, AtomicOp, BtlFlags, Error, Local, Remote, RemoteAtomic};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Fetch-add, compare-swap and the other atomics on the peer's u64 words.
pub fn atomics(p: &mut Peer<'_>) {
    let attrs = p.module.attributes().clone();
    if !attrs.flags.contains(BtlFlags::ATOMIC_FOPS) {
        let b = Buffer::new(p.module, p.endpoint, 64, ALL);
        let refused = p.module.atomic(
            &RemoteAtomic::new(
                p.endpoint,
                Remote::new(b.addr(0) as u64, b.handle.remote()),
                AtomicKind::Op(AtomicOp::Add, 1),
            ),
            Box::new(|_, _| {}),
        );
        assert!(matches!(
            refused,
            Err(Error::NotSupported(_)) | Err(Error::BadRemoteHandle(_))
        ));
        return;
    }
    const N: usize = 100;
    let ep = p.endpoint;
    let results = Buffer::new(p.module, ep, N * 8, ALL);
    let target = Buffer::new(p.module, ep, 64, ALL);
    let peer = p.swap(&target.advertise());
    let (raddr, rh) = remote_of(&peer);
    let done = Arc::new(AtomicUsize::new(0));
    for i in 0..N {
        p.module
            .atomic(
                &RemoteAtomic::new(
                    ep,
                    Remote::new(raddr, &rh),
                    AtomicKind::Op(AtomicOp::Add, 1),
                )
                .fetching(Local::new(results.addr(i * 8), &results.handle)),
                counting(&done),
            )
            .expect("atomic_fop");
        p.module.flush(Some(ep)).expect("flush");
    }
    assert_eq!(done.load(Ordering::SeqCst), N);
    let mut fetched: Vec<u64> = results
        .snapshot()
        .chunks(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    fetched.sort_unstable();
    assert_eq!(
        fetched,
        (0..N as u64).collect::<Vec<_>>(),
        "fetch-add results"
    );
    p.barrier();
    let word = |b: &Buffer, i: usize| {
        u64::from_ne_bytes(b.snapshot()[i * 8..i * 8 + 8].try_into().unwrap())
    };
    assert_eq!(word(&target, 0), N as u64, "counter after fetch-adds");
    p.barrier();

    // Compare-swap: a mismatch leaves the word, a match replaces it.
    for (compare, value) in [(1, 5), (N as u64, 777)] {
        p.module
            .atomic(
                &RemoteAtomic::new(
                    ep,
                    Remote::new(raddr, &rh),
                    AtomicKind::CompareSwap { compare, value },
                )
                .fetching(Local::new(results.addr(0), &results.handle)),
                Box::new(|_, c| c.status.expect("cswap status")),
            )
            .expect("atomic_cswap");
        p.module.flush(Some(ep)).expect("flush");
        assert_eq!(word(&results, 0), N as u64, "cswap fetched the old value");
    }
    p.barrier();
    assert_eq!(word(&target, 0), 777, "cswap stored");
    p.barrier();

    // Non-fetching operations on word 1: those the module lists apply, the others are
    // refused.
    if attrs.flags.contains(BtlFlags::ATOMIC_OPS) {
        let w1 = raddr + 8;
        let mut expected = 0u64;
        for (op, flag, operand) in [
            (AtomicOp::Swap, AtomicFlags::SWAP, 0b1100u64),
            (AtomicOp::Or, AtomicFlags::OR, 0b0011),
            (AtomicOp::And, AtomicFlags::AND, 0b0110),
            (AtomicOp::Xor, AtomicFlags::XOR, 0b1111),
            (AtomicOp::Add, AtomicFlags::ADD, 100),
        ] {
            let r = p.module.atomic(
                &RemoteAtomic::new(ep, Remote::new(w1, &rh), AtomicKind::Op(op, operand)),
                Box::new(|_, c| c.status.expect("op")),
            );
            if !attrs.atomic_flags.contains(flag) {
                assert!(matches!(r, Err(Error::NotSupported(_))), "{op:?}: {r:?}");
                continue;
            }
            r.expect("atomic_op");
            p.module.flush(Some(ep)).expect("flush");
            let w = AtomicU64::new(expected);
            op.apply(&w, operand);
            expected = w.into_inner();
        }
        p.barrier();
        assert_eq!(word(&target, 1), expected);
        p.barrier();
    }
    let misaligned = p.module.atomic(
        &RemoteAtomic::new(
            ep,
            Remote::new(raddr + 4, &rh),
            AtomicKind::Op(AtomicOp::Add, 1),
        ),
        Box::new(|_, _| {}),
    );
    assert!(
        matches!(misaligned, Err(Error::Misaligned(_))),
        "{misaligned:?}"
    );
    p.barrier();
}
