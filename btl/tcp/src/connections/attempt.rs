//! Our own connection attempt for one link: the nonblocking connect, the HELLO, and
//! the peer's answer ([`handshake`](crate::handshake) has the states, this drives them
//! over the socket). What the answer means for the link is the connection table's
//! business ([`net`](crate::net)).
//!
//! The attempt has no clock of its own: the link it is for has a deadline to be up
//! ([`LinkSlot::deadline`](crate::slot::LinkSlot)), which covers the connect, a peer
//! that accepted the connection and never answers, and a peer that declined ours and
//! never connects itself.

use crate::handshake::{Connecting, Event, HELLO_LEN};
use crate::link::RxBuf;
use crate::sockets;
use crate::wire::{self, Frame, Hello, Limits};
use socket2::Socket;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};

/// One connection attempt.
pub struct Attempt {
    /// The peer's index.
    pub peer: usize,
    /// The link index.
    pub link: usize,
    state: Connecting,
    hello: [u8; HELLO_LEN],
    sent: usize,
}

/// Where an attempt stands after [`Attempt::advance`].
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Its connect, its HELLO or its answer is still to come.
    Waiting,
    /// Accepted: the connection is the link now.
    Up,
    /// Declined: the peer's own connection for the link comes to our listener.
    Declined,
    /// It failed, for this reason.
    Failed(String),
}

impl Attempt {
    /// Start connecting from `local` to `to` for link `link` of peer `peer`, saying
    /// `hello` once connected.
    pub fn open(
        peer: usize,
        link: usize,
        hello: &Hello,
        local: IpAddr,
        to: SocketAddr,
        opts: &sockets::Options,
    ) -> io::Result<(Socket, Attempt)> {
        let sock = sockets::connect(local, to, opts)?;
        let mut bytes = [0u8; HELLO_LEN];
        bytes.copy_from_slice(wire::hello(hello).as_bytes());
        let attempt = Attempt {
            peer,
            link,
            state: Connecting::Opening,
            hello: bytes,
            sent: 0,
        };
        Ok((sock, attempt))
    }

    /// What it waits for, to say why a link was not up in time.
    pub fn waiting_for(&self) -> &'static str {
        match self.state {
            Connecting::Opening => "the connection was not made",
            _ => "the peer accepted the connection but did not answer its HELLO",
        }
    }

    /// Whether the TCP connection was made (the peer's listener took it).
    pub fn connected(&self) -> bool {
        self.state != Connecting::Opening
    }

    /// Drive it as far as the socket allows: `writable` and `readable` are the
    /// connection's readiness (cleared when a call would block), `rx` its buffer.
    pub fn advance(
        &mut self,
        sock: &Socket,
        rx: &mut RxBuf,
        readable: &mut bool,
        writable: &mut bool,
        limits: &Limits,
    ) -> Outcome {
        if self.state == Connecting::Opening {
            if !*writable {
                return Outcome::Waiting;
            }
            match sockets::connect_result(sock) {
                Ok(()) => self.state = self.state.on(Event::Opened),
                Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                    *writable = false;
                    return Outcome::Waiting;
                }
                Err(e) => return Outcome::Failed(e.to_string()),
            }
        }
        while self.sent < HELLO_LEN {
            match sockets::send(sock, &[IoSlice::new(&self.hello[self.sent..])]) {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    *writable = false;
                    return Outcome::Waiting;
                }
                Err(e) => return Outcome::Failed(e.to_string()),
            }
        }
        let event = loop {
            match wire::decode(rx.data(), limits) {
                Ok(Some((Frame::HelloAck, used))) => {
                    rx.consume(used);
                    break Event::Ack;
                }
                Ok(Some((Frame::HelloNack, used))) => {
                    rx.consume(used);
                    break Event::Nack;
                }
                Ok(Some(_)) | Err(_) => break Event::Other,
                Ok(None) => {}
            }
            if !*readable {
                return Outcome::Waiting;
            }
            match rx.fill(sock, wire::HEADER) {
                Ok((0, _)) => break Event::Closed,
                Ok((_, full)) => *readable = full,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => *readable = false,
                Err(_) => break Event::Closed,
            }
        };
        self.state = self.state.on(event);
        match self.state {
            Connecting::Up => Outcome::Up,
            Connecting::Declined => Outcome::Declined,
            _ => Outcome::Failed(format!("the handshake failed ({event:?})")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn opts() -> sockets::Options {
        sockets::Options {
            nodelay: true,
            sndbuf: 0,
            rcvbuf: 0,
            congestion: None,
        }
    }

    const LIMITS: Limits = Limits {
        am_payload: 64,
        rdma_data: 64,
    };

    /// Advance until the outcome is not `Waiting` or `tries` rounds have passed.
    fn drive(a: &mut Attempt, sock: &Socket, rx: &mut RxBuf, tries: usize) -> Outcome {
        for _ in 0..tries {
            let (mut r, mut w) = (true, true);
            let o = a.advance(sock, rx, &mut r, &mut w, &LIMITS);
            if o != Outcome::Waiting {
                return o;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        Outcome::Waiting
    }

    /// The loopback addresses of both families.
    fn loopbacks() -> [IpAddr; 2] {
        [
            std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::Ipv6Addr::LOCALHOST.into(),
        ]
    }

    /// A listener on loopback address `ip`, its address, and the HELLO an attempt to
    /// it sends.
    fn listener_and_hello(ip: IpAddr) -> (std::net::TcpListener, SocketAddr, Hello) {
        let l = std::net::TcpListener::bind(SocketAddr::new(ip, 0)).unwrap();
        let to = l.local_addr().unwrap();
        let hello = Hello {
            secret: [3; wire::SECRET],
            rank: 1,
            link: 0,
            version: wire::VERSION,
        };
        (l, to, hello)
    }

    #[test]
    fn an_attempt_says_hello_and_takes_its_answer() {
        for ip in loopbacks() {
            let (l, to, hello) = listener_and_hello(ip);
            for (answer, outcome) in [(10u8, Outcome::Up), (11, Outcome::Declined)] {
                let (sock, mut a) =
                    Attempt::open(0, 0, &hello, ip, to, &opts()).expect("connecting on loopback");
                let mut rx = RxBuf::new(64);
                let (mut peer, from) = l.accept().unwrap();
                assert_eq!(from.ip(), ip, "from the local address asked for");
                assert_eq!(drive(&mut a, &sock, &mut rx, 100), Outcome::Waiting);
                assert!(a.connected() && a.waiting_for().contains("did not answer"));
                let mut got = [0u8; HELLO_LEN];
                peer.read_exact(&mut got).unwrap();
                assert_eq!(&got[..], wire::hello(&hello).as_bytes());
                let frame = [answer, 0, 0, 0, 0, 0, 0, 0];
                peer.write_all(&frame).unwrap();
                assert_eq!(drive(&mut a, &sock, &mut rx, 5000), outcome);
            }
        }
    }

    #[test]
    fn an_attempt_whose_peer_closes_fails() {
        for ip in loopbacks() {
            let (l, to, hello) = listener_and_hello(ip);
            let (sock, mut a) = Attempt::open(0, 0, &hello, ip, to, &opts()).unwrap();
            let mut rx = RxBuf::new(64);
            drop(l.accept().unwrap());
            assert!(matches!(
                drive(&mut a, &sock, &mut rx, 5000),
                Outcome::Failed(_)
            ));
        }
    }
}
