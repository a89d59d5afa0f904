//! The contract suite: checks every transport runs, against itself (`self`) or across
//! processes (`sm`, `tcp`, `openib`). Each check is symmetric: both sides run the same
//! code, each acting on its peer, and meet through an exchange over the transport
//! itself ([`EXCHANGE_TAG`]), so the same function serves a process talking to itself
//! and two processes. A failed check panics with what it saw.
//!
//! [`run_all`] runs every check; each is also a function of its own, taking the
//! [`Peer`] both sides build. [`offers_what_it_must`] pins what each transport
//! advertises; [`atomics_on_shared_words`], run by every rank of a job at once, has
//! them all update the same words.

#![warn(missing_docs)]

mod atomics;
mod atomics32;
mod buffer;
mod expected;
mod limits;
mod offers;
mod pattern;
mod peer;
mod rdma;
mod registration;
mod retry;
mod sends;
mod shared_words;
mod unregistered;
mod vectored_anywhere;

pub use atomics::atomics;
pub use atomics32::atomics_32bit;
pub use buffer::{grantable, remote_of, Buffer, Bytes};
pub use expected::expected_receive;
pub use limits::limits_are_enforced;
pub use offers::{offers_what_it_must, pinned};
pub use pattern::interesting_sizes;
pub use peer::{Peer, EXCHANGE_TAG, NOBODY_TAG};
pub use rdma::{
    flush_completes_everything, put_get_every_alignment, remote_access_is_checked, transfers_now,
    unattended_get,
};
pub use registration::{registration_refusals, requested_keys, vectored_registration};
pub use sends::{
    all_tags, callbacks_may_progress, ownership_and_callbacks, segments, sends_every_size,
    unregistered_tag,
};
pub use shared_words::{atomics_on_shared_words, Meet};
pub use unregistered::{unregistered_local_side, unregistered_remote_side};
pub use vectored_anywhere::vectored_transfers_anywhere;

use rbtl_btl::{Endpoint, Module};

/// Run every check of the suite between `module` and the peer behind `endpoint` (which
/// runs it too). Other peers of the module must not run the suite with this process
/// at the same time.
pub fn run_all(module: &mut dyn Module, endpoint: Endpoint) {
    offers_what_it_must(module);
    let p = &mut Peer::new(module, endpoint);
    unregistered_tag(p);
    sends_every_size(p);
    all_tags(p);
    callbacks_may_progress(p);
    segments(p);
    ownership_and_callbacks(p);
    expected_receive(p);
    put_get_every_alignment(p);
    flush_completes_everything(p);
    unregistered_local_side(p);
    unregistered_remote_side(p);
    unattended_get(p);
    transfers_now(p);
    atomics(p);
    atomics_32bit(p);
    remote_access_is_checked(p);
    registration_refusals(p);
    requested_keys(p);
    vectored_registration(p);
    vectored_transfers_anywhere(p);
    limits_are_enforced(p);
    p.barrier();
}
