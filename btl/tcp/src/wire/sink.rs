//! Put and get data streaming into place: a put's data at its target (into this
//! process's registered memory, checked again before every write, or discarded once
//! refused), a get's data at its origin (into the buffer the get named). What the
//! link's buffer holds is copied; the rest is read from the socket straight into place.

use crate::conn::Conn;
use crate::link::{Item, RxBuf};
use crate::sockets;
use crate::wire::{self, Kind};
use rbtl_btl::transport_kit::keytable::{KeyTableView, HANDLE_SIZE};
use rbtl_btl::{ModuleId, PeerFailure};
use std::io;

/// Where a put's or get's data goes while it streams in.
#[derive(Debug)]
pub enum Sink {
    /// Into this process's registered memory at `at` (a put at its target), `left`
    /// bytes more; the status so far and the put's request and handle to recheck.
    Put {
        /// The origin's request.
        req: u64,
        /// The next byte's address.
        at: usize,
        /// Bytes still to come.
        left: usize,
        /// The status (a refusal discards the rest).
        status: rbtl_btl::Result<()>,
        /// The handle's bytes, to check again before each read.
        handle: [u8; HANDLE_SIZE],
    },
    /// Into the origin's memory at `at` (a get's data), `left` bytes more.
    Get {
        /// The next byte's address.
        at: usize,
        /// Bytes still to come.
        left: usize,
    },
}

impl Sink {
    /// Move what is there of the data into place: from `rx` first, then from `conn`'s
    /// socket. `Ok(true)` when all of it has come, `Ok(false)` when the socket has no
    /// more yet; `Err` when the connection failed or closed.
    pub fn pour(
        &mut self,
        conn: &mut Conn,
        rx: &mut RxBuf,
        table: &KeyTableView,
        me: ModuleId,
    ) -> Result<bool, PeerFailure> {
        loop {
            // Where the next bytes go (0: discarded), and how many are to come.
            let (at, left) = match self {
                Sink::Put {
                    at,
                    left,
                    status,
                    handle,
                    ..
                } => {
                    if status.is_ok() && *left > 0 {
                        let h = rbtl_btl::RemoteHandle::from_bytes(handle)
                            .map_err(|e| PeerFailure::Protocol(e.to_string()))?;
                        *status = table.check(
                            me,
                            &h,
                            *at as u64,
                            *left,
                            rbtl_btl::transport_kit::PUT_REMOTE,
                        );
                    }
                    (if status.is_ok() { *at } else { 0 }, *left)
                }
                Sink::Get { at, left } => (*at, *left),
            };
            if left == 0 {
                return Ok(true);
            }
            let held = rx.data().len().min(left);
            let took = if held > 0 {
                if at != 0 {
                    // SAFETY: `at` is checked memory: for a put, our live registration
                    // with remote-write access (checked just now); for a get, the
                    // origin's buffer, checked with local-write access when the get
                    // started (or unregistered, `Local::unregistered`) and kept by the
                    // caller until its completion.
                    unsafe { rbtl_btl::copy_bytes(rx.data().as_ptr(), at as *mut u8, held) };
                }
                rx.consume(held);
                held
            } else {
                if !conn.readable {
                    return Ok(false);
                }
                let read = if at != 0 {
                    // SAFETY: as above.
                    unsafe { sockets::recv_into(&conn.sock, at as *mut u8, left) }
                        .map(|n| (n, n == left, n))
                } else {
                    // Read into the buffer; discarded from there on the next turn.
                    rx.fill(&conn.sock, 1).map(|(n, full)| (n, full, 0))
                };
                match read {
                    Ok((0, _, _)) => return Err(sockets::read_failure(None)),
                    Ok((_, filled, placed)) => {
                        conn.read_some(filled);
                        placed
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        conn.readable = false;
                        0
                    }
                    Err(e) => return Err(sockets::read_failure(Some(&e))),
                }
            };
            match self {
                Sink::Put { at, left, .. } | Sink::Get { at, left } => {
                    *at += took;
                    *left -= took;
                }
            }
        }
    }

    /// Bytes still to come.
    pub fn left(&self) -> usize {
        match self {
            Sink::Put { left, .. } | Sink::Get { left, .. } => *left,
        }
    }

    /// What a sink that has all its data answers: a put's acknowledgement.
    pub fn answer(self) -> Option<Item> {
        let Sink::Put { req, status, .. } = self else {
            return None;
        };
        let ack = wire::Encoder::new(Kind::PutAck, 0, 0, Kind::PutAck.ext())
            .u64(req)
            .status(&status);
        Some(Item::Bytes(ack.as_bytes().to_vec()))
    }
}
