//! XRC, the extended reliable-connected transport (for the `xrc` connection method): a
//! domain shared by the processes of a node; XRC shared receive queues in it, each
//! known to peers by its SRQ number; target queue pairs in the domain, which receive
//! into whichever of its SRQs a message names; and initiator queue pairs, which send
//! and name the remote SRQ in every request. So one initiator per remote node reaches
//! every process there.
//!
//! Only devices of the mlx4/mlx5 class have XRC; soft devices (rxe, siw) refuse the
//! domain with EOPNOTSUPP, which is how the `xrc` CPC learns it cannot run there. No
//! software device has XRC, so beyond that refusal nothing here has run on the
//! development hosts or in CI: the XRC SRQ, the two queue pairs and their transitions
//! follow libibverbs' `xsrq_pingpong` example and Open MPI's openib XRC code, and are
//! untested. The `openib` transport's XRC path is built on them.
//!
//! The extended verbs (`ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_get_srq_num`,
//! `ibv_create_qp_ex`, `ibv_open_qp`; `ibv_create_srq_ex` is in the `srq` module) are static inline
//! functions in verbs.h. They are written here after verbs.h, reaching the provider
//! through the `extended` module, rather than taken from rdma-sys 0.3, whose
//! `verbs_get_ctx` does not recognise rdma-core's extended contexts and whose
//! `ibv_create_srq_ex` sends XRC requests to the legacy `ibv_create_srq`.

use crate::cq::{Cq, CqInner};
use crate::device::{Context, ContextInner};
use crate::error::{call_error, unsupported, Result};
use crate::extended::verbs_op;
use crate::pd::{Mr, MrAccess, Pd, PdInner};
use crate::qp::{
    modify, post_send_request, qp_num, responder_rtr_attr, rtr_attr, to_init, to_rts, Op, QpCaps,
    QpEndpoint, Sge, MAX_SEND_SGE,
};
use rdma_sys as sys;
use std::mem::{offset_of, size_of};
use std::ptr::NonNull;
use std::sync::Arc;

// What the casts below rely on: verbs.h hands an ibv_qp_init_attr_ex to the legacy
// ibv_create_qp as an ibv_qp_init_attr, so the latter's fields must sit where the
// former has them.
const _: () = {
    use sys::ibv_qp_init_attr as Legacy;
    use sys::ibv_qp_init_attr_ex as Ex;
    assert!(offset_of!(Legacy, qp_context) == offset_of!(Ex, qp_context));
    assert!(offset_of!(Legacy, send_cq) == offset_of!(Ex, send_cq));
    assert!(offset_of!(Legacy, recv_cq) == offset_of!(Ex, recv_cq));
    assert!(offset_of!(Legacy, srq) == offset_of!(Ex, srq));
    assert!(offset_of!(Legacy, cap) == offset_of!(Ex, cap));
    assert!(offset_of!(Legacy, qp_type) == offset_of!(Ex, qp_type));
    assert!(offset_of!(Legacy, sq_sig_all) == offset_of!(Ex, sq_sig_all));
};

// rdma-sys's hand-written ibv_send_wr puts `qp_type.xrc.remote_srqn` where C does.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(size_of::<sys::ibv_send_wr>() == 128);
    assert!(offset_of!(sys::ibv_send_wr, qp_type) == 72);
};

/// verbs.h's `ibv_create_qp_ex`: a request with exactly PD in `comp_mask` goes to the
/// legacy `ibv_create_qp` (an initiator does), any other to the provider's
/// `create_qp_ex` (a target does), or fails with EOPNOTSUPP when the provider has
/// none. Bits of `comp_mask` this libibverbs does not define fail with EINVAL. Errors
/// name `ibv_create_qp_ex`.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is filled in for its `comp_mask` with live objects
/// of that context.
unsafe fn create_qp_ex(
    ctx: *mut sys::ibv_context,
    attr: &mut sys::ibv_qp_init_attr_ex,
) -> Result<NonNull<sys::ibv_qp>> {
    use sys::ibv_qp_init_attr_mask as m;
    const CALL: &str = "ibv_create_qp_ex";
    let known = (m::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS.0 << 1) - 1;
    if attr.comp_mask & !known != 0 {
        return Err(call_error(CALL, libc::EINVAL));
    }
    let qp = if attr.comp_mask == m::IBV_QP_INIT_ATTR_PD.0 {
        let init: *mut sys::ibv_qp_init_attr = (attr as *mut sys::ibv_qp_init_attr_ex).cast();
        // SAFETY: a live PD (the caller's promise) and the legacy attr's fields where
        // the extended one has them (checked at compile time above), as verbs.h does.
        unsafe { sys::ibv_create_qp(attr.pd, init) }
    } else {
        // SAFETY: a live context.
        let create = unsafe { verbs_op!(ctx, create_qp_ex) }.ok_or_else(|| unsupported(CALL))?;
        // SAFETY: the provider's own op on its context, with a filled-in attr.
        unsafe { create(ctx, attr) }
    };
    NonNull::new(qp).ok_or_else(|| call_error(CALL, 0))
}

/// Fail with EINVAL (naming `call`) unless every one of `theirs` is `ctx`'s context.
fn same_context(ctx: &Context, theirs: &[*mut sys::ibv_context], call: &'static str) -> Result<()> {
    let own = ctx.inner.ptr.as_ptr();
    if theirs.iter().all(|&c| c == own) {
        Ok(())
    } else {
        Err(call_error(call, libc::EINVAL))
    }
}

fn pd_context(pd: &Pd) -> *mut sys::ibv_context {
    // SAFETY: a live PD; `context` is set at allocation and never changes.
    unsafe { pd.inner.ptr.as_ref() }.context
}

fn cq_context(cq: &Cq) -> *mut sys::ibv_context {
    // SAFETY: a live CQ; `context` is set at creation and never changes.
    unsafe { cq.inner.ptr.as_ref() }.context
}

pub(crate) struct XrcdInner {
    pub(crate) ptr: NonNull<sys::ibv_xrcd>,
    _ctx: Arc<ContextInner>,
}

// SAFETY: an XRC domain is a kernel object usable from any thread; nothing here writes
// the struct after opening.
unsafe impl Send for XrcdInner {}
// SAFETY: as above.
unsafe impl Sync for XrcdInner {}

impl XrcdInner {
    fn context(&self) -> *mut sys::ibv_context {
        // SAFETY: a live domain; `context` is set at opening and never changes.
        unsafe { self.ptr.as_ref() }.context
    }
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        let (xrcd, ctx) = (self.ptr.as_ptr(), self.context());
        // SAFETY: the context is alive (held by `_ctx`); the domain was opened by the
        // provider's open_xrcd on it and is closed once, as verbs.h's ibv_close_xrcd
        // does, after every SRQ and queue pair in it (each holds an Arc to this).
        unsafe {
            if let Some(close) = verbs_op!(ctx, close_xrcd) {
                close(xrcd);
            }
        }
    }
}

/// An XRC domain.
pub struct Xrcd {
    pub(crate) inner: Arc<XrcdInner>,
}

impl Xrcd {
    /// A new XRC domain of this process (no shared file). Where the device has no XRC
    /// (rxe, siw) this fails with EOPNOTSUPP, naming `ibv_open_xrcd`.
    pub fn open(ctx: &Context) -> Result<Xrcd> {
        Xrcd::open_fd(ctx, -1)
    }

    /// The XRC domain of `file`, created if no process has it yet (`O_CREAT`): every
    /// process that opens the same file on the same device shares one domain, as the
    /// processes of a node do with Open MPI's `openib_xrc_domain_<device>` file. The
    /// domain outlives the file's descriptor and name; it goes with its last user.
    pub fn open_file(ctx: &Context, file: &std::fs::File) -> Result<Xrcd> {
        use std::os::fd::AsRawFd;
        Xrcd::open_fd(ctx, file.as_raw_fd())
    }

    fn open_fd(ctx: &Context, fd: i32) -> Result<Xrcd> {
        const CALL: &str = "ibv_open_xrcd";
        let mut attr = sys::ibv_xrcd_init_attr {
            comp_mask: sys::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_FD.0
                | sys::ibv_xrcd_init_attr_mask::IBV_XRCD_INIT_ATTR_OFLAGS.0,
            fd,
            oflags: libc::O_CREAT,
        };
        let c = ctx.inner.ptr.as_ptr();
        // SAFETY: a live context.
        let open = unsafe { verbs_op!(c, open_xrcd) }.ok_or_else(|| unsupported(CALL))?;
        // SAFETY: the provider's own op on its live context, with a filled-in attr
        // whose descriptor (if any) the caller keeps open for the call.
        let xrcd = unsafe { open(c, &mut attr) };
        let ptr = NonNull::new(xrcd).ok_or_else(|| call_error(CALL, 0))?;
        Ok(Xrcd {
            inner: Arc::new(XrcdInner {
                ptr,
                _ctx: ctx.inner.clone(),
            }),
        })
    }
}

/// An XRC shared receive queue (`IBV_SRQT_XRC`): receives posted here serve messages
/// that arrive through any target queue pair of its domain naming its
/// [SRQ number](XrcSrq::srq_num); their completions go to the queue's own CQ.
pub struct XrcSrq {
    ptr: NonNull<sys::ibv_srq>,
    _xrcd: Arc<XrcdInner>,
    _cq: Arc<CqInner>,
    _pd: Arc<PdInner>,
}

// libibverbs allows posting from any thread; posting takes `&mut XrcSrq`. Created by
// create_srq_ex, destroyed before its domain, CQ and PD (which it keeps alive).
object_owner!(XrcSrq: Send, sys::ibv_destroy_srq);

impl XrcSrq {
    /// An XRC SRQ of `max_wr` receives of one scatter entry each, in `xrcd`, its
    /// buffers under `pd`, completing into `cq`; all of `ctx`'s device (else EINVAL).
    /// Made through `ibv_create_srq_ex` (after verbs.h, see the module doc); errors name
    /// it.
    pub fn create(ctx: &Context, pd: &Pd, xrcd: &Xrcd, cq: &Cq, max_wr: u32) -> Result<XrcSrq> {
        use sys::ibv_srq_init_attr_mask as m;
        const CALL: &str = "ibv_create_srq_ex";
        let theirs = [pd_context(pd), xrcd.inner.context(), cq_context(cq)];
        same_context(ctx, &theirs, CALL)?;
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
        attr.attr = sys::ibv_srq_attr {
            max_wr,
            max_sge: 1,
            srq_limit: 0,
        };
        attr.comp_mask = m::IBV_SRQ_INIT_ATTR_TYPE.0
            | m::IBV_SRQ_INIT_ATTR_XRCD.0
            | m::IBV_SRQ_INIT_ATTR_CQ.0
            | m::IBV_SRQ_INIT_ATTR_PD.0;
        attr.srq_type = sys::ibv_srq_type::IBV_SRQT_XRC;
        attr.xrcd = xrcd.inner.ptr.as_ptr();
        attr.cq = cq.inner.ptr.as_ptr();
        attr.pd = pd.inner.ptr.as_ptr();
        // SAFETY: a live context, and a filled-in attr of live objects of it.
        let ptr = unsafe { crate::srq::create_srq_ex(ctx.inner.ptr.as_ptr(), &mut attr) }?;
        Ok(XrcSrq {
            ptr,
            _xrcd: xrcd.inner.clone(),
            _cq: cq.inner.clone(),
            _pd: pd.inner.clone(),
        })
    }

    /// Its SRQ number, which senders put into every request for it
    /// (`ibv_get_srq_num`).
    pub fn srq_num(&self) -> Result<u32> {
        const CALL: &str = "ibv_get_srq_num";
        let srq = self.ptr.as_ptr();
        // SAFETY: a live SRQ; `context` never changes and is kept alive by `_pd`.
        let ctx = unsafe { self.ptr.as_ref() }.context;
        // SAFETY: a live context.
        let get = unsafe { verbs_op!(ctx, get_srq_num) }.ok_or_else(|| unsupported(CALL))?;
        let mut num = 0;
        // SAFETY: the provider's own op, on a live SRQ of its context.
        let rc = unsafe { get(srq, &mut num) };
        if rc != 0 {
            return Err(call_error(CALL, rc));
        }
        Ok(num)
    }

    /// Post a receive into `[addr, addr+len)` of `mr`.
    ///
    /// # Safety
    ///
    /// The range must lie inside `mr` and stay untouched until the receive completes.
    pub unsafe fn post_recv(&mut self, wr_id: u64, mr: &Mr, addr: u64, len: u32) -> Result<()> {
        // SAFETY: a live SRQ; the caller's contract for the memory.
        unsafe { crate::srq::post_srq_recv(self.ptr, wr_id, mr, addr, len) }
    }
}

/// An XRC initiator queue pair (`IBV_QPT_XRC_SEND`): sends only, each request naming
/// the remote [`XrcSrq`] it is for. Connected to one [`XrcTarget`] on the remote node.
pub struct XrcInitiator {
    ptr: NonNull<sys::ibv_qp>,
    _pd: Arc<PdInner>,
    _cq: Arc<CqInner>,
    port: u8,
    gid_index: u8,
    /// Caps as granted (`max_recv_wr` is 0: an initiator has no receive queue).
    pub caps: QpCaps,
}

// libibverbs allows posting from any thread; posting takes `&mut XrcInitiator`.
// Created by create_qp_ex, destroyed before its CQ and PD (which it keeps alive).
object_owner!(XrcInitiator: Send, sys::ibv_destroy_qp);

impl XrcInitiator {
    /// An initiator on `pd` completing its sends into `send_cq` (`caps.max_recv_wr` is
    /// ignored), for `port` and GID index `gid_index`; `pd` and `send_cq` of `ctx`'s
    /// device (else EINVAL). Made through `ibv_create_qp_ex` with `comp_mask` PD, which
    /// verbs.h hands to the legacy `ibv_create_qp`; errors name `ibv_create_qp_ex`.
    pub fn create(
        ctx: &Context,
        pd: &Pd,
        send_cq: &Cq,
        caps: QpCaps,
        port: u8,
        gid_index: u8,
    ) -> Result<XrcInitiator> {
        const CALL: &str = "ibv_create_qp_ex";
        same_context(ctx, &[pd_context(pd), cq_context(send_cq)], CALL)?;
        // SAFETY: plain C struct, zero is a valid value.
        let mut init: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        init.qp_type = sys::ibv_qp_type::IBV_QPT_XRC_SEND;
        init.send_cq = send_cq.inner.ptr.as_ptr();
        init.cap.max_send_wr = caps.max_send_wr;
        init.cap.max_send_sge = MAX_SEND_SGE;
        init.cap.max_inline_data = caps.max_inline;
        init.comp_mask = sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
        init.pd = pd.inner.ptr.as_ptr();
        // SAFETY: a live context, and a filled-in attr of live objects of it.
        let ptr = unsafe { create_qp_ex(ctx.inner.ptr.as_ptr(), &mut init) }?;
        Ok(XrcInitiator {
            ptr,
            _pd: pd.inner.clone(),
            _cq: send_cq.inner.clone(),
            port,
            gid_index,
            caps: QpCaps {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: 0,
                max_inline: init.cap.max_inline_data,
            },
        })
    }

    /// Its number.
    pub fn qpn(&self) -> u32 {
        qp_num(self.ptr)
    }

    /// RESET -> INIT (no remote access: an initiator only sends).
    pub fn to_init(&mut self) -> Result<()> {
        to_init(self.ptr, self.port, MrAccess::NONE)
    }

    /// INIT -> RTR towards the remote `target` (its queue pair number, LID and GID),
    /// with path MTU `mtu_enum` (an `ibv_mtu`).
    pub fn to_rtr(&mut self, target: &QpEndpoint, mtu_enum: u32) -> Result<()> {
        let (mut a, mask) = rtr_attr(target, mtu_enum, self.port, self.gid_index);
        modify(self.ptr, &mut a, mask, "ibv_modify_qp(RTR)")
    }

    /// RTR -> RTS, sending from packet sequence number `psn` (what the target expects).
    pub fn to_rts(&mut self, psn: u32) -> Result<()> {
        to_rts(self.ptr, psn)
    }

    /// Post `op` gathering `sges` (at most [`MAX_SEND_SGE`]) for the remote SRQ
    /// numbered `remote_srqn`, as [`Qp::post_send_sg`](crate::Qp::post_send_sg) does on
    /// an RC queue pair: inline when asked and the total fits the initiator's inline
    /// limit; an unsignalled request produces no completion. Every request names the
    /// SRQ, puts, gets and atomics too (the target checks that it is of its domain).
    ///
    /// # Safety
    ///
    /// Each piece must lie inside the registration its key names (unless inline) and
    /// stay valid and untouched until the request completes.
    #[inline(always)]
    pub unsafe fn post_send_sg(
        &mut self,
        wr_id: u64,
        remote_srqn: u32,
        op: Op,
        sges: &[Sge],
        inline: bool,
        signaled: bool,
    ) -> Result<()> {
        let inline_up_to = inline.then_some(self.caps.max_inline);
        let xrc = Some(remote_srqn);
        // SAFETY: a live XRC initiator; the caller's contract for the memory.
        unsafe { post_send_request(self.ptr, wr_id, op, sges, inline_up_to, signaled, xrc) }
    }
}

/// An XRC target queue pair (`IBV_QPT_XRC_RECV`) in a domain: the receiving end of one
/// remote [`XrcInitiator`], delivering into whichever [`XrcSrq`] of the domain each
/// request names. It has no send queue, PD or CQ of its own, so it goes to RTR only.
pub struct XrcTarget {
    ptr: NonNull<sys::ibv_qp>,
    _xrcd: Arc<XrcdInner>,
    port: u8,
    gid_index: u8,
}

// A kernel object usable from any thread; transitions take `&mut XrcTarget`. Created
// by create_qp_ex or opened by open_qp; destroying an opened one releases its
// reference. Destroyed before its domain (which it keeps alive).
object_owner!(XrcTarget: Send, sys::ibv_destroy_qp);

impl XrcTarget {
    /// A target in `xrcd` (of `ctx`'s device, else EINVAL), for `port` and GID index
    /// `gid_index`. Made through `ibv_create_qp_ex` with `comp_mask` XRCD, which goes
    /// to the provider's `create_qp_ex`; errors name `ibv_create_qp_ex`.
    pub fn create(ctx: &Context, xrcd: &Xrcd, port: u8, gid_index: u8) -> Result<XrcTarget> {
        const CALL: &str = "ibv_create_qp_ex";
        same_context(ctx, &[xrcd.inner.context()], CALL)?;
        // SAFETY: plain C struct, zero is a valid value.
        let mut init: sys::ibv_qp_init_attr_ex = unsafe { std::mem::zeroed() };
        init.qp_type = sys::ibv_qp_type::IBV_QPT_XRC_RECV;
        init.comp_mask = sys::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_XRCD.0;
        init.xrcd = xrcd.inner.ptr.as_ptr();
        // SAFETY: a live context, and a filled-in attr with a live domain of it.
        let ptr = unsafe { create_qp_ex(ctx.inner.ptr.as_ptr(), &mut init) }?;
        Ok(XrcTarget {
            ptr,
            _xrcd: xrcd.inner.clone(),
            port,
            gid_index,
        })
    }

    /// Open the target `qpn` another process of the node made in the shared domain
    /// `xrcd` (of `ctx`'s device, else EINVAL): a reference that keeps it alive after
    /// its maker is gone, released when this is dropped. verbs.h's `ibv_open_qp`, through
    /// the provider's `open_qp`; fails (naming `ibv_open_qp`) when no target of that
    /// number is in the domain, or with EOPNOTSUPP where the provider has no `open_qp`.
    /// The opened target is already connected: it needs no transition.
    pub fn open(ctx: &Context, xrcd: &Xrcd, qpn: u32) -> Result<XrcTarget> {
        use sys::ibv_qp_open_attr_mask as m;
        const CALL: &str = "ibv_open_qp";
        same_context(ctx, &[xrcd.inner.context()], CALL)?;
        let mut attr = sys::ibv_qp_open_attr {
            comp_mask: m::IBV_QP_OPEN_ATTR_NUM.0
                | m::IBV_QP_OPEN_ATTR_XRCD.0
                | m::IBV_QP_OPEN_ATTR_TYPE.0,
            qp_num: qpn,
            xrcd: xrcd.inner.ptr.as_ptr(),
            qp_context: std::ptr::null_mut(),
            qp_type: sys::ibv_qp_type::IBV_QPT_XRC_RECV,
        };
        let c = ctx.inner.ptr.as_ptr();
        // SAFETY: a live context.
        let open = unsafe { verbs_op!(c, open_qp) }.ok_or_else(|| unsupported(CALL))?;
        // SAFETY: the provider's own op on its live context, with a filled-in attr
        // naming a live domain of it.
        let qp = unsafe { open(c, &mut attr) };
        let ptr = NonNull::new(qp).ok_or_else(|| call_error(CALL, 0))?;
        Ok(XrcTarget {
            ptr,
            _xrcd: xrcd.inner.clone(),
            port: 0,
            gid_index: 0,
        })
    }

    /// Its number (what the remote initiator connects to).
    pub fn qpn(&self) -> u32 {
        qp_num(self.ptr)
    }

    /// RESET -> INIT, granting the remote initiator `access` (remote write and read for
    /// RDMA into this node's memory; receives need nothing).
    pub fn to_init(&mut self, access: MrAccess) -> Result<()> {
        to_init(self.ptr, self.port, access)
    }

    /// INIT -> RTR from the remote `initiator` (its queue pair number, first packet
    /// sequence number, LID and GID), with path MTU `mtu_enum` (an `ibv_mtu`).
    pub fn to_rtr(&mut self, initiator: &QpEndpoint, mtu_enum: u32) -> Result<()> {
        let (mut a, mask) = responder_rtr_attr(initiator, mtu_enum, self.port, self.gid_index);
        modify(self.ptr, &mut a, mask, "ibv_modify_qp(RTR)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_device::device;

    /// A domain shared through a file: refused on a soft device (rxe, siw) just as a
    /// private one is, naming the call. Where a device has XRC (never here), a second
    /// opening of the same file is the same domain, so a target made through one is
    /// opened by its number through the other, as another process of the node would.
    #[test]
    fn a_domain_shared_through_a_file() {
        let Some(ctx) = device() else { return };
        let path = std::env::temp_dir().join(format!("rbtl-xrc-test-{}", std::process::id()));
        let file = std::fs::File::create(&path).unwrap();
        let first = Xrcd::open_file(&ctx, &file);
        let _ = std::fs::remove_file(&path);
        let first = match first {
            Ok(x) => x,
            Err(e) => {
                let crate::Error::Call { call, source } = &e else {
                    panic!("{e}")
                };
                assert_eq!(*call, "ibv_open_xrcd", "{e}");
                assert_eq!(source.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
                return;
            }
        };
        let second = Xrcd::open_file(&ctx, &file).unwrap();
        let made = XrcTarget::create(&ctx, &first, 1, 0).unwrap();
        let opened = XrcTarget::open(&ctx, &second, made.qpn()).unwrap();
        assert_eq!(opened.qpn(), made.qpn());
        drop(made);
        assert!(
            XrcTarget::open(&ctx, &second, opened.qpn()).is_ok(),
            "kept alive"
        );
    }
}
