//! Registered memory for the one-sided checks, and how a peer learns to reach it.

use rbtl_btl::{Access, Endpoint, MemHandle, Module, RemoteHandle};
use std::ops::{Deref, DerefMut};

/// Zeroed bytes that start 8-byte aligned (so that a transport's alignment of up to 8
/// bytes holds at offsets that are multiples of it).
pub struct Bytes {
    words: Vec<u64>,
    len: usize,
}

impl Bytes {
    /// `len` zeroed bytes.
    pub fn new(len: usize) -> Bytes {
        Bytes {
            words: vec![0u64; len.div_ceil(8)],
            len,
        }
    }
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes of the live, initialised words.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for Bytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, borrowed mutably through `self`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
}

/// `access` without what the module cannot grant: atomic access where it has no
/// atomics (such a registration is refused with `AccessNotSupported`).
pub fn grantable(m: &dyn Module, access: Access) -> Access {
    m.attributes().registrable(access)
}

/// A registered buffer and what the peer needs to reach it.
pub struct Buffer {
    /// Its registration (declared first: dropped before the memory).
    pub handle: MemHandle,
    /// The memory.
    pub mem: Bytes,
}

impl Buffer {
    /// Allocate `len` zeroed bytes, 8-byte aligned, and register them for `access`
    /// (what of it the module can grant: [`grantable`]).
    pub fn new(m: &mut dyn Module, ep: Endpoint, len: usize, access: Access) -> Buffer {
        let mut mem = Bytes::new(len);
        let access = grantable(m, access);
        // SAFETY: `mem` lives in the returned Buffer, whose `handle` is dropped before
        // it (field order), and its heap block does not move.
        let handle = unsafe { m.register_mem(Some(ep), mem.as_mut_ptr() as usize, len, access) }
            .expect("register_mem");
        Buffer { handle, mem }
    }

    /// Address of byte `off`.
    pub fn addr(&self, off: usize) -> usize {
        self.mem.as_ptr() as usize + off
    }

    /// What the peer needs: address then handle bytes.
    pub fn advertise(&self) -> Vec<u8> {
        let mut v = (self.addr(0) as u64).to_le_bytes().to_vec();
        v.extend_from_slice(self.handle.remote().as_bytes());
        v
    }

    /// Read volatile-ly (peers write into it behind the compiler's back).
    pub fn snapshot(&self) -> Vec<u8> {
        // SAFETY: our own live bytes, read after a barrier that orders the peer's
        // writes before this read.
        unsafe { snapshot(self.addr(0), self.mem.len()) }
    }
}

/// Read `len` bytes at `addr` volatile-ly (memory peers write into).
///
/// # Safety
///
/// `[addr, addr+len)` must be live memory, readable for the whole call.
pub(crate) unsafe fn snapshot(addr: usize, len: usize) -> Vec<u8> {
    (0..len)
        // SAFETY: the caller's contract.
        .map(|i| unsafe { std::ptr::read_volatile((addr + i) as *const u8) })
        .collect()
}

/// The peer's buffer as advertised.
pub fn remote_of(bytes: &[u8]) -> (u64, RemoteHandle) {
    let addr = u64::from_le_bytes(bytes[..8].try_into().expect("address"));
    (addr, RemoteHandle::from_bytes(&bytes[8..]).expect("handle"))
}
