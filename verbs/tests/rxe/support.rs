//! What the tests share: the device (or SKIP), registered buffers, and two RC queue
//! pairs connected to each other.

use rbtl_verbs::{Context, Cq, Mr, MrAccess, Pd, PortAttr, Qp, QpCaps, QpEndpoint, Srq};
use std::time::Duration;

/// How long a test waits for one completion or event.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

pub(crate) fn device() -> Option<Context> {
    rbtl_testkit::found_or_skip(
        Context::open_first().unwrap(),
        "VERBS_REQUIRE_DEVICE",
        "no RDMA device here (run in the soft-RoCE guest: rdma/guest.sh)",
    )
}

/// Memory and its registration, kept together (the region goes first).
pub(crate) struct Buf {
    pub(crate) mr: Mr,
    pub(crate) mem: Vec<u8>,
}

impl Buf {
    pub(crate) fn new(pd: &Pd, len: usize, fill: u8, access: MrAccess) -> Buf {
        let mut mem = vec![fill; len];
        // SAFETY: `mem` lives in the Buf and outlives `mr` (dropped first); no other
        // reference writes it while operations are in flight.
        let mr = unsafe { pd.reg_mr(mem.as_mut_ptr(), len, access) }.unwrap();
        Buf { mr, mem }
    }

    pub(crate) fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    pub(crate) fn read(&self) -> Vec<u8> {
        // SAFETY: reading our own buffer after the completion that wrote it.
        (0..self.mem.len())
            .map(|i| unsafe { std::ptr::read_volatile(self.mem.as_ptr().add(i)) })
            .collect()
    }
}

/// Two connected queue pairs, each with its completion queue.
pub(crate) struct Pair {
    pub(crate) pd: Pd,
    pub(crate) a: Qp,
    pub(crate) b: Qp,
    pub(crate) cq_a: Cq,
    pub(crate) cq_b: Cq,
}

/// Port 1, and the index of the GID queue pairs use on it: GID 1 is RoCEv2 over IPv4
/// on rxe; InfiniBand uses GID 0 and the LID.
pub(crate) fn port(ctx: &Context) -> (PortAttr, u8) {
    let port = ctx.query_port(1).unwrap();
    assert!(port.active, "port 1 of {} is not active", ctx.name());
    let gid_index = if port.ethernet { 1 } else { 0 };
    (port, gid_index)
}

/// Take `a` and `b`, RC queue pairs on port 1, through INIT (granting `access`), RTR
/// and RTS towards each other, starting at packet sequence numbers `psn_a` and `psn_b`.
pub(crate) fn connect(
    ctx: &Context,
    (a, b): (&mut Qp, &mut Qp),
    (psn_a, psn_b): (u32, u32),
    access: MrAccess,
) {
    let (port, gid_index) = port(ctx);
    let gid = ctx.query_gid(1, i32::from(gid_index)).unwrap();
    let ep = |qp: &Qp, psn| QpEndpoint {
        qpn: qp.qpn(),
        psn,
        lid: port.lid,
        gid,
    };
    let (ea, eb) = (ep(a, psn_a), ep(b, psn_b));
    for (qp, peer, own) in [(a, &eb, &ea), (b, &ea, &eb)] {
        qp.to_init(access).unwrap();
        qp.to_rtr(peer, port.mtu_enum).unwrap();
        qp.to_rts(own.psn).unwrap();
    }
}

/// Two RC queue pairs on port 1 of `pd`, each of `caps`: `a` completing on `cq_a`, `b`
/// on `cq_b` and taking its receives from `srq` when there is one; connected to each
/// other as [`connect`] does (at `psns`, granting `access`).
pub(crate) fn connected_qps(
    ctx: &Context,
    pd: &Pd,
    (cq_a, cq_b): (&Cq, &Cq),
    srq: Option<&Srq>,
    caps: QpCaps,
    psns: (u32, u32),
    access: MrAccess,
) -> (Qp, Qp) {
    let (_, gid_index) = port(ctx);
    let mut a = Qp::create_rc(pd, cq_a, cq_a, None, caps, 1, gid_index).unwrap();
    let mut b = Qp::create_rc(pd, cq_b, cq_b, srq, caps, 1, gid_index).unwrap();
    connect(ctx, (&mut a, &mut b), psns, access);
    (a, b)
}

/// Two RC queue pairs on port 1, connected to each other.
pub(crate) fn pair(ctx: &Context) -> Pair {
    let pd = ctx.alloc_pd().unwrap();
    let (cq_a, cq_b) = (ctx.create_cq(64).unwrap(), ctx.create_cq(64).unwrap());
    let caps = QpCaps {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_inline: 64,
    };
    let all = MrAccess::LOCAL_WRITE
        | MrAccess::REMOTE_WRITE
        | MrAccess::REMOTE_READ
        | MrAccess::REMOTE_ATOMIC;
    let (a, b) = connected_qps(ctx, &pd, (&cq_a, &cq_b), None, caps, (0x1111, 0x2222), all);
    Pair {
        pd,
        a,
        b,
        cq_a,
        cq_b,
    }
}
