//! Shared receive queues: one pool of posted receives for many queue pairs.
//!
//! Also `ibv_create_srq_ex`, written here after verbs.h's inline function rather than
//! taken from rdma-sys 0.3, whose hand-written version sends every request to the
//! legacy `ibv_create_srq` (so an XRC SRQ would silently come out a basic one) and
//! whose `verbs_context` lookup does not recognise rdma-core's marker (see the
//! `extended` module).

use crate::error::{call_error, unsupported, Result};
use crate::extended::verbs_op;
use crate::pd::{Mr, Pd, PdInner};
use rdma_sys as sys;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::Arc;

// verbs.h hands an `ibv_srq_init_attr_ex` to the legacy `ibv_create_srq` as an
// `ibv_srq_init_attr`: the latter must be the former's prefix.
const _: () = {
    use sys::ibv_srq_init_attr as Legacy;
    use sys::ibv_srq_init_attr_ex as Ex;
    assert!(offset_of!(Legacy, srq_context) == offset_of!(Ex, srq_context));
    assert!(offset_of!(Legacy, attr) == offset_of!(Ex, attr));
    assert!(offset_of!(Legacy, attr) + size_of::<sys::ibv_srq_attr>() <= offset_of!(Ex, comp_mask));
};

pub(crate) struct SrqInner {
    pub(crate) ptr: NonNull<sys::ibv_srq>,
    _pd: Arc<PdInner>,
}

// libibverbs allows posting from any thread; posting takes `&mut Srq`, and queue pairs
// only keep it alive. Created by ibv_create_srq (directly or through create_srq_ex);
// every queue pair using it holds an Arc to this.
object_owner!(SrqInner: Send + Sync, sys::ibv_destroy_srq);

/// A shared receive queue.
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

/// Whether verbs.h's `ibv_create_srq_ex` hands a request with `comp_mask` `mask` and
/// type `srq_type` to the legacy `ibv_create_srq`: a PD, no type or the basic type,
/// and nothing else.
fn legacy_serves(mask: u32, srq_type: sys::ibv_srq_type::Type) -> bool {
    use sys::ibv_srq_init_attr_mask as m;
    let (pd, ty) = (m::IBV_SRQ_INIT_ATTR_PD.0, m::IBV_SRQ_INIT_ATTR_TYPE.0);
    mask & !(pd | ty) == 0
        && mask & pd != 0
        && (mask & ty == 0 || srq_type == sys::ibv_srq_type::IBV_SRQT_BASIC)
}

/// `ibv_create_srq_ex` as verbs.h's inline function does it: a request the legacy verb
/// can serve ([`legacy_serves`]) goes to `ibv_create_srq`, any other to the provider
/// ([`provider_create_srq_ex`]). Errors name `ibv_create_srq_ex` either way.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is filled in for its `comp_mask`, with live objects
/// of that context.
pub(crate) unsafe fn create_srq_ex(
    ctx: *mut sys::ibv_context,
    attr: &mut sys::ibv_srq_init_attr_ex,
) -> Result<NonNull<sys::ibv_srq>> {
    if !legacy_serves(attr.comp_mask, attr.srq_type) {
        // SAFETY: the caller's promise.
        return unsafe { provider_create_srq_ex(ctx, attr) };
    }
    let init: *mut sys::ibv_srq_init_attr = (attr as *mut sys::ibv_srq_init_attr_ex).cast();
    // SAFETY: a live PD (the caller's promise) and the legacy attr as the prefix of the
    // extended one (checked at compile time above), as verbs.h passes it.
    let srq = unsafe { sys::ibv_create_srq(attr.pd, init) };
    NonNull::new(srq).ok_or_else(|| call_error(SRQ_EX, 0))
}

const SRQ_EX: &str = "ibv_create_srq_ex";

/// The provider's `create_srq_ex`, from the context's `verbs_context` (verbs.h's
/// `verbs_get_ctx_op`), or EOPNOTSUPP when the provider has none. Bits of `comp_mask`
/// this libibverbs does not define fail with EINVAL before anything is called. Errors
/// name `ibv_create_srq_ex`.
///
/// # Safety
///
/// As [`create_srq_ex`].
pub(crate) unsafe fn provider_create_srq_ex(
    ctx: *mut sys::ibv_context,
    attr: &mut sys::ibv_srq_init_attr_ex,
) -> Result<NonNull<sys::ibv_srq>> {
    let known = sys::ibv_srq_init_attr_mask::IBV_SRQ_INIT_ATTR_RESERVED.0 - 1;
    if attr.comp_mask & !known != 0 {
        return Err(call_error(SRQ_EX, libc::EINVAL));
    }
    // SAFETY: a live context (the caller's promise).
    let create = unsafe { verbs_op!(ctx, create_srq_ex) }.ok_or_else(|| unsupported(SRQ_EX))?;
    // SAFETY: the provider's own op, on its context, with a filled-in attr.
    let srq = unsafe { create(ctx, attr) };
    NonNull::new(srq).ok_or_else(|| call_error(SRQ_EX, 0))
}

impl Srq {
    /// A shared receive queue of `max_wr` receives of one scatter entry each.
    pub fn create(pd: &Pd, max_wr: u32) -> Result<Srq> {
        let mut init = sys::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: sys::ibv_srq_attr {
                max_wr,
                max_sge: 1,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and a filled-in attr.
        let srq = unsafe { sys::ibv_create_srq(pd.inner.ptr.as_ptr(), &mut init) };
        let ptr = NonNull::new(srq).ok_or_else(|| call_error("ibv_create_srq", 0))?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                ptr,
                _pd: pd.inner.clone(),
            }),
        })
    }

    /// The same queue as [`Srq::create`], made by the provider's `create_srq_ex` (type
    /// `IBV_SRQT_BASIC`, `comp_mask` PD and TYPE): the entry XRC SRQs are made through.
    /// verbs.h's `ibv_create_srq_ex` would hand such a basic request to the legacy verb;
    /// this deliberately does not, so that the extended path can be exercised where
    /// XRC cannot (rxe has `create_srq_ex`, not XRC). Fails with EOPNOTSUPP where the
    /// provider has no `create_srq_ex`; errors name `ibv_create_srq_ex`.
    pub fn create_ex_basic(pd: &Pd, max_wr: u32) -> Result<Srq> {
        use sys::ibv_srq_init_attr_mask as m;
        let pd_ptr = pd.inner.ptr.as_ptr();
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.attr = sys::ibv_srq_attr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        };
        attr.comp_mask = m::IBV_SRQ_INIT_ATTR_PD.0 | m::IBV_SRQ_INIT_ATTR_TYPE.0;
        attr.srq_type = sys::ibv_srq_type::IBV_SRQT_BASIC;
        attr.pd = pd_ptr;
        // SAFETY: a live PD; `context` is the context it was allocated on.
        let ctx = unsafe { (*pd_ptr).context };
        // SAFETY: the PD's live context and an attr filled in for its mask.
        let ptr = unsafe { provider_create_srq_ex(ctx, &mut attr) }?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                ptr,
                _pd: pd.inner.clone(),
            }),
        })
    }

    /// Post a receive into `[addr, addr+len)` of `mr`.
    ///
    /// # Safety
    ///
    /// The range must lie inside `mr` and stay untouched until the receive completes.
    pub unsafe fn post_recv(&mut self, wr_id: u64, mr: &Mr, addr: u64, len: u32) -> Result<()> {
        // SAFETY: a live SRQ; the caller's contract for the memory.
        unsafe { post_srq_recv(self.inner.ptr, wr_id, mr, addr, len) }
    }
}

/// Post a receive into `[addr, addr+len)` of `mr` on the shared receive queue `srq`
/// (a basic or an XRC one).
///
/// # Safety
///
/// `srq` is live; the range lies inside `mr` and stays untouched until the receive
/// completes.
pub(crate) unsafe fn post_srq_recv(
    srq: NonNull<sys::ibv_srq>,
    wr_id: u64,
    mr: &Mr,
    addr: u64,
    len: u32,
) -> Result<()> {
    let srq = srq.as_ptr();
    // SAFETY: a live SRQ; the caller vouches for the memory.
    crate::qp::post_one_recv(
        "ibv_post_srq_recv",
        wr_id,
        mr,
        addr,
        len,
        |wr, bad| unsafe { sys::ibv_post_srq_recv(srq, wr, bad) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_device::device;
    use sys::ibv_srq_init_attr_mask as m;
    use sys::ibv_srq_type::{IBV_SRQT_BASIC, IBV_SRQT_XRC};

    /// verbs.h's routing: only basic requests with a PD go to the legacy verb; an XRC
    /// request never does (rdma-sys 0.3 sends it there).
    #[test]
    fn only_basic_requests_go_to_the_legacy_verb() {
        let (pd, ty, xrcd, cq) = (
            m::IBV_SRQ_INIT_ATTR_PD.0,
            m::IBV_SRQ_INIT_ATTR_TYPE.0,
            m::IBV_SRQ_INIT_ATTR_XRCD.0,
            m::IBV_SRQ_INIT_ATTR_CQ.0,
        );
        assert!(legacy_serves(pd, IBV_SRQT_XRC), "no TYPE bit: basic");
        assert!(legacy_serves(pd | ty, IBV_SRQT_BASIC));
        assert!(!legacy_serves(pd | ty, IBV_SRQT_XRC));
        assert!(!legacy_serves(pd | ty | xrcd | cq, IBV_SRQT_XRC));
        assert!(
            !legacy_serves(pd | ty | cq, IBV_SRQT_BASIC),
            "a CQ: extended"
        );
        assert!(!legacy_serves(ty, IBV_SRQT_BASIC), "no PD");
        assert!(!legacy_serves(0, IBV_SRQT_BASIC));
    }

    /// An XRC request reaches the provider's `create_srq_ex`, which refuses one without
    /// a domain, where rdma-sys 0.3's `ibv_create_srq_ex` hands it to the legacy verb
    /// and comes back with a basic SRQ. Bits libibverbs does not define are refused
    /// before any call.
    #[test]
    fn create_srq_ex_sends_xrc_requests_to_the_provider() {
        use sys::ibv_srq_init_attr_mask as m;
        let Some(ctx) = device() else { return };
        let c = ctx.inner.ptr.as_ptr();
        let pd = ctx.alloc_pd().unwrap();
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.attr.max_wr = 4;
        attr.attr.max_sge = 1;
        attr.comp_mask = m::IBV_SRQ_INIT_ATTR_PD.0 | m::IBV_SRQ_INIT_ATTR_TYPE.0;
        attr.srq_type = sys::ibv_srq_type::IBV_SRQT_XRC;
        attr.pd = pd.inner.ptr.as_ptr();
        let mut theirs = attr;
        // SAFETY: a live context and an attr of a live PD of it.
        let e = unsafe { crate::srq::create_srq_ex(c, &mut attr) }
            .expect_err("an XRC SRQ without a domain");
        let crate::Error::Call { call, source } = &e else {
            panic!("{e}")
        };
        assert_eq!(*call, "ibv_create_srq_ex");
        let errno = source.raw_os_error();
        assert!(
            matches!(errno, Some(libc::EINVAL | libc::EOPNOTSUPP)),
            "{e}"
        );
        eprintln!("{}: XRC SRQ without a domain: {e}", ctx.name());
        // SAFETY: as above; an SRQ it makes is destroyed once.
        if let Some(srq) = unsafe { sys::ibv_create_srq_ex(c, &mut theirs) } {
            if !srq.is_null() {
                eprintln!("rdma-sys 0.3's ibv_create_srq_ex made a basic SRQ of it");
                // SAFETY: just made, destroyed once.
                unsafe { sys::ibv_destroy_srq(srq) };
            }
        }
        attr.comp_mask |= m::IBV_SRQ_INIT_ATTR_RESERVED.0;
        // SAFETY: as above.
        let e = unsafe { crate::srq::create_srq_ex(c, &mut attr) }.expect_err("refused");
        assert!(e.to_string().starts_with("ibv_create_srq_ex failed"), "{e}");
    }
}
