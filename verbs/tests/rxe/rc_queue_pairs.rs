//! Two RC queue pairs of one process: the device's port and GID, send/receive, RDMA
//! write and read, atomics, and writes the target's registration refuses.

use crate::support::{device, pair, Buf, WAIT};
use rbtl_verbs::{Context, Error, MrAccess, Op};

#[test]
fn port_and_gid_of_the_device() {
    let Some(ctx) = device() else { return };
    let port = ctx.query_port(1).unwrap();
    assert!(port.active && port.mtu >= 256);
    let dev = ctx.query_device().unwrap();
    assert!(dev.ports >= 1 && dev.max_qp_wr > 0 && dev.max_cqe > 0);
    if port.ethernet {
        let gid = ctx.query_gid(1, 1).unwrap();
        assert_eq!(
            &gid[..12],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
            "RoCEv2 IPv4-mapped GID: {gid:?}"
        );
    }
    let e = Context::open("no_such_dev").err().expect("an error");
    assert!(
        matches!(e, Error::NoDevice { .. }) && e.to_string().contains(ctx.name()),
        "{e}"
    );
}

#[test]
fn send_receive_write_read_and_atomics() {
    let Some(ctx) = device() else { return };
    let mut p = pair(&ctx);
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_ATOMIC;
    let src = Buf::new(&p.pd, 4096, 0, all);
    let dst = Buf::new(&p.pd, 4096, 0, all);
    // SAFETY: every post, copy and volatile access below stays inside the registered
    // buffers, which outlive the operations; each operation is waited for before the
    // next.
    unsafe {
        // Send / receive.
        std::ptr::copy_nonoverlapping(b"hello".as_ptr(), src.addr() as *mut u8, 5);
        p.b.post_recv(1, &dst.mr, dst.addr(), 4096).unwrap();
        p.a.post_send(2, Op::Send, &src.mr, src.addr(), 5, true)
            .unwrap();
        p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
        let recv = p.cq_b.wait_one(WAIT).unwrap();
        recv.result().unwrap();
        assert_eq!((recv.wr_id, recv.byte_len), (1, 5));
        assert_eq!(&dst.read()[..5], b"hello");

        // RDMA write of 3000 bytes at an odd offset.
        let pattern: Vec<u8> = (0..3000).map(|i| (i * 7 % 251) as u8).collect();
        std::ptr::copy_nonoverlapping(pattern.as_ptr(), src.addr() as *mut u8, 3000);
        let write = Op::Write {
            remote: dst.addr() + 17,
            rkey: dst.mr.rkey(),
        };
        p.a.post_send(3, write, &src.mr, src.addr(), 3000, false)
            .unwrap();
        p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
        assert_eq!(&dst.read()[17..3017], &pattern[..]);

        // RDMA read back into the source buffer's upper half.
        let read = Op::Read {
            remote: dst.addr() + 17,
            rkey: dst.mr.rkey(),
        };
        p.a.post_send(4, read, &src.mr, src.addr() + 1024, 2048, false)
            .unwrap();
        p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
        assert_eq!(&src.read()[1024..3072], &pattern[..2048]);

        if ctx.query_device().unwrap().atomics {
            let word = (dst.addr() + 4000) & !7;
            std::ptr::write_volatile(word as *mut u64, 40);
            let fadd = Op::FetchAdd {
                remote: word,
                rkey: dst.mr.rkey(),
                add: 2,
            };
            p.a.post_send(5, fadd, &src.mr, src.addr(), 8, false)
                .unwrap();
            p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
            assert_eq!(
                std::ptr::read_volatile(src.addr() as *const u64),
                40,
                "fetched the old value"
            );
            assert_eq!(std::ptr::read_volatile(word as *const u64), 42);
            let cas = Op::CompareSwap {
                remote: word,
                rkey: dst.mr.rkey(),
                compare: 42,
                swap: 7,
            };
            p.a.post_send(6, cas, &src.mr, src.addr(), 8, false)
                .unwrap();
            p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
            assert_eq!(std::ptr::read_volatile(word as *const u64), 7);
        }
    }
}

/// A write the target's registration does not allow ends in an error completion and
/// leaves the target memory unchanged.
fn refused_write(op: impl Fn(&Buf) -> Op, target_access: MrAccess) {
    let Some(ctx) = device() else { return };
    let mut p = pair(&ctx);
    let src = Buf::new(&p.pd, 4096, 0xab, MrAccess::LOCAL_WRITE);
    let dst = Buf::new(&p.pd, 4096, 0x11, target_access);
    // SAFETY: the local range lies inside `src`, which outlives the operation.
    unsafe { p.a.post_send(9, op(&dst), &src.mr, src.addr(), 64, false) }.unwrap();
    let done = p.cq_a.wait_one(WAIT).unwrap();
    let err = done.result().expect_err("the write must fail");
    assert!(matches!(err, Error::Completion { wr_id: 9, .. }), "{err}");
    assert!(dst.read().iter().all(|&b| b == 0x11), "target unchanged");
    drop(p.b);
}

#[test]
fn write_with_a_wrong_key_fails_and_changes_nothing() {
    refused_write(
        |d| Op::Write {
            remote: d.addr(),
            rkey: d.mr.rkey() ^ 0x5a5a,
        },
        MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE,
    );
}

#[test]
fn write_outside_the_registration_fails_and_changes_nothing() {
    refused_write(
        |d| Op::Write {
            remote: d.addr() + 4096 - 32,
            rkey: d.mr.rkey(),
        },
        MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE,
    );
}

#[test]
fn write_to_a_read_only_registration_fails_and_changes_nothing() {
    refused_write(
        |d| Op::Write {
            remote: d.addr(),
            rkey: d.mr.rkey(),
        },
        MrAccess::REMOTE_READ,
    );
}
