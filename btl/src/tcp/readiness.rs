//! Which connections progress looks at, and how it learns that they have news.
//!
//! `epoll` (through `mio`'s edge-triggered `Poll`) knows about every connection and
//! listener, at the price of one `epoll_wait` per progress call, and then a `recv`
//! for the connection it names: two system calls for a message that one `recv` could
//! take. So while the module's only connections are a few links, none of them blocked
//! on a full socket, progress reads those links directly, without asking `epoll`
//! ([`DIRECT_LINKS`]); it asks `epoll` again every [`EPOLL_EVERY`] calls (for new
//! connections on the listeners) and on every call while anything else is under way
//! (handshakes, attempts, writers waiting for room). Reading directly keeps the
//! edge-triggered contract: a link is read until a read comes back short or would
//! block, as after an `epoll` event, and `epoll` itself reports a connection only
//! while it is still ready when asked.

use super::acceptor;
use super::conn::{Conns, Role};
use super::peer::ConnId;
use mio::{Events, Poll, Registry};
use std::collections::VecDeque;
use std::io;

/// Most links read directly; with more, one `epoll_wait` is cheaper than a `recv`
/// per link.
pub const DIRECT_LINKS: usize = 4;
/// Progress calls between two looks at `epoll` while links are read directly.
pub const EPOLL_EVERY: u32 = 64;

/// The connections to look at, and the `epoll` instance that watches them all.
pub struct Readiness {
    poll: Poll,
    events: Events,
    /// Connections to look at, with their generation.
    ready: VecDeque<(ConnId, u64)>,
    /// Calls left before `epoll` is asked again.
    direct_left: u32,
}

impl Readiness {
    /// A fresh `epoll` instance.
    pub fn new() -> io::Result<Readiness> {
        Ok(Readiness {
            poll: Poll::new()?,
            events: Events::with_capacity(64),
            ready: VecDeque::new(),
            direct_left: 0,
        })
    }

    /// Where connections and listeners are registered.
    pub fn registry(&self) -> &Registry {
        self.poll.registry()
    }

    /// List the connections to look at now, with their readiness; `true` when a
    /// listener has connections to accept.
    #[inline]
    pub fn look(&mut self, conns: &mut Conns) -> bool {
        if self.direct_left > 0 && Self::links_only(conns) {
            self.direct_left -= 1;
            for i in 0..conns.links().len() {
                let id = conns.links()[i];
                if let Some(c) = conns.get_mut(id) {
                    c.readable = true;
                    if !c.queued {
                        c.queued = true;
                        self.ready.push_back((id, c.gen));
                    }
                }
            }
            return false;
        }
        self.direct_left = EPOLL_EVERY;
        self.wait(conns)
    }

    /// Whether the links may be read directly: nothing but a few links, none waiting
    /// for room to write.
    #[inline]
    fn links_only(conns: &Conns) -> bool {
        conns.accepting() == 0
            && conns.attempts() == 0
            && conns.links().len() <= DIRECT_LINKS
            && conns
                .links()
                .iter()
                .all(|&id| conns.get(id).is_some_and(|c| c.writable))
    }

    /// Ask `epoll` (without waiting).
    fn wait(&mut self, conns: &mut Conns) -> bool {
        if let Err(e) = self
            .poll
            .poll(&mut self.events, Some(std::time::Duration::ZERO))
        {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(%e, "tcp: epoll_wait failed");
            }
        }
        let mut accept = false;
        for ev in self.events.iter() {
            if acceptor::is_listener(ev.token()) {
                accept = true;
                continue;
            }
            let id = ev.token().0;
            if let Some(c) = conns.get_mut(id) {
                c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                c.hup |= ev.is_read_closed() || ev.is_error();
                c.writable |= ev.is_writable() || ev.is_error();
                if !c.queued {
                    c.queued = true;
                    self.ready.push_back((id, c.gen));
                }
            }
        }
        accept
    }

    /// List connection `id` (at the back, or at the front to be looked at next).
    pub fn enqueue(&mut self, conns: &mut Conns, id: ConnId, front: bool) {
        if let Some(c) = conns.get_mut(id) {
            if !c.queued {
                c.queued = true;
                if front {
                    self.ready.push_front((id, c.gen));
                } else {
                    self.ready.push_back((id, c.gen));
                }
            }
        }
    }

    /// Connections listed now.
    #[inline]
    pub fn listed(&self) -> usize {
        self.ready.len()
    }

    /// The next connection listed: `None` when none is, `Some(None)` when the one
    /// listed is gone.
    #[inline]
    pub fn next(&mut self, conns: &mut Conns) -> Option<Option<(ConnId, u64)>> {
        let (id, gen) = self.ready.pop_front()?;
        Some(conns.same(id, gen).map(|c| {
            c.queued = false;
            c.pending = false;
            (id, gen)
        }))
    }

    /// List connection `id` again if it was left with work.
    #[inline]
    pub fn relist(&mut self, conns: &mut Conns, id: ConnId, gen: u64) {
        if let Some(c) = conns.same(id, gen) {
            let more = c.pending || (c.readable && !matches!(c.role, Role::Early { .. }));
            if more && !c.queued {
                c.queued = true;
                self.ready.push_back((id, gen));
            }
        }
    }
}
