//! The check of expected receives ([`Module::expect`]).

use crate::pattern::pattern;
use crate::peer::collect;
use crate::retry::{idle_progress, sendi_all, sendi_progressing};
use crate::Peer;
use rbtl_btl::{BtlFlags, Endpoint, Expected, Module, Tag, EXPECTED_KEY};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An expected receive ([`Module::expect`]), where the transport has them, takes the
/// first message that carries its key and fits its room, short or long, with no
/// callback, and the progress call that fills it returns right after it. Messages
/// with another key, a matching one too long, and the ones after it reach the callback
/// in order; a withdrawn receive takes nothing.
pub fn expected_receive(p: &mut Peer<'_>) {
    if !p.module.attributes().flags.contains(BtlFlags::SEND) {
        return;
    }
    let tag = Tag(Tag::USR.0 + 3);
    let got = collect(p.module, tag, |r| r.to_vec());
    let (key, other) = ([1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 9]);
    let ep = p.endpoint;
    for (round, cap) in [16, 1000].into_iter().enumerate() {
        let len = cap - EXPECTED_KEY;
        let mut buf = vec![0u8; cap];
        let e = Expected {
            endpoint: ep,
            tag,
            key,
            buf: buf.as_mut_ptr(),
            cap,
        };
        // SAFETY: `buf` outlives the receive: it is taken or withdrawn below, before
        // `buf` is read or dropped.
        let posted = unsafe { p.module.expect(e) };
        // Both sides have posted before either sends.
        let peer_posted = p.swap(&[u8::from(posted)]) == [1];
        assert_eq!(posted, peer_posted, "both sides run the same transport");
        if !posted {
            return;
        }
        let data: Vec<u8> = (0..cap + 1).map(|i| pattern(cap, i)).collect();
        // From here every progress call is followed by a look at the receive, noting
        // how many messages had reached the callback when it filled. The peer sends
        // only once it has this side's go, which leaves after the last call that is not
        // watched.
        let mut filled = None;
        p.send_exchange(&[]);
        let start = Instant::now();
        while p.take_exchange().is_none() {
            progress_watching(p.module, &mut filled, &got);
            assert!(start.elapsed() < Duration::from_secs(60), "the peer's go");
        }
        let sends = [
            (other, &data[..EXPECTED_KEY]),
            (key, &data[..]),
            (key, &data[..len]),
            (key, &data[..3]),
        ];
        for (head, body) in sends {
            sendi_progressing(p, &head, body, tag, |m| {
                progress_watching(m, &mut filled, &got)
            });
        }
        let start = Instant::now();
        while filled.is_none() {
            progress_watching(p.module, &mut filled, &got);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "round {round}: the expected receive still waits after 60 s"
            );
        }
        let (filled, before) = filled.expect("filled");
        assert_eq!(
            before, 2,
            "round {round}: the call that filled the receive returned right after it"
        );
        assert_eq!(filled, len, "round {round}: its length");
        assert_eq!(buf[..len], data[..len], "round {round}: its bytes");
        assert!(
            buf[len..].iter().all(|&b| b == 0),
            "round {round}: nothing more"
        );
        assert_eq!(p.module.take_expected(), None, "round {round}: taken once");
        p.wait("the messages around the expected one", || {
            got.lock().unwrap().len() == 3
        });
        let expect_got = [
            [&other[..], &data[..EXPECTED_KEY]].concat(),
            [&key[..], &data].concat(),
            [&key[..], &data[..3]].concat(),
        ];
        assert_eq!(
            *got.lock().unwrap(),
            expect_got,
            "round {round}: the other messages reach the callback, in order"
        );
        got.lock().unwrap().clear();
        p.barrier();
    }
    // An endpoint the module does not know is refused.
    let mut buf = vec![0u8; 16];
    let stranger = Expected {
        endpoint: Endpoint(u32::MAX),
        tag,
        key,
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
    };
    assert!(
        // SAFETY: refused, so nothing is posted; `buf` outlives the call anyway.
        !unsafe { p.module.expect(stranger) },
        "{}: an expected receive from an unknown endpoint is refused",
        p.module.name()
    );
    // Withdrawn: a matching message goes to the callback, the buffer stays untouched.
    let e = Expected {
        endpoint: ep,
        tag,
        key,
        buf: buf.as_mut_ptr(),
        cap: buf.len(),
    };
    // SAFETY: withdrawn at once, before `buf` is read or dropped.
    assert!(unsafe { p.module.expect(e) }, "posted as before");
    p.module.cancel_expected();
    p.barrier();
    sendi_all(p, &key, &[9; 8], tag);
    p.wait("a message for a withdrawn receive", || {
        got.lock().unwrap().len() == 1
    });
    assert_eq!(
        p.module.take_expected(),
        None,
        "a withdrawn receive takes nothing"
    );
    assert!(buf.iter().all(|&b| b == 0), "nor writes its buffer");
    p.barrier();
}

/// Progress once; if that filled the expected receive, note its length and how many
/// messages `got` holds.
fn progress_watching(
    m: &mut dyn Module,
    filled: &mut Option<(usize, usize)>,
    got: &Mutex<Vec<Vec<u8>>>,
) {
    idle_progress(m);
    if let Some(len) = m.take_expected() {
        assert!(filled.is_none(), "an expected receive is filled once");
        *filled = Some((len, got.lock().unwrap().len()));
    }
}
