//! The frames of the `tcp` transport: an 8-byte header, then a body whose first bytes
//! (the *extension*) have a fixed layout per kind. Everything is little-endian.
//!
//! ```text
//! header:  kind u8 | a u8 | b u8 | c u8 | len u32   (len: bytes of the body)
//!
//! kind          a           b        body
//! AM            tag         nseg     [nseg x u32 lengths, when nseg > 1] payload
//! PUT           handle len  -        req u64, addr u64, handle[48], data
//! PUT_ACK       -           -        req u64, status[40]
//! GET_REQ       handle len  -        req u64, offset u64, addr u64, len u64, handle[48]
//! GET_DATA      -           -        req u64, offset u64, data
//! GET_DONE      -           -        req u64, offset u64, len u64, status[40]
//! ATOMIC_REQ    handle len  op       req u64, addr u64, operand u64, compare u64, handle[48]
//! ATOMIC_RESP   -           -        req u64, old u64, status[40]
//! HELLO         -           -        secret[16], rank u32, link u16, version u16
//! HELLO_ACK     -           -        (empty)
//! HELLO_NACK    -           -        (empty)
//! ```
//!
//! A handle is the one-range handle of the range the access lies in
//! (see [`keytable`](rbtl_btl::transport_kit::keytable)). An atomic's `op` is its
//! [`AtomicRequest`]'s code.
//!
//! The data of PUT and GET_DATA follows the extension and may be long: the receiver
//! takes the header and extension from its buffer and reads the data straight into
//! place. Every other frame is taken whole. [`decode`] validates everything a peer
//! controls (kind, lengths against [`Limits`], reserved tags, segment tables, handle
//! lengths) and never panics: a frame it refuses is a protocol error of the peer.

// What reads frames off the links and writes them: beside the format they share.
pub(crate) mod reader;
pub(crate) mod sends;
pub(crate) mod sink;

use rbtl_btl::transport_kit::keytable::HANDLE_SIZE;
use rbtl_btl::transport_kit::{u32_at, u64_at};
use rbtl_btl::{AtomicOp, AtomicRequest, AtomicWidth, Error, Tag, MAX_SEGMENTS};
use rbtl_rcache::Access;

/// Bytes of the fixed header.
pub const HEADER: usize = 8;
/// Bytes of an encoded status.
pub const STATUS: usize = 40;
/// Bytes of a listener's secret.
pub const SECRET: usize = 16;
/// The protocol version a HELLO carries.
pub const VERSION: u16 = 2;

/// Frame kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An active message.
    Am = 1,
    /// A chunk of a put: write this data at the target.
    Put = 2,
    /// The target applied (or refused) a put chunk.
    PutAck = 3,
    /// Send me these bytes of yours.
    GetReq = 4,
    /// Bytes of a get chunk.
    GetData = 5,
    /// A get chunk is over (all its data sent), with its status.
    GetDone = 6,
    /// Apply this atomic.
    AtomicReq = 7,
    /// The atomic's previous value (or its refusal).
    AtomicResp = 8,
    /// The connector's first frame: the listener's secret, its rank and link index.
    Hello = 9,
    /// The acceptor keeps the connection.
    HelloAck = 10,
    /// The acceptor keeps the connection it initiated itself instead.
    HelloNack = 11,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Am,
            2 => Kind::Put,
            3 => Kind::PutAck,
            4 => Kind::GetReq,
            5 => Kind::GetData,
            6 => Kind::GetDone,
            7 => Kind::AtomicReq,
            8 => Kind::AtomicResp,
            9 => Kind::Hello,
            10 => Kind::HelloAck,
            11 => Kind::HelloNack,
            _ => return None,
        })
    }

    /// Bytes of the fixed part of the body.
    pub const fn ext(self) -> usize {
        match self {
            Kind::Am | Kind::HelloAck | Kind::HelloNack => 0,
            Kind::Put => 16 + HANDLE_SIZE,
            Kind::PutAck => 8 + STATUS,
            Kind::GetReq => 32 + HANDLE_SIZE,
            Kind::GetData => 16,
            Kind::GetDone => 24 + STATUS,
            Kind::AtomicReq => 32 + HANDLE_SIZE,
            Kind::AtomicResp => 16 + STATUS,
            Kind::Hello => SECRET + 8,
        }
    }

    /// Whether data of any length follows the extension (read into place).
    const fn streams(self) -> bool {
        matches!(self, Kind::Put | Kind::GetData)
    }
}

/// The largest bodies a receiver takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Payload of an active message (the receiver's `max_send_size`).
    pub am_payload: usize,
    /// Data of one put or get chunk.
    pub rdma_data: usize,
}

/// A frame, as [`decode`] returns it. For [`Frame::Put`] and [`Frame::GetData`], the
/// data (`data_len` bytes) follows what was consumed.
#[derive(Debug)]
pub enum Frame<'a> {
    /// An active message: its tag, the lengths of its segments, its bytes.
    Am {
        /// The tag (not reserved).
        tag: Tag,
        /// Segment lengths (`nseg` of them).
        lens: [u32; MAX_SEGMENTS],
        /// Segment count, 1..=MAX_SEGMENTS.
        nseg: usize,
        /// All segments' bytes, in order.
        payload: &'a [u8],
    },
    /// A put chunk.
    Put {
        /// The origin's request.
        req: u64,
        /// Where at the target.
        addr: u64,
        /// The target's handle as the origin named it.
        handle: &'a [u8],
        /// Data bytes that follow.
        data_len: usize,
    },
    /// A put chunk's outcome.
    PutAck {
        /// The request.
        req: u64,
        /// Its status.
        status: Result<(), Error>,
    },
    /// A get chunk's request.
    GetReq {
        /// The origin's request.
        req: u64,
        /// Offset of the chunk in the get.
        offset: u64,
        /// Where at the target.
        addr: u64,
        /// Bytes.
        len: u64,
        /// The target's handle.
        handle: &'a [u8],
    },
    /// Data of a get chunk.
    GetData {
        /// The request.
        req: u64,
        /// Offset of the data in the get.
        offset: u64,
        /// Data bytes that follow.
        data_len: usize,
    },
    /// A get chunk is over.
    GetDone {
        /// The request.
        req: u64,
        /// Offset of the chunk in the get.
        offset: u64,
        /// Its length.
        len: u64,
        /// Its status.
        status: Result<(), Error>,
    },
    /// An atomic to apply.
    AtomicReq {
        /// The origin's request.
        req: u64,
        /// Where at the target (a word of `width`).
        addr: u64,
        /// The operation; `None` for compare-swap.
        op: Option<AtomicOp>,
        /// The word's width.
        width: AtomicWidth,
        /// Operand (the new value of a compare-swap).
        operand: u64,
        /// Compare-swap's expected value.
        compare: u64,
        /// The target's handle.
        handle: &'a [u8],
    },
    /// An atomic's outcome.
    AtomicResp {
        /// The request.
        req: u64,
        /// The previous value.
        old: u64,
        /// Its status.
        status: Result<(), Error>,
    },
    /// The connector's greeting.
    Hello(Hello),
    /// The acceptor keeps the connection.
    HelloAck,
    /// The acceptor declines it (simultaneous connect).
    HelloNack,
}

/// What a connector says first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The secret of the listener it connected to.
    pub secret: [u8; SECRET],
    /// Its rank.
    pub rank: u32,
    /// The link index this connection is for.
    pub link: u16,
    /// Its protocol version.
    pub version: u16,
}

/// Why bytes from a peer are not a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Invalid(pub &'static str);

/// Decode the frame at the start of `buf`: `Ok(None)` while more bytes are needed,
/// else the frame and the bytes it took (for PUT and GET_DATA, the header and
/// extension only).
pub fn decode<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(Frame<'a>, usize)>, Invalid> {
    let Some(h) = buf.get(..HEADER) else {
        return Ok(None);
    };
    let kind = Kind::of(h[0]).ok_or(Invalid("unknown frame kind"))?;
    let (a, b) = (h[1], h[2]);
    let len = u32_at(h, 4) as usize;
    let ext = kind.ext();
    let most = match kind {
        Kind::Am => limits.am_payload + 4 * MAX_SEGMENTS,
        Kind::Put | Kind::GetData => ext + limits.rdma_data,
        _ => ext,
    };
    if len < ext || len > most || (!kind.streams() && kind != Kind::Am && len != ext) {
        return Err(Invalid("frame length out of bounds for its kind"));
    }
    let take = HEADER + if kind.streams() { ext } else { len };
    let Some(body) = buf.get(HEADER..take) else {
        return Ok(None);
    };
    let handle = |at: usize| -> Result<&'a [u8], Invalid> {
        if usize::from(a) != HANDLE_SIZE {
            return Err(Invalid("malformed memory handle"));
        }
        Ok(&buf[HEADER + at..HEADER + at + HANDLE_SIZE])
    };
    let frame = match kind {
        Kind::Am => {
            let tag = Tag(a);
            if tag.is_reserved() {
                return Err(Invalid("active message on a reserved tag"));
            }
            let nseg = usize::from(b);
            if nseg == 0 || nseg > MAX_SEGMENTS {
                return Err(Invalid("segment count out of range"));
            }
            let mut lens = [0u32; MAX_SEGMENTS];
            let table = if nseg > 1 { 4 * nseg } else { 0 };
            let payload = body
                .get(table..)
                .ok_or(Invalid("segment table cut short"))?;
            if payload.len() > limits.am_payload {
                return Err(Invalid("active message over max_send_size"));
            }
            if nseg == 1 {
                lens[0] = payload.len() as u32;
            } else {
                let mut sum = 0u64;
                for (i, l) in lens.iter_mut().take(nseg).enumerate() {
                    *l = u32_at(body, 4 * i);
                    sum += u64::from(*l);
                }
                if sum != payload.len() as u64 {
                    return Err(Invalid("segment lengths do not add up to the payload"));
                }
            }
            Frame::Am {
                tag,
                lens,
                nseg,
                payload,
            }
        }
        Kind::Put => Frame::Put {
            req: u64_at(body, 0),
            addr: u64_at(body, 8),
            handle: handle(16)?,
            data_len: len - ext,
        },
        Kind::PutAck => Frame::PutAck {
            req: u64_at(body, 0),
            status: decode_status(&body[8..8 + STATUS]),
        },
        Kind::GetReq => {
            let len = u64_at(body, 24);
            if len > limits.rdma_data as u64 {
                return Err(Invalid("get chunk over the largest chunk"));
            }
            Frame::GetReq {
                req: u64_at(body, 0),
                offset: u64_at(body, 8),
                addr: u64_at(body, 16),
                len,
                handle: handle(32)?,
            }
        }
        Kind::GetData => Frame::GetData {
            req: u64_at(body, 0),
            offset: u64_at(body, 8),
            data_len: len - ext,
        },
        Kind::GetDone => Frame::GetDone {
            req: u64_at(body, 0),
            offset: u64_at(body, 8),
            len: u64_at(body, 16),
            status: decode_status(&body[24..24 + STATUS]),
        },
        Kind::AtomicReq => {
            let AtomicRequest { op, width } =
                AtomicRequest::of_code(b).ok_or(Invalid("unknown atomic operation"))?;
            Frame::AtomicReq {
                req: u64_at(body, 0),
                addr: u64_at(body, 8),
                op,
                width,
                operand: u64_at(body, 16),
                compare: u64_at(body, 24),
                handle: handle(32)?,
            }
        }
        Kind::AtomicResp => Frame::AtomicResp {
            req: u64_at(body, 0),
            old: u64_at(body, 8),
            status: decode_status(&body[16..16 + STATUS]),
        },
        Kind::Hello => {
            let mut secret = [0u8; SECRET];
            secret.copy_from_slice(&body[..SECRET]);
            Frame::Hello(Hello {
                secret,
                rank: u32_at(body, SECRET),
                link: u16::from_le_bytes([body[SECRET + 4], body[SECRET + 5]]),
                version: u16::from_le_bytes([body[SECRET + 6], body[SECRET + 7]]),
            })
        }
        Kind::HelloAck => Frame::HelloAck,
        Kind::HelloNack => Frame::HelloNack,
    };
    Ok(Some((frame, take)))
}

/// Bytes needed at the start of `buf` before [`decode`] can take a frame (when it
/// returned `Ok(None)`, which it does only for lengths within the limits).
pub fn needed(buf: &[u8]) -> usize {
    let Some(h) = buf.get(..HEADER) else {
        return HEADER;
    };
    match Kind::of(h[0]) {
        Some(k) if k.streams() => HEADER + k.ext(),
        _ => HEADER + u32_at(h, 4) as usize,
    }
}

/// Builds one frame's header and extension.
pub struct Encoder {
    buf: [u8; HEADER + MAX_EXT],
    at: usize,
}

/// The longest extension, or AM segment table.
const MAX_EXT: usize = 4 * MAX_SEGMENTS + 32 + HANDLE_SIZE;

impl Encoder {
    /// A frame of `kind` whose body (extension included) is `body_len` bytes.
    pub fn new(kind: Kind, a: u8, b: u8, body_len: usize) -> Encoder {
        let mut buf = [0u8; HEADER + MAX_EXT];
        buf[0] = kind as u8;
        buf[1] = a;
        buf[2] = b;
        buf[4..8].copy_from_slice(&(body_len as u32).to_le_bytes());
        Encoder { buf, at: HEADER }
    }

    /// Append a u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.buf[self.at..self.at + 8].copy_from_slice(&v.to_le_bytes());
        self.at += 8;
        self
    }

    /// Append raw bytes (at most the room left).
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.buf[self.at..self.at + v.len()].copy_from_slice(v);
        self.at += v.len();
        self
    }

    /// Append a handle, zero-padded to its fixed size.
    pub fn handle(mut self, h: &[u8]) -> Self {
        let n = h.len().min(HANDLE_SIZE);
        self.buf[self.at..self.at + n].copy_from_slice(&h[..n]);
        self.at += HANDLE_SIZE;
        self
    }

    /// Append a status.
    pub fn status(self, s: &Result<(), Error>) -> Self {
        self.bytes(&encode_status(s))
    }

    /// The bytes so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.at]
    }
}

/// The header (and segment table) of an active message of `lens`.
pub fn am(tag: Tag, lens: &[usize]) -> Encoder {
    let total: usize = lens.iter().sum();
    let table = if lens.len() > 1 { 4 * lens.len() } else { 0 };
    let mut e = Encoder::new(Kind::Am, tag.0, lens.len() as u8, table + total);
    if lens.len() > 1 {
        for &l in lens {
            e = e.bytes(&(l as u32).to_le_bytes());
        }
    }
    e
}

/// A HELLO frame.
pub fn hello(h: &Hello) -> Encoder {
    Encoder::new(Kind::Hello, 0, 0, Kind::Hello.ext())
        .bytes(&h.secret)
        .bytes(&h.rank.to_le_bytes())
        .bytes(&h.link.to_le_bytes())
        .bytes(&h.version.to_le_bytes())
}

/// A status as it travels: a code and up to four words, so that the origin gets back
/// the same typed error the target's check made.
pub fn encode_status(s: &Result<(), Error>) -> [u8; STATUS] {
    let (code, w): (u32, [u64; 4]) = match s {
        Ok(()) => (0, [0; 4]),
        Err(Error::OutOfRange {
            addr,
            len,
            base,
            reg_len,
            ..
        }) => (1, [*addr, *len as u64, *base, *reg_len as u64]),
        Err(Error::AccessDenied { has, needs, .. }) => {
            (2, [has.bits().into(), needs.bits().into(), 0, 0])
        }
        Err(Error::BadRemoteHandle(_)) => (3, [0; 4]),
        Err(Error::Misaligned(addr)) => (4, [*addr, 0, 0, 0]),
        Err(Error::MalformedHandle(len)) => (5, [*len as u64, 0, 0, 0]),
        Err(_) => (6, [0; 4]),
    };
    let mut b = [0u8; STATUS];
    b[..4].copy_from_slice(&code.to_le_bytes());
    for (i, v) in w.iter().enumerate() {
        b[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// The status `b` stands for; any bytes give some status.
pub fn decode_status(b: &[u8]) -> Result<(), Error> {
    let w = |i: usize| u64_at(b, 8 + 8 * i);
    let access = |v: u64| Access::from_bits_truncate(v as u32);
    Err(match u32_at(b, 0) {
        0 => return Ok(()),
        1 => Error::OutOfRange {
            side: "remote",
            addr: w(0),
            len: w(1) as usize,
            base: w(2),
            reg_len: w(3) as usize,
        },
        2 => Error::AccessDenied {
            side: "remote",
            has: access(w(0)),
            needs: access(w(1)),
        },
        3 => Error::BadRemoteHandle("the target has no live registration of that handle".into()),
        4 => Error::Misaligned(w(0)),
        5 => Error::MalformedHandle(w(0) as usize),
        code => Error::NotAvailable(format!("the target failed the operation (status {code})")),
    })
}

#[cfg(test)]
mod tests;
