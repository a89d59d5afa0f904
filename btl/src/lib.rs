//! The BTL contract: what a byte-transfer layer offers the message-passing library
//! above it, in Open MPI BTL 3.x terms, and what its transports share to implement it.
//!
//! | Open MPI (`opal/mca/btl/btl.h`) | here |
//! |---|---|
//! | `mca_btl_base_component_t`, `mca_btl_base_select` | [`Component`], [`Framework`] |
//! | `mca_btl_base_module_t` | [`Module`] |
//! | `btl_eager_limit`, `btl_put_limit`, `btl_flags`, ... | [`Attributes`], [`BtlFlags`] |
//! | `mca_btl_base_registration_handle_t` | [`MemHandle`] (local), [`RemoteHandle`] (bytes for peers) |
//! | (libfabric: `fi_mr_regattr`, `struct fi_mr_attr`, `requested_key`, `fi_mr_regv`) | [`Module::register`], [`RegRequest`], [`MemRange`] |
//! | `btl_put`, `btl_get` (address, handle and size of each side, flags, order) | [`Module::put`], [`Module::get`] taking one [`Transfer`] ([`Local`], [`Remote`], [`RdmaFlags`]) |
//! | `btl_sendi` (endpoint, header, payload, order, flags, tag) | [`Module::sendi`] taking one [`ActiveMessage`] |
//! | `btl_alloc`, `btl_prepare_src` (endpoint, order, size or reserve, flags) | [`Module::alloc`], [`Module::prepare_src`] taking one [`DescriptorRequest`] |
//! | `btl_atomic_op`, `btl_atomic_fop`, `btl_atomic_cswap` | [`Module::atomic`] taking one [`RemoteAtomic`] ([`AtomicKind`], a result or none) |
//! | `mca_btl_base_atomic_op_t`, `MCA_BTL_ATOMIC_FLAG_32BIT`, `MCA_BTL_ATOMIC_SUPPORTS_*` | [`AtomicOp`], [`AtomicWidth::W32`], [`AtomicFlags`] |
//! | `mca_btl_base_descriptor_t`, `MCA_BTL_DES_FLAGS_*` | [`Descriptor`], [`DesFlags`] |
//! | `mca_btl_base_tag_t`, `MCA_BTL_TAG_*` | [`Tag`] |
//! | `mca_btl_base_rdma_completion_fn_t` | [`RdmaCallback`] |
//! | `OPAL_ERR_OUT_OF_RESOURCE`, `OPAL_ERR_NOT_AVAILABLE` | [`Error::OutOfResource`], [`Error::NotAvailable`] |
//! | `mca_btl_base_active_message_trigger` | [`transport_kit::AmTable`] |
//! | the modex (PMIx) | [`Modex`] |
//! | (UCX: `uct_iface_tag_recv_zcopy`, tag offload) | [`Module::expect`], [`Expected`] (a transport holds it in [`transport_kit::ExpectedSlot`]) |
//!
//! Where ours differs: callbacks run only from `progress`/`flush` and get the module
//! back as `&mut dyn Module`; `register_mem` and `expect` are the `unsafe` calls (they
//! are where a memory's lifetime is promised; [`OwnedMemory`] is the safe form for a
//! buffer handed over), after which put/get check every address against the handles
//! and are safe; descriptors and handles are owned values, so a
//! failed send hands its descriptor back and a handle cannot outlive its
//! deregistration unnoticed. A module may also match one receive itself
//! ([`Module::expect`]), which Open MPI's BTLs leave to the layer above.
//!
//! The transports are crates of their own over this one: `rbtl-self` (a process to
//! itself, the shortest whole transport: read it first when writing one), `rbtl-sm`
//! (processes on one node), `rbtl-tcp` (any IP network) and `rbtl-openib` (verbs
//! devices); `rbtl-conformance` is the suite every one of them passes. An embedding
//! program gets the framework over every transport compiled in from the `rbtl` crate
//! (`rbtl::framework()`). What only a transport needs (the table of receive callbacks,
//! the expected-receive slot, key tables, send fragments, ...) is in [`transport_kit`].

#![warn(missing_docs)]

mod am_table;
mod atomic;
mod attributes;
mod component;
mod copy;
mod count_params;
mod descriptor;
mod done;
mod error;
mod expected;
mod flush_watch;
mod handle;
pub mod idle;
mod inline_ranges;
mod keyed_handle;
mod keytable;
mod le;
mod modex;
mod module;
mod operation;
mod owned_memory;
mod rcache_params;
mod registrations;
mod request;
mod send_admission;
mod send_frags;
mod slices;
mod tag;
pub mod transport_kit;

pub use atomic::{AtomicOp, AtomicRequest, AtomicWidth};
pub use attributes::{exclusivity, AtomicFlags, Attributes, BtlFlags, MAX_HANDLE_SIZE};
pub use component::{Component, Framework, SELECT_PARAM, SHM_DIR_PARAM};
pub use copy::{copy_bytes, move_bytes};
pub use descriptor::{
    DesFlags, Descriptor, Order, Received, SendCallback, SendCompletion, MAX_SEGMENTS,
};
pub use error::{Error, PeerFailure, Result, SilentPeer};
pub use handle::{check_range, find_range, MemHandle, ModuleId, RemoteHandle};
pub use modex::{Modex, SingletonModex};
pub use module::{
    AmCallback, Endpoint, ErrorCallback, ErrorEvent, Expected, Module, Proc, RdmaCallback,
    RdmaCompletion, SendError, SendOutcome, SendResult, SendiOutcome, SharedMem, EXPECTED_KEY,
};
pub use operation::{
    ActiveMessage, AtomicKind, DescriptorRequest, Local, RdmaFlags, Remote, RemoteAtomic, Transfer,
};
pub use owned_memory::{NotReleased, OwnedMemory};
pub use rbtl_rcache::Access;
pub use request::{MemRange, RegRequest, MAX_RANGES};
pub use slices::{slice_at, slice_at_mut};
pub use tag::Tag;

// What a put or a get needs of the remote side, for `operation.rs` (the kit has them too).
pub(crate) use module::{GET_REMOTE, PUT_REMOTE};
