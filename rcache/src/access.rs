//! Access rights of a registration, and their libfabric equivalents.

/// libfabric's `fi_mr_reg` access bits (`rdma/fabric.h`), for
/// [`Access::from_libfabric`] and [`Access::to_libfabric`].
pub mod libfabric {
    /// `FI_READ`: the local side may read the region (RMA read initiator / send source).
    pub const FI_READ: u64 = 1 << 8;
    /// `FI_WRITE`: the local side may write the region (RMA read target buffer / receive buffer).
    pub const FI_WRITE: u64 = 1 << 9;
    /// `FI_RECV` (not an access bit for registrations; listed for reference).
    pub const FI_RECV: u64 = 1 << 10;
    /// `FI_SEND` (not an access bit for registrations; listed for reference).
    pub const FI_SEND: u64 = 1 << 11;
    /// `FI_REMOTE_READ`: peers may RMA-read the region.
    pub const FI_REMOTE_READ: u64 = 1 << 12;
    /// `FI_REMOTE_WRITE`: peers may RMA-write the region.
    pub const FI_REMOTE_WRITE: u64 = 1 << 13;
}

bitflags::bitflags! {
    /// Access rights of a registration, after libfabric's `fi_mr_reg` names:
    /// `FI_READ`/`FI_WRITE` (local), `FI_REMOTE_READ`, `FI_REMOTE_WRITE`, and
    /// atomics (verbs `IBV_ACCESS_*`, Open MPI's `MCA_RCACHE_ACCESS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The local process reads the region (libfabric `FI_READ`).
        const LOCAL_READ = 1;
        /// The local process or NIC writes the region (libfabric `FI_WRITE`, verbs `IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = 2;
        /// Peers may RMA-read the region (`FI_REMOTE_READ`, `IBV_ACCESS_REMOTE_READ`).
        const REMOTE_READ = 4;
        /// Peers may RMA-write the region (`FI_REMOTE_WRITE`, `IBV_ACCESS_REMOTE_WRITE`).
        const REMOTE_WRITE = 8;
        /// Peers may perform atomics on the region (`IBV_ACCESS_REMOTE_ATOMIC`).
        /// libfabric has no separate bit: there atomics need
        /// `FI_REMOTE_READ | FI_REMOTE_WRITE`.
        const ATOMIC = 16;
    }
}

impl Access {
    /// Converts libfabric `fi_mr_reg` access bits ([`libfabric`]) to [`Access`].
    ///
    /// `FI_READ`, `FI_WRITE`, `FI_REMOTE_READ` and `FI_REMOTE_WRITE` map to
    /// the flags of the same meaning; other bits are ignored. [`Access::ATOMIC`]
    /// is never produced because libfabric has no atomic access bit.
    pub fn from_libfabric(fi_bits: u64) -> Access {
        let mut a = Access::empty();
        if fi_bits & libfabric::FI_READ != 0 {
            a |= Access::LOCAL_READ;
        }
        if fi_bits & libfabric::FI_WRITE != 0 {
            a |= Access::LOCAL_WRITE;
        }
        if fi_bits & libfabric::FI_REMOTE_READ != 0 {
            a |= Access::REMOTE_READ;
        }
        if fi_bits & libfabric::FI_REMOTE_WRITE != 0 {
            a |= Access::REMOTE_WRITE;
        }
        a
    }

    /// Converts to libfabric `fi_mr_reg` access bits.
    ///
    /// [`Access::ATOMIC`] becomes `FI_REMOTE_READ | FI_REMOTE_WRITE`, which is
    /// what libfabric requires for atomic operations on a region.
    pub fn to_libfabric(self) -> u64 {
        let mut fi = 0;
        if self.contains(Access::LOCAL_READ) {
            fi |= libfabric::FI_READ;
        }
        if self.contains(Access::LOCAL_WRITE) {
            fi |= libfabric::FI_WRITE;
        }
        if self.intersects(Access::REMOTE_READ | Access::ATOMIC) {
            fi |= libfabric::FI_REMOTE_READ;
        }
        if self.intersects(Access::REMOTE_WRITE | Access::ATOMIC) {
            fi |= libfabric::FI_REMOTE_WRITE;
        }
        fi
    }
}
