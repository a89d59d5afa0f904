//! For transport authors: building blocks the transports (`self`, `sm`, `tcp`, `openib`) share; an
//! embedding library does not need them.
//!
//! The contract's own types also have methods only a transport calls, such as
//! [`MemHandle::new`](crate::MemHandle::new), [`MemHandle::check`](crate::MemHandle::check),
//! [`RegRequest::check`](crate::RegRequest::check),
//! [`Attributes::check_transfer`](crate::Attributes::check_transfer),
//! [`Descriptor::new`](crate::Descriptor::new) and [`ModuleId::fresh`](crate::ModuleId::fresh).

pub use crate::am_table::{check_not_reserved, AmTable};
pub use crate::atomic::compare_swap;
pub use crate::component::init_with;
pub use crate::count_params::{at_least_one, count};
pub use crate::done::{complete_send, run_done, Done, RdmaOp};
pub use crate::expected::ExpectedSlot;
pub use crate::flush_watch::{Answers, FlushWatch};
pub use crate::inline_ranges::{InlineRanges, RangeLayout};
pub use crate::le::{u32_at, u64_at};
pub use crate::module::{GET_REMOTE, PUT_REMOTE};
pub use crate::send_admission::admit_send;

pub mod keytable {
    //! A fixed-capacity table of live registrations in plain memory (such as a shared
    //! segment), against which peers check remote handles before they touch the memory
    //! (the `self` and `sm` transports).

    pub use crate::keyed_handle::{handle_size, HandleFields, RangeFields, HANDLE_SIZE};
    pub use crate::keytable::{
        table_bytes, table_bytes_checked, Entry, KeyTable, KeyTableView, Slot,
    };
}

pub mod registrations {
    //! `register_mem` through the registration cache, for transports whose peers check
    //! handles against a [`KeyTable`](super::keytable::KeyTable), and the span check
    //! every transport makes first.

    pub use crate::registrations::{check_span, NoPin, Reg, Registrations};
}

pub mod send_frags {
    //! Send descriptors over a free list of fragments, for transports that copy what they
    //! send: `alloc` and `free` of the contract (its `prepare_src` packs with these).

    pub use crate::send_frags::{pack, packed_len, SendFrags};
}

pub mod rcache_params {
    //! The registration cache's parameters, shared by every transport that registers
    //! (the [`Framework`](crate::Framework) registers them).

    pub use crate::rcache_params::{
        leave_pinned, monitor_status, monitor_wanted, options, register_params,
    };
}
