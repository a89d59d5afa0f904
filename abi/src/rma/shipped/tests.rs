//! The server's requests against real memory: applied, refused, held for later.

use super::super::lock_word::EXCLUSIVE;
use super::super::ACC_WORD;
use super::target::apply;
use super::*;
use rbtl::msg::{Served, ServedRequest};

const INT: Prim = Prim::Int {
    bytes: 4,
    signed: true,
};

/// A window of 16 ints (1..=16) and its control block, as the server sees them.
struct Window {
    mem: Vec<i32>,
    control: Vec<u64>,
}

impl Window {
    fn new() -> Window {
        Window {
            mem: (1..=16).collect(),
            control: vec![0; 8],
        }
    }

    fn exposure(&mut self) -> Exposure {
        Exposure {
            base: self.mem.as_mut_ptr().cast(),
            size: self.mem.len() * 4,
            control: self.control.as_mut_ptr().cast(),
            regions: None,
        }
    }

    /// Apply a request: the result and the answer.
    fn apply(&mut self, body: &[u8]) -> (std::result::Result<bool, String>, Vec<u8>) {
        let e = self.exposure();
        let mut answer = Vec::new();
        // SAFETY: `e` describes this window's live vectors.
        let r = unsafe { apply(&e, body, 1, &mut answer) };
        (r, answer)
    }
}

fn request(s: &Ship, fetch: bool, offset: usize, len: usize, operand: &[u8]) -> Vec<u8> {
    let mut r = Vec::new();
    header(&mut r, s, fetch, offset, len);
    assert_eq!(r.len(), HEADER);
    r.extend_from_slice(operand);
    r
}

fn ints(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn sum() -> Ship {
    Ship {
        kind: Kind::Accumulate,
        prim: INT,
        op: MPI_SUM,
        alone: false,
    }
}

#[test]
fn basic_kinds_round_trip_and_nothing_else_decodes() {
    let mut all = vec![Prim::LongDouble, Prim::ComplexLongDouble, Prim::Byte];
    for b in [1, 2, 4, 8, 16] {
        all.push(Prim::Int {
            bytes: b,
            signed: true,
        });
        all.push(Prim::Int {
            bytes: b,
            signed: false,
        });
        all.push(Prim::Logical(b));
    }
    for b in [2, 4, 8, 16] {
        all.push(Prim::Float(b));
        all.push(Prim::Complex(b));
    }
    all.extend(PAIRS.iter().map(|&p| Prim::Pair(p)));
    for p in all {
        assert_eq!(decode_prim(encode_prim(p)), Some(p));
    }
    for bad in [
        [0, 3, 1],
        [0, 4, 2],
        [1, 1, 0],
        [5, 0, 0],
        [7, 8, 0],
        [8, 0, 0],
    ] {
        assert_eq!(decode_prim(bad), None, "{bad:?}");
    }
}

#[test]
fn a_sum_is_applied_and_the_old_data_answered() {
    let mut w = Window::new();
    let (r, answer) = w.apply(&request(&sum(), true, 8, 8, &ints(&[10, 20])));
    assert_eq!(r, Ok(true));
    assert_eq!(answer, [&[0u8][..], &ints(&[3, 4])].concat());
    assert_eq!(w.mem[..5], [1, 2, 13, 24, 5]);
    assert_eq!(w.control[ACC_WORD / 8], 0, "the mutex is given back");
    let (r, answer) = w.apply(&request(&sum(), false, 0, 4, &ints(&[1])));
    assert_eq!((r, answer), (Ok(true), vec![0]));
    assert_eq!(w.mem[0], 2);
}

#[test]
fn an_origin_alone_gets_what_atomics_give() {
    // The flag of an origin that holds the member's lock exclusively changes how
    // words are combined (at once), not what comes of it, fetched or not.
    let operand = ints(&(0..16).map(|i| 1 << i).collect::<Vec<_>>());
    for fetch in [true, false] {
        let (mut atomics, mut alone) = (Window::new(), Window::new());
        let xor = |alone| Ship {
            op: MPI_BXOR,
            alone,
            ..sum()
        };
        let by_atomics = atomics.apply(&request(&xor(false), fetch, 0, 64, &operand));
        let at_once = alone.apply(&request(&xor(true), fetch, 0, 64, &operand));
        assert_eq!(by_atomics, at_once, "fetch {fetch}");
        assert_eq!(atomics.mem, alone.mem, "fetch {fetch}");
        assert_eq!(alone.mem[3], 4 ^ 8);
        assert_eq!(alone.control[ACC_WORD / 8], 0, "the mutex is given back");
    }
}

#[test]
fn a_held_mutex_leaves_the_request_for_later() {
    let mut w = Window::new();
    w.control[ACC_WORD / 8] = EXCLUSIVE;
    let (r, answer) = w.apply(&request(&sum(), true, 0, 4, &ints(&[5])));
    assert_eq!(r, Ok(false));
    assert!(answer.is_empty());
    assert_eq!(w.mem[0], 1, "nothing applied");
}

#[test]
fn compare_and_swap_swaps_only_an_equal_element() {
    let mut w = Window::new();
    let cas = Ship {
        kind: Kind::CompareSwap,
        prim: INT,
        op: MPI_REPLACE,
        alone: false,
    };
    let (r, answer) = w.apply(&request(&cas, true, 4, 4, &ints(&[99, 7])));
    assert_eq!((r, answer), (Ok(true), [&[0u8][..], &ints(&[2])].concat()));
    assert_eq!(w.mem[1], 2, "2 is not 7");
    let (r, _) = w.apply(&request(&cas, true, 4, 4, &ints(&[99, 2])));
    assert_eq!(r, Ok(true));
    assert_eq!(w.mem[1], 99);
}

#[test]
fn malformed_requests_are_refused_and_change_nothing() {
    let float_band = Ship {
        kind: Kind::Accumulate,
        prim: Prim::Float(4),
        op: MPI_BAND,
        alone: false,
    };
    let user_op = Ship {
        kind: Kind::Accumulate,
        prim: INT,
        op: 0x7777,
        alone: false,
    };
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![0; HEADER - 1], "bytes (at least"),
        (
            request(&sum(), false, 60, 8, &ints(&[1, 1])),
            "outside the window",
        ),
        (
            request(&sum(), false, usize::MAX - 2, 8, &ints(&[1, 1])),
            "outside the window",
        ),
        (request(&sum(), false, 0, 6, &[0; 6]), "whole number"),
        (
            request(&sum(), false, 0, 8, &ints(&[1])),
            "operand of 4 bytes",
        ),
        (request(&float_band, false, 0, 4, &[0; 4]), "does not apply"),
        (
            request(&user_op, false, 0, 4, &ints(&[1])),
            "does not apply",
        ),
        (
            [&[9u8][..], &request(&sum(), false, 0, 4, &ints(&[1]))[1..]].concat(),
            "kind 9",
        ),
        (
            [
                &[0u8, 4][..],
                &request(&sum(), false, 0, 4, &ints(&[1]))[2..],
            ]
            .concat(),
            "flags 0x4",
        ),
    ];
    for (body, why) in cases {
        let mut w = Window::new();
        let (r, _) = w.apply(&body);
        let e = r.expect_err(why);
        assert!(e.contains(why), "{e} (expected {why})");
        assert_eq!(w.mem, (1..=16).collect::<Vec<_>>());
        assert_eq!(w.control[ACC_WORD / 8], 0);
    }
}

#[test]
fn the_server_answers_a_window_it_does_not_have_with_a_refusal() {
    let mut w = Window::new();
    let exposures = Exposures::default();
    expose(
        &exposures,
        6,
        (w.mem.as_mut_ptr().cast(), 64),
        w.control.as_mut_ptr().cast(),
        None,
    );
    let mut serve = server(exposures);
    let body = request(&sum(), false, 0, 4, &ints(&[1]));
    let mut answer = Vec::new();
    let r = ServedRequest {
        source: 1,
        tag: ANSWER_TAG,
        ctx: 8 | SERVED,
        body: &body,
    };
    assert_eq!(
        serve(r, &mut answer),
        Served::Reply {
            tag: ANSWER_TAG,
            ctx: 8
        }
    );
    assert_eq!(answer[0], 1);
    assert!(String::from_utf8_lossy(&answer[1..]).contains("no window"));
    answer.clear();
    let r = ServedRequest {
        ctx: 6 | SERVED,
        ..r
    };
    assert_eq!(
        serve(r, &mut answer),
        Served::Reply {
            tag: ANSWER_TAG,
            ctx: 6
        }
    );
    assert_eq!((answer, w.mem[0]), (vec![0], 2));
}

#[test]
fn pairs_with_a_gap_travel_packed_and_are_applied_as_their_c_structs() {
    // Three `MPI_SHORT_INT`s one after the other: runs of memory join one struct's
    // int to the next one's short.
    let runs = [(0, 2), (4, 6), (12, 6), (20, 4)];
    let (mut pieces, mut ranges) = (Vec::new(), Vec::new());
    gapped_pieces(&runs, Pair::ShortInt, 1 << 10, &mut pieces, &mut ranges);
    assert_eq!((pieces, ranges), (vec![(0..1, 0, 18)], vec![(0, 24)]));
    let (mut pieces, mut ranges) = (Vec::new(), Vec::new());
    gapped_pieces(&runs, Pair::ShortInt, 12, &mut pieces, &mut ranges);
    assert_eq!(pieces, [(0..1, 0, 12), (1..2, 12, 6)]);
    assert_eq!(ranges, [(0, 16), (16, 8)]);
    // MINLOC on the structs at bytes 8..24 of the window (ints 3..6): {short 7, pad,
    // int 1} and {short 2, pad, int 5}, against {3, 9} and {2, 0} packed.
    let mut w = Window::new();
    let shorts = |v: i16, rest: i32| [&v.to_ne_bytes()[..], &[0, 0], &rest.to_ne_bytes()].concat();
    let mem = [shorts(7, 1), shorts(2, 5)].concat();
    // SAFETY: 16 bytes inside the window's 64.
    unsafe { std::ptr::copy_nonoverlapping(mem.as_ptr(), w.mem.as_mut_ptr().add(2).cast(), 16) };
    let packed = |v: i16, i: i32| [&v.to_ne_bytes()[..], &i.to_ne_bytes()].concat();
    let operand = [packed(3, 9), packed(2, 0)].concat();
    let minloc = Ship {
        kind: Kind::Accumulate,
        prim: Prim::Pair(Pair::ShortInt),
        op: MPI_MINLOC,
        alone: false,
    };
    let (r, answer) = w.apply(&request(&minloc, true, 8, 16, &operand));
    assert_eq!(r, Ok(true));
    assert_eq!(answer, [&[0u8][..], &packed(7, 1), &packed(2, 5)].concat());
    // SAFETY: as above.
    let now = unsafe { rbtl::btl::slice_at(w.mem.as_ptr().add(2).cast::<u8>(), 16) };
    assert_eq!(now[..2], 3i16.to_ne_bytes());
    assert_eq!(now[4..8], 9i32.to_ne_bytes());
    assert_eq!(now[8..10], 2i16.to_ne_bytes());
    assert_eq!(
        now[12..16],
        0i32.to_ne_bytes(),
        "a tie takes the lower index"
    );
    assert_eq!(now[2..4], [0, 0], "the padding stays");
    let (r, _) = w.apply(&request(&minloc, false, 8, 12, &operand[..6]));
    assert!(r
        .unwrap_err()
        .contains("no whole number of 8-byte elements"));
}

#[test]
fn short_runs_travel_together_and_long_ones_in_pieces() {
    // Runs of 8 bytes every 16, then one of 100 bytes, then two short ones again,
    // with room for 64 packed bytes a request.
    let runs = [
        (0, 8),
        (16, 8),
        (32, 8),
        (48, 8),
        (64, 100),
        (200, 8),
        (216, 8),
    ];
    let (mut pieces, mut ranges) = (Vec::new(), Vec::new());
    pieces_of(&runs, &sum(), (64, 0), &mut pieces, &mut ranges);
    // 8 bytes and 16 of range each: two runs a request (the third would make 72).
    assert_eq!(
        pieces,
        [
            (0..2, 0, 16),
            (2..4, 16, 16),
            (4..5, 32, 64),
            (5..6, 96, 36),
            (6..8, 132, 16)
        ]
    );
    assert_eq!(ranges[4..6], [(64, 64), (128, 36)]);
    // A request of several ranges, applied to each in order; the old data answered
    // range by range; a range outside the window refuses the whole.
    let mut w = Window::new();
    let runs_of = Ship {
        kind: Kind::Runs,
        prim: INT,
        op: MPI_SUM,
        alone: false,
    };
    let several = |rs: &[(u64, u64)], operand: &[i32]| {
        let mut r = Vec::new();
        header(
            &mut r,
            &runs_of,
            true,
            rs.len(),
            rs.iter().map(|r| r.1 as usize).sum(),
        );
        for &(off, len) in rs {
            r.extend_from_slice(&off.to_le_bytes());
            r.extend_from_slice(&len.to_le_bytes());
        }
        r.extend_from_slice(&ints(operand));
        r
    };
    let (r, answer) = w.apply(&several(&[(4, 4), (12, 8)], &[100, 200, 300]));
    assert_eq!(r, Ok(true));
    assert_eq!(answer, [&[0u8][..], &ints(&[2, 4, 5])].concat());
    assert_eq!(w.mem[..6], [1, 102, 3, 204, 305, 6]);
    let (r, _) = w.apply(&several(&[(0, 4), (64, 4)], &[1, 1]));
    assert!(r.unwrap_err().contains("outside the window"));
    assert_eq!(w.mem[0], 1, "nothing applied");
    let mut short = several(&[(0, 4)], &[1]);
    short[13] = 9;
    let (r, _) = w.apply(&short);
    assert!(r.unwrap_err().contains("9 ranges in a request"));
}
