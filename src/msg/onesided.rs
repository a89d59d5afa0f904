//! One-sided building blocks for a layer above with windows of its own (an MPI
//! library's `osc`): memory exposed to peers, a peer's exposed memory as reached from
//! here, and puts, gets and atomics on it that complete in the background, counted
//! until the caller waits for them. [`Window`](super::Window) is the simple form over
//! every rank.
//!
//! Where a peer's memory came from a transport's shared heap, it is mapped here: a
//! put is a store, a get a load, an atomic a processor atomic (Open MPI: `osc/sm`);
//! other peers are reached through the transports' put, get and atomics (`osc/rdma`).

use super::pending::Pending;
use super::{Comm, Error, Result};
use rbtl_btl::{
    Access, AtomicWidth, BtlFlags, Local, MemHandle, RdmaFlags, Remote, RemoteAtomic, RemoteHandle,
    SharedMem, Transfer,
};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Memory from a transport's shared heap: peers on the node map it.
pub struct SharedRegion {
    module: usize,
    mem: SharedMem,
}

impl SharedRegion {
    /// Its start.
    pub fn ptr(&self) -> *mut u8 {
        self.mem.ptr
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.mem.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.mem.len == 0
    }
}

/// Memory registered with every transport for peers to reach.
pub struct Exposed {
    addr: usize,
    len: usize,
    /// Per module.
    handles: Vec<MemHandle>,
}

/// A peer's exposed memory, as reached from here.
#[derive(Clone)]
pub struct Target {
    rank: u32,
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) handle: RemoteHandle,
    /// A mapping of it, when it lies in shared memory (or is this process's own).
    pub(super) direct: Option<*mut u8>,
    /// The flags of the transport's transfers to it.
    flags: RdmaFlags,
}

impl Target {
    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its address in the peer's memory.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Whether it is reached with loads and stores.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// The same target, its transfers through a transport asked to complete without
    /// the peer's process taking part ([`RdmaFlags::UNATTENDED`]; see
    /// [`Comm::unattended_from`]).
    pub fn unattended(self) -> Target {
        Target {
            flags: self.flags | RdmaFlags::UNATTENDED,
            ..self
        }
    }

    /// The `len` bytes at `offset` of this target, as a target of their own (the same
    /// registration and mapping); `None` past its end.
    pub fn slice(&self, offset: usize, len: usize) -> Option<Target> {
        let end = offset.checked_add(len)?;
        (end <= self.len).then(|| Target {
            addr: self.addr + offset as u64,
            len,
            direct: self.direct.map(|base| base.wrapping_add(offset)),
            ..self.clone()
        })
    }

    /// Where `len` bytes at `offset` of a direct target lie in this process's
    /// memory: `None` for a target reached through a transport, or a range outside
    /// it. Reading or writing there races with the peer's own accesses: the caller
    /// synchronizes (a lock of the window, say).
    pub fn direct_range(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let base = self.direct?;
        let end = offset.checked_add(len)?;
        // (`base` maps `len` bytes: a pointer inside or one past the end.)
        (end <= self.len).then(|| base.wrapping_add(offset))
    }

    /// Copy `len` bytes between `buf` and a direct target at `offset` (into the
    /// target when `put`), ordered by fences with the processes that synchronize
    /// with this one: done at once, nothing left pending. `false`, copying nothing,
    /// for a target reached through a transport or a range outside it.
    ///
    /// # Safety
    ///
    /// `buf` holds (a put) or has room for (a get) `len` bytes.
    #[inline(always)]
    pub unsafe fn copy_direct(&self, offset: usize, buf: *mut u8, len: usize, put: bool) -> bool {
        let Some(at) = self.direct_range(offset, len) else {
            return false;
        };
        // SAFETY: `at` starts `len` bytes inside the target's mapping (checked), the
        // caller's buffer holds `len` bytes.
        unsafe { copy_mapped(at, buf, len, put) };
        true
    }

    /// The rank it belongs to.
    pub fn rank(&self) -> u32 {
        self.rank
    }
}

/// An atomic operation on a word of a peer's memory (the contract's own).
pub use rbtl_btl::AtomicKind as Atomic;

/// Bytes of a card's fixed part: address and length.
const CARD_FIXED: usize = 16;

/// The card of `len` bytes at `addr` under `handle`: what [`Comm::target`] reads.
pub(super) fn card_of(addr: u64, len: u64, handle: &RemoteHandle) -> Vec<u8> {
    let mut b = addr.to_le_bytes().to_vec();
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(handle.as_bytes());
    b
}

impl Comm {
    /// `len` bytes of a transport's shared heap, where one has room: peers on the
    /// node reach it with loads and stores.
    pub fn alloc_shared(&mut self, len: usize) -> Result<Option<SharedRegion>> {
        for (module, m) in self.modules.iter_mut().enumerate() {
            if let Some(mem) = m.alloc_shared(len)? {
                return Ok(Some(SharedRegion { module, mem }));
            }
        }
        Ok(None)
    }

    /// Give back shared memory; every peer must be done with it (the caller agrees
    /// that with them) and its registrations gone.
    pub fn free_shared(&mut self, r: SharedRegion) -> Result<()> {
        Ok(self.modules[r.module].free_shared(r.mem)?)
    }

    /// Register `len` bytes at `addr` with every transport, with every access each
    /// grants, for peers to reach.
    ///
    /// # Safety
    ///
    /// The memory stays mapped until the returned value is dropped.
    pub unsafe fn expose(&mut self, addr: usize, len: usize) -> Result<Exposed> {
        let mut handles = Vec::with_capacity(self.modules.len());
        for m in self.modules.iter_mut() {
            let all = m.attributes().registrable(Access::all());
            // SAFETY: the caller's contract.
            handles.push(unsafe { m.register_mem(None, addr, len.max(1), all) }?);
        }
        Ok(Exposed { addr, len, handles })
    }

    /// What `rank` needs to reach `e`: its address, length and the registration of
    /// the transport that carries traffic between the two.
    pub fn card(&mut self, e: &Exposed, rank: u32) -> Result<Vec<u8>> {
        let (mi, _) = self.route(rank)?;
        Ok(card_of(e.addr as u64, e.len as u64, e.handles[mi].remote()))
    }

    /// `rank`'s exposed memory from its `card`: mapped here when it lies in shared
    /// memory; a card that does not parse is an error.
    pub fn target(&mut self, rank: u32, card: &[u8]) -> Result<Target> {
        let (addr, len, handle) = Self::read_card(rank, card)?;
        let direct = if rank == self.rank {
            Some(addr as usize as *mut u8)
        } else {
            let (mi, ep) = self.route(rank)?;
            self.modules[mi].map_remote(
                ep,
                addr,
                &handle,
                len,
                Access::REMOTE_READ | Access::REMOTE_WRITE,
            )?
        };
        Ok(Target {
            rank,
            addr,
            len,
            handle,
            direct,
            flags: RdmaFlags::empty(),
        })
    }

    /// `rank`'s exposed memory from its `card`, which this process maps at `at` by
    /// means of its own (a segment both processes map, outside any transport's
    /// heap): reached there with loads and stores, as a mapping of a transport's.
    ///
    /// # Safety
    ///
    /// `at` maps the same memory as the card describes, all its bytes, for as long as
    /// the target is used.
    pub unsafe fn target_mapped(&mut self, rank: u32, card: &[u8], at: *mut u8) -> Result<Target> {
        let (addr, len, handle) = Self::read_card(rank, card)?;
        self.route(rank)?;
        Ok(Target {
            rank,
            addr,
            len,
            handle,
            direct: Some(at),
            flags: RdmaFlags::empty(),
        })
    }

    /// The address, length and handle that `rank`'s window `card` holds.
    fn read_card(rank: u32, card: &[u8]) -> Result<(u64, usize, RemoteHandle)> {
        let malformed = |why: String| {
            Error::Btl(rbtl_btl::Error::Modex(format!(
                "rank {rank}'s window card: {why}"
            )))
        };
        if card.len() < CARD_FIXED {
            return Err(malformed(format!("{} bytes", card.len())));
        }
        let addr = u64::from_le_bytes(card[..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(card[8..16].try_into().expect("8 bytes"));
        let (Some(_), Ok(len)) = (addr.checked_add(len), usize::try_from(len)) else {
            return Err(malformed(format!(
                "{len} bytes at {addr:#x} pass the end of the address space"
            )));
        };
        let handle = RemoteHandle::from_bytes(&card[CARD_FIXED..])?;
        Ok((addr, len, handle))
    }

    /// From which size transfers to `t` through a transport that completes them
    /// without the peer's process taking part once asked ([`Target::unattended`],
    /// [`BtlFlags::UNATTENDED_RDMA`]) are worth it against a message that process
    /// answers ([`Attributes::unattended_from`](rbtl_btl::Attributes::unattended_from)).
    /// `None` where the transport offers none, and for a rank out of the job. (A
    /// question about the route only: whether the peer still lives is the transfer's
    /// to find.)
    pub fn unattended_from(&self, t: &Target) -> Option<usize> {
        let &(mi, _) = self.routes.get(t.rank as usize)?;
        let attrs = self.modules[mi].attributes();
        attrs
            .flags
            .contains(BtlFlags::UNATTENDED_RDMA)
            .then_some(attrs.unattended_from)
    }

    /// Whether the atomics that reach `t` through a transport are atomic with respect
    /// to the processor's atomic instructions at its rank
    /// ([`AtomicFlags::GLOB`](rbtl_btl::AtomicFlags::GLOB)): that rank may then apply
    /// operations of its own to the same words with them. `false` for a rank out of
    /// the job.
    pub fn atomics_global(&self, t: &Target) -> bool {
        self.routes.get(t.rank as usize).is_some_and(|&(mi, _)| {
            self.modules[mi]
                .attributes()
                .atomic_flags
                .contains(rbtl_btl::AtomicFlags::GLOB)
        })
    }

    /// `[offset, offset + len)` lies inside `t`.
    fn inside(t: &Target, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= t.len => Ok(()),
            _ => Err(Error::OutOfWindow {
                rank: t.rank,
                offset,
                len,
                window: t.len,
            }),
        }
    }

    /// Start writing `len` bytes from `buf` into `t` at `offset`, counted by
    /// `pending` (a direct target is written at once).
    ///
    /// # Safety
    ///
    /// `buf` holds `len` bytes and stays unchanged until `pending` is waited for.
    pub unsafe fn put_to(
        &mut self,
        t: &Target,
        offset: usize,
        buf: *const u8,
        len: usize,
        pending: &Pending,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rdma_to(t, offset, buf.cast_mut(), len, true, pending) }
    }

    /// Start reading `len` bytes of `t` at `offset` into `buf`, counted by `pending`.
    ///
    /// # Safety
    ///
    /// `buf` has room for `len` bytes, untouched by anyone else until `pending` is
    /// waited for.
    pub unsafe fn get_from(
        &mut self,
        t: &Target,
        offset: usize,
        buf: *mut u8,
        len: usize,
        pending: &Pending,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.rdma_to(t, offset, buf, len, false, pending) }
    }

    /// # Safety
    ///
    /// As [`Comm::put_to`] and [`Comm::get_from`].
    unsafe fn rdma_to(
        &mut self,
        t: &Target,
        offset: usize,
        buf: *mut u8,
        len: usize,
        put: bool,
        pending: &Pending,
    ) -> Result<()> {
        Self::inside(t, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller's buffer holds `len` bytes.
        if unsafe { t.copy_direct(offset, buf, len, put) } {
            return Ok(());
        }
        let (mi, ep) = self.route(t.rank)?;
        let m = self.modules[mi].as_mut();
        // SAFETY: the caller keeps the buffer until `pending` is waited for, which is
        // after the callback that drops the handle (if any).
        let handle = unsafe {
            super::pieces::register_local(
                m,
                ep,
                (buf as usize, len),
                Access::LOCAL_READ | Access::LOCAL_WRITE,
            )
        }?
        .map(Arc::new);
        let remote = t.addr + offset as u64;
        let attrs = m.attributes();
        let piece = super::pieces::piece_len(attrs, put);
        let local_addr = buf as usize;
        // SAFETY: as above.
        let local = unsafe { super::pieces::local_side(local_addr, handle.as_deref()) };
        // The peer exposed all of `t` until the window ends (`expose`'s contract): where
        // the transport reaches a peer's memory by its address, and that is worth it for
        // the size, it needs no look-up of the registration. Refused (the peer turned
        // out not to allow it), the transfer goes with the registration.
        if attrs.flags.contains(BtlFlags::UNREGISTERED_REMOTE)
            && len < attrs.unregistered_remote_below
            && len <= piece
        {
            // SAFETY: `[remote, remote + len)` lies inside `t` (checked above), which
            // the peer keeps mapped for the window's life.
            let by_address = unsafe { Remote::unregistered(remote) };
            let op = Transfer::new(ep, local, by_address, len).flagged(t.flags);
            let outcome = match m.transfer_now(&op, put) {
                Some(done) => done,
                None => pending.started(handle.clone(), |done| {
                    super::pieces::put_or_get(m, &op, put, done)
                }),
            };
            match outcome {
                Err(rbtl_btl::Error::UnregisteredRemote) => {}
                outcome => return Ok(outcome?),
            }
        }
        let whole = Transfer::new(ep, local, Remote::new(remote, &t.handle), len).flagged(t.flags);
        // Done at once where the transport can: nothing to count, no callback.
        if len <= piece {
            if let Some(done) = m.transfer_now(&whole, put) {
                return Ok(done?);
            }
        }
        pending.started(handle.clone(), |done| {
            super::pieces::transfer_in_pieces(m, &whole, put, done)
        })?;
        Ok(())
    }

    /// The 8-byte word of `t` at `offset`, for the processor's atomics, when `t` is
    /// mapped here (shared memory, or this process's own); `None` when it is not
    /// (then [`Comm::atomic_on`] reaches it through its transport). The word must lie
    /// inside `t` and be aligned.
    pub fn word_here(t: &Target, offset: usize) -> Result<Option<&AtomicU64>> {
        let Some(base) = t.direct else {
            return Ok(None);
        };
        Self::inside(t, offset, 8)?;
        let at = t.addr + offset as u64;
        if at % 8 != 0 {
            return Err(Error::Btl(rbtl_btl::Error::Misaligned(at)));
        }
        // SAFETY: the word lies inside the mapping (checked), which lives as long as
        // `t`, and is aligned; it is reached only atomically by every process (the
        // library's rule for window words under atomics).
        Ok(Some(unsafe {
            AtomicU64::from_ptr(base.add(offset).cast())
        }))
    }

    /// The atomic of [`Comm::atomic_on`] done at once where `t` is mapped here: the
    /// word's previous value; `None`, having done nothing, where `t` is reached
    /// through a transport.
    #[inline]
    pub fn atomic_here(
        t: &Target,
        offset: usize,
        atomic: Atomic,
        width_32: bool,
    ) -> Result<Option<u64>> {
        let size = if width_32 { 4 } else { 8 };
        Self::inside(t, offset, size)?;
        let at = t.addr + offset as u64;
        if at % size as u64 != 0 {
            return Err(Error::Btl(rbtl_btl::Error::Misaligned(at)));
        }
        let Some(base) = t.direct else {
            return Ok(None);
        };
        // SAFETY: the word lies inside the mapping (checked) and is aligned; it is
        // reached only atomically by every process (the library's rule for window
        // words under atomics).
        Ok(Some(unsafe {
            direct_atomic(base.add(offset), atomic, width_32)
        }))
    }

    /// Start an atomic on the word of `width_32` (4 bytes) or 8 bytes of `t` at
    /// `offset`, its previous value written to `result` (when not null) once
    /// complete; counted by `pending`. The word must be aligned to its size.
    ///
    /// # Safety
    ///
    /// `result` is null or has room for the word, untouched by anyone else until
    /// `pending` is waited for.
    pub unsafe fn atomic_on(
        &mut self,
        t: &Target,
        offset: usize,
        atomic: Atomic,
        width_32: bool,
        result: *mut u8,
        pending: &Pending,
    ) -> Result<()> {
        let size = if width_32 { 4 } else { 8 };
        if let Some(old) = Self::atomic_here(t, offset, atomic, width_32)? {
            if !result.is_null() {
                // SAFETY: the caller's contract: room for the word.
                unsafe { rbtl_btl::copy_bytes(old.to_ne_bytes().as_ptr(), result, size) };
            }
            return Ok(());
        }
        let at = t.addr + offset as u64;
        let (mi, ep) = self.route(t.rank)?;
        let m = self.modules[mi].as_mut();
        let width = if width_32 {
            AtomicWidth::W32
        } else {
            AtomicWidth::W64
        };
        let remote = Remote::new(at, &t.handle);
        let op = RemoteAtomic::new(ep, remote, atomic).of_width(width);
        let started = if result.is_null() {
            match atomic {
                Atomic::Op(..) => pending.started(None, |done| m.atomic(&op, done)),
                Atomic::CompareSwap { .. } => Err(rbtl_btl::Error::NotSupported(
                    "a compare-swap without a result",
                )),
            }
        } else {
            // SAFETY: the caller keeps `result` until `pending` is waited for, after
            // the callback that drops the handle.
            match unsafe {
                m.register_mem(
                    Some(ep),
                    result as usize,
                    size,
                    Access::LOCAL_READ | Access::LOCAL_WRITE,
                )
            } {
                Err(e) => Err(e),
                Ok(local) => {
                    // The registration stays until the callback has run.
                    let local = Arc::new(local);
                    let into = Local::new(result as usize, &local);
                    pending.started(Some(local.clone()), |done| {
                        m.atomic(&op.fetching(into), done)
                    })
                }
            }
        };
        Ok(started?)
    }
}

/// Copy `len` bytes between `buf` and `at`, a peer's memory mapped here (into it when
/// `put`), ordered by fences with the processes that synchronize with this one: a put
/// is a store, a get a load.
///
/// # Safety
///
/// `at` and `buf` each hold `len` bytes.
#[inline(always)]
pub(super) unsafe fn copy_mapped(at: *mut u8, buf: *mut u8, len: usize, put: bool) {
    // SAFETY: the caller's contract.
    unsafe {
        if put {
            rbtl_btl::copy_bytes(buf, at, len);
            fence(Ordering::Release);
        } else {
            fence(Ordering::Acquire);
            rbtl_btl::copy_bytes(at, buf, len);
        }
    }
}

/// A processor atomic on a word of shared memory: the previous value.
///
/// # Safety
///
/// `p` is valid, aligned to the word's size, and reached only atomically.
unsafe fn direct_atomic(p: *mut u8, atomic: Atomic, width_32: bool) -> u64 {
    use Ordering::{AcqRel, Acquire};
    if width_32 {
        // SAFETY: the caller's contract.
        let w = unsafe { AtomicU32::from_ptr(p.cast()) };
        return u64::from(match atomic {
            Atomic::Op(op, v) => op.apply32(w, v as u32),
            Atomic::CompareSwap { compare, value } => w
                .compare_exchange(compare as u32, value as u32, AcqRel, Acquire)
                .unwrap_or_else(|v| v),
        });
    }
    // SAFETY: the caller's contract.
    let w = unsafe { AtomicU64::from_ptr(p.cast()) };
    match atomic {
        Atomic::Op(op, v) => op.apply(w, v),
        Atomic::CompareSwap { compare, value } => w
            .compare_exchange(compare, value, AcqRel, Acquire)
            .unwrap_or_else(|v| v),
    }
}
