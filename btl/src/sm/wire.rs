//! The format of the `sm` transport's own messages (tags below
//! [`Tag::PML`](crate::Tag)), which the copy protocol sends: put and get by copying
//! through the rings when cross-memory attach is not used, and emulated atomics (as
//! Open MPI's vader emulates them), all checked by the target. Their fields are
//! little-endian, read and written here (as are those of the card a process publishes
//! for its peers).

use crate::keytable::HANDLE_SIZE;
use crate::{AtomicOp, Error, RemoteHandle};

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
        u64::from_le_bytes(self.0[at..at + 8].try_into().expect("8 bytes"))
    }

    /// The u32 at byte `at`.
    pub fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
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
/// Header bytes of GET_DATA: request, offset, status, and the sender's rate of copies
/// into the ring in MB/s, 0 for none (u64).
pub const GET_DATA_HEADER: usize = 32;

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

/// Atomic operation codes on the wire; 5 is compare-swap.
pub fn op_code(op: AtomicOp) -> u64 {
    match op {
        AtomicOp::Add => 0,
        AtomicOp::And => 1,
        AtomicOp::Or => 2,
        AtomicOp::Xor => 3,
        AtomicOp::Swap => 4,
    }
}

/// Compare-swap's code.
pub const CSWAP: u64 = 5;

/// The operation of a code (other than compare-swap).
pub fn op_of(code: u64) -> Option<AtomicOp> {
    Some(match code {
        0 => AtomicOp::Add,
        1 => AtomicOp::And,
        2 => AtomicOp::Or,
        3 => AtomicOp::Xor,
        4 => AtomicOp::Swap,
        _ => return None,
    })
}
