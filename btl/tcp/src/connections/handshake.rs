//! The connection handshake, as state machines with no I/O: what an accepted
//! connection must say before anything it sends is acted on, what a connector waits
//! for, and which of two simultaneous connections between the same pair survives.
//!
//! Each listener draws a random secret, published in the modex beside its address. A
//! connector's first frame is a HELLO carrying that secret, its rank and the link index
//! the connection is for; it then waits for HELLO_ACK before sending anything else
//! (frames queue meanwhile). The acceptor reads exactly one HELLO, compares the secret
//! in constant time and checks the rank, and only then treats the connection as the
//! peer's. Anything else (silence past the deadline, a wrong secret, bytes that are not
//! a HELLO, a close) ends the connection, is counted, and says nothing about any rank:
//! no connection that never finished a handshake can make a rank look dead.
//!
//! Both sides may connect the same link at once. The connection initiated by the lower
//! rank wins: the higher rank accepts it (HELLO_ACK) and drops its own attempt, the
//! lower rank declines the higher's (HELLO_NACK) and keeps its own.

use crate::wire::{self, Frame, Hello, Limits, SECRET};
use std::time::{Duration, Instant};

/// A listener's secret.
pub type Secret = [u8; SECRET];

/// Fresh random bytes from the kernel (`getrandom`).
pub fn fresh_secret() -> std::io::Result<Secret> {
    let mut s = [0u8; SECRET];
    let mut got = 0;
    while got < SECRET {
        match rustix::rand::getrandom(&mut s[got..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(s)
}

/// Compare two secrets in time independent of where they differ.
pub fn same_secret(a: &Secret, b: &Secret) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    // Keep the compiler from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

/// Why an accepted connection was closed before it was trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// It closed before a whole HELLO arrived (an empty connection, a scan).
    Closed,
    /// No whole HELLO arrived before the deadline.
    Stalled,
    /// The first bytes were not a HELLO frame.
    Garbage,
    /// A HELLO with another secret.
    WrongSecret,
    /// A HELLO naming a rank outside the job, this process itself, an unknown link, or
    /// another protocol version.
    BadIdentity,
    /// Closed unheard to make room for a newer connection: the most connections that
    /// may prove themselves at once were, or the process had no descriptor left.
    Crowded,
}

/// What an accepted connection has shown so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Not a whole HELLO yet.
    Waiting,
    /// A job member: `rank` for link `link`. The connection is trusted from here on.
    Member {
        /// Its rank.
        rank: u32,
        /// The link index it is for.
        link: u16,
    },
    /// Close it, counted under this reason.
    Refuse(Refusal),
}

/// What an acceptor checks a HELLO against.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// The secret of the listener that accepted the connection.
    pub secret: Secret,
    /// This process's rank.
    pub me: u32,
    /// Ranks in the job.
    pub size: u32,
    /// Most links per peer.
    pub links: u16,
}

/// An accepted connection before its HELLO.
#[derive(Debug)]
pub struct Accepting {
    deadline: Instant,
    buf: [u8; HELLO_LEN],
    have: usize,
}

/// Bytes of a HELLO frame.
pub const HELLO_LEN: usize = wire::HEADER + wire::Kind::Hello.ext();

impl Accepting {
    /// A connection accepted at `now`, to be trusted within `timeout`.
    pub fn new(now: Instant, timeout: Duration) -> Accepting {
        Accepting {
            deadline: now + timeout,
            buf: [0; HELLO_LEN],
            have: 0,
        }
    }

    /// When its HELLO is due (the oldest connection has the earliest).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Where the next bytes go: at most the rest of a HELLO, never more (what follows a
    /// HELLO belongs to the trusted connection, and a connector sends nothing before
    /// its answer).
    pub fn room(&mut self) -> &mut [u8] {
        &mut self.buf[self.have..]
    }

    /// `n` bytes were written into [`Accepting::room`].
    pub fn received(&mut self, n: usize, expect: &Expect) -> Step {
        self.have += n;
        // A HELLO's header is known in full: refuse garbage as soon as it shows.
        let want = wire::hello(&Hello {
            secret: [0; SECRET],
            rank: 0,
            link: 0,
            version: 0,
        });
        let header = &want.as_bytes()[..wire::HEADER];
        let seen = self.have.min(wire::HEADER);
        if self.buf[..seen] != header[..seen] {
            return Step::Refuse(Refusal::Garbage);
        }
        if self.have < HELLO_LEN {
            return Step::Waiting;
        }
        let limits = Limits {
            am_payload: 0,
            rdma_data: 0,
        };
        let Ok(Some((Frame::Hello(h), _))) = wire::decode(&self.buf, &limits) else {
            return Step::Refuse(Refusal::Garbage);
        };
        if !same_secret(&h.secret, &expect.secret) {
            return Step::Refuse(Refusal::WrongSecret);
        }
        if h.rank >= expect.size
            || h.rank == expect.me
            || h.link >= expect.links
            || h.version != wire::VERSION
        {
            return Step::Refuse(Refusal::BadIdentity);
        }
        Step::Member {
            rank: h.rank,
            link: h.link,
        }
    }

    /// The connection closed, or `now` is past the deadline: the refusal, if so.
    pub fn check(&self, closed: bool, now: Instant) -> Option<Refusal> {
        if closed {
            Some(Refusal::Closed)
        } else if now >= self.deadline {
            Some(Refusal::Stalled)
        } else {
            None
        }
    }
}

/// What the acceptor does with a member's connection for a link, given what it has
/// for that link itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep it (answer HELLO_ACK); drop our own attempt, if any.
    Keep,
    /// Decline it (answer HELLO_NACK, then close): ours wins.
    Decline,
}

/// The state of one link as the acceptor has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkState {
    /// Nothing yet.
    None,
    /// Our own connection attempt, not yet answered.
    Connecting,
    /// Up already.
    Up,
}

/// Simultaneous connects: the connection the lower rank initiated wins.
pub fn verdict(me: u32, peer: u32, ours: LinkState) -> Verdict {
    match ours {
        LinkState::None => Verdict::Keep,
        LinkState::Connecting if peer < me => Verdict::Keep,
        LinkState::Connecting | LinkState::Up => Verdict::Decline,
    }
}

/// A connector's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connecting {
    /// The TCP connection is being made.
    Opening,
    /// HELLO sent; waiting for the answer.
    Greeted,
    /// Accepted: frames may flow.
    Up,
    /// Declined: the peer keeps its own connection for this link, which arrives on
    /// our listener.
    Declined,
    /// The peer is unreachable or closed without answering.
    Failed,
}

/// What happened to a connector's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The TCP connection is made (the HELLO goes out now).
    Opened,
    /// A HELLO_ACK arrived.
    Ack,
    /// A HELLO_NACK arrived.
    Nack,
    /// A frame other than an answer arrived before the answer.
    Other,
    /// The connection failed or closed.
    Closed,
}

impl Connecting {
    /// The next state.
    pub fn on(self, e: Event) -> Connecting {
        match (self, e) {
            (Connecting::Opening, Event::Opened) => Connecting::Greeted,
            (Connecting::Greeted, Event::Ack) => Connecting::Up,
            (Connecting::Greeted, Event::Nack) => Connecting::Declined,
            (Connecting::Up, Event::Ack | Event::Nack) => Connecting::Failed,
            (Connecting::Up, _) => Connecting::Up,
            (Connecting::Declined, _) => Connecting::Declined,
            _ => Connecting::Failed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect() -> Expect {
        Expect {
            secret: [5; SECRET],
            me: 0,
            size: 4,
            links: 2,
        }
    }

    fn hello_bytes(secret: Secret, rank: u32, link: u16) -> Vec<u8> {
        wire::hello(&Hello {
            secret,
            rank,
            link,
            version: wire::VERSION,
        })
        .as_bytes()
        .to_vec()
    }

    /// Feed `bytes` a few at a time, as a socket might deliver them.
    fn feed(bytes: &[u8], step: usize) -> Step {
        let mut a = Accepting::new(Instant::now(), Duration::from_secs(5));
        let mut rest = bytes;
        loop {
            let room = a.room();
            let n = room.len().min(step).min(rest.len());
            if n == 0 {
                return Step::Waiting;
            }
            room[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            match a.received(n, &expect()) {
                Step::Waiting => {}
                other => return other,
            }
        }
    }

    #[test]
    fn a_member_is_trusted_whatever_the_pieces() {
        for step in [1, 3, HELLO_LEN] {
            assert_eq!(
                feed(&hello_bytes([5; SECRET], 2, 1), step),
                Step::Member { rank: 2, link: 1 }
            );
        }
    }

    #[test]
    fn strangers_are_refused() {
        assert_eq!(
            feed(&hello_bytes([6; SECRET], 2, 0), 4),
            Step::Refuse(Refusal::WrongSecret)
        );
        assert_eq!(
            feed(b"GET / HTTP/1.1\r\n\r\n", 100),
            Step::Refuse(Refusal::Garbage)
        );
        assert_eq!(
            feed(&[7], 1),
            Step::Refuse(Refusal::Garbage),
            "at the first byte"
        );
        for (rank, link) in [(4, 0), (0, 0), (1, 2)] {
            assert_eq!(
                feed(&hello_bytes([5; SECRET], rank, link), 7),
                Step::Refuse(Refusal::BadIdentity),
                "rank {rank} link {link}"
            );
        }
        let half = hello_bytes([5; SECRET], 2, 0);
        assert_eq!(feed(&half[..HELLO_LEN - 1], 5), Step::Waiting);
        let t0 = Instant::now();
        let a = Accepting::new(t0, Duration::from_secs(3));
        assert_eq!(a.check(false, t0 + Duration::from_secs(1)), None);
        assert_eq!(
            a.check(false, t0 + Duration::from_secs(3)),
            Some(Refusal::Stalled)
        );
        assert_eq!(a.check(true, t0), Some(Refusal::Closed));
    }

    #[test]
    fn secrets_compare_whole() {
        let a = [1u8; SECRET];
        let mut b = a;
        assert!(same_secret(&a, &b));
        b[SECRET - 1] = 0;
        assert!(!same_secret(&a, &b));
        assert_ne!(fresh_secret().unwrap(), fresh_secret().unwrap());
    }

    #[test]
    fn the_lower_ranks_connection_wins() {
        // Ranks 1 and 3 connect at once: 3 keeps 1's, 1 declines 3's.
        assert_eq!(verdict(3, 1, LinkState::Connecting), Verdict::Keep);
        assert_eq!(verdict(1, 3, LinkState::Connecting), Verdict::Decline);
        assert_eq!(verdict(1, 3, LinkState::None), Verdict::Keep);
        assert_eq!(verdict(3, 1, LinkState::Up), Verdict::Decline);
    }

    #[test]
    fn a_connector_waits_for_its_answer() {
        use Connecting::*;
        let run = |events: &[Event]| events.iter().fold(Opening, |s, &e| s.on(e));
        assert_eq!(run(&[Event::Opened, Event::Ack]), Up);
        assert_eq!(run(&[Event::Opened, Event::Nack]), Declined);
        assert_eq!(run(&[Event::Opened, Event::Nack, Event::Closed]), Declined);
        assert_eq!(run(&[Event::Closed]), Failed);
        assert_eq!(run(&[Event::Opened, Event::Other]), Failed);
        assert_eq!(run(&[Event::Opened, Event::Closed]), Failed);
        assert_eq!(run(&[Event::Opened, Event::Ack, Event::Ack]), Failed);
    }
}
