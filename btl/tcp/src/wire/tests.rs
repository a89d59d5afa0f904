//! Tests of the frame decoder and encoder: every kind round trips, partial frames
//! wait, malformed ones are refused, and no input makes the decoder panic.

use super::*;

const LIMITS: Limits = Limits {
    am_payload: 1024,
    rdma_data: 4096,
};

fn frame(e: Encoder, tail: &[u8]) -> Vec<u8> {
    [e.as_bytes(), tail].concat()
}

/// An atomic request of operation code `code` under handle `h`: request 1, at 8,
/// operand 2, compare 3.
fn atomic_req(code: u8, h: &[u8]) -> Vec<u8> {
    frame(
        Encoder::new(
            Kind::AtomicReq,
            HANDLE_SIZE as u8,
            code,
            Kind::AtomicReq.ext(),
        )
        .u64(1)
        .u64(8)
        .u64(2)
        .u64(3)
        .handle(h),
        &[],
    )
}

#[test]
fn every_kind_round_trips() {
    let h = [7u8; HANDLE_SIZE];
    let am = frame(am(Tag(0x80), &[3, 0, 2]), b"abcde");
    let Ok(Some((
        Frame::Am {
            tag,
            lens,
            nseg,
            payload,
        },
        n,
    ))) = decode(&am, &LIMITS)
    else {
        panic!("am");
    };
    assert_eq!(
        (tag, &lens[..nseg], payload, n),
        (Tag(0x80), &[3, 0, 2][..], &b"abcde"[..], am.len())
    );
    let put = frame(
        Encoder::new(Kind::Put, HANDLE_SIZE as u8, 0, Kind::Put.ext() + 3)
            .u64(9)
            .u64(0x1000)
            .handle(&h),
        b"xyz",
    );
    let Ok(Some((
        Frame::Put {
            req: 9,
            addr: 0x1000,
            handle,
            data_len: 3,
        },
        n,
    ))) = decode(&put, &LIMITS)
    else {
        panic!("put");
    };
    assert_eq!((handle, n), (&h[..], HEADER + Kind::Put.ext()));
    let err = Err(Error::OutOfRange {
        side: "remote",
        addr: 5,
        len: 6,
        base: 7,
        reg_len: 8,
    });
    let ack = frame(
        Encoder::new(Kind::PutAck, 0, 0, Kind::PutAck.ext())
            .u64(9)
            .status(&err),
        &[],
    );
    let Ok(Some((
        Frame::PutAck {
            req: 9,
            status:
                Err(Error::OutOfRange {
                    addr: 5,
                    len: 6,
                    base: 7,
                    reg_len: 8,
                    ..
                }),
        },
        _,
    ))) = decode(&ack, &LIMITS)
    else {
        panic!("ack");
    };
    let hello_frame = frame(
        hello(&Hello {
            secret: [3; SECRET],
            rank: 4,
            link: 2,
            version: VERSION,
        }),
        &[],
    );
    let Ok(Some((Frame::Hello(hello), n))) = decode(&hello_frame, &LIMITS) else {
        panic!("hello");
    };
    assert_eq!(
        hello,
        Hello {
            secret: [3; SECRET],
            rank: 4,
            link: 2,
            version: VERSION
        }
    );
    assert_eq!(n, HEADER + Kind::Hello.ext());
    let cas = atomic_req(
        rbtl_btl::AtomicRequest {
            op: None,
            width: rbtl_btl::AtomicWidth::W64,
        }
        .code(),
        &h,
    );
    assert!(matches!(
        decode(&cas, &LIMITS),
        Ok(Some((
            Frame::AtomicReq {
                op: None,
                operand: 2,
                compare: 3,
                ..
            },
            _
        )))
    ));
}

#[test]
fn statuses_keep_their_type() {
    for e in [
        Error::AccessDenied {
            side: "remote",
            has: Access::REMOTE_READ,
            needs: Access::REMOTE_WRITE,
        },
        Error::BadRemoteHandle("x".into()),
        Error::Misaligned(12),
        Error::MalformedHandle(5),
    ] {
        let back = decode_status(&encode_status(&Err(e))).unwrap_err();
        assert!(!matches!(back, Error::NotAvailable(_)), "{back:?}");
    }
    assert!(decode_status(&encode_status(&Ok(()))).is_ok());
    assert!(matches!(
        decode_status(&[0xff; STATUS]),
        Err(Error::NotAvailable(_))
    ));
}

#[test]
fn partial_frames_wait_for_more() {
    let am = frame(am(Tag::USR, &[10]), &[1; 10]);
    for cut in 0..am.len() {
        assert!(
            matches!(decode(&am[..cut], &LIMITS), Ok(None)),
            "cut at {cut}"
        );
    }
}

#[test]
fn malformed_frames_are_refused() {
    let bad = |b: Vec<u8>, why: &str| {
        assert!(decode(&b, &LIMITS).is_err(), "{why}: {b:?}");
    };
    bad(vec![0; 8], "kind 0");
    bad(vec![99, 0, 0, 0, 0, 0, 0, 0], "unknown kind");
    bad(frame(am(Tag(0x10), &[1]), &[1]), "reserved tag");
    bad(frame(am(Tag::USR, &[2000]), &[]), "over max_send_size");
    let mut no_segs = frame(am(Tag::USR, &[1]), &[1]);
    no_segs[2] = 0;
    bad(no_segs, "zero segments");
    let mut many = frame(am(Tag::USR, &[1]), &[1]);
    many[2] = 17;
    bad(many, "17 segments");
    let mut sums = frame(am(Tag::USR, &[1, 1]), &[1, 1]);
    sums[8] = 5;
    bad(sums, "segment lengths that do not add up");
    let h = [0u8; HANDLE_SIZE];
    bad(
        frame(
            Encoder::new(Kind::Put, 5, 0, Kind::Put.ext())
                .u64(1)
                .u64(2)
                .handle(&h),
            &[],
        ),
        "handle length 5",
    );
    bad(
        frame(
            Encoder::new(Kind::Put, HANDLE_SIZE as u8, 0, Kind::Put.ext() + 5000)
                .u64(1)
                .u64(2)
                .handle(&h),
            &[],
        ),
        "put over the largest chunk",
    );
    bad(
        frame(
            Encoder::new(Kind::GetReq, HANDLE_SIZE as u8, 0, Kind::GetReq.ext())
                .u64(1)
                .u64(0)
                .u64(2)
                .u64(5000)
                .handle(&h),
            &[],
        ),
        "get over the largest chunk",
    );
    bad(atomic_req(9, &h), "unknown atomic");
    bad(
        frame(Encoder::new(Kind::HelloAck, 0, 0, 4).u64(0), &[]),
        "an ack with a body",
    );
    bad(
        frame(Encoder::new(Kind::PutAck, 0, 0, 3), &[1, 2, 3]),
        "a short ack",
    );
    bad(
        vec![1, 0x80, 1, 0, 0xff, 0xff, 0xff, 0xff],
        "a 4 GiB message",
    );
}

use rbtl_testkit::rng::Xorshift as Rng;

#[test]
fn no_input_makes_the_decoder_panic() {
    let h = [1u8; HANDLE_SIZE];
    let valid = [
        frame(am(Tag::USR, &[1, 2, 3]), &[1; 6]),
        frame(
            Encoder::new(Kind::Put, HANDLE_SIZE as u8, 0, Kind::Put.ext() + 4)
                .u64(1)
                .u64(2)
                .handle(&h),
            &[0; 4],
        ),
        frame(
            Encoder::new(Kind::GetDone, 0, 0, Kind::GetDone.ext())
                .u64(1)
                .u64(2)
                .u64(3)
                .status(&Ok(())),
            &[],
        ),
        frame(
            hello(&Hello {
                secret: [9; SECRET],
                rank: 1,
                link: 0,
                version: VERSION,
            }),
            &[],
        ),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..200_000 {
        let mut b = if round % 4 == 0 {
            let len = (rng.next_u64() % 128) as usize;
            (0..len).map(|_| rng.next_u64() as u8).collect()
        } else {
            valid[round % valid.len()].clone()
        };
        // Flip, cut or extend.
        for _ in 0..(rng.next_u64() % 4) {
            if b.is_empty() {
                break;
            }
            let i = (rng.next_u64() as usize) % b.len();
            b[i] = rng.next_u64() as u8;
        }
        if rng.next_u64() % 3 == 0 {
            let keep = (rng.next_u64() as usize) % (b.len() + 1);
            b.truncate(keep);
        }
        if let Ok(Some((_, n))) = decode(&b, &LIMITS) {
            assert!(n <= b.len(), "took {n} of {} bytes", b.len());
        }
    }
}
