//! The message layer's served contexts across real processes: a request is
//! answered where it arrives, also while its target sits in a blocking receive;
//! one whose server asks to wait is offered again until answered; a malformed one
//! is dropped without harm.

use rbtl::msg::{Comm, Served, ServedRequest, SERVED};

/// The context of the requests (with [`SERVED`]) and of their answers.
const CTX: u32 = 7;
/// Times a server turns each request away before answering it.
const TURNED_AWAY: usize = 3;

/// Every rank serves: the answer is the request's bytes reversed, after turning it
/// away [`TURNED_AWAY`] times; a request of one byte 0xff is dropped. Each rank
/// asks every other, then the ranks pair up so that one asks while the other waits
/// in a blocking receive for a message sent only after the answer came.
pub fn run(report: &dyn Fn(u32, &str)) {
    let mut comm = Comm::init(&[]).unwrap();
    let (me, n) = (comm.rank(), comm.size());
    let mut offers = 0usize;
    comm.serve(Box::new(
        move |r: ServedRequest<'_>, answer: &mut Vec<u8>| {
            assert_eq!(r.ctx, CTX | SERVED);
            if r.body == [0xff] {
                return Served::Dropped("the test's malformed request".into());
            }
            offers += 1;
            if offers % (TURNED_AWAY + 1) != 0 {
                return Served::Later;
            }
            answer.extend(r.body.iter().rev());
            Served::Reply {
                tag: r.tag,
                ctx: CTX,
            }
        },
    ));
    let ask = |comm: &mut Comm, to: u32, tag: i32| {
        let mut body: Vec<u8> = (0..100u32)
            .map(|i| (i * 3 + me * 11 + tag as u32) as u8)
            .collect();
        comm.send_in(CTX | SERVED, &[0xff], to, tag).unwrap();
        comm.send_in(CTX | SERVED, &body, to, tag).unwrap();
        let mut got = vec![0u8; 200];
        let s = comm.recv_in(CTX, &mut got, Some(to), Some(tag)).unwrap();
        got.truncate(s.len);
        body.reverse();
        assert_eq!(got, body, "rank {to}'s answer to tag {tag}");
    };
    for to in (0..n).filter(|&r| r != me) {
        for tag in 0..5 {
            ask(&mut comm, to, tag);
        }
    }
    comm.barrier().unwrap();
    // Pairs (0, 1), (2, 3), ...: the even rank asks; the odd one waits meanwhile.
    let peer = me ^ 1;
    if peer < n {
        if me % 2 == 0 {
            ask(&mut comm, peer, 9);
            comm.send(b"go", peer, 1).unwrap();
        } else {
            let mut b = [0u8; 2];
            comm.recv(&mut b, Some(peer), Some(1)).unwrap();
            assert_eq!(&b, b"go");
        }
    }
    comm.finalize().unwrap();
    report(me, "ok");
}
