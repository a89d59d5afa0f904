//! The `oob` connection method's handshake, with no I/O (Open MPI:
//! `btl_openib_connect_oob.c`): queue-pair number, PSN, LID, GID and MTU travel over
//! the job's out-of-band channel. The lower rank initiates; the higher one, when it
//! needs the connection first, asks the lower one to.
//!
//! ```text
//! initiator                         responder
//!   Request(info)  ------------->   RTR+RTS towards info
//!                  <-------------   Reply(info)
//!   RTR+RTS, up
//!   Ready          ------------->   up
//! ```
//!
//! The responder's queue pair is ready to receive before it replies, so the initiator
//! may send as soon as it is up; the responder sends only after `Ready`. A side that
//! waits past its deadline gives up ([`Handshake::time_out`]), and later messages of
//! that handshake only fail it again. A side that removes its peer (`del_procs`) says
//! `Removed` before it closes its channel, and the peer fails it with that reason
//! rather than taking the close for the end of its process.

use crate::deadline::timed_out;
use crate::Failure;
use std::time::Duration;

/// What one side tells the other about its queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Port GID.
    pub gid: [u8; 16],
    /// Active MTU as an `ibv_mtu` value.
    pub mtu: u8,
}

pub(crate) const INFO_LEN: usize = 4 + 4 + 2 + 16 + 1;

impl QpInfo {
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out.extend_from_slice(&self.psn.to_le_bytes());
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&self.gid);
        out.push(self.mtu);
    }

    pub(crate) fn decode(b: &[u8]) -> Option<QpInfo> {
        if b.len() != INFO_LEN {
            return None;
        }
        Some(QpInfo {
            qpn: u32::from_le_bytes(b[0..4].try_into().ok()?),
            psn: u32::from_le_bytes(b[4..8].try_into().ok()?),
            lid: u16::from_le_bytes(b[8..10].try_into().ok()?),
            gid: b[10..26].try_into().ok()?,
            mtu: b[26],
        })
    }
}

/// A handshake message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// From the responder side: please initiate.
    Ask,
    /// The initiator's queue pair.
    Request(QpInfo),
    /// The responder's queue pair, ready to receive.
    Reply(QpInfo),
    /// The initiator is up.
    Ready,
    /// The sender removed the receiver (`del_procs`): it takes nothing more from it.
    Removed,
}

impl Message {
    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + INFO_LEN);
        match self {
            Message::Ask => out.push(1),
            Message::Request(i) => {
                out.push(2);
                i.encode(&mut out);
            }
            Message::Reply(i) => {
                out.push(3);
                i.encode(&mut out);
            }
            Message::Ready => out.push(4),
            Message::Removed => out.push(5),
        }
        out
    }

    /// A message from its bytes; `None` if they are not one.
    pub fn decode(b: &[u8]) -> Option<Message> {
        let (&kind, rest) = b.split_first()?;
        match (kind, rest.is_empty()) {
            (1, true) => Some(Message::Ask),
            (2, false) => QpInfo::decode(rest).map(Message::Request),
            (3, false) => QpInfo::decode(rest).map(Message::Reply),
            (4, true) => Some(Message::Ready),
            (5, true) => Some(Message::Removed),
            _ => None,
        }
    }
}

/// What the driver must do, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Send this message to the peer.
    Send(Message),
    /// Move the local queue pair to RTR then RTS towards the peer's.
    Connect(QpInfo),
    /// The connection is up: queued fragments may go.
    Up,
    /// The handshake failed.
    Fail(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Asked,
    Requested,
    Replied,
    Up,
    Failed,
}

/// One peer's handshake.
#[derive(Debug)]
pub struct Handshake {
    initiator: bool,
    local: QpInfo,
    state: State,
}

/// Whether `me` initiates towards `peer`: the lower rank does.
pub fn initiates(me: u32, peer: u32) -> bool {
    me < peer
}

impl Handshake {
    /// The handshake of a side that initiates or not, with its queue pair `local`
    /// (created, in INIT, with receives posted).
    pub fn new(initiator: bool, local: QpInfo) -> Handshake {
        Handshake {
            initiator,
            local,
            state: State::Idle,
        }
    }

    /// Whether the connection is up.
    pub fn is_up(&self) -> bool {
        self.state == State::Up
    }

    /// The connection was not up within `waited` of being wanted: the handshake fails,
    /// saying what it was waiting for (nothing happens once it is up or failed).
    pub fn time_out(&mut self, waited: Duration) -> Vec<Action> {
        let waiting_for = match self.state {
            State::Up | State::Failed => return Vec::new(),
            State::Idle => "the handshake never started",
            State::Asked => {
                "we asked the peer, which initiates, to connect (Ask), and it sent no Request"
            }
            State::Requested => "we sent our queue pair (Request) and the peer sent no Reply",
            State::Replied => {
                "we answered the peer's Request (Reply) and it never said it is up (Ready)"
            }
        };
        self.state = State::Failed;
        vec![Action::Fail(timed_out("oob", waited, waiting_for))]
    }

    /// The local side wants the connection.
    pub fn start(&mut self) -> Vec<Action> {
        match (self.state, self.initiator) {
            (State::Idle, true) => {
                self.state = State::Requested;
                vec![Action::Send(Message::Request(self.local))]
            }
            (State::Idle, false) => {
                self.state = State::Asked;
                vec![Action::Send(Message::Ask)]
            }
            _ => Vec::new(),
        }
    }

    /// A message from the peer arrived.
    pub fn on_message(&mut self, m: Message) -> Vec<Action> {
        use State::*;
        match (self.state, self.initiator, m) {
            (Idle, true, Message::Ask) => self.start(),
            (Requested | Up, true, Message::Ask) => Vec::new(),
            (Requested, true, Message::Reply(remote)) => {
                self.state = Up;
                vec![
                    Action::Connect(remote),
                    Action::Send(Message::Ready),
                    Action::Up,
                ]
            }
            (Idle | Asked, false, Message::Request(remote)) => {
                self.state = Replied;
                vec![
                    Action::Connect(remote),
                    Action::Send(Message::Reply(self.local)),
                ]
            }
            (Replied, false, Message::Ready) => {
                self.state = Up;
                vec![Action::Up]
            }
            (_, _, Message::Removed) => {
                self.state = Failed;
                vec![Action::Fail(Failure::Removed { cpc: "oob" })]
            }
            (state, initiator, m) => {
                self.state = Failed;
                let side = if initiator { "initiator" } else { "responder" };
                vec![Action::Fail(Failure::Protocol {
                    cpc: "oob",
                    what: format!("unexpected {m:?} for the {side} in state {state:?}"),
                })]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(qpn: u32) -> QpInfo {
        QpInfo {
            qpn,
            psn: qpn * 3,
            lid: 0,
            gid: [qpn as u8; 16],
            mtu: 3,
        }
    }

    /// Deliver every message between two sides until none is left; what each did.
    fn run(a: &mut Handshake, b: &mut Handshake, first: Vec<Action>) -> (Vec<Action>, Vec<Action>) {
        let (mut done_a, mut done_b) = (first.clone(), Vec::new());
        let mut to_b: Vec<Message> = sends(&first);
        let mut to_a: Vec<Message> = Vec::new();
        while !to_a.is_empty() || !to_b.is_empty() {
            for m in std::mem::take(&mut to_b) {
                let acts = b.on_message(m);
                to_a.extend(sends(&acts));
                done_b.extend(acts);
            }
            for m in std::mem::take(&mut to_a) {
                let acts = a.on_message(m);
                to_b.extend(sends(&acts));
                done_a.extend(acts);
            }
        }
        (done_a, done_b)
    }

    fn sends(acts: &[Action]) -> Vec<Message> {
        acts.iter()
            .filter_map(|a| match a {
                Action::Send(m) => Some(*m),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn initiator_first() {
        let mut a = Handshake::new(initiates(0, 1), info(10));
        let mut b = Handshake::new(initiates(1, 0), info(20));
        let first = a.start();
        let (da, db) = run(&mut a, &mut b, first);
        assert!(a.is_up() && b.is_up());
        assert!(da.contains(&Action::Connect(info(20))));
        assert!(db.contains(&Action::Connect(info(10))));
        // The responder is connected before it replies; the initiator before it
        // reports up.
        assert_eq!(db[0], Action::Connect(info(10)));
        assert_eq!(da.last(), Some(&Action::Up));
    }

    #[test]
    fn responder_asks_first_and_both_start() {
        let mut a = Handshake::new(true, info(1));
        let mut b = Handshake::new(false, info(2));
        let first = b.start();
        assert_eq!(first, vec![Action::Send(Message::Ask)]);
        let (_, _) = run(&mut b, &mut a, first);
        assert!(a.is_up() && b.is_up());
        // Both at once: the initiator's request crosses the responder's ask.
        let mut a = Handshake::new(true, info(1));
        let mut b = Handshake::new(false, info(2));
        let ask = b.start();
        let req = a.start();
        assert!(
            a.on_message(sends(&ask)[0]).is_empty(),
            "ask while requested"
        );
        let (_, _) = run(&mut a, &mut b, req);
        assert!(a.is_up() && b.is_up());
    }

    #[test]
    fn unexpected_messages_fail_with_the_state() {
        let mut b = Handshake::new(false, info(2));
        let acts = b.on_message(Message::Ask);
        assert!(
            matches!(&acts[..], [Action::Fail(Failure::Protocol { what, .. })] if what.contains("Ask") && what.contains("responder")),
            "{acts:?}"
        );
        let mut a = Handshake::new(true, info(1));
        assert!(matches!(
            &a.on_message(Message::Ready)[..],
            [Action::Fail(_)]
        ));
    }

    /// Past the deadline each waiting side fails, naming what it waited for; a late
    /// answer only fails it again (it never comes up), and an up side stays up.
    #[test]
    fn a_side_past_its_deadline_fails_naming_what_it_waited_for() {
        let waited = Duration::from_millis(2500);
        let why = |acts: Vec<Action>| match &acts[..] {
            [Action::Fail(why @ Failure::TimedOut { .. })] => why.to_string(),
            other => panic!("{other:?}"),
        };
        // The initiator whose request the (stopped) peer never answered.
        let mut a = Handshake::new(true, info(1));
        a.start();
        let w = why(a.time_out(waited));
        assert!(
            w.starts_with("oob: the connection was not up within 2500 ms")
                && w.contains("no Reply")
                && w.contains("btl_openib_connect_timeout"),
            "{w}"
        );
        assert!(a.time_out(waited).is_empty(), "failed once");
        let late = a.on_message(Message::Reply(info(2)));
        assert!(matches!(&late[..], [Action::Fail(_)]), "{late:?}");
        assert!(!a.is_up());
        // The responder that asked, and the one that replied and heard no Ready.
        let mut b = Handshake::new(false, info(2));
        b.start();
        assert!(why(b.time_out(waited)).contains("sent no Request"));
        let mut b = Handshake::new(false, info(2));
        b.on_message(Message::Request(info(1)));
        assert!(why(b.time_out(waited)).contains("never said it is up (Ready)"));
        assert!(matches!(
            &b.on_message(Message::Ready)[..],
            [Action::Fail(_)]
        ));
        // Up: nothing to give up.
        let (mut a, mut b) = (
            Handshake::new(true, info(1)),
            Handshake::new(false, info(2)),
        );
        let first = a.start();
        run(&mut a, &mut b, first);
        assert!(a.time_out(waited).is_empty() && b.time_out(waited).is_empty());
        assert!(a.is_up() && b.is_up());
    }

    /// `Removed` fails either side in any state, naming the removal.
    #[test]
    fn a_removal_fails_the_side_that_hears_it() {
        let (mut a, mut b) = (
            Handshake::new(true, info(1)),
            Handshake::new(false, info(2)),
        );
        let first = a.start();
        run(&mut a, &mut b, first);
        for side in [&mut a, &mut b, &mut Handshake::new(false, info(3))] {
            let acts = side.on_message(Message::Removed);
            assert!(
                matches!(&acts[..], [Action::Fail(Failure::Removed { cpc: "oob" })]),
                "{acts:?}"
            );
            assert!(!side.is_up());
        }
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Message::Ask,
            Message::Request(info(7)),
            Message::Reply(info(8)),
            Message::Ready,
            Message::Removed,
        ] {
            assert_eq!(Message::decode(&m.encode()), Some(m));
        }
        assert_eq!(Message::decode(&[2, 1, 2]), None);
        assert_eq!(Message::decode(&[]), None);
        assert_eq!(Message::decode(&[9]), None);
    }
}
