//! The wrapper against a real RDMA device: two RC queue pairs of one process,
//! connected to each other over the device's port, moving bytes with send/receive,
//! RDMA write and read and atomics, and refusing what the remote registration does not
//! allow. There is no RDMA device on the development hosts: CI runs this binary in the
//! soft-RoCE guest (`rdma/guest.sh`) with `VERBS_REQUIRE_DEVICE=1`, where a
//! missing device is a failure; elsewhere the tests say SKIP and pass.

use rbtl_verbs::{device_names, Context, Cq, Error, Mr, MrAccess, Op, Pd, Qp, QpCaps, QpEndpoint};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

fn device() -> Option<Context> {
    let names = device_names().unwrap();
    match names.first() {
        Some(name) => Some(Context::open(name).unwrap()),
        None => {
            assert!(
                std::env::var_os("VERBS_REQUIRE_DEVICE").is_none(),
                "no RDMA device, and VERBS_REQUIRE_DEVICE is set"
            );
            eprintln!("SKIP: no RDMA device here (run in the soft-RoCE guest: rdma/guest.sh)");
            None
        }
    }
}

/// Memory and its registration, kept together (the region goes first).
struct Buf {
    mr: Mr,
    mem: Vec<u8>,
}

impl Buf {
    fn new(pd: &Pd, len: usize, fill: u8, access: MrAccess) -> Buf {
        let mut mem = vec![fill; len];
        // SAFETY: `mem` lives in the Buf and outlives `mr` (dropped first); no other
        // reference writes it while operations are in flight.
        let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), len, access) }.unwrap();
        Buf { mr, mem }
    }

    fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    fn read(&self) -> Vec<u8> {
        // SAFETY: reading our own buffer after the completion that wrote it.
        (0..self.mem.len())
            .map(|i| unsafe { std::ptr::read_volatile(self.mem.as_ptr().add(i)) })
            .collect()
    }
}

/// Two connected queue pairs, each with its completion queue.
struct Pair {
    pd: Pd,
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
}

fn pair(ctx: &Context) -> Pair {
    let port = ctx.query_port(1).unwrap();
    assert!(port.active, "port 1 of {} is not active", ctx.name());
    // GID 1 is RoCEv2 over IPv4 on rxe; InfiniBand uses GID 0 and the LID.
    let gid_index = if port.ethernet { 1 } else { 0 };
    let gid = ctx.query_gid(1, i32::from(gid_index)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (ctx.create_cq(64).unwrap(), ctx.create_cq(64).unwrap());
    let caps = QpCaps {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_inline: 64,
    };
    let mut a = Qp::create_rc(&pd, &cq_a, &cq_a, None, caps, 1, gid_index).unwrap();
    let mut b = Qp::create_rc(&pd, &cq_b, &cq_b, None, caps, 1, gid_index).unwrap();
    let ep = |qp: &Qp, psn| QpEndpoint {
        qpn: qp.qpn(),
        psn,
        lid: port.lid,
        gid,
    };
    let (ea, eb) = (ep(&a, 0x1111), ep(&b, 0x2222));
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_ATOMIC;
    for (qp, peer, own) in [(&mut a, &eb, &ea), (&mut b, &ea, &eb)] {
        qp.to_init(all).unwrap();
        qp.to_rtr(peer, port.mtu_enum).unwrap();
        qp.to_rts(own.psn).unwrap();
    }
    Pair {
        pd,
        a,
        b,
        cq_a,
        cq_b,
    }
}

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
    // SAFETY (all posts below): the ranges lie inside the registered buffers, which
    // outlive the operations; each operation is waited for before the next.
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

/// In a child process: without CAP_IPC_LOCK and with a 64 KiB locked-memory limit, a
/// 1 MiB registration is refused with the diagnosis naming `ulimit -l`.
#[test]
fn memlock_child() {
    if std::env::var_os("VERBS_MEMLOCK_CHILD").is_none() {
        return;
    }
    let ctx = device().expect("the parent checked for a device");
    rbtl_testkit::restrict_memlock(64 << 10);
    let pd = ctx.alloc_pd().unwrap();
    let mut mem = vec![0u8; 1 << 20];
    // SAFETY: `mem` outlives the attempt (and nothing is registered on success).
    let err = unsafe { pd.reg_mr(mem.as_mut_ptr(), mem.len(), MrAccess::LOCAL_WRITE) }
        .err()
        .expect("refused");
    let msg = err.to_string();
    assert!(matches!(err, Error::Memlock { len: 1048576, .. }), "{msg}");
    assert!(msg.contains("ulimit -l") && msg.contains("64 KiB"), "{msg}");
}

#[test]
fn a_registration_over_the_memlock_limit_names_the_limit() {
    if device().is_none() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "memlock_child",
            "--exact",
            "--nocapture",
            "--color",
            "never",
        ])
        .env("VERBS_MEMLOCK_CHILD", "1")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("1 passed"), "{text}");
}

/// Registrations through the registration cache are real memory regions: a second
/// registration of the same buffer hits, and the handle's key works for RDMA.
#[test]
fn registrations_through_the_cache() {
    use rbtl_rcache::{Access, Options, Rcache};
    use rbtl_verbs::VerbsRegistrar;
    let Some(ctx) = device() else { return };
    let mut p = pair(&ctx);
    let cache = Rcache::new(VerbsRegistrar::new(p.pd.clone()), Options::default());
    let mut target = vec![0u8; 8192];
    let src = Buf::new(&p.pd, 64, 0x5c, MrAccess::LOCAL_WRITE);
    let base = target.as_mut_ptr() as usize;
    let r1 = cache
        .register(base, 8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let r2 = cache
        .register(base + 100, 1000, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(r1.id(), r2.id(), "covered with enough access: a hit");
    assert_eq!((cache.stats().hits, cache.stats().misses), (1, 1));
    let write = Op::Write {
        remote: base as u64 + 4096,
        rkey: r2.handle().rkey(),
    };
    // SAFETY: the local range lies inside `src`; the target is registered and alive.
    unsafe { p.a.post_send(1, write, &src.mr, src.addr(), 64, false) }.unwrap();
    p.cq_a.wait_one(WAIT).unwrap().result().unwrap();
    // SAFETY: reading our buffer after the completion.
    let got: Vec<u8> = (0..64)
        .map(|i| unsafe { std::ptr::read_volatile(target.as_ptr().add(4096 + i)) })
        .collect();
    assert_eq!(got, vec![0x5c; 64]);
    drop((r1, r2));
    assert_eq!(cache.invalidate(base, 8192), 1);
    assert_eq!(
        cache.stats().entries,
        0,
        "deregistered once invalidated and idle"
    );
    drop(p.b);
}

/// Receives posted to a shared receive queue serve a queue pair that has none of its
/// own; a completion channel wakes a waiter when the CQ it watches gets a completion.
#[test]
fn shared_receive_queue_and_completion_channel() {
    use rbtl_verbs::Srq;
    let Some(ctx) = device() else { return };
    let port = ctx.query_port(1).unwrap();
    let gid_index = if port.ethernet { 1 } else { 0 };
    let gid = ctx.query_gid(1, i32::from(gid_index)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let mut cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with_channel(16, &channel).unwrap();
    let mut srq = Srq::create(&pd, 16).unwrap();
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline: 0,
    };
    let mut a = Qp::create_rc(&pd, &cq_a, &cq_a, None, caps, 1, gid_index).unwrap();
    let mut b = Qp::create_rc(&pd, &cq_b, &cq_b, Some(&srq), caps, 1, gid_index).unwrap();
    let ep = |qp: &Qp, psn| QpEndpoint {
        qpn: qp.qpn(),
        psn,
        lid: port.lid,
        gid,
    };
    let (ea, eb) = (ep(&a, 7), ep(&b, 9));
    for (qp, peer, own) in [(&mut a, &eb, &ea), (&mut b, &ea, &eb)] {
        qp.to_init(MrAccess::LOCAL_WRITE).unwrap();
        qp.to_rtr(peer, port.mtu_enum).unwrap();
        qp.to_rts(own.psn).unwrap();
    }
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
    let port = ctx.query_port(1).unwrap();
    let gid_index = if port.ethernet { 1 } else { 0 };
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
        // SAFETY: as above.
        unsafe { ini.post_send(i as u64, nums[i], Op::Send, &src.mr, src.addr(), len, false) }
            .unwrap();
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

/// A basic SRQ made by the provider's `create_srq_ex`, reached through the
/// `verbs_context` the way XRC SRQs are (written after verbs.h, not taken from
/// rdma-sys), is a working shared receive queue: messages from an RC queue pair land in
/// its receives, in the order they were posted. This is as close to the XRC SRQ path
/// as a device without XRC gets.
#[test]
fn basic_srq_made_through_create_srq_ex_receives_from_an_rc_queue_pair() {
    use rbtl_verbs::Srq;
    let Some(ctx) = device() else { return };
    let port = ctx.query_port(1).unwrap();
    let gid_index = if port.ethernet { 1 } else { 0 };
    let gid = ctx.query_gid(1, i32::from(gid_index)).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let (mut cq_a, mut cq_b) = (ctx.create_cq(16).unwrap(), ctx.create_cq(16).unwrap());
    let mut srq = Srq::create_ex_basic(&pd, 8).unwrap();
    let caps = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_inline: 0,
    };
    let mut a = Qp::create_rc(&pd, &cq_a, &cq_a, None, caps, 1, gid_index).unwrap();
    let mut b = Qp::create_rc(&pd, &cq_b, &cq_b, Some(&srq), caps, 1, gid_index).unwrap();
    let ep = |qp: &Qp, psn| QpEndpoint {
        qpn: qp.qpn(),
        psn,
        lid: port.lid,
        gid,
    };
    let (ea, eb) = (ep(&a, 0x31), ep(&b, 0x47));
    for (qp, peer, own) in [(&mut a, &eb, &ea), (&mut b, &ea, &eb)] {
        qp.to_init(MrAccess::LOCAL_WRITE).unwrap();
        qp.to_rtr(peer, port.mtu_enum).unwrap();
        qp.to_rts(own.psn).unwrap();
    }
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
