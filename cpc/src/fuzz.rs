//! Property tests of what a peer (or a stranger) hands the connection methods: the
//! `oob` and `xrc` channel messages and `rdma_cm`'s private data as bytes, the
//! connection-method list of a modex blob, and the `oob` and `rdma_cm` state machines
//! fed any sequence of what may arrive. No panic; bytes that decode are exactly the
//! bytes of what they decode to; a list that does not decode is a typed error.

use crate::oob::{self, Handshake, QpInfo};
use crate::rdma_cm::{self, Connection, Event, Hello, Kind};
use crate::select::{self, Offer};
use crate::xrc;
use crate::Error;
use proptest::prelude::*;
use std::time::Duration;

/// Bytes near a message: a valid encoding, cut, extended, or with one byte changed.
fn near(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = valid.len();
    (
        0..4u8,
        0..len.max(1),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(move |(how, at, byte, extra)| {
            let mut b = valid.clone();
            match how {
                0 => b.truncate(at),
                1 => b.extend_from_slice(&extra),
                2 if !b.is_empty() => b[at.min(len - 1)] = byte,
                _ => {}
            }
            b
        })
}

/// Any run of fewer than `max_len` bytes, or bytes [`near`] an encoding `valid` makes.
fn any_or_near(
    max_len: usize,
    valid: impl Strategy<Value = Vec<u8>>,
) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..max_len),
        valid.prop_flat_map(near),
    ]
}

fn qp_info() -> impl Strategy<Value = QpInfo> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<u16>(),
        any::<[u8; 16]>(),
        any::<u8>(),
    )
        .prop_map(|(qpn, psn, lid, gid, mtu)| QpInfo {
            qpn,
            psn,
            lid,
            gid,
            mtu,
        })
}

fn oob_message() -> impl Strategy<Value = oob::Message> {
    prop_oneof![
        Just(oob::Message::Ask),
        qp_info().prop_map(oob::Message::Request),
        qp_info().prop_map(oob::Message::Reply),
        Just(oob::Message::Ready),
        Just(oob::Message::Removed),
    ]
}

fn xrc_message() -> impl Strategy<Value = xrc::Message> {
    prop_oneof![
        qp_info().prop_map(xrc::Message::Connect),
        (any::<u32>(), qp_info(), any::<u32>()).prop_map(|(initiator, target, srqn)| {
            xrc::Message::Accept {
                initiator,
                target,
                srqn,
            }
        }),
        any::<u32>().prop_map(|qpn| xrc::Message::Attach { qpn }),
        (any::<u32>(), any::<u32>()).prop_map(|(qpn, srqn)| xrc::Message::Attached { qpn, srqn }),
        any::<u32>().prop_map(|qpn| xrc::Message::Gone { qpn }),
        any::<u32>().prop_map(|qpn| xrc::Message::Refuse { qpn }),
    ]
}

fn offers() -> impl Strategy<Value = Vec<Offer>> {
    let offer = (
        "[a-z_]{0,12}",
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(name, priority, blob)| Offer {
            name,
            priority,
            blob,
        });
    prop::collection::vec(offer, 0..4)
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Connect), Just(Kind::Ask)]
}

fn rdma_cm_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        Just(Event::Start),
        kind().prop_map(Event::Request),
        Just(Event::Established),
        kind().prop_map(Event::Rejected),
        Just(Event::Disconnected),
    ]
}

proptest! {
    #[test]
    fn oob_messages_decode_exactly(
        bytes in any_or_near(64, oob_message().prop_map(|m| m.encode()))
    ) {
        if let Some(m) = oob::Message::decode(&bytes) {
            prop_assert_eq!(m.encode(), bytes);
        }
    }

    #[test]
    fn xrc_messages_decode_exactly(
        bytes in any_or_near(64, xrc_message().prop_map(|m| m.encode()))
    ) {
        if let Some(m) = xrc::Message::decode(&bytes) {
            prop_assert_eq!(m.encode(), bytes);
        }
    }

    /// Private data carries the hello first, then anything (the transport's padding).
    #[test]
    fn rdma_cm_hellos_decode_from_their_first_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..56)
    ) {
        if let Some(h) = Hello::decode(&bytes) {
            prop_assert_eq!(&h.encode()[..], &bytes[..Hello::LEN]);
        } else {
            prop_assert!(bytes.len() < Hello::LEN || !matches!(bytes[4], 1 | 2));
        }
    }

    #[test]
    fn connection_method_lists_decode_exactly_or_are_refused(
        bytes in any_or_near(96, offers().prop_map(|o| select::encode(&o)))
    ) {
        match select::decode(&bytes) {
            Ok(o) => prop_assert_eq!(select::encode(&o), bytes),
            Err(e) => prop_assert!(matches!(e, Error::Selection(_)), "{e:?}"),
        }
    }

    /// Any sequence of messages, starts and a time-out: no panic, the handshake is up
    /// only after it said so, and nothing follows a failure but silence or `Removed`'s
    /// failure again.
    #[test]
    fn oob_handshakes_take_any_sequence(
        initiator in any::<bool>(),
        local in qp_info(),
        steps in prop::collection::vec(prop_oneof![
            oob_message().prop_map(Some),
            Just(None),
        ], 0..12),
        time_out in any::<bool>(),
    ) {
        let mut h = Handshake::new(initiator, local);
        let mut said_up = false;
        for step in steps {
            let actions = match step {
                Some(m) => h.on_message(m),
                None => h.start(),
            };
            said_up |= actions.contains(&oob::Action::Up);
            prop_assert!(!h.is_up() || said_up, "up without saying so");
        }
        if time_out {
            let actions = h.time_out(Duration::from_secs(1));
            prop_assert!(actions.is_empty() || !h.is_up());
        }
    }

    #[test]
    fn rdma_cm_connections_take_any_sequence(
        initiator in any::<bool>(),
        events in prop::collection::vec(rdma_cm_event(), 0..12),
        time_out in any::<bool>(),
    ) {
        let mut c = Connection::new(initiator);
        let mut said_up = false;
        for e in events {
            let actions = c.on(e);
            said_up |= actions.contains(&rdma_cm::Action::Up);
            prop_assert!(!c.is_up() || said_up, "up without saying so");
        }
        if time_out {
            let actions = c.time_out(Duration::from_secs(1));
            prop_assert!(actions.is_empty() || !c.is_up());
        }
    }
}
