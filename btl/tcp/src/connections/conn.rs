//! The connections of a `tcp` module: each socket with its role (an accepted
//! connection before its HELLO, our own attempt before its answer, or a link), its
//! received bytes and its readiness, in a table whose index is the socket's `mio`
//! token. Each entry has a generation, so that a connection closed and its slot reused
//! while a callback ran is not mistaken for the one that was there.
//!
//! The table also counts its connections by role and lists the links, so that
//! progress knows in constant time whether anything but links needs `epoll`
//! ([`readiness`](crate::readiness)).

use crate::attempt::Attempt;
use crate::handshake::Accepting;
use crate::link::RxBuf;
use crate::peer::ConnId;
use crate::sink::Sink;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use socket2::Socket;
use std::os::fd::AsRawFd;

/// What a connection is.
pub enum Role {
    /// Accepted by listener `listener`, not trusted yet.
    Accepting {
        /// The listener (whose secret it must send).
        listener: usize,
        /// Its handshake so far.
        hs: Accepting,
    },
    /// A member's accepted connection, kept, from a rank not added yet.
    Early {
        /// The rank.
        rank: u32,
        /// The link index.
        link: u16,
    },
    /// Our own connection attempt.
    Attempt(Attempt),
    /// Link `link` of peer `peer`, up.
    Link {
        /// The peer's index.
        peer: usize,
        /// The link index.
        link: usize,
    },
}

/// The kinds of role, as the table counts them.
#[derive(Clone, Copy)]
enum Kind {
    Accepting,
    Early,
    Attempt,
    Link,
}

impl Kind {
    fn of(role: &Role) -> Kind {
        match role {
            Role::Accepting { .. } => Kind::Accepting,
            Role::Early { .. } => Kind::Early,
            Role::Attempt(_) => Kind::Attempt,
            Role::Link { .. } => Kind::Link,
        }
    }
}

/// One connection.
pub struct Conn {
    /// The socket.
    pub sock: Socket,
    /// This entry's generation.
    pub gen: u64,
    /// What it is. (Its kind changes only through [`Conns::set_role`], which counts
    /// them; what is inside a role may change in place.)
    pub role: Role,
    /// Bytes read and not taken yet (taken out while its frames are handled).
    pub rx: RxBuf,
    /// Where streaming data goes, while a frame's data comes in.
    pub sink: Option<Sink>,
    /// Readable since the last read that left it empty.
    pub readable: bool,
    /// The peer's end closed (or failed): read on until the end shows, whatever the
    /// reads return (the readiness that said so will not come again).
    pub hup: bool,
    /// Writable since the last write that filled it.
    pub writable: bool,
    /// Its frames are being handled further up the stack (a callback runs).
    pub busy: bool,
    /// In the module's list of connections to look at.
    pub queued: bool,
    /// Stopped with frames left to handle.
    pub pending: bool,
    /// Registered with `epoll` (links read directly are not: see
    /// [`readiness`](crate::readiness)).
    watched: bool,
}

impl Conn {
    /// A read returned data: whether it filled the room it was given. A read that did
    /// not found the kernel's buffer empty, and new data raises a new readiness; after
    /// a hang-up, reading goes on until the end shows.
    #[inline]
    pub fn read_some(&mut self, filled: bool) {
        self.readable = filled || self.hup;
    }
}

/// The connection table.
#[derive(Default)]
pub struct Conns {
    slots: Vec<Option<Conn>>,
    free: Vec<ConnId>,
    gens: u64,
    accepting: usize,
    attempts: usize,
    links: Vec<ConnId>,
}

impl Conns {
    /// Add a connection with `role`, watched by `registry`; its id.
    pub fn insert(
        &mut self,
        registry: &Registry,
        sock: Socket,
        role: Role,
        rx_bytes: usize,
    ) -> std::io::Result<ConnId> {
        let id = self.free.pop().unwrap_or(self.slots.len());
        if let Err(e) = registry.register(
            &mut SourceFd(&sock.as_raw_fd()),
            Token(id),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            if id < self.slots.len() {
                self.free.push(id);
            }
            return Err(e);
        }
        self.gens += 1;
        self.count(Kind::of(&role), id, true);
        let conn = Conn {
            sock,
            gen: self.gens,
            role,
            rx: RxBuf::new(rx_bytes),
            sink: None,
            // Data may have come before registration: look once.
            readable: true,
            hup: false,
            writable: false,
            busy: false,
            queued: false,
            pending: false,
            watched: true,
        };
        if id == self.slots.len() {
            self.slots.push(Some(conn));
        } else {
            self.slots[id] = Some(conn);
        }
        Ok(id)
    }

    /// Close connection `id` (if it is there); its role.
    pub fn remove(&mut self, registry: &Registry, id: ConnId) -> Option<Role> {
        let c = self.slots.get_mut(id).and_then(Option::take)?;
        if c.watched {
            let _ = registry.deregister(&mut SourceFd(&c.sock.as_raw_fd()));
        }
        self.free.push(id);
        self.count(Kind::of(&c.role), id, false);
        Some(c.role)
    }

    /// Have `epoll` watch connection `id` again (readable and writable).
    pub fn watch(&mut self, registry: &Registry, id: ConnId) -> std::io::Result<()> {
        let Some(c) = self.get_mut(id).filter(|c| !c.watched) else {
            return Ok(());
        };
        registry.register(
            &mut SourceFd(&c.sock.as_raw_fd()),
            Token(id),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        c.watched = true;
        Ok(())
    }

    /// Stop `epoll` watching connection `id` (its socket is read directly).
    pub fn unwatch(&mut self, registry: &Registry, id: ConnId) -> std::io::Result<()> {
        let Some(c) = self.get_mut(id).filter(|c| c.watched) else {
            return Ok(());
        };
        registry.deregister(&mut SourceFd(&c.sock.as_raw_fd()))?;
        c.watched = false;
        Ok(())
    }

    /// Whether `epoll` watches connection `id`.
    #[inline]
    pub fn watched(&self, id: ConnId) -> bool {
        self.get(id).is_some_and(|c| c.watched)
    }

    /// Make connection `id` a `role` of another kind.
    pub fn set_role(&mut self, id: ConnId, role: Role) {
        let new = Kind::of(&role);
        let Some(c) = self.slots.get_mut(id).and_then(Option::as_mut) else {
            return;
        };
        let old = Kind::of(&std::mem::replace(&mut c.role, role));
        self.count(old, id, false);
        self.count(new, id, true);
    }

    fn count(&mut self, kind: Kind, id: ConnId, add: bool) {
        match (kind, add) {
            (Kind::Accepting, true) => self.accepting += 1,
            (Kind::Accepting, false) => self.accepting -= 1,
            (Kind::Attempt, true) => self.attempts += 1,
            (Kind::Attempt, false) => self.attempts -= 1,
            (Kind::Link, true) => self.links.push(id),
            (Kind::Link, false) => self.links.retain(|&l| l != id),
            (Kind::Early, _) => {}
        }
    }

    /// Accepted connections before their HELLO.
    #[inline]
    pub fn accepting(&self) -> usize {
        self.accepting
    }

    /// Our connection attempts before their answer.
    #[inline]
    pub fn attempts(&self) -> usize {
        self.attempts
    }

    /// The connections that are links.
    #[inline]
    pub fn links(&self) -> &[ConnId] {
        &self.links
    }

    /// Connection `id`.
    #[inline]
    pub fn get(&self, id: ConnId) -> Option<&Conn> {
        self.slots.get(id).and_then(Option::as_ref)
    }

    /// Connection `id`, writable.
    #[inline]
    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.slots.get_mut(id).and_then(Option::as_mut)
    }

    /// Connection `id` if it is still generation `gen`.
    #[inline]
    pub fn same(&mut self, id: ConnId, gen: u64) -> Option<&mut Conn> {
        self.get_mut(id).filter(|c| c.gen == gen)
    }

    /// Ids of every connection whose role passes `f`.
    pub fn ids(&self, f: impl Fn(&Role) -> bool) -> Vec<ConnId> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].as_ref().is_some_and(|c| f(&c.role)))
            .collect()
    }
}
