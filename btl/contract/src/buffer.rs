//! Registered memory for the one-sided checks, and how a peer learns to reach it.

use rbtl_btl::{Access, Endpoint, MemHandle, Module, RemoteHandle};

/// A registered buffer and what the peer needs to reach it.
pub struct Buffer {
    /// The memory.
    pub mem: Vec<u8>,
    /// Its registration.
    pub handle: MemHandle,
}

impl Buffer {
    /// Allocate `len` zeroed bytes and register them for `access`.
    pub fn new(m: &mut dyn Module, ep: Endpoint, len: usize, access: Access) -> Buffer {
        let mut mem = vec![0u8; len];
        // SAFETY: `mem` lives in the returned Buffer, whose `handle` is dropped with it
        // (field order), and its heap block does not move while the Vec is not resized.
        let handle = unsafe { m.register_mem(Some(ep), mem.as_mut_ptr() as usize, len, access) }
            .expect("register_mem");
        Buffer { mem, handle }
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
        // SAFETY: reading our own live buffer through a raw pointer, after a barrier
        // that orders the peer's writes before this read.
        (0..self.mem.len())
            .map(|i| unsafe { std::ptr::read_volatile(self.mem.as_ptr().add(i)) })
            .collect()
    }
}

/// The peer's buffer as advertised.
pub fn remote_of(bytes: &[u8]) -> (u64, RemoteHandle) {
    let addr = u64::from_le_bytes(bytes[..8].try_into().expect("address"));
    (addr, RemoteHandle::from_bytes(&bytes[8..]).expect("handle"))
}
