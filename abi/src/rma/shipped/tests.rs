//! The server's requests against real memory: applied, refused, held for later.

use super::*;

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
    };
    let user_op = Ship {
        kind: Kind::Accumulate,
        prim: INT,
        op: 0x7777,
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
