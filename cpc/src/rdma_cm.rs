//! The `rdma_cm` connection method's decisions, with no I/O (Open MPI:
//! `btl_openib_connect_rdmacm.c`). Each side listens on its port's IP address; the
//! side with the lower address (IP, then port) initiates. The other side, when it
//! needs the connection first, sends a connect request marked as an *ask*, which the
//! lower side rejects before connecting back. Requests that cross are resolved the
//! same way on both sides: the lower side's connection wins. A side that waits past
//! its deadline gives up ([`Connection::time_out`]).

use crate::deadline::timed_out;
use crate::Failure;
use std::net::SocketAddrV4;
use std::time::Duration;

/// What a connect request's private data says it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A real connection.
    Connect,
    /// A request that the receiver connect back.
    Ask,
}

/// The private data of a connect request: the sender's rank and what it wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The sender's rank.
    pub rank: u32,
    /// What it wants.
    pub kind: Kind,
    /// The sender's queue pair number (0 for an ask).
    pub qpn: u32,
}

impl Hello {
    /// Bytes of an encoded hello, well inside the 56 bytes of private data (the rest
    /// is free for the transport).
    pub const LEN: usize = 9;

    /// Its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.push(match self.kind {
            Kind::Connect => 1,
            Kind::Ask => 2,
        });
        out.extend_from_slice(&self.qpn.to_le_bytes());
        out
    }

    /// From private data (which may carry padding after it).
    pub fn decode(b: &[u8]) -> Option<Hello> {
        let kind = match *b.get(4)? {
            1 => Kind::Connect,
            2 => Kind::Ask,
            _ => return None,
        };
        Some(Hello {
            rank: u32::from_le_bytes(b.get(0..4)?.try_into().ok()?),
            kind,
            qpn: u32::from_le_bytes(b.get(5..9)?.try_into().ok()?),
        })
    }
}

/// What happened, as the driver saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The local side wants the connection.
    Start,
    /// The peer's connect request arrived.
    Request(Kind),
    /// Our connection is established.
    Established,
    /// The peer rejected our request of this kind.
    Rejected(Kind),
    /// The connection went down.
    Disconnected,
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Resolve the peer's address and route, then send a connect request of this kind
    /// (with a queue pair for [`Kind::Connect`]).
    Connect(Kind),
    /// Accept the pending request (with a queue pair, receives posted).
    Accept,
    /// Reject the pending request.
    Reject,
    /// The connection is up.
    Up,
    /// Connecting failed.
    Fail(Failure),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Asking,
    Connecting,
    Accepting,
    Up,
    Failed,
}

/// One peer's connection decisions.
#[derive(Debug)]
pub struct Connection {
    initiator: bool,
    state: State,
}

/// Whether the side listening at `me` initiates towards `peer`: the lower address.
pub fn initiates(me: SocketAddrV4, peer: SocketAddrV4) -> bool {
    (me.ip(), me.port()) < (peer.ip(), peer.port())
}

impl Connection {
    /// The decisions of a side that initiates or not.
    pub fn new(initiator: bool) -> Connection {
        Connection {
            initiator,
            state: State::Idle,
        }
    }

    /// Whether the connection is up.
    pub fn is_up(&self) -> bool {
        self.state == State::Up
    }

    /// The connection was not up within `waited` of being wanted: it fails, saying what
    /// it was waiting for (nothing happens once it is up or failed). The driver drops
    /// its identifiers and queue pairs for the peer.
    pub fn time_out(&mut self, waited: Duration) -> Vec<Action> {
        let waiting_for = match self.state {
            State::Up | State::Failed => return Vec::new(),
            State::Idle => "it never started",
            State::Asking => {
                "we asked the peer, which initiates, to connect (a connect request marked \
                 as an ask), and it did not connect"
            }
            State::Connecting => {
                "our connect request was not accepted (resolving the peer's address and \
                 route, or waiting for its accept)"
            }
            State::Accepting => {
                "we accepted the peer's connect request and the connection was not \
                 established"
            }
        };
        self.state = State::Failed;
        vec![Action::Fail(timed_out("rdma_cm", waited, waiting_for))]
    }

    /// Take in an event; what to do.
    pub fn on(&mut self, event: Event) -> Vec<Action> {
        use State::*;
        let fail = |s: &mut State, why: Failure| {
            *s = Failed;
            vec![Action::Fail(why)]
        };
        let broken = |what: &str| Failure::Broken {
            cpc: "rdma_cm",
            what: what.into(),
        };
        match (self.state, event) {
            (Idle, Event::Start) if self.initiator => {
                self.state = Connecting;
                vec![Action::Connect(Kind::Connect)]
            }
            (Idle, Event::Start) => {
                self.state = Asking;
                vec![Action::Connect(Kind::Ask)]
            }
            (_, Event::Start) => Vec::new(),
            // The peer connects to us: accept unless our own connection wins.
            (Idle | Asking, Event::Request(Kind::Connect)) => {
                self.state = Accepting;
                vec![Action::Accept]
            }
            (Connecting, Event::Request(Kind::Connect)) if self.initiator => vec![Action::Reject],
            (Connecting, Event::Request(Kind::Connect)) => {
                self.state = Accepting;
                vec![Action::Accept]
            }
            // The peer asks us to connect.
            (Idle, Event::Request(Kind::Ask)) => {
                self.state = Connecting;
                vec![Action::Reject, Action::Connect(Kind::Connect)]
            }
            (Connecting | Accepting | Up, Event::Request(Kind::Ask)) => vec![Action::Reject],
            (Asking, Event::Request(Kind::Ask)) => fail(
                &mut self.state,
                Failure::Protocol {
                    cpc: "rdma_cm",
                    what: "both sides asked the other to connect (their addresses disagree on \
                           who initiates)"
                        .into(),
                },
            ),
            (Connecting | Accepting, Event::Established) => {
                self.state = Up;
                vec![Action::Up]
            }
            // Asks are always refused, whenever the refusal arrives (it may come after
            // the peer's own connection is up); a real request loses a crossing.
            (_, Event::Rejected(Kind::Ask)) => Vec::new(),
            (Accepting, Event::Rejected(Kind::Connect)) => Vec::new(),
            (Connecting, Event::Rejected(Kind::Connect)) => {
                fail(&mut self.state, broken("the peer rejected the connection"))
            }
            (Up, Event::Request(Kind::Connect)) => vec![Action::Reject],
            (Up, Event::Disconnected) => fail(
                &mut self.state,
                broken(
                    "the peer disconnected: it removed this process (del_procs), or its \
                     module or process ended",
                ),
            ),
            (state, event) => fail(
                &mut self.state,
                Failure::Protocol {
                    cpc: "rdma_cm",
                    what: format!("unexpected {event:?} in {state:?}"),
                },
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8, port: u16) -> SocketAddrV4 {
        SocketAddrV4::new([198, 18, 0, last].into(), port)
    }

    /// The lower side and the higher one, both started at once.
    fn both_started() -> (Connection, Connection) {
        let (mut lo, mut hi) = (Connection::new(true), Connection::new(false));
        lo.on(Event::Start);
        hi.on(Event::Start);
        (lo, hi)
    }

    #[test]
    fn the_lower_address_initiates() {
        assert!(initiates(addr(1, 5000), addr(2, 4000)));
        assert!(initiates(addr(1, 4000), addr(1, 5000)));
        assert!(!initiates(addr(1, 5000), addr(1, 4000)));
    }

    #[test]
    fn initiator_connects_peer_accepts() {
        let (mut lo, mut hi) = (Connection::new(true), Connection::new(false));
        assert_eq!(lo.on(Event::Start), vec![Action::Connect(Kind::Connect)]);
        assert_eq!(hi.on(Event::Request(Kind::Connect)), vec![Action::Accept]);
        assert_eq!(hi.on(Event::Established), vec![Action::Up]);
        assert_eq!(lo.on(Event::Established), vec![Action::Up]);
        assert!(lo.is_up() && hi.is_up());
    }

    #[test]
    fn the_higher_side_asks_and_is_connected_back() {
        let (mut lo, mut hi) = (Connection::new(true), Connection::new(false));
        assert_eq!(hi.on(Event::Start), vec![Action::Connect(Kind::Ask)]);
        assert_eq!(
            lo.on(Event::Request(Kind::Ask)),
            vec![Action::Reject, Action::Connect(Kind::Connect)]
        );
        assert!(hi.on(Event::Rejected(Kind::Ask)).is_empty());
        assert_eq!(hi.on(Event::Request(Kind::Connect)), vec![Action::Accept]);
        assert_eq!(lo.on(Event::Established), vec![Action::Up]);
        assert_eq!(hi.on(Event::Established), vec![Action::Up]);
    }

    #[test]
    fn an_asks_refusal_may_arrive_after_the_connection_is_up() {
        let (mut lo, mut hi) = both_started();
        assert_eq!(hi.on(Event::Request(Kind::Connect)), vec![Action::Accept]);
        assert_eq!(hi.on(Event::Established), vec![Action::Up]);
        assert_eq!(lo.on(Event::Request(Kind::Ask)), vec![Action::Reject]);
        assert!(hi.on(Event::Rejected(Kind::Ask)).is_empty());
        assert!(hi.is_up());
    }

    #[test]
    fn crossing_requests_resolve_to_the_lower_sides_connection() {
        // Both start at once: the ask reaches a side already connecting.
        let (mut lo, mut hi) = both_started();
        assert_eq!(lo.on(Event::Request(Kind::Ask)), vec![Action::Reject]);
        assert_eq!(hi.on(Event::Request(Kind::Connect)), vec![Action::Accept]);
        assert!(hi.on(Event::Rejected(Kind::Ask)).is_empty());
        assert_eq!(lo.on(Event::Established), vec![Action::Up]);
        assert_eq!(hi.on(Event::Established), vec![Action::Up]);
        // Two real connects crossing (a peer that thinks it initiates): the lower one
        // wins on both sides.
        let (mut lo, mut hi) = (Connection::new(true), Connection::new(false));
        lo.on(Event::Start);
        hi.state = State::Connecting;
        assert_eq!(lo.on(Event::Request(Kind::Connect)), vec![Action::Reject]);
        assert_eq!(hi.on(Event::Request(Kind::Connect)), vec![Action::Accept]);
        assert!(hi.on(Event::Rejected(Kind::Connect)).is_empty());
        assert_eq!(hi.on(Event::Established), vec![Action::Up]);
    }

    #[test]
    fn refusals_and_confusion_fail_clearly() {
        let mut lo = Connection::new(true);
        lo.on(Event::Start);
        assert!(
            matches!(&lo.on(Event::Rejected(Kind::Connect))[..], [Action::Fail(Failure::Broken { what, .. })] if what.contains("rejected"))
        );
        let mut hi = Connection::new(false);
        hi.on(Event::Start);
        assert!(
            matches!(&hi.on(Event::Request(Kind::Ask))[..], [Action::Fail(Failure::Protocol { what, .. })] if what.contains("both sides"))
        );
        let mut up = Connection::new(true);
        up.on(Event::Start);
        up.on(Event::Established);
        assert!(matches!(
            &up.on(Event::Disconnected)[..],
            [Action::Fail(Failure::Broken { what, .. })] if what.contains("removed this process")
        ));
    }

    /// Past the deadline each waiting side fails, naming what it waited for; what the
    /// peer does later never brings it up.
    #[test]
    fn a_side_past_its_deadline_fails_naming_what_it_waited_for() {
        let waited = Duration::from_millis(3000);
        let why = |acts: Vec<Action>| match &acts[..] {
            [Action::Fail(why @ Failure::TimedOut { .. })] => why.to_string(),
            other => panic!("{other:?}"),
        };
        let mut lo = Connection::new(true);
        lo.on(Event::Start);
        let w = why(lo.time_out(waited));
        assert!(
            w.starts_with("rdma_cm: the connection was not up within 3000 ms")
                && w.contains("not accepted")
                && w.contains("btl_openib_connect_timeout"),
            "{w}"
        );
        assert!(lo.time_out(waited).is_empty(), "failed once");
        // The peer wakes up: its accept's establishment, or its own request, fail.
        assert!(matches!(&lo.on(Event::Established)[..], [Action::Fail(_)]));
        assert!(matches!(
            &lo.on(Event::Request(Kind::Connect))[..],
            [Action::Fail(_)]
        ));
        assert!(!lo.is_up());
        let mut hi = Connection::new(false);
        hi.on(Event::Start);
        assert!(why(hi.time_out(waited)).contains("did not connect"));
        let mut hi = Connection::new(false);
        hi.on(Event::Request(Kind::Connect));
        assert!(why(hi.time_out(waited)).contains("not established"));
        let mut up = Connection::new(true);
        up.on(Event::Start);
        up.on(Event::Established);
        assert!(up.time_out(waited).is_empty() && up.is_up());
    }

    #[test]
    fn hello_round_trips() {
        let h = Hello {
            rank: 7,
            kind: Kind::Ask,
            qpn: 0x1234,
        };
        let mut b = h.encode();
        b.resize(56, 0);
        assert_eq!(Hello::decode(&b), Some(h));
        assert_eq!(Hello::decode(&[1, 2, 3]), None);
    }
}
