//! Which connections progress looks at, and how it learns that they have news.
//!
//! `epoll` (through `mio`'s edge-triggered `Poll`) knows about every connection and
//! listener, at the price of one `epoll_wait` per progress call, and then a `recv`
//! for the connection it names: two system calls for a message that one `recv` could
//! take. Being watched also costs every arriving segment `epoll`'s wake-up callback,
//! under the socket's lock. So while the module's only connections are a few links
//! ([`DIRECT_LINKS`]), progress reads those links directly, on every call, and
//! `epoll` does not watch them: it watches the listeners (and any connection still
//! proving itself), and is asked every [`EPOLL_EVERY`] calls. A link whose writes
//! would block is watched until it takes them again, and `epoll` is asked on every
//! call meanwhile (writing again on every call instead would contend with the peer
//! for the socket's lock). As soon as anything else is under way (a handshake, an
//! attempt, more links), every link is watched again and `epoll` is asked on every
//! call.
//!
//! Reading directly keeps the edge-triggered contract: a link is read until a read
//! comes back short or would block, as after an `epoll` event; a link watched again
//! is listed once whatever its readiness, and `epoll` reports a connection only while
//! it is still ready when asked.

use crate::acceptor;
use crate::conn::{Conns, Role};
use crate::peer::ConnId;
use mio::{Events, Poll, Registry};
use std::collections::VecDeque;
use std::io;

/// Most links read directly; with more, one `epoll_wait` is cheaper than a `recv`
/// per link.
pub const DIRECT_LINKS: usize = 4;
/// Progress calls between two looks at `epoll` while links are read directly.
pub const EPOLL_EVERY: u32 = 64;

/// The connections to look at, and the `epoll` instance that watches the rest.
pub struct Readiness {
    poll: Poll,
    events: Events,
    /// Connections to look at, with their generation.
    ready: VecDeque<(ConnId, u64)>,
    /// The links are read directly (and not watched).
    direct: bool,
    /// Calls left before `epoll` is asked again while the links are read directly.
    direct_left: u32,
    /// Links `epoll` could not be made to watch again: looked at on every call.
    strays: Vec<ConnId>,
}

impl Readiness {
    /// A fresh `epoll` instance.
    pub fn new() -> io::Result<Readiness> {
        Ok(Readiness {
            poll: Poll::new()?,
            events: Events::with_capacity(64),
            ready: VecDeque::new(),
            direct: false,
            direct_left: 0,
            strays: Vec::new(),
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
        if Self::links_only(conns) {
            self.direct = true;
            let mut blocked = false;
            for i in 0..conns.links().len() {
                let id = conns.links()[i];
                let Some(c) = conns.get_mut(id) else {
                    continue;
                };
                c.readable = true;
                if !c.queued {
                    c.queued = true;
                    self.ready.push_back((id, c.gen));
                }
                // A link whose writes would block is watched until it takes them again
                // (retrying the write on every call would contend for its socket).
                let watch = !c.writable;
                blocked |= watch;
                if watch != conns.watched(id) {
                    let registry = self.poll.registry();
                    let r = if watch {
                        conns.watch(registry, id)
                    } else {
                        conns.unwatch(registry, id)
                    };
                    if let Err(e) = r {
                        tracing::debug!(%e, watch, "tcp: epoll_ctl on a link failed");
                        if let Some(c) = conns.get_mut(id) {
                            // Unwatched after all: written again on the next call.
                            c.writable |= watch;
                        }
                    }
                }
            }
            if self.direct_left > 0 && !blocked {
                self.direct_left -= 1;
                return false;
            }
            self.direct_left = EPOLL_EVERY;
        } else if self.direct {
            // Something else is under way: every link is watched again, and looked at
            // once whatever its readiness.
            self.direct = false;
            self.strays.extend_from_slice(conns.links());
        }
        if !self.strays.is_empty() {
            self.watch_strays(conns);
        }
        self.wait(conns)
    }

    /// Have `epoll` watch the links read directly until now; each is listed once
    /// whatever its readiness (those it cannot watch, on every call until it can).
    #[cold]
    fn watch_strays(&mut self, conns: &mut Conns) {
        let strays = std::mem::take(&mut self.strays);
        for id in strays {
            if conns.get(id).is_none() {
                continue;
            }
            if let Err(e) = conns.watch(self.poll.registry(), id) {
                tracing::warn!(%e, "tcp: cannot watch a link; it is read on every call");
                self.strays.push(id);
            }
            self.list_any(conns, id);
        }
    }

    /// Whether the links may be read directly: nothing but a few links.
    #[inline]
    fn links_only(conns: &Conns) -> bool {
        conns.accepting() == 0 && conns.attempts() == 0 && conns.links().len() <= DIRECT_LINKS
    }

    /// List connection `id` as readable and writable (it is read and written until a
    /// call would block).
    #[inline]
    fn list_any(&mut self, conns: &mut Conns, id: ConnId) {
        if let Some(c) = conns.get_mut(id) {
            c.readable = true;
            c.writable = true;
            if !c.queued {
                c.queued = true;
                self.ready.push_back((id, c.gen));
            }
        }
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
