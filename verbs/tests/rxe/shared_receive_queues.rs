//! Shared receive queues (made by the legacy verb and by the provider's
//! `create_srq_ex`) serving an RC queue pair, and a completion channel.

use crate::support::{connected_qps, device, Buf, WAIT};
use rbtl_verbs::{Context, Cq, MrAccess, Op, Pd, Qp, QpCaps, Srq};
use std::time::Duration;

/// An RC queue pair `a` on `cq_a` connected (at `psns`) to one on `cq_b` that takes its
/// receives from `srq`; both queues `depth` deep, sends never inline.
fn srq_pair(
    ctx: &Context,
    pd: &Pd,
    cqs: (&Cq, &Cq),
    srq: &Srq,
    depth: u32,
    psns: (u32, u32),
) -> (Qp, Qp) {
    let caps = QpCaps {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_inline: 0,
    };
    connected_qps(ctx, pd, cqs, Some(srq), caps, psns, MrAccess::LOCAL_WRITE)
}

/// Receives posted to a shared receive queue serve a queue pair that has none of its
/// own; a completion channel wakes a waiter when the CQ it watches gets a completion.
#[test]
fn shared_receive_queue_and_completion_channel() {
    let Some(ctx) = device() else { return };
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let mut cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with_channel(16, &channel).unwrap();
    let mut srq = Srq::create(&pd, 16).unwrap();
    let (mut a, _b) = srq_pair(&ctx, &pd, (&cq_a, &cq_b), &srq, 16, (7, 9));
    let src = Buf::new(&pd, 256, 0x42, MrAccess::LOCAL_WRITE);
    let dst = Buf::new(&pd, 256, 0, MrAccess::LOCAL_WRITE);
    cq_b.req_notify().unwrap();
    assert!(
        !channel.wait(Duration::from_millis(50)).unwrap(),
        "nothing completed yet"
    );
    // SAFETY: the ranges lie inside the registered buffers, which outlive the ops.
    unsafe {
        srq.post_recv(77, &dst.mr, dst.addr(), 256).unwrap();
        a.post_send(1, Op::Send, &src.mr, src.addr(), 200, false)
            .unwrap();
    }
    cq_a.wait_one(WAIT).unwrap().result().unwrap();
    assert!(channel.wait(WAIT).unwrap(), "the channel woke us");
    let done = cq_b.wait_one(WAIT).unwrap();
    done.result().unwrap();
    assert_eq!(
        (done.wr_id, done.byte_len),
        (77, 200),
        "the SRQ's receive took it"
    );
    assert_eq!(&dst.read()[..200], &[0x42; 200][..]);
}

/// A basic SRQ made by the provider's `create_srq_ex`, reached through the
/// `verbs_context` the way XRC SRQs are (written after verbs.h, not taken from
/// rdma-sys), is a working shared receive queue: messages from an RC queue pair land in
/// its receives, in the order they were posted. This is as close to the XRC SRQ path
/// as a device without XRC gets.
#[test]
fn basic_srq_made_through_create_srq_ex_receives_from_an_rc_queue_pair() {
    let Some(ctx) = device() else { return };
    let pd = ctx.alloc_pd().unwrap();
    let (mut cq_a, mut cq_b) = (ctx.create_cq(16).unwrap(), ctx.create_cq(16).unwrap());
    let mut srq = Srq::create_ex_basic(&pd, 8).unwrap();
    let (mut a, _b) = srq_pair(&ctx, &pd, (&cq_a, &cq_b), &srq, 8, (0x31, 0x47));
    let src = Buf::new(&pd, 3 * 64, 0, MrAccess::LOCAL_WRITE);
    let dst = Buf::new(&pd, 3 * 128, 0, MrAccess::LOCAL_WRITE);
    for i in 0..3u64 {
        // SAFETY: inside the registered buffers, which outlive the receives; nothing
        // is in flight on `src` yet.
        unsafe {
            std::ptr::write_bytes((src.addr() + 64 * i) as *mut u8, 0xa0 + i as u8, 64);
            srq.post_recv(100 + i, &dst.mr, dst.addr() + 128 * i, 128)
                .unwrap();
        }
    }
    for (i, len) in [(0u64, 10u32), (1, 64), (2, 33)] {
        // SAFETY: inside the registered buffer, which outlives the send.
        unsafe { a.post_send(i, Op::Send, &src.mr, src.addr() + 64 * i, len, false) }.unwrap();
        cq_a.wait_one(WAIT).unwrap().result().unwrap();
        let got = cq_b.wait_one(WAIT).unwrap();
        got.result().unwrap();
        assert_eq!((got.wr_id, got.byte_len), (100 + i, len), "message {i}");
        let at = 128 * i as usize;
        assert_eq!(
            &dst.read()[at..at + len as usize],
            &vec![0xa0 + i as u8; len as usize][..]
        );
    }
}
