//! The format of the `sm` transport's own messages (tags below
//! [`Tag::PML`](rbtl_btl::Tag)), which the copy protocol sends: put and get by copying
//! through the rings when cross-memory attach is not used, and emulated atomics (as
//! Open MPI's vader emulates them), all checked by the target. Their fields are
//! little-endian, read and written here (as are those of the card a process publishes
//! for its peers).

use rbtl_btl::transport_kit::keytable::HANDLE_SIZE;
use rbtl_btl::transport_kit::{u32_at, u64_at};
use rbtl_btl::{Error, RemoteHandle};

/// A chunk of a put: header then data.
pub const PUT_DATA: u8 = 1;
/// The target applied a whole put (or refused it).
pub const PUT_ACK: u8 = 2;
/// Please send me these bytes of yours.
pub const GET_REQ: u8 = 3;
/// A chunk of a get's data (or its refusal).
pub const GET_DATA: u8 = 4;
/// Please apply this atomic.
pub const ATOMIC_REQ: u8 = 5;
/// The atomic's previous value (or its refusal).
pub const ATOMIC_RESP: u8 = 6;

/// Little-endian field reader over a received header.
pub struct Reader<'a>(pub &'a [u8]);

impl Reader<'_> {
    /// The u64 at byte `at`.
    pub fn u64(&self, at: usize) -> u64 {
        u64_at(self.0, at)
    }

    /// The u32 at byte `at`.
    pub fn u32(&self, at: usize) -> u32 {
        u32_at(self.0, at)
    }
}

/// Builds a header of little-endian fields.
#[derive(Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// Append a u64.
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Append a u32.
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Append a handle (fixed size).
    pub fn handle(mut self, h: &RemoteHandle) -> Self {
        let mut b = [0u8; HANDLE_SIZE];
        let src = h.as_bytes();
        let n = src.len().min(HANDLE_SIZE);
        b[..n].copy_from_slice(&src[..n]);
        self.0.extend_from_slice(&b);
        self
    }
}

/// Header bytes of PUT_DATA: request, address, last flag (u64), handle.
pub const PUT_HEADER: usize = 24 + HANDLE_SIZE;
/// Bytes of PUT_ACK: request (u64), status (u32).
const PUT_ACK_BYTES: usize = 12;
/// Bytes of GET_REQ: request, address, length (u64), handle.
const GET_REQ_BYTES: usize = 24 + HANDLE_SIZE;
/// Header bytes of GET_DATA: request, offset, status, and the sender's rate of copies
/// into the ring in MB/s, 0 for none (u64).
pub const GET_DATA_HEADER: usize = 32;
/// Bytes of ATOMIC_REQ: request, address, operand, compare, operation (u64), handle.
const ATOMIC_REQ_BYTES: usize = 40 + HANDLE_SIZE;
/// Bytes of ATOMIC_RESP: request, previous value (u64), status (u32).
const ATOMIC_RESP_BYTES: usize = 20;

/// A message of the protocol, read from the segments it arrived in.
#[derive(Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A chunk of a put: request, target address, whether it is the last chunk, the
    /// target's handle (its bytes), and the data.
    PutData {
        req: u64,
        addr: u64,
        last: bool,
        handle: &'a [u8],
        data: &'a [u8],
    },
    /// A put applied (status 0) or refused.
    PutAck { req: u64, status: u32 },
    /// A request for `len` bytes at `addr`, under `handle` (the rest of the message).
    GetReq {
        req: u64,
        addr: u64,
        len: u64,
        handle: &'a [u8],
    },
    /// A chunk of a get's data at `offset`, or its refusal (`status` not 0), with the
    /// sender's rate of copies into the ring (0: none).
    GetData {
        req: u64,
        offset: u64,
        status: u64,
        rate: u64,
        data: &'a [u8],
    },
    /// An atomic to apply: operation code `op` (an
    /// [`AtomicRequest`](rbtl_btl::AtomicRequest)'s wire code), under
    /// `handle` (the rest of the message).
    AtomicReq {
        req: u64,
        addr: u64,
        operand: u64,
        compare: u64,
        op: u64,
        handle: &'a [u8],
    },
    /// An atomic's previous value, or its refusal (`status` not 0).
    AtomicResp { req: u64, old: u64, status: u32 },
}

/// Read the message of `tag` that arrived as `segs`: a header, and for chunks the data
/// after it in the same segment or in a second one (the ring splits large ones).
/// [`Error::NotAvailable`] for a tag that is not the protocol's, or a message too short
/// for its tag.
pub fn decode<'a>(tag: u8, segs: &[&'a [u8]]) -> Result<Message<'a>, Error> {
    let msg: &'a [u8] = segs.first().copied().unwrap_or_default();
    let malformed = || {
        Error::NotAvailable(format!(
            "malformed sm message with tag {tag} ({} bytes in {} segments)",
            msg.len(),
            segs.len()
        ))
    };
    let need = match tag {
        PUT_DATA => PUT_HEADER,
        PUT_ACK => PUT_ACK_BYTES,
        GET_REQ => GET_REQ_BYTES,
        GET_DATA => GET_DATA_HEADER,
        ATOMIC_REQ => ATOMIC_REQ_BYTES,
        ATOMIC_RESP => ATOMIC_RESP_BYTES,
        _ => return Err(malformed()),
    };
    if msg.len() < need {
        return Err(malformed());
    }
    let r = Reader(msg);
    // A chunk's data: the second segment when the ring split it off, else the rest.
    let data = || match segs {
        [_, data, ..] => *data,
        _ => &msg[need..],
    };
    Ok(match tag {
        PUT_DATA => Message::PutData {
            req: r.u64(0),
            addr: r.u64(8),
            last: r.u64(16) != 0,
            handle: &msg[24..PUT_HEADER],
            data: data(),
        },
        PUT_ACK => Message::PutAck {
            req: r.u64(0),
            status: r.u32(8),
        },
        GET_REQ => Message::GetReq {
            req: r.u64(0),
            addr: r.u64(8),
            len: r.u64(16),
            // (All the rest: a handle of another length is refused by its check.)
            handle: &msg[24..],
        },
        GET_DATA => Message::GetData {
            req: r.u64(0),
            offset: r.u64(8),
            status: r.u64(16),
            rate: r.u64(24),
            data: data(),
        },
        ATOMIC_REQ => Message::AtomicReq {
            req: r.u64(0),
            addr: r.u64(8),
            operand: r.u64(16),
            compare: r.u64(24),
            op: r.u64(32),
            handle: &msg[40..],
        },
        _ => Message::AtomicResp {
            req: r.u64(0),
            old: r.u64(8),
            status: r.u32(16),
        },
    })
}

/// Status codes carried back to the initiator.
pub fn status_code(e: &Error) -> u32 {
    match e {
        Error::OutOfRange { .. } => 1,
        Error::AccessDenied { .. } => 2,
        Error::BadRemoteHandle(_) | Error::MalformedHandle(_) => 3,
        Error::Misaligned(_) => 4,
        _ => 5,
    }
}

/// The error a status code stands for (`Ok` for 0).
pub fn status_error(code: u32) -> Result<(), Error> {
    let why = match code {
        0 => return Ok(()),
        1 => "the target found the access outside its registration",
        2 => "the target's registration lacks the access",
        3 => "the target no longer has that registration",
        4 => "misaligned atomic",
        _ => "the target failed the operation",
    };
    Err(Error::BadRemoteHandle(why.into()))
}
