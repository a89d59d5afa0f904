//! A link's two byte streams: the frames waiting to be written (kept across partial
//! writes, and across the handshake: frames queue until the link is up), and the
//! bytes read but not yet taken (kept across partial reads).
//!
//! Queued frames keep their data where it is when they can: a descriptor's bytes in
//! the descriptor, a put's in the caller's registered memory, a get reply's in this
//! process's registered memory (checked again before every write that includes it:
//! a registration that goes meanwhile turns the rest of the data into zeros and the
//! chunk's status into a refusal).

use crate::sockets;
use crate::wire::{self, Kind};
use rbtl_btl::transport_kit::keytable::KeyTableView;
use rbtl_btl::{Descriptor, Error, ModuleId, RemoteHandle};
use socket2::Socket;
use std::collections::VecDeque;
use std::io::{self, IoSlice};

/// Most frames gathered into one `sendmsg`.
const GATHER: usize = 64;
/// Most bytes of a header, extension or segment table.
const HEAD: usize = 96;

/// A frame's header and extension (or segment table).
#[derive(Clone, Copy)]
pub struct Head {
    bytes: [u8; HEAD],
    len: u8,
}

impl Head {
    /// Copy of `b` (at most 96 bytes).
    pub fn new(b: &[u8]) -> Head {
        let mut bytes = [0u8; HEAD];
        bytes[..b.len()].copy_from_slice(b);
        Head {
            bytes,
            len: b.len() as u8,
        }
    }

    /// Its bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// A frame waiting to be written.
pub enum Item {
    /// Whole frames, copied.
    Bytes(Vec<u8>),
    /// An active message whose payload is a descriptor's bytes.
    Desc {
        /// Its header and segment table.
        head: Head,
        /// The descriptor (completed once written).
        descriptor: Descriptor,
    },
    /// A put chunk: header, then the caller's memory.
    Put {
        /// Header and extension.
        head: Head,
        /// Start of the data (the caller keeps it until the put completes).
        data: usize,
        /// Its length.
        len: usize,
    },
    /// A get chunk's reply: GET_DATA with this process's registered memory, then
    /// GET_DONE.
    GetReply(Box<GetReply>),
}

/// A get chunk on its way back.
pub struct GetReply {
    head: Head,
    addr: usize,
    len: usize,
    handle: RemoteHandle,
    req: u64,
    offset: u64,
    /// Zeros that replace the data once the registration went.
    zeros: Option<Vec<u8>>,
    done: Head,
}

impl GetReply {
    /// The reply to a checked request of `len` bytes at `addr` under `handle`.
    pub fn new(req: u64, offset: u64, addr: usize, len: usize, handle: RemoteHandle) -> GetReply {
        let ext = Kind::GetData.ext();
        let head = wire::Encoder::new(Kind::GetData, 0, 0, ext + len)
            .u64(req)
            .u64(offset);
        GetReply {
            head: Head::new(head.as_bytes()),
            addr,
            len,
            handle,
            req,
            offset,
            zeros: None,
            done: Head::new(done_frame(req, offset, len as u64, &Ok(())).as_bytes()),
        }
    }
}

/// The GET_DONE frame of a chunk.
pub fn done_frame(req: u64, offset: u64, len: u64, status: &Result<(), Error>) -> wire::Encoder {
    wire::Encoder::new(Kind::GetDone, 0, 0, Kind::GetDone.ext())
        .u64(req)
        .u64(offset)
        .u64(len)
        .status(status)
}

impl Item {
    fn len(&self) -> usize {
        match self {
            Item::Bytes(b) => b.len(),
            Item::Desc { head, descriptor } => head.as_slice().len() + descriptor.len(),
            Item::Put { head, len, .. } => head.as_slice().len() + len,
            Item::GetReply(g) => g.head.as_slice().len() + g.len + g.done.as_slice().len(),
        }
    }

    /// Its bytes from `from` on, as up to three slices.
    fn parts(&self, from: usize) -> [&[u8]; 3] {
        let whole: [&[u8]; 3] = match self {
            Item::Bytes(b) => [b, &[], &[]],
            Item::Desc { head, descriptor } => [head.as_slice(), descriptor.bytes(), &[]],
            Item::Put { head, data, len } => [
                head.as_slice(),
                // SAFETY: the put was checked against the caller's live registration
                // when it started, and the caller keeps its buffer until the put
                // completes (register_mem's and put's contracts).
                unsafe { std::slice::from_raw_parts(*data as *const u8, *len) },
                &[],
            ],
            Item::GetReply(g) => [
                g.head.as_slice(),
                match &g.zeros {
                    Some(z) => z,
                    // SAFETY: `refresh` checked just before this write that the range
                    // lies in a live registration of ours with remote-read access.
                    None => unsafe { std::slice::from_raw_parts(g.addr as *const u8, g.len) },
                },
                g.done.as_slice(),
            ],
        };
        let mut skip = from;
        whole.map(|p| {
            let s = skip.min(p.len());
            skip -= s;
            &p[s..]
        })
    }

    /// Before writing a get reply's data: check the registration again; if it went,
    /// zeros replace the rest and the chunk is refused.
    fn refresh(&mut self, sent: usize, table: &KeyTableView, me: ModuleId) {
        let Item::GetReply(g) = self else {
            return;
        };
        let head = g.head.as_slice().len();
        if g.zeros.is_some() || sent >= head + g.len {
            return;
        }
        let check = table.check(
            me,
            &g.handle,
            g.addr as u64,
            g.len,
            rbtl_btl::transport_kit::GET_REMOTE,
        );
        if let Err(e) = check {
            g.zeros = Some(vec![0; g.len]);
            g.done = Head::new(done_frame(g.req, g.offset, g.len as u64, &Err(e)).as_bytes());
        }
    }
}

/// Frames waiting for a link, in order, with the bytes of the first already written.
#[derive(Default)]
pub struct SendQueue {
    items: VecDeque<Item>,
    sent: usize,
    bytes: usize,
}

impl SendQueue {
    /// Nothing waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes - self.sent
    }

    /// Queue `item` after the others.
    pub fn push(&mut self, item: Item) {
        self.bytes += item.len();
        self.items.push_back(item);
    }

    /// Queue `item` whose first `sent` bytes were written already (it goes first).
    pub fn push_partial(&mut self, item: Item, sent: usize) {
        debug_assert!(self.items.is_empty());
        self.bytes += item.len();
        self.sent = sent;
        self.items.push_back(item);
    }

    /// Write as much as the socket takes; every item written whole goes to `done`.
    /// `Ok(true)` when the queue is empty, `Ok(false)` when the socket is full.
    pub fn drain(
        &mut self,
        sock: &Socket,
        table: &KeyTableView,
        me: ModuleId,
        mut done: impl FnMut(Item),
    ) -> io::Result<bool> {
        while !self.items.is_empty() {
            let mut slices = [IoSlice::new(&[]); 3 * GATHER];
            let mut n = 0;
            let mut from = self.sent;
            for item in self.items.iter_mut().take(GATHER) {
                item.refresh(from, table, me);
                from = 0;
            }
            let mut from = self.sent;
            for item in self.items.iter().take(GATHER) {
                for p in item.parts(from) {
                    if !p.is_empty() {
                        slices[n] = IoSlice::new(p);
                        n += 1;
                    }
                }
                from = 0;
            }
            let mut wrote = match sockets::send(sock, &slices[..n]) {
                Ok(w) => w,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while wrote > 0 {
                let Some(front) = self.items.front() else {
                    break;
                };
                let left = front.len() - self.sent;
                if wrote < left {
                    self.sent += wrote;
                    break;
                }
                wrote -= left;
                self.bytes -= front.len();
                self.sent = 0;
                if let Some(item) = self.items.pop_front() {
                    done(item);
                }
            }
            // Items of no bytes (none are made) would loop here; all have a header.
        }
        Ok(true)
    }

    /// Take every item out (a failed link), for their completions.
    pub fn take_all(&mut self) -> Vec<Item> {
        self.sent = 0;
        self.bytes = 0;
        self.items.drain(..).collect()
    }
}

/// Bytes read from a link and not yet taken.
pub struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RxBuf {
    /// A buffer of `cap` bytes (it grows for a frame that needs more).
    pub fn new(cap: usize) -> RxBuf {
        RxBuf {
            buf: vec![0; cap],
            start: 0,
            end: 0,
        }
    }

    /// Bytes it holds before it must grow.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The bytes not yet taken.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Take `n` bytes.
    #[inline]
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Read from `sock` after the bytes held, making room for at least `want` bytes
    /// in all; the bytes read (0: closed), and whether the read filled the room (the
    /// socket may hold more: an edge-triggered readiness will not say so again).
    pub fn fill(&mut self, sock: &Socket, want: usize) -> io::Result<(usize, bool)> {
        let held = self.end - self.start;
        let need = want.max(held + 1);
        if self.buf.len() - self.start < need || self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = held;
            if self.buf.len() < need {
                self.buf.resize(need, 0);
            }
        }
        let room = &mut self.buf[self.end..];
        let n = sockets::recv(sock, room)?;
        let full = n == room.len();
        self.end += n;
        Ok((n, full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rbtl_btl::Tag;

    #[test]
    fn items_resume_where_a_partial_write_stopped() {
        let head = wire::am(Tag::USR, &[3]);
        let item = Item::Bytes([head.as_bytes(), b"abc"].concat());
        let whole = item.parts(0).concat();
        for from in 0..whole.len() {
            assert_eq!(item.parts(from).concat(), whole[from..], "from {from}");
        }
    }

    #[test]
    fn the_buffer_keeps_what_it_did_not_give_yet() {
        let mut r = RxBuf::new(8);
        r.buf[..6].copy_from_slice(b"abcdef");
        r.end = 6;
        r.consume(4);
        assert_eq!(r.data(), b"ef");
        r.consume(2);
        assert_eq!((r.start, r.end), (0, 0), "empty: back to the start");
    }
}
