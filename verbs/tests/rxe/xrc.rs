//! XRC: domains, SRQs and queue pairs where the device has them; typed refusals
//! where it has none.

use crate::support::{device, port, Buf, WAIT};
use rbtl_verbs::{Error, MrAccess, Op, QpCaps, QpEndpoint, Sge};

/// XRC needs a device of the mlx class; a soft device says so with a typed error naming
/// the call (which is how the xrc connection method learns it cannot run there), and
/// refuses an XRC initiator queue pair, which needs no domain, the same typed way.
///
/// No software device has XRC (rxe and siw refuse the domain), so the XRC SRQ, the
/// initiator and target queue pairs, their transitions and sends to a remote SRQ
/// number cannot be tested here. Where a device has XRC, this test goes on to send
/// through them (one initiator, one target, two XRC SRQs told apart by number): that
/// part has never run.
#[test]
fn xrc_domains_where_the_device_has_them() {
    use rbtl_verbs::{XrcInitiator, XrcSrq, XrcTarget, Xrcd};
    let Some(ctx) = device() else { return };
    let (port, gid_index) = port(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let mut send_cq = ctx.create_cq(16).unwrap();
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 0,
        max_inline: 0,
    };
    let xrcd = match Xrcd::open(&ctx) {
        Ok(xrcd) => xrcd,
        Err(e) => {
            let msg = e.to_string();
            let Error::Call { call, source } = &e else {
                panic!("unexpected: {msg}")
            };
            assert_eq!(*call, "ibv_open_xrcd", "{msg}");
            assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP), "{msg}");
            assert!(msg.starts_with("ibv_open_xrcd failed: "), "{msg}");
            match XrcInitiator::create(&ctx, &pd, &send_cq, caps, 1, gid_index) {
                Err(Error::Call {
                    call: "ibv_create_qp_ex",
                    source,
                }) => eprintln!("{}: no XRC initiator either: {source}", ctx.name()),
                Err(e) => panic!("unexpected: {e}"),
                Ok(_) => panic!("{} made an XRC initiator without XRC", ctx.name()),
            }
            return;
        }
    };
    eprintln!("{} has XRC", ctx.name());
    let gid = ctx.query_gid(1, i32::from(gid_index)).unwrap();
    let mut recv_cq = ctx.create_cq(16).unwrap();
    let mut srqs = [
        XrcSrq::create(&ctx, &pd, &xrcd, &recv_cq, 8).unwrap(),
        XrcSrq::create(&ctx, &pd, &xrcd, &recv_cq, 8).unwrap(),
    ];
    let nums = [srqs[0].srq_num().unwrap(), srqs[1].srq_num().unwrap()];
    assert_ne!(nums[0], nums[1]);
    let mut ini = XrcInitiator::create(&ctx, &pd, &send_cq, caps, 1, gid_index).unwrap();
    let mut tgt = XrcTarget::create(&ctx, &xrcd, 1, gid_index).unwrap();
    let ep = |qpn, psn| QpEndpoint {
        qpn,
        psn,
        lid: port.lid,
        gid,
    };
    let (e_ini, e_tgt) = (ep(ini.qpn(), 0x123), ep(tgt.qpn(), 0x456));
    tgt.to_init(MrAccess::NONE).unwrap();
    tgt.to_rtr(&e_ini, port.mtu_enum).unwrap();
    ini.to_init().unwrap();
    ini.to_rtr(&e_tgt, port.mtu_enum).unwrap();
    ini.to_rts(e_ini.psn).unwrap();
    let dst = Buf::new(&pd, 256, 0, MrAccess::LOCAL_WRITE);
    let srcs = [
        Buf::new(&pd, 64, 0x11, MrAccess::LOCAL_WRITE),
        Buf::new(&pd, 64, 0x22, MrAccess::LOCAL_WRITE),
    ];
    // SAFETY: the ranges lie inside the registered buffers, which outlive the ops.
    unsafe {
        srqs[0].post_recv(10, &dst.mr, dst.addr(), 128).unwrap();
        srqs[1]
            .post_recv(11, &dst.mr, dst.addr() + 128, 128)
            .unwrap();
    }
    // The second SRQ first: the number, not the order, picks the queue.
    for (i, len) in [(1usize, 20u32), (0, 30)] {
        let src = &srcs[i];
        let sge = Sge {
            addr: src.addr(),
            len,
            lkey: src.mr.lkey(),
        };
        // SAFETY: as above.
        unsafe { ini.post_send_sg(i as u64, nums[i], Op::Send, &[sge], false, true) }.unwrap();
        send_cq.wait_one(WAIT).unwrap().result().unwrap();
        let got = recv_cq.wait_one(WAIT).unwrap();
        got.result().unwrap();
        assert_eq!((got.wr_id, got.byte_len), (10 + i as u64, len));
        let at = 128 * i;
        assert!(dst.read()[at..at + len as usize]
            .iter()
            .all(|&b| b == 0x11 * (i as u8 + 1)));
    }
}
