//! The wrapper's floor for RDMA reads: two connected queue pairs in one process, 8-byte
//! reads one at a time, average microseconds (compare with perftest's `ib_read_lat`
//! on the same device). Needs a device: run it in `rdma/guest.sh`.

use rbtl_verbs::{Context, MrAccess, Op, Qp, QpCaps, QpEndpoint};
use std::time::Instant;

fn main() {
    let iters: u32 = std::env::args()
        .nth(1)
        .map(|n| n.parse().expect("ITERATIONS is a number"))
        .unwrap_or(3000);
    let name = rbtl_verbs::device_names().expect("devices")[0].clone();
    let ctx = Context::open(&name).expect("open");
    let port = ctx.query_port(1).expect("port");
    let gid_index = if port.ethernet { 1 } else { 0 };
    let gid = ctx.query_gid(1, i32::from(gid_index)).expect("gid");
    let pd = ctx.alloc_pd().expect("pd");
    let (mut cq_a, cq_b) = (ctx.create_cq(64).unwrap(), ctx.create_cq(64).unwrap());
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
    let all = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    for (qp, peer, own) in [(&mut a, &eb, &ea), (&mut b, &ea, &eb)] {
        qp.to_init(all).unwrap();
        qp.to_rtr(peer, port.mtu_enum).unwrap();
        qp.to_rts(own.psn).unwrap();
    }
    let mut src = vec![1u8; 4096];
    let mut dst = vec![0u8; 4096];
    // SAFETY: both buffers outlive their regions, dropped at the end of main.
    let (ms, md) = unsafe {
        (
            pd.reg_mr(src.as_mut_ptr(), src.len(), all).unwrap(),
            pd.reg_mr(dst.as_mut_ptr(), dst.len(), all).unwrap(),
        )
    };
    let skip = iters / 100 + 10;
    let mut start = Instant::now();
    for i in 0..iters + skip {
        if i == skip {
            start = Instant::now();
        }
        let op = Op::Read {
            remote: ms.addr(),
            rkey: ms.rkey(),
        };
        // SAFETY: `dst` lies in `md` and is untouched until the completion below.
        unsafe { a.post_send(u64::from(i), op, &md, md.addr(), 8, false) }.unwrap();
        let mut wc = [rbtl_verbs::Completion {
            wr_id: 0,
            status: 0,
            byte_len: 0,
        }];
        while cq_a.poll(&mut wc).unwrap() == 0 {}
        wc[0].result().unwrap();
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(iters);
    println!("verbs_read_8B_us {us:.3}");
}
