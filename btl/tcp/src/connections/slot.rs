//! One link to a peer: the connection once its handshake is over, our own connection
//! attempt meanwhile, the deadline by which it must be up, and the writing side: the
//! frames queued for it and how they reach the socket.
//!
//! A frame on an idle link is written at once, header and payload gathered in one
//! system call; what the socket does not take queues, in order, and goes out as the
//! socket takes it (one `sendmsg` gathers many queued frames).

use crate::conn::Conn;
use crate::link::{Head, Item, SendQueue};
use crate::peer::ConnId;
use crate::sockets;
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::{Descriptor, Error, ModuleId, Result};
use std::io::{self, IoSlice};
use std::time::Instant;

/// Bytes queued on a link beyond which `sendi` says `OutOfResource`.
const MAX_QUEUED: usize = 4 << 20;
/// Frames up to this size are gathered on the stack and written with one `send`.
const SMALL: usize = 256;

/// One link to a peer.
#[derive(Default)]
pub struct LinkSlot {
    /// The connection, once its handshake is over.
    pub up: Option<ConnId>,
    /// Our own connection attempt, before its answer.
    pub attempt: Option<ConnId>,
    /// Our attempt was declined: the peer's own connection is on its way.
    pub declined: bool,
    /// While the link is not up: when it must be, or the peer counts as failed.
    pub deadline: Option<Instant>,
    /// Connection attempts that may still be made again after the peer closed one
    /// before answering it.
    pub retries: u8,
    /// Frames for this link, written once it is up.
    pub queue: SendQueue,
}

/// What became of a frame given to the link.
pub enum Sent<T> {
    /// Written whole at once.
    Written(T),
    /// Queued (partly written, or the socket is full).
    Queued,
    /// Queued: the link is not up (the caller connects it).
    NotUp,
    /// The write failed: the connection is broken.
    Failed(String, T),
}

impl LinkSlot {
    /// Queue `item`, writing at once when the link is up and idle (`conn` is its
    /// connection); `Err` when the write failed.
    pub fn push(
        &mut self,
        conn: Option<&mut Conn>,
        item: Item,
        table: &KeyTableView,
        me: ModuleId,
        written: &mut Vec<Descriptor>,
    ) -> Sent<()> {
        let was_empty = self.queue.is_empty();
        self.queue.push(item);
        match conn {
            Some(c) if was_empty && c.writable => match self.drain(c, table, me, written) {
                Ok(()) => Sent::Queued,
                Err(e) => Sent::Failed(sockets::broken("writing", &e), ()),
            },
            Some(_) => Sent::Queued,
            None => Sent::NotUp,
        }
    }

    /// Write what waits, as far as the socket takes it; descriptors written whole go
    /// to `written`.
    pub fn drain(
        &mut self,
        conn: &mut Conn,
        table: &KeyTableView,
        me: ModuleId,
        written: &mut Vec<Descriptor>,
    ) -> io::Result<()> {
        let all = self.queue.drain(&conn.sock, table, me, |item| {
            if let Item::Desc { descriptor, .. } = item {
                written.push(descriptor);
            }
        })?;
        conn.writable = all;
        Ok(())
    }

    /// Write a small frame of `parts` (at most three) now if the link is up and idle,
    /// else queue a copy; `Err(OutOfResource)` when too much waits already.
    #[inline]
    pub fn send_small(&mut self, conn: Option<&mut Conn>, parts: &[&[u8]]) -> Result<Sent<()>> {
        let Some(conn) = conn.filter(|_| self.queue.is_empty()) else {
            if self.queue.bytes() > MAX_QUEUED {
                return Err(Error::OutOfResource("tcp send queue"));
            }
            self.queue.push(Item::Bytes(parts.concat()));
            return Ok(if self.up.is_some() {
                Sent::Queued
            } else {
                Sent::NotUp
            });
        };
        let total: usize = parts.iter().map(|s| s.len()).sum();
        let mut sent = 0;
        if conn.writable {
            let wrote = if total <= SMALL {
                // One buffer, one `send`: cheaper for the kernel than a gather.
                let mut buf = [0u8; SMALL];
                let mut at = 0;
                for p in parts {
                    buf[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
                sockets::send(&conn.sock, &[IoSlice::new(&buf[..total])])
            } else {
                let iov = [
                    IoSlice::new(parts[0]),
                    IoSlice::new(parts.get(1).copied().unwrap_or_default()),
                    IoSlice::new(parts.get(2).copied().unwrap_or_default()),
                ];
                sockets::send(&conn.sock, &iov[..parts.len()])
            };
            match wrote {
                Ok(n) if n == total => return Ok(Sent::Written(())),
                Ok(n) => sent = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Ok(Sent::Failed(sockets::broken("writing", &e), ())),
            }
            conn.writable = false;
        }
        self.queue.push_partial(Item::Bytes(parts.concat()), sent);
        Ok(Sent::Queued)
    }

    /// Send an active message of `head` then `descriptor`'s bytes: written now if the
    /// link is up and idle, else queued.
    pub fn send_desc(
        &mut self,
        conn: Option<&mut Conn>,
        head: Head,
        descriptor: Descriptor,
    ) -> Sent<Descriptor> {
        let Some(conn) = conn.filter(|_| self.queue.is_empty()) else {
            self.queue.push(Item::Desc { head, descriptor });
            return if self.up.is_some() {
                Sent::Queued
            } else {
                Sent::NotUp
            };
        };
        let mut sent = 0;
        if conn.writable {
            let iov = [
                IoSlice::new(head.as_slice()),
                IoSlice::new(descriptor.bytes()),
            ];
            match sockets::send(&conn.sock, &iov) {
                Ok(n) if n == head.as_slice().len() + descriptor.len() => {
                    return Sent::Written(descriptor)
                }
                Ok(n) => sent = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Sent::Failed(sockets::broken("writing", &e), descriptor),
            }
            conn.writable = false;
        }
        self.queue
            .push_partial(Item::Desc { head, descriptor }, sent);
        Sent::Queued
    }
}
