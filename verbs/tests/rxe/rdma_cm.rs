//! librdmacm: connecting two identifiers of this process over the port's IP address.

use crate::support::{device, Buf, WAIT};
use rbtl_verbs::{MrAccess, Op, QpCaps};

/// Connect two identifiers of this process through librdmacm over the port's IP
/// address (198.18.0.1 on the guest's dummy0), trading private data, then send over
/// the connected queue pair.
#[test]
fn rdma_cm_connect_accept_with_private_data() {
    use rbtl_verbs::{CmEventKind, CmId, EventChannel};
    use std::net::{Ipv4Addr, SocketAddrV4};
    let Some(ctx) = device() else { return };
    let port = ctx.query_port(1).unwrap();
    if !port.ethernet {
        eprintln!("SKIP: rdma_cm over IP needs a RoCE port");
        return;
    }
    // The IPv4 address behind GID 1 (::ffff:a.b.c.d).
    let gid = ctx.query_gid(1, 1).unwrap();
    let ip = Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]);
    let (server_ch, client_ch) = (EventChannel::new().unwrap(), EventChannel::new().unwrap());
    let listener = CmId::new(&server_ch).unwrap();
    listener.bind(SocketAddrV4::new(ip, 0)).unwrap();
    listener.listen(4).unwrap();
    let dst = SocketAddrV4::new(ip, listener.local_port());

    let client = CmId::new(&client_ch).unwrap();
    client.resolve_addr(dst, WAIT).unwrap();
    assert!(matches!(
        client_ch.next(WAIT).unwrap().kind,
        CmEventKind::AddrResolved
    ));
    client.resolve_route(WAIT).unwrap();
    assert!(matches!(
        client_ch.next(WAIT).unwrap().kind,
        CmEventKind::RouteResolved
    ));
    let cctx = client.context().expect("bound to a device");
    let (cpd, mut ccq) = (cctx.alloc_pd().unwrap(), cctx.create_cq(16).unwrap());
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_inline: 0,
    };
    let mut cqp = client.create_qp(&cpd, &ccq, None, caps).unwrap();
    client.connect(b"rank 0, qp details").unwrap();

    let req = server_ch.next(WAIT).unwrap();
    assert_eq!(&req.private_data[..18], b"rank 0, qp details");
    let CmEventKind::ConnectRequest(conn) = req.kind else {
        panic!("expected a connect request")
    };
    let sctx = conn.context().expect("bound to a device");
    let (spd, mut scq) = (sctx.alloc_pd().unwrap(), sctx.create_cq(16).unwrap());
    let mut sqp = conn.create_qp(&spd, &scq, None, caps).unwrap();
    let inbox = Buf::new(&spd, 64, 0, MrAccess::LOCAL_WRITE);
    // SAFETY: inside the registered buffer, which outlives the receive.
    unsafe { sqp.post_recv(5, &inbox.mr, inbox.addr(), 64) }.unwrap();
    conn.accept(b"rank 1 says yes").unwrap();

    let est = client_ch.next(WAIT).unwrap();
    assert!(
        matches!(est.kind, CmEventKind::Established),
        "status {}",
        est.status
    );
    assert_eq!(&est.private_data[..15], b"rank 1 says yes");
    assert!(matches!(
        server_ch.next(WAIT).unwrap().kind,
        CmEventKind::Established
    ));

    let out = Buf::new(&cpd, 64, 0x33, MrAccess::LOCAL_WRITE);
    // SAFETY: inside the registered buffer, which outlives the send.
    unsafe { cqp.post_send(6, Op::Send, &out.mr, out.addr(), 40, false) }.unwrap();
    ccq.wait_one(WAIT).unwrap().result().unwrap();
    let got = scq.wait_one(WAIT).unwrap();
    got.result().unwrap();
    assert_eq!((got.wr_id, got.byte_len), (5, 40));
    assert_eq!(&inbox.read()[..40], &[0x33; 40][..]);
    // Disconnecting: the peer hears of it, disconnects too, and then so do we.
    client.disconnect().unwrap();
    assert!(matches!(
        server_ch.next(WAIT).unwrap().kind,
        CmEventKind::Disconnected
    ));
    conn.disconnect().unwrap();
    assert!(matches!(
        client_ch.next(WAIT).unwrap().kind,
        CmEventKind::Disconnected
    ));
    drop((cqp, sqp));
}
