//! The C side of the ABI: the types every binding passes, and the standard's
//! constants (from the table, `spec/mpi.spec`).

pub use std::ffi::{c_char, c_int, c_void};

/// A handle (`MPI_Comm`, `MPI_Datatype`, ...): an opaque pointer in C. Predefined
/// handles are small constants; the library's own objects carry their kind and a
/// generation (see `crate::handles`).
pub type Handle = usize;
/// `MPI_Aint`: an address or a displacement.
pub type Aint = isize;
/// `MPI_Count` and `MPI_Offset`.
pub type Count = i64;

/// `MPI_Status`. `internal` holds the received length in bytes (two halves) and
/// whether the operation was cancelled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
    pub internal: [c_int; 5],
}

impl Status {
    /// Bytes received.
    pub fn bytes(&self) -> u64 {
        u64::from(self.internal[0] as u32) | u64::from(self.internal[1] as u32) << 32
    }

    /// Set the bytes received.
    pub fn set_bytes(&mut self, n: u64) {
        self.internal[0] = n as u32 as c_int;
        self.internal[1] = (n >> 32) as u32 as c_int;
    }

    /// Whether the operation was cancelled.
    pub fn cancelled(&self) -> bool {
        self.internal[2] != 0
    }

    /// Mark it cancelled (or not).
    pub fn set_cancelled(&mut self, yes: bool) {
        self.internal[2] = c_int::from(yes);
    }

    /// The empty status: of a null or inactive request.
    pub fn empty() -> Status {
        Status {
            source: MPI_ANY_SOURCE,
            tag: MPI_ANY_TAG,
            error: MPI_SUCCESS,
            internal: [0; 5],
        }
    }

    /// The status of a receive from `MPI_PROC_NULL`.
    pub fn proc_null() -> Status {
        Status {
            source: MPI_PROC_NULL,
            ..Status::empty()
        }
    }
}

/// A pointer the library exports as a variable (`MPI_F_STATUS_IGNORE`, ...).
#[repr(transparent)]
pub struct GlobalPtr(pub *mut c_void);

// SAFETY: the exported pointers are constants (null); nothing writes through them.
unsafe impl Sync for GlobalPtr {}

/// Store `value` at `out` if the caller gave a place for it: for the outputs a caller
/// may leave out (those of the tool interface's `_get_info` calls, `MPI_Init_thread`'s
/// level); a required one is written by [`crate::error::write_arg`].
///
/// # Safety
///
/// `out` is null or valid for a write of `T`.
#[inline(always)]
pub unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(value) };
    }
}

include!(concat!(env!("OUT_DIR"), "/consts.rs"));
