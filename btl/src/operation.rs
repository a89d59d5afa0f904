//! Operations as values: a [`Transfer`] names a put or a get, a [`RemoteAtomic`] an
//! atomic, an [`ActiveMessage`] a send without a descriptor, a [`DescriptorRequest`]
//! the descriptor wanted for a send, whole, where Open MPI's `btl_put`, `btl_get`,
//! `btl_atomic_op`, `btl_atomic_fop`, `btl_atomic_cswap`, `btl_sendi`, `btl_alloc`
//! and `btl_prepare_src` take an argument list each.
//! [`Module::put`](crate::Module::put), [`Module::get`](crate::Module::get) and
//! [`Module::atomic`](crate::Module::atomic) take them with the completion callback,
//! [`Module::sendi`](crate::Module::sendi) and [`Module::alloc`](crate::Module::alloc)
//! alone; the checks that do not depend on the transport's state are the values' own
//! ([`Transfer::check_limits`], [`RemoteAtomic::check_word`],
//! [`ActiveMessage::check`], [`DescriptorRequest::check`]).

use crate::{Access, MemHandle, Order, RemoteHandle, Result, Tag};
use crate::{AtomicOp, AtomicRequest, AtomicWidth, Attributes, DesFlags, Endpoint, Error};
use crate::{Descriptor, Module};

bitflags::bitflags! {
    /// Flags of a put or a get (Open MPI: the `flags` of `btl_put` and `btl_get`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct RdmaFlags: u32 {
        /// Signal the target's progress engine (where the transport can).
        const SIGNAL = 1;
        /// Complete without the target process taking part, on a transport that
        /// offers it ([`BtlFlags::UNATTENDED_RDMA`](crate::BtlFlags::UNATTENDED_RDMA)):
        /// for a one-sided operation whose target may be busy elsewhere. Elsewhere it
        /// changes nothing.
        const UNATTENDED = 2;
    }
}

/// This process's side of an operation: an address inside a registration of the
/// module's, or, for a module that reaches this process's memory by its address
/// alone (no [`BtlFlags::REGISTRATION_REQUIRED`](crate::BtlFlags::REGISTRATION_REQUIRED)),
/// an address the caller vouches for ([`Local::unregistered`]; UCX: a zero-copy
/// operation without a memory handle where the memory domain does not set
/// `UCT_MD_FLAG_NEED_MEMH`).
#[derive(Clone, Copy, Debug)]
pub struct Local<'a> {
    /// Where the bytes are (or go).
    pub addr: usize,
    /// The registration they lie in (none: vouched for by the creator).
    handle: Option<&'a MemHandle>,
}

impl<'a> Local<'a> {
    /// `addr` inside `handle`.
    pub fn new(addr: usize, handle: &'a MemHandle) -> Self {
        Local {
            addr,
            handle: Some(handle),
        }
    }

    /// `addr`, registered with nothing. A module that needs registrations
    /// ([`BtlFlags::REGISTRATION_REQUIRED`](crate::BtlFlags::REGISTRATION_REQUIRED))
    /// refuses it with [`Error::Unregistered`].
    ///
    /// # Safety
    ///
    /// The operation's bytes from `addr` stay mapped, readable (a put) or writable
    /// (a get), and unused by anyone else until its callback runs: what a
    /// registration's contract ([`Module::register`](crate::Module::register))
    /// otherwise promises.
    pub unsafe fn unregistered(addr: usize) -> Local<'static> {
        Local { addr, handle: None }
    }

    /// The registration, if the local side has one.
    pub fn handle(&self) -> Option<&'a MemHandle> {
        self.handle
    }

    /// Check that `len` bytes from the address lie in one range of the registration,
    /// made by `module` as a `T`, with `needs` access; an unregistered side passes
    /// (its creator vouched for it).
    #[inline]
    pub fn check<T: 'static>(
        &self,
        module: crate::ModuleId,
        len: usize,
        needs: Access,
    ) -> Result<()> {
        match self.handle {
            Some(h) => h.check::<T>(module, self.addr, len, needs).map(|_| ()),
            None => Ok(()),
        }
    }
}

/// The peer's side: an address inside the registration a peer handed out, or, for a
/// module that reaches a peer's memory by its address alone
/// ([`BtlFlags::UNREGISTERED_REMOTE`](crate::BtlFlags::UNREGISTERED_REMOTE)), an
/// address the peer vouched for ([`Remote::unregistered`]; Open MPI's `vader` with
/// cross-memory attach has no registration at all, UCX's transports without
/// `UCT_MD_FLAG_NEED_RKEY` none for the peer's side).
#[derive(Clone, Copy, Debug)]
pub struct Remote<'a> {
    /// The address in the peer's memory.
    pub addr: u64,
    /// The peer's registration, as received from it (none: vouched for by the peer).
    handle: Option<&'a RemoteHandle>,
}

impl<'a> Remote<'a> {
    /// `addr` inside `handle`.
    pub fn new(addr: u64, handle: &'a RemoteHandle) -> Self {
        Remote {
            addr,
            handle: Some(handle),
        }
    }

    /// `addr` in the peer's memory, registered with nothing. A module without
    /// [`BtlFlags::UNREGISTERED_REMOTE`](crate::BtlFlags::UNREGISTERED_REMOTE)
    /// refuses it with [`Error::UnregisteredRemote`], as does one that cannot reach this
    /// peer that way; atomics always refuse it.
    ///
    /// # Safety
    ///
    /// The peer vouched for the operation's bytes from `addr`: they stay mapped,
    /// readable (a get) or writable (a put), and unused by anyone else until it
    /// hears that the operation completed, as its registration would have promised.
    pub unsafe fn unregistered(addr: u64) -> Remote<'static> {
        Remote { addr, handle: None }
    }

    /// The registration, if the peer's side has one.
    #[inline]
    pub fn handle(&self) -> Option<&'a RemoteHandle> {
        self.handle
    }

    /// The registration, or [`Error::UnregisteredRemote`] for a module that needs one.
    #[inline]
    pub fn registered(&self) -> Result<&'a RemoteHandle> {
        self.handle.ok_or(Error::UnregisteredRemote)
    }
}

/// A put (local to remote) or a get (remote to local) of `len` bytes over
/// `endpoint`.
#[derive(Clone, Copy, Debug)]
pub struct Transfer<'a> {
    /// The peer.
    pub endpoint: Endpoint,
    /// This process's bytes.
    pub local: Local<'a>,
    /// The peer's bytes.
    pub remote: Remote<'a>,
    /// How many.
    pub len: usize,
    /// Its flags.
    pub flags: RdmaFlags,
    /// The order it keeps with the endpoint's other operations.
    pub order: Order,
}

impl<'a> Transfer<'a> {
    /// `len` bytes between `local` and `remote`, no flags, in any order.
    pub fn new(endpoint: Endpoint, local: Local<'a>, remote: Remote<'a>, len: usize) -> Self {
        Transfer {
            endpoint,
            local,
            remote,
            len,
            flags: RdmaFlags::empty(),
            order: Order::ANY,
        }
    }

    /// The same, kept in `order`.
    pub fn ordered(self, order: Order) -> Self {
        Transfer { order, ..self }
    }

    /// The same, with `flags`.
    pub fn flagged(self, flags: RdmaFlags) -> Self {
        Transfer { flags, ..self }
    }

    /// The `len` bytes at `offset` of this transfer, on both sides (a piece of one
    /// larger than the transport's limit).
    pub fn piece(&self, offset: usize, len: usize) -> Self {
        let mut piece = *self;
        piece.local.addr += offset;
        piece.remote.addr += offset as u64;
        piece.len = len;
        piece
    }

    /// The access a put (`put`) or a get needs: of this process's memory, and of the
    /// peer's.
    pub const fn needs(put: bool) -> (Access, Access) {
        if put {
            (Access::LOCAL_READ, crate::PUT_REMOTE)
        } else {
            (Access::LOCAL_WRITE, crate::GET_REMOTE)
        }
    }

    /// The module's limit and alignment for a put (`put`) or a get
    /// ([`Error::NotAvailable`](crate::Error::NotAvailable) beyond them), decided before any handle is looked at.
    #[inline]
    pub fn check_limits(&self, attrs: &Attributes, put: bool) -> Result<()> {
        attrs.check_transfer(put, self.local.addr, self.remote.addr, self.len)
    }
}

/// What an atomic does to the word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicKind {
    /// Apply the operation with the operand (Open MPI: `btl_atomic_op`, and
    /// `btl_atomic_fop` with a result).
    Op(AtomicOp, u64),
    /// Store `value` if the word equals `compare` (Open MPI: `btl_atomic_cswap`); a
    /// 32-bit word compares and stores the low 32 bits of each.
    CompareSwap {
        /// What the word must hold.
        compare: u64,
        /// What it then holds.
        value: u64,
    },
}

/// An atomic on the peer's word at `remote` (see [`AtomicWidth`] for the widths).
#[derive(Clone, Copy, Debug)]
pub struct RemoteAtomic<'a> {
    /// The peer.
    pub endpoint: Endpoint,
    /// The word.
    pub remote: Remote<'a>,
    /// What it does there.
    pub kind: AtomicKind,
    /// Where the word's previous value goes (`width` bytes, inside a registration
    /// with local write access); `None`: nowhere.
    pub result: Option<Local<'a>>,
    /// The word's width.
    pub width: AtomicWidth,
    /// The order it keeps with the endpoint's other operations.
    pub order: Order,
}

impl<'a> RemoteAtomic<'a> {
    /// `kind` on the 64-bit word at `remote`, its previous value dropped, in any
    /// order.
    pub fn new(endpoint: Endpoint, remote: Remote<'a>, kind: AtomicKind) -> Self {
        RemoteAtomic {
            endpoint,
            remote,
            kind,
            result: None,
            width: AtomicWidth::W64,
            order: Order::ANY,
        }
    }

    /// The same, the previous value written to `result`.
    pub fn fetching(self, result: Local<'a>) -> Self {
        RemoteAtomic {
            result: Some(result),
            ..self
        }
    }

    /// The same on a word of `width`.
    pub fn of_width(self, width: AtomicWidth) -> Self {
        RemoteAtomic { width, ..self }
    }

    /// The same, kept in `order`.
    pub fn ordered(self, order: Order) -> Self {
        RemoteAtomic { order, ..self }
    }

    /// The operation and width as a target applies them (and as the wire names them).
    #[inline]
    pub fn request(&self) -> AtomicRequest {
        let op = match self.kind {
            AtomicKind::Op(op, _) => Some(op),
            AtomicKind::CompareSwap { .. } => None,
        };
        AtomicRequest {
            op,
            width: self.width,
        }
    }

    /// The operand (the value to store, for a compare-and-swap) and the comparand (0
    /// for the other operations).
    #[inline]
    pub fn operands(&self) -> (u64, u64) {
        match self.kind {
            AtomicKind::Op(_, operand) => (operand, 0),
            AtomicKind::CompareSwap { compare, value } => (value, compare),
        }
    }

    /// [`Error::Misaligned`](crate::Error::Misaligned) unless the word is aligned to its width.
    #[inline]
    pub fn check_word(&self) -> Result<()> {
        self.width.check_aligned(self.remote.addr)
    }

    /// The local address of the result (0 without one), as the completion reports it.
    #[inline]
    pub fn result_addr(&self) -> usize {
        self.result.map_or(0, |r| r.addr)
    }
}

/// A message to the callback of `tag` at `endpoint`: `header`, then `payload`, sent
/// without a descriptor where the transport can (Open MPI: the arguments of
/// `btl_sendi`).
#[derive(Clone, Copy, Debug)]
pub struct ActiveMessage<'a> {
    /// The peer.
    pub endpoint: Endpoint,
    /// The receive callback's tag.
    pub tag: Tag,
    /// The caller's header.
    pub header: &'a [u8],
    /// The data after it.
    pub payload: &'a [u8],
    /// The order it keeps with the endpoint's other operations.
    pub order: Order,
    /// The flags of the descriptor it becomes where it cannot go inline.
    pub flags: DesFlags,
}

impl<'a> ActiveMessage<'a> {
    /// `header` then `payload` to `tag` at `endpoint`, no flags, in any order.
    pub fn new(endpoint: Endpoint, tag: Tag, header: &'a [u8], payload: &'a [u8]) -> Self {
        ActiveMessage {
            endpoint,
            tag,
            header,
            payload,
            order: Order::ANY,
            flags: DesFlags::empty(),
        }
    }

    /// The same, kept in `order`.
    pub fn ordered(self, order: Order) -> Self {
        ActiveMessage { order, ..self }
    }

    /// The same, with `flags`.
    pub fn flagged(self, flags: DesFlags) -> Self {
        ActiveMessage { flags, ..self }
    }

    /// Bytes of header and payload.
    #[inline]
    pub fn len(&self) -> usize {
        self.header.len() + self.payload.len()
    }

    /// Whether it carries no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Write its header then its payload, [`len`](Self::len) bytes, from `at` on (for
    /// a transport that gathers a small message in a buffer of its own).
    ///
    /// # Safety
    ///
    /// `at` must be valid for writes of `self.len()` bytes that overlap neither slice.
    #[inline]
    pub unsafe fn gather_to(&self, at: *mut u8) {
        // SAFETY: the caller's contract; the two pieces follow each other from `at`.
        unsafe {
            crate::copy_bytes(self.header.as_ptr(), at, self.header.len());
            crate::copy_bytes(
                self.payload.as_ptr(),
                at.add(self.header.len()),
                self.payload.len(),
            );
        }
    }

    /// The descriptor this message becomes where it cannot go inline, from `module`:
    /// no room reserved before the data, header and payload packed as data by
    /// [`Module::prepare_src`](crate::Module::prepare_src), in the same order and with
    /// the same flags (Open MPI: `btl_sendi`'s fallback to `btl_prepare_src`).
    pub fn prepare_descriptor<M: Module + ?Sized>(&self, module: &mut M) -> Result<Descriptor> {
        let request = DescriptorRequest::new(self.endpoint, 0)
            .ordered(self.order)
            .flagged(self.flags);
        module.prepare_src(&request, &[self.header, self.payload])
    }

    /// [`Error::BadTag`] for a tag reserved for transports, [`Error::TooLarge`] for
    /// more than `max_send_size` bytes.
    #[inline]
    pub fn check(&self, max_send_size: usize) -> Result<()> {
        crate::am_table::check_not_reserved(self.tag)?;
        check_send_size(self.len(), max_send_size)
    }
}

/// The descriptor wanted for a send to `endpoint`: one segment of `size` bytes,
/// kept in `order`, with `flags` (Open MPI: the arguments of `btl_alloc`; for
/// [`Module::prepare_src`](crate::Module::prepare_src), `size` is the room reserved
/// for the caller's header before the data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorRequest {
    /// The peer.
    pub endpoint: Endpoint,
    /// Bytes of the segment.
    pub size: usize,
    /// The order it keeps with the endpoint's other operations.
    pub order: Order,
    /// What happens to the descriptor once it is sent.
    pub flags: DesFlags,
}

impl DescriptorRequest {
    /// `size` bytes for `endpoint`, no flags, in any order.
    pub fn new(endpoint: Endpoint, size: usize) -> Self {
        DescriptorRequest {
            endpoint,
            size,
            order: Order::ANY,
            flags: DesFlags::empty(),
        }
    }

    /// The same, kept in `order`.
    pub fn ordered(self, order: Order) -> Self {
        DescriptorRequest { order, ..self }
    }

    /// The same, with `flags`.
    pub fn flagged(self, flags: DesFlags) -> Self {
        DescriptorRequest { flags, ..self }
    }

    /// [`Error::TooLarge`] for more than `max_send_size` bytes.
    #[inline]
    pub fn check(&self, max_send_size: usize) -> Result<()> {
        check_send_size(self.size, max_send_size)
    }
}

/// [`Error::TooLarge`] for a send of more than `max_send_size` bytes.
fn check_send_size(size: usize, max_send_size: usize) -> Result<()> {
    if size > max_send_size {
        return Err(Error::TooLarge(format!(
            "{size} bytes exceed max_send_size {max_send_size}"
        )));
    }
    Ok(())
}
