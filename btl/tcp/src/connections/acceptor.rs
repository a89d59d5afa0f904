//! The accepting side of a `tcp` module: one listener per chosen address (so at least
//! one per family in use; IPv6 ones take IPv6 only), each with its own secret and the
//! number of its interface; the connections they accept, until each has proved with a
//! HELLO that it comes from a member of the job (or is closed and counted: see
//! `handshake`); and the answer a member's connection gets. Which link a member's
//! connection becomes is the connection table's business (`net`).
//!
//! A member's connection proves itself with its first frame, so only strangers stay
//! unproven for long. At most [`UNPROVEN_MAX`] connections are heard at once: a
//! newer one closes the oldest (counted as crowded), as does one the process has no
//! descriptor left for. So a crowd of silent connections never holds the listener
//! shut to the job, nor takes the descriptors its own connections need. Connections
//! the kernel holds that could not be accepted yet are tried again on every call.

use crate::conn::{Conns, Role};
use crate::handshake::{self, Accepting, Expect, Refusal, Step};
use crate::interfaces::Interface;
use crate::peer::ConnId;
use crate::published::{Listener, Published};
use crate::wire::{self, Kind};
use crate::{sockets, Refused};
use mio::{Registry, Token};
use rbtl_btl::{Error, Result};
use socket2::Socket;
use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Most accepted connections heard at once before they prove themselves.
pub const UNPROVEN_MAX: usize = 64;

/// Tokens from here up are listeners (`usize::MAX - index`).
const LISTENER_BASE: usize = usize::MAX - 1024;

/// Whether `token` is a listener's.
#[inline]
pub fn is_listener(token: Token) -> bool {
    token.0 >= LISTENER_BASE
}

/// What an accepted connection has said so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// Not a whole HELLO yet.
    Waiting,
    /// Refused (closed and counted).
    Refused,
    /// A member's connection: `rank`'s, for link `link`.
    Member {
        /// Its rank.
        rank: u32,
        /// The link index.
        link: u16,
    },
}

/// The listeners and their half-open connections.
pub struct Acceptor {
    listeners: Vec<(Socket, Listener)>,
    opts: sockets::Options,
    timeout: Duration,
    refused: Refused,
    /// A listener may hold connections not accepted yet (an `accept` failed for want
    /// of resources), which raise no new readiness: accept again on the next call.
    retry: bool,
}

fn os(call: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |source| Error::Os { call, source }
}

impl Acceptor {
    /// Listen on every address of `interfaces`, each with a fresh secret, watched by
    /// `registry`; accepted connections have `timeout` to send their HELLO.
    pub fn listen(
        interfaces: &[Interface],
        opts: &sockets::Options,
        timeout: Duration,
        registry: &Registry,
    ) -> Result<Acceptor> {
        if interfaces.len() > Published::MAX_LISTENERS {
            return Err(Error::NotAvailable(format!(
                "{} addresses chosen, at most {} are published: narrow btl_tcp_if_include",
                interfaces.len(),
                Published::MAX_LISTENERS
            )));
        }
        // The published number of each address's interface: the order of its name.
        let mut names: Vec<&str> = Vec::new();
        let mut listeners = Vec::new();
        let mut skipped = None;
        for itf in interfaces {
            let iface = match names.iter().position(|n| *n == itf.name) {
                Some(k) => k,
                None => {
                    names.push(&itf.name);
                    names.len() - 1
                }
            } as u8;
            let (sock, addr) = match sockets::listen(itf.addr, opts) {
                Ok(bound) => bound,
                // An IPv6 address still in duplicate address detection, or gone since
                // it was listed, or IPv6 turned off: the other addresses carry the job.
                Err(e) if itf.addr.is_ipv6() && unbindable(&e) => {
                    tracing::warn!(addr = %itf.addr, %e, "tcp: not listening on this address");
                    skipped = Some(e);
                    continue;
                }
                Err(e) => return Err(os("listen")(e)),
            };
            let secret = handshake::fresh_secret().map_err(os("getrandom"))?;
            registry
                .register(
                    &mut mio::unix::SourceFd(&sock.as_raw_fd()),
                    Token(usize::MAX - listeners.len()),
                    mio::Interest::READABLE,
                )
                .map_err(os("epoll_ctl"))?;
            let l = Listener {
                addr,
                prefix: itf.prefix,
                iface,
                secret,
            };
            listeners.push((sock, l));
        }
        if let (true, Some(e)) = (listeners.is_empty(), skipped) {
            return Err(os("listen")(e));
        }
        Ok(Acceptor {
            listeners,
            opts: *opts,
            timeout,
            refused: Refused::default(),
            retry: false,
        })
    }

    /// What this module publishes.
    pub fn published(&self, module: u64) -> Published {
        Published {
            module,
            listeners: self.listeners(),
        }
    }

    /// The listeners as published.
    pub fn listeners(&self) -> Vec<Listener> {
        self.listeners.iter().map(|(_, l)| *l).collect()
    }

    /// How many listeners there are.
    pub fn count(&self) -> usize {
        self.listeners.len()
    }

    /// The addresses it listens on.
    pub fn listening(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(_, l)| l.addr).collect()
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.refused
    }

    /// Whether a listener may hold connections that an earlier call could not accept.
    #[inline]
    pub fn retry(&self) -> bool {
        self.retry
    }

    /// Accept what every listener has, into `conns`; the new connections.
    pub fn accept_all(&mut self, conns: &mut Conns, registry: &Registry) -> Vec<ConnId> {
        let mut fresh = Vec::new();
        let was_retrying = std::mem::take(&mut self.retry);
        for i in 0..self.listeners.len() {
            loop {
                let sock = match sockets::accept(&self.listeners[i].0, &self.opts) {
                    Ok(s) => s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => match accept_error(&e) {
                        AcceptError::Again => continue,
                        AcceptError::Short if self.make_room(conns, registry) => continue,
                        AcceptError::Short => {
                            if !was_retrying {
                                tracing::warn!(%e, "tcp: accept failed; trying again on each call");
                            }
                            self.retry = true;
                            break;
                        }
                        AcceptError::Other => {
                            tracing::warn!(%e, "tcp: accept failed");
                            break;
                        }
                    },
                };
                if conns.accepting() >= UNPROVEN_MAX {
                    self.make_room(conns, registry);
                }
                let hs = Accepting::new(Instant::now(), self.timeout);
                let role = Role::Accepting { listener: i, hs };
                match conns.insert(registry, sock, role, 0) {
                    Ok(id) => fresh.push(id),
                    Err(e) => tracing::warn!(%e, "tcp: cannot watch an accepted connection"),
                }
            }
        }
        fresh
    }

    /// Read what accepted connection `id` has sent of its HELLO and judge it: a
    /// refusal closes it. `me` and `size` are this rank and the job's, `links` the
    /// most links per peer.
    pub fn hear(
        &mut self,
        conns: &mut Conns,
        registry: &Registry,
        id: ConnId,
        (me, size, links): (u32, u32, u16),
    ) -> Heard {
        loop {
            let Some(c) = conns.get_mut(id) else {
                return Heard::Waiting;
            };
            let Role::Accepting { listener, hs } = &mut c.role else {
                return Heard::Waiting;
            };
            let expect = Expect {
                secret: self.listeners[*listener].1.secret,
                me,
                size,
                links,
            };
            let step = match sockets::recv(&c.sock, hs.room()) {
                Ok(0) => Step::Refuse(Refusal::Closed),
                Ok(n) => hs.received(n, &expect),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    c.readable = false;
                    return Heard::Waiting;
                }
                Err(_) => Step::Refuse(Refusal::Closed),
            };
            match step {
                Step::Waiting => continue,
                Step::Refuse(why) => {
                    self.refuse(conns, registry, id, why);
                    return Heard::Refused;
                }
                Step::Member { rank, link } => return Heard::Member { rank, link },
            }
        }
    }

    /// Close (and count) accepted connections whose HELLO is late at `now`.
    pub fn expire(&mut self, conns: &mut Conns, registry: &Registry, now: Instant) {
        for id in conns.ids(|r| matches!(r, Role::Accepting { .. })) {
            let why = match conns.get(id).map(|c| &c.role) {
                Some(Role::Accepting { hs, .. }) => hs.check(false, now),
                _ => None,
            };
            if let Some(why) = why {
                self.refuse(conns, registry, id, why);
            }
        }
    }

    /// Close the oldest connection still to prove itself, counted as crowded; whether
    /// there was one.
    pub fn make_room(&mut self, conns: &mut Conns, registry: &Registry) -> bool {
        let oldest = conns
            .ids(|r| matches!(r, Role::Accepting { .. }))
            .into_iter()
            .filter_map(|id| match conns.get(id).map(|c| &c.role) {
                Some(Role::Accepting { hs, .. }) => Some((hs.deadline(), id)),
                _ => None,
            })
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        self.refuse(conns, registry, id, Refusal::Crowded);
        true
    }

    fn refuse(&mut self, conns: &mut Conns, registry: &Registry, id: ConnId, why: Refusal) {
        let from = conns.get(id).and_then(|c| c.sock.peer_addr().ok());
        tracing::info!(
            ?from,
            ?why,
            "tcp: a connection that did not prove it belongs to the job closed"
        );
        self.refused.count(why);
        conns.remove(registry, id);
    }
}

/// What a failed `accept` means for the listener.
#[derive(Debug, PartialEq, Eq)]
enum AcceptError {
    /// Interrupted, or a connection that ended in the queue: accept the next.
    Again,
    /// Out of descriptors or memory: make room, or try again on the next call.
    Short,
    /// Anything else: left until the listener is ready again.
    Other,
}

/// Whether `e` says the process (or the system) has no descriptor left.
pub fn short_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

fn accept_error(e: &io::Error) -> AcceptError {
    match e.raw_os_error() {
        Some(libc::EINTR | libc::ECONNABORTED | libc::EPROTO | libc::EPERM) => AcceptError::Again,
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => AcceptError::Short,
        _ => AcceptError::Other,
    }
}

/// Whether binding failed for want of the address (`EADDRNOTAVAIL`: not, or not yet,
/// on this host) or of its family (`EAFNOSUPPORT`).
fn unbindable(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT)
    )
}

/// Write the 8-byte answer `kind` on a member's fresh connection; whether it went
/// whole (a fresh connection's buffer is empty: anything less means it failed).
pub fn answer(sock: &Socket, kind: Kind) -> bool {
    let frame = wire::Encoder::new(kind, 0, 0, 0);
    matches!(
        sockets::send(sock, &[IoSlice::new(frame.as_bytes())]),
        Ok(wire::HEADER)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(name: &str, addr: &str) -> Interface {
        Interface {
            name: name.into(),
            addr: addr.parse().unwrap(),
            prefix: 64,
            up: true,
        }
    }

    fn listen(interfaces: &[Interface]) -> Result<Acceptor> {
        let poll = mio::Poll::new().unwrap();
        let opts = sockets::Options {
            nodelay: true,
            sndbuf: 0,
            rcvbuf: 0,
            congestion: None,
        };
        Acceptor::listen(interfaces, &opts, Duration::from_secs(1), poll.registry())
    }

    #[test]
    fn accept_errors_say_whether_to_go_on_make_room_or_wait() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(accept_error(&e(libc::ECONNABORTED)), AcceptError::Again);
        assert_eq!(accept_error(&e(libc::EINTR)), AcceptError::Again);
        assert_eq!(accept_error(&e(libc::EMFILE)), AcceptError::Short);
        assert_eq!(accept_error(&e(libc::ENOBUFS)), AcceptError::Short);
        assert_eq!(accept_error(&e(libc::EINVAL)), AcceptError::Other);
        assert!(short_of_descriptors(&e(libc::ENFILE)));
        assert!(!short_of_descriptors(&e(libc::ENOMEM)));
    }

    #[test]
    fn each_address_has_its_listener_and_its_interface_number() {
        let a = listen(&[
            interface("lo", "127.0.0.1"),
            interface("lo", "::1"),
            interface("lo2", "127.0.0.2"),
        ])
        .unwrap();
        let got: Vec<(String, u8)> = a
            .listeners()
            .iter()
            .map(|l| (l.addr.ip().to_string(), l.iface))
            .collect();
        let want = [("127.0.0.1", 0), ("::1", 0), ("127.0.0.2", 1)];
        assert_eq!(got, want.map(|(ip, n)| (ip.to_string(), n)));
        let secrets: Vec<_> = a.listeners().iter().map(|l| l.secret).collect();
        assert!(secrets[0] != secrets[1] && secrets[1] != secrets[2]);
    }

    /// An IPv6 address that cannot be bound (here one this host does not have: binding
    /// fails at once, nothing is sent) is left out while another address listens;
    /// alone, or an IPv4 one, it is an error.
    #[test]
    fn an_ipv6_address_that_cannot_be_bound_is_left_out_beside_others() {
        let absent = interface("eth9", "2001:db8::99");
        let a = listen(&[interface("lo", "127.0.0.1"), absent.clone()]).unwrap();
        assert_eq!(a.listening().len(), 1);
        let e = listen(std::slice::from_ref(&absent)).err().unwrap();
        assert!(e.to_string().starts_with("listen: "), "{e}");
        let v4_absent = interface("eth9", "203.0.113.99");
        assert!(listen(&[interface("lo", "::1"), v4_absent]).is_err());
    }
}
