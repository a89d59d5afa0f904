//! The extended verbs' way to the provider: verbs.h's extended verbs (XRC's, and
//! `ibv_create_srq_ex`, `ibv_create_qp_ex`) are static inline functions that reach it
//! through the `verbs_context` laid out in front of the `ibv_context`. This is that
//! lookup, written after verbs.h rather than taken from rdma-sys 0.3, whose
//! `verbs_get_ctx` recognises an extended context only by libibverbs 1.1's marker
//! (`abi_compat == UINT_MAX`), not by rdma-core's (`UINTPTR_MAX`).

use rdma_sys as sys;
use std::mem::{offset_of, size_of};
use std::ptr::{addr_of, NonNull};

/// `abi_compat` of a context that is the tail of a `verbs_context`: verbs.h's
/// `__VERBS_ABI_IS_EXTENDED`, `(void *)UINTPTR_MAX` in rdma-core.
const ABI_IS_EXTENDED: usize = usize::MAX;
/// The same marker as libibverbs 1.1 wrote it (`(void *)UINT_MAX`), also accepted: no
/// pointer a non-extended context could hold there has either value.
const ABI_IS_EXTENDED_1_1: usize = u32::MAX as usize;

// What the pointer arithmetic below relies on.
const _: () = {
    use sys::verbs_context as V;
    // The ibv_context is the verbs_context's last field, right after `sz` (verbs.h:
    // "Must be last field in the struct", "Must be immediately before").
    assert!(offset_of!(V, context) + size_of::<sys::ibv_context>() == size_of::<V>());
    assert!(offset_of!(V, sz) + size_of::<usize>() == offset_of!(V, context));
};

/// verbs.h's `verbs_get_ctx`: the `verbs_context` whose tail `ctx` is, when `ctx` is an
/// extended context (every context of rdma-core's libibverbs is).
///
/// # Safety
///
/// `ctx` is a live context.
pub(crate) unsafe fn verbs_get_ctx(
    ctx: *mut sys::ibv_context,
) -> Option<NonNull<sys::verbs_context>> {
    // SAFETY: a live context (the caller's promise); reading one pointer-sized field.
    let marker = unsafe { addr_of!((*ctx).abi_compat).read() } as usize;
    if marker != ABI_IS_EXTENDED && marker != ABI_IS_EXTENDED_1_1 {
        return None;
    }
    // The start of a verbs_context of this crate's layout. An older provider's is
    // shorter at the front, so this may point before its allocation: wrapping
    // arithmetic, and only fields that `sz` says exist are ever read (verbs_op!).
    let vctx = ctx
        .cast::<u8>()
        .wrapping_sub(offset_of!(sys::verbs_context, context));
    NonNull::new(vctx.cast())
}

/// verbs.h's `verbs_get_ctx_op`: the provider's `$op` (a `verbs_context` field) for the
/// context `$ctx`, or `None` when the context is not extended, the provider's
/// `verbs_context` is too old to have the slot (its `sz` does not reach back to it), or
/// the slot is empty. Expands to unsafe code: use it inside `unsafe`, with `$ctx` (a
/// `*mut ibv_context`) live.
macro_rules! verbs_op {
    ($ctx:expr, $op:ident) => {{
        use ::rdma_sys::verbs_context as V;
        match $crate::extended::verbs_get_ctx($ctx) {
            None => None,
            Some(v) => {
                let v = v.as_ptr();
                let reach = ::std::mem::size_of::<V>() - ::std::mem::offset_of!(V, $op);
                if ::std::ptr::addr_of!((*v).sz).read() < reach {
                    None
                } else {
                    ::std::ptr::addr_of!((*v).$op).read()
                }
            }
        }
    }};
}
pub(crate) use verbs_op;

#[cfg(test)]
mod tests {
    //! The `verbs_context` lookup against a real device (in the soft-RoCE guest; SKIP
    //! elsewhere unless VERBS_REQUIRE_DEVICE is set).

    use super::*;
    use crate::test_device::device;

    /// The context is extended with rdma-core's marker, and a verb reached through the
    /// `verbs_context` found from it answers like the plain verb.
    #[test]
    fn verbs_context_of_a_real_device() {
        let Some(ctx) = device() else { return };
        let c = ctx.inner.ptr.as_ptr();
        // SAFETY: a live context.
        let marker = unsafe { addr_of!((*c).abi_compat).read() } as usize;
        assert_eq!(marker, ABI_IS_EXTENDED, "abi_compat {marker:#x}");
        // SAFETY: as above.
        let v = unsafe { verbs_get_ctx(c) }.expect("an extended context");
        // SAFETY: an extended context: `sz` lies just before it.
        let sz = unsafe { addr_of!((*v.as_ptr()).sz).read() };
        assert_eq!(
            sz,
            size_of::<sys::verbs_context>(),
            "built against these headers"
        );
        // SAFETY: a live context.
        let query = unsafe { verbs_op!(c, query_device_ex) }.expect("query_device_ex");
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: the provider's op on its context, with a writable attr of this size.
        let rc = unsafe {
            query(
                c,
                std::ptr::null(),
                &mut attr,
                size_of::<sys::ibv_device_attr_ex>(),
            )
        };
        assert_eq!(rc, 0);
        let plain = ctx.query_device().unwrap();
        assert_eq!(
            (attr.orig_attr.max_qp_wr, attr.orig_attr.phys_port_cnt),
            (plain.max_qp_wr, plain.ports)
        );
        // SAFETY: a live context.
        let present = unsafe {
            [
                verbs_op!(c, create_qp_ex).is_some(),
                verbs_op!(c, create_srq_ex).is_some(),
                verbs_op!(c, open_xrcd).is_some(),
                verbs_op!(c, get_srq_num).is_some(),
            ]
        };
        assert_eq!(
            present, [true; 4],
            "libibverbs fills every slot (a dummy where the provider has none)"
        );
    }
}
