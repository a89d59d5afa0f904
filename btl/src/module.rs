//! The module trait: one instance of a transport (a device port, a shared-memory
//! segment, the process itself), with the operations of Open MPI's
//! `mca_btl_base_module_t` (BTL 3.x).
//!
//! # Callbacks
//!
//! Every completion and receive callback runs from inside [`Module::progress`] or
//! [`Module::flush`], never from inside the call that started the operation, and gets
//! the module back as `&mut dyn Module` so it can start more work (Open MPI passes the
//! `btl` pointer the same way). A transfer that the module completes inside the call
//! has no callback ([`Module::transfer_now`]).

use crate::expected::ExpectedSlot;
use crate::{
    ActiveMessage, Attributes, Descriptor, DescriptorRequest, Error, MemHandle, Modex, Received,
    RegRequest, RemoteAtomic, RemoteHandle, Result, Tag, Transfer,
};
use rbtl_rcache::Access;

/// A peer as this module knows it (Open MPI: `mca_btl_base_endpoint_t*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint(pub u32);

/// A process of the job, as given to `add_procs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proc {
    /// Its rank in the job.
    pub rank: u32,
    /// The node it runs on, as published in the modex.
    pub node: String,
}

/// Receive callback of a tag (Open MPI: `mca_btl_base_module_recv_cb_fn_t`). The
/// segments are valid only during the call.
pub type AmCallback = Box<dyn FnMut(&mut dyn Module, &Received<'_>) + Send>;

/// What a put, get or atomic completion receives.
#[derive(Debug)]
pub struct RdmaCompletion {
    /// The endpoint of the operation.
    pub endpoint: Endpoint,
    /// The local address given to the operation (0 for non-fetching atomics).
    pub local_address: usize,
    /// Bytes transferred.
    pub size: usize,
    /// Whether it succeeded; a failure leaves the target memory unchanged.
    pub status: Result<()>,
}

/// Runs once when a put, get or atomic completes (Open MPI:
/// `mca_btl_base_rdma_completion_fn_t`; the closure's captures are its context).
pub type RdmaCallback = Box<dyn FnOnce(&mut dyn Module, RdmaCompletion) + Send>;

/// A failure the module reports outside any call (Open MPI: the error callback given to
/// `btl_register_error`).
#[derive(Debug)]
pub struct ErrorEvent {
    /// The failed peer's endpoint, if the failure concerns one.
    pub endpoint: Option<Endpoint>,
    /// The failed peer's rank, if known.
    pub rank: Option<u32>,
    /// What happened.
    pub error: Error,
}

/// The error callback.
pub type ErrorCallback = Box<dyn FnMut(&ErrorEvent) + Send>;

/// Memory from [`Module::alloc_shared`].
#[derive(Clone, Copy, Debug)]
pub struct SharedMem {
    /// Its start in this process.
    pub ptr: *mut u8,
    /// Its length.
    pub len: usize,
}

/// What `send` did with the descriptor.
#[derive(Debug)]
pub enum SendOutcome {
    /// Sent at once. The callback runs only under
    /// [`DesFlags::ALWAYS_CALLBACK`](crate::DesFlags::ALWAYS_CALLBACK); the descriptor
    /// comes back here when the caller owns it and no callback will get it.
    Done(Option<Descriptor>),
    /// Queued; the callback (if any) runs on completion (Open MPI: `OPAL_SUCCESS`).
    Queued,
}

/// What `sendi` did.
#[derive(Debug)]
pub enum SendiOutcome {
    /// Sent inline; nothing more to do.
    Sent,
    /// Could not send inline: here is a descriptor holding header and payload, ready to
    /// `send` (Open MPI hands back a descriptor the same way).
    Descriptor(Descriptor),
}

/// What `send` gives: the outcome, or the error with the descriptor.
pub type SendResult = std::result::Result<SendOutcome, SendError>;

/// A failed `send`: the descriptor comes back with the error, nothing is lost.
#[derive(Debug)]
pub struct SendError {
    /// Why.
    pub error: Error,
    /// The descriptor, unchanged.
    pub descriptor: Descriptor,
}

/// A receive handed to the transport, which matches and fills it itself, without a
/// callback (UCX: tag offload, `uct_iface_tag_recv_zcopy`); see [`Module::expect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The peer whose message it takes.
    pub endpoint: Endpoint,
    /// The active-message tag of that message.
    pub tag: Tag,
    /// The first bytes of that message (the caller's own header, such as its matching
    /// tag). They are compared, not copied.
    pub key: [u8; EXPECTED_KEY],
    /// Where the bytes after the key go.
    pub buf: *mut u8,
    /// Room at `buf`: a longer message is not taken.
    pub cap: usize,
}

/// Bytes of [`Expected::key`].
pub const EXPECTED_KEY: usize = 8;

/// The access a put needs at the remote end.
pub const PUT_REMOTE: Access = Access::REMOTE_WRITE;
/// The access a get needs at the remote end.
pub const GET_REMOTE: Access = Access::REMOTE_READ;

/// One instance of a transport.
pub trait Module: Send {
    /// Component name (`self`, `sm`, `tcp`, `openib`).
    fn name(&self) -> &str;

    /// This instance's identity.
    fn id(&self) -> crate::ModuleId;

    /// Limits, alignments, hints and flags.
    fn attributes(&self) -> &Attributes;

    /// Make endpoints for `procs` (Open MPI: `btl_add_procs`): `Some` for each peer this
    /// module reaches, `None` for the others. Peers' address blobs come from `modex`.
    fn add_procs(&mut self, procs: &[Proc], modex: &mut dyn Modex)
        -> Result<Vec<Option<Endpoint>>>;

    /// Forget endpoints (Open MPI: `btl_del_procs`).
    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()>;

    /// Install the receive callback of `tag`; reserved tags are refused.
    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()>;

    /// Install the callback for what no call returns; it runs from `progress`.
    /// [`Error::PeerFailed`] means a peer is gone (its pending operations complete with
    /// that error). Events that are not fatal come here too: a message that arrived on a
    /// tag with no registered callback ([`Error::BadTag`]; the message is dropped), or a
    /// malformed message from a peer. Without a callback they are logged.
    fn register_error(&mut self, callback: ErrorCallback);

    /// Register what `request` describes (libfabric: `fi_mr_regattr`): one range or
    /// several under one handle, for its access, under a requested key or one the
    /// transport chooses ([`MemHandle::key`]). Refusals are typed:
    /// [`Error::KeyInUse`] for a requested key a live registration of this module
    /// holds, [`Error::KeyRejected`] for one the transport will not honour
    /// ([`BtlFlags::PROVIDER_KEYS`](crate::BtlFlags::PROVIDER_KEYS)),
    /// [`Error::AccessNotSupported`] for access it cannot grant,
    /// [`Error::TooManyRanges`], [`Error::ZeroLength`], [`Error::Overflow`]; a refused
    /// request registers nothing. Peers address the memory by its virtual address, and
    /// each put, get or atomic must lie inside one range (see [`RegRequest`]).
    ///
    /// # Safety
    ///
    /// Every range must stay mapped and must not be freed until the handle is
    /// deregistered or dropped. While registered with remote access, peers may read or
    /// write it at any time: access it only through raw pointers, or after a
    /// synchronisation (completion, flush, a message) that orders the peers' accesses.
    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle>;

    /// Register `[base, base+len)` for `access` (Open MPI: `btl_register_mem`): a
    /// [`Module::register`] of that one range, under a key the transport chooses.
    ///
    /// # Safety
    ///
    /// As [`Module::register`]: the memory must stay mapped until the handle is
    /// deregistered or dropped. [`OwnedMemory::register`](crate::OwnedMemory::register)
    /// is the safe form for a buffer the caller hands over.
    unsafe fn register_mem(
        &mut self,
        endpoint: Option<Endpoint>,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<MemHandle> {
        let request = RegRequest::new(base, len, access).endpoint(endpoint);
        // SAFETY: forwarded contract.
        unsafe { self.register(&request) }
    }

    /// Release a registration (Open MPI: `btl_deregister_mem`). Deregistering twice,
    /// or a handle of another module, is an error and changes nothing. (Provided: the
    /// handle holds the transport's state of the registration, which ends with it.)
    fn deregister_mem(&mut self, handle: &mut MemHandle) -> Result<()> {
        handle.release(self.id())
    }

    /// The counters of the registration cache behind this module's handles (hits,
    /// misses, invalidations, what is pinned and idle); `None` where the module keeps
    /// no cache.
    fn registration_stats(&self) -> Option<rbtl_rcache::Stats> {
        None
    }

    /// A descriptor with one segment of `request.size` bytes (at most
    /// `max_send_size`: [`DescriptorRequest::check`]) for `request.endpoint` (Open
    /// MPI: `btl_alloc`).
    fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor>;

    /// A descriptor holding `request.size` bytes for the caller's header followed by
    /// as much of `data` (gathered in order) as fits in `max_send_size` (Open MPI:
    /// `btl_prepare_src` with a convertor). The descriptor's length tells how much was
    /// packed. (Provided: an [`alloc`](Module::alloc) of that length, filled.)
    fn prepare_src(&mut self, request: &DescriptorRequest, data: &[&[u8]]) -> Result<Descriptor> {
        let max = self.attributes().max_send_size;
        let reserve = request.size;
        let len = crate::send_frags::packed_len(max, reserve, data)?;
        let mut des = self.alloc(&DescriptorRequest {
            size: len,
            ..*request
        })?;
        crate::send_frags::pack(&mut des, reserve, data);
        Ok(des)
    }

    /// Return a descriptor (Open MPI: `btl_free`).
    fn free(&mut self, descriptor: Descriptor) -> Result<()>;

    /// Send a descriptor to the callback of `tag` at the peer (Open MPI: `btl_send`).
    // The error carries the descriptor back by value: boxing it would allocate on every
    // out-of-resource retry, which is a hot path under load.
    #[allow(clippy::result_large_err)]
    fn send(&mut self, endpoint: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult;

    /// Send `message` without a descriptor if the transport can (Open MPI:
    /// `btl_sendi`); `Err(OutOfResource)` means nothing was sent.
    fn sendi(&mut self, message: &ActiveMessage<'_>) -> Result<SendiOutcome>;

    /// Write `op.len` bytes from `op.local` to the peer's `op.remote` (Open MPI:
    /// `btl_put`). `Ok` means queued: `callback` runs once the data is visible at the
    /// target. `OutOfResource` means retry after progress; `NotAvailable` a size over
    /// [`Attributes::put_limit`] or an address or size that is not a multiple of
    /// [`Attributes::put_alignment`], decided before the handles are looked at
    /// ([`Transfer::check_limits`]). Both addresses must lie, with the whole transfer,
    /// inside one range of their registrations. Every error leaves the target
    /// unchanged.
    fn put(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()>;

    /// Read `op.len` bytes from the peer's `op.remote` into `op.local` (Open MPI:
    /// `btl_get`); as [`Module::put`] otherwise.
    fn get(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()>;

    /// A put (`put`) or get done inside this call, where the module can: `Some` with
    /// its outcome (`Ok`: the data is at the target, or here), and no callback ever
    /// runs for it; `None` where it must be started with [`Module::put`] or
    /// [`Module::get`] (the default), nothing done. For a caller that would only
    /// wait for the callback (Open MPI's `vader` calls a put's callback inside the
    /// put where it copies by cross-memory attach). Errors as [`Module::put`]'s.
    fn transfer_now(&mut self, _op: &Transfer<'_>, _put: bool) -> Option<Result<()>> {
        None
    }

    /// Apply `op.kind` to the peer's word at `op.remote`, its previous value written
    /// to `op.result` if given (Open MPI: `btl_atomic_op`, `btl_atomic_fop`,
    /// `btl_atomic_cswap`). The word must be aligned to its width
    /// ([`Error::Misaligned`]); an operation or width the module does not list in
    /// [`Attributes::atomic_flags`] is [`Error::NotSupported`].
    fn atomic(&mut self, _op: &RemoteAtomic<'_>, _callback: RdmaCallback) -> Result<()> {
        Err(Error::NotSupported("atomic"))
    }

    /// Memory that peers reach with plain loads and stores through
    /// [`Module::map_remote`] (Open MPI: the shared segment behind `osc/sm` windows);
    /// `None` where the transport has none or it is used up. It stays allocated until
    /// [`Module::free_shared`], and at most as long as the module. Register it like any
    /// memory to hand it out.
    fn alloc_shared(&mut self, _len: usize) -> Result<Option<SharedMem>> {
        Ok(None)
    }

    /// Give back memory that [`Module::alloc_shared`] returned, for reuse. The caller
    /// makes sure that no peer uses it any more (a window is freed collectively for
    /// that) and has deregistered it. Memory the module did not hand out, or took back
    /// already, is refused and nothing changes.
    fn free_shared(&mut self, mem: SharedMem) -> Result<()> {
        Err(Error::UnknownSharedMemory {
            addr: mem.ptr as usize,
            len: mem.len,
        })
    }

    /// A local pointer to `[remote, remote+len)` of the peer's memory named by
    /// `remote_handle`, when that memory came from the peer's `alloc_shared`, after the
    /// checks a put or get needing `access` would make. Loads and stores through it are
    /// the peer's memory; order them with atomics or fences.
    fn map_remote(
        &mut self,
        _endpoint: Endpoint,
        _remote: u64,
        _remote_handle: &RemoteHandle,
        _len: usize,
        _access: Access,
    ) -> Result<Option<*mut u8>> {
        Ok(None)
    }

    /// Complete every put, get and atomic started so far on `endpoint` (or all
    /// endpoints), running their callbacks (Open MPI: `btl_flush`). Operations that
    /// fail (a peer gone: [`Error::PeerFailed`]) complete too, with their error in
    /// their callback; flush itself returns `Ok` then.
    ///
    /// Where operations need the target's own progress (`tcp`; `sm`'s copy protocol;
    /// `openib` while their connection is being made), a target that answers nothing
    /// (stopped, hung, never calling progress) would keep flush waiting forever. Such a
    /// transport waits only while the peers answer: once every peer it still waits for
    /// has sent no answer for its timeout (`btl_tcp_flush_timeout`,
    /// `btl_sm_flush_timeout`, `btl_openib_flush_timeout`; a peer that answers, however
    /// slowly, restarts its count), flush returns [`Error::PeerTimeout`] naming them,
    /// after running the callbacks of what did complete. Nothing is lost: their
    /// operations stay pending and complete if the peers answer later (a later flush
    /// waits for them again), or fail with [`Error::PeerFailed`] when the link breaks
    /// (over `openib`: when the connection is not up within
    /// `btl_openib_connect_timeout`) or the caller removes the peers with
    /// [`Module::del_procs`]. Transports whose
    /// operations the hardware completes (`self`; `openib` once connected) return no
    /// such error. [`Error::UnknownEndpoint`] for an endpoint the module did not make.
    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()>;

    /// Drive completions and receives; returns how many events it handled.
    fn progress(&mut self) -> usize;

    /// Post one receive that the transport fills itself: the first message from
    /// `e.endpoint` on `e.tag` that begins with `e.key` and whose remaining bytes fit
    /// `e.cap` is copied to `e.buf` instead of reaching its callback, and the progress
    /// call that does so returns right after it (so the caller learns of it before any
    /// later message is delivered). Every other message, a matching one too long for
    /// the room included, goes to its callback as usual. A module holds at most one
    /// such receive: a new one replaces the previous. False when the transport does
    /// not match receives itself (no [`Module::expected_slot`]), or cannot receive
    /// from the endpoint ([`Module::expects_from`]); nothing was posted then.
    /// (Provided, over those two.)
    ///
    /// # Safety
    ///
    /// `e.buf` must stay valid for writes of `e.cap` bytes, and not be accessed
    /// otherwise, until [`Module::take_expected`] has returned its length or
    /// [`Module::cancel_expected`] was called.
    unsafe fn expect(&mut self, e: Expected) -> bool {
        if !self.expects_from(e.endpoint) {
            return false;
        }
        match self.expected_slot() {
            Some(slot) => {
                slot.post(&e);
                true
            }
            None => false,
        }
    }

    /// The length of the message the posted [`Module::expect`] received, once (the
    /// receive is then over); `None` while it waits or when none is posted.
    /// (Provided.)
    fn take_expected(&mut self) -> Option<usize> {
        self.expected_slot()?.take()
    }

    /// Withdraw the receive posted with [`Module::expect`], whatever its state: the
    /// transport no longer touches its buffer, and [`Module::take_expected`] returns
    /// `None` until the next one. (Provided.)
    fn cancel_expected(&mut self) {
        if let Some(slot) = self.expected_slot() {
            slot.cancel();
        }
    }

    /// The slot of the receive [`Module::expect`] posts, for a transport whose poll
    /// loop fills it (`sm`, `tcp`, `openib`: [`ExpectedSlot::fill`] on each message);
    /// `None` (the default) for one that does not match receives itself.
    fn expected_slot(&mut self) -> Option<&mut ExpectedSlot> {
        None
    }

    /// Whether `endpoint` is a peer this module can still receive from (one it made,
    /// not removed), for [`Module::expect`]; false by default.
    fn expects_from(&self, _endpoint: Endpoint) -> bool {
        false
    }
}
