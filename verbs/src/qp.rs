//! Reliable-connected queue pairs: creation, the RESET -> INIT -> RTR -> RTS
//! transitions (and ERR, which flushes what is posted), and posting work requests. The
//! transitions and the posting of sends serve the XRC queue pairs too.

use crate::cq::{Cq, CqInner};
use crate::error::{call_error, Result};
use crate::pd::{Mr, MrAccess, Pd, PdInner};
use crate::rdmacm::IdInner;
use crate::srq::{Srq, SrqInner};
use rdma_sys as sys;
use std::ptr::NonNull;
use std::sync::Arc;

/// What a peer needs to connect to a queue pair (exchanged out of band).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// Queue pair number.
    pub qpn: u32,
    /// First packet sequence number.
    pub psn: u32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// Port GID.
    pub gid: [u8; 16],
}

/// Sizes of a queue pair.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Bytes a send may carry inline.
    pub max_inline: u32,
}

/// Gather entries a send may carry (header, payload and trailer of an inline send).
pub const MAX_SEND_SGE: u32 = 3;

/// One piece of a gather list: `len` bytes at `addr`, registered under `lkey` (any key
/// for an inline send, whose bytes are copied at posting). Laid out as `ibv_sge`, so a
/// list goes to the device as it is.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Sge {
    /// Start.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key of the registration holding it.
    pub lkey: u32,
}

const _: () = {
    assert!(std::mem::size_of::<Sge>() == std::mem::size_of::<sys::ibv_sge>());
    assert!(std::mem::offset_of!(Sge, addr) == std::mem::offset_of!(sys::ibv_sge, addr));
    assert!(std::mem::offset_of!(Sge, len) == std::mem::offset_of!(sys::ibv_sge, length));
    assert!(std::mem::offset_of!(Sge, lkey) == std::mem::offset_of!(sys::ibv_sge, lkey));
};

/// A reliable-connected queue pair.
pub struct Qp {
    ptr: NonNull<sys::ibv_qp>,
    _pd: Arc<PdInner>,
    _cqs: (Arc<CqInner>, Arc<CqInner>),
    _srq: Option<Arc<SrqInner>>,
    /// The connection identifier that made it, when librdmacm did (it destroys it).
    cm: Option<Arc<IdInner>>,
    port: u8,
    gid_index: u8,
    /// Caps as granted.
    pub caps: QpCaps,
}

// SAFETY: libibverbs allows posting from any thread; posting takes `&mut Qp`.
unsafe impl Send for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        match &self.cm {
            // SAFETY: made by rdma_create_qp on this id, destroyed once, before the id.
            Some(id) => unsafe { sys::rdma_destroy_qp(id.ptr.as_ptr()) },
            // SAFETY: created by ibv_create_qp, destroyed once, before its CQs and PD
            // (which it keeps alive).
            None => unsafe {
                sys::ibv_destroy_qp(self.ptr.as_ptr());
            },
        }
    }
}

/// What a work request does.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// A send to the peer's posted receive.
    Send,
    /// Write the local bytes at `remote` (RDMA write).
    Write {
        /// Remote address.
        remote: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Read the bytes at `remote` into the local buffer (RDMA read).
    Read {
        /// Remote address.
        remote: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Add `add` to the u64 at `remote`; the old value lands in the local 8 bytes.
    FetchAdd {
        /// Remote address (8-byte aligned).
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Addend.
        add: u64,
    },
    /// If the u64 at `remote` equals `compare`, store `swap`; the old value lands in
    /// the local 8 bytes.
    CompareSwap {
        /// Remote address (8-byte aligned).
        remote: u64,
        /// Remote key.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// New value.
        swap: u64,
    },
}

impl Op {
    /// Set `wr`'s opcode and remote address, key and operands for this operation.
    pub(crate) fn encode(self, wr: &mut sys::ibv_send_wr) {
        use sys::ibv_wr_opcode as o;
        match self {
            Op::Send => wr.opcode = o::IBV_WR_SEND,
            Op::Write { remote, rkey } => {
                wr.opcode = o::IBV_WR_RDMA_WRITE;
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: remote,
                    rkey,
                };
            }
            Op::Read { remote, rkey } => {
                wr.opcode = o::IBV_WR_RDMA_READ;
                wr.wr.rdma = sys::rdma_t {
                    remote_addr: remote,
                    rkey,
                };
            }
            Op::FetchAdd { remote, rkey, add } => {
                wr.opcode = o::IBV_WR_ATOMIC_FETCH_AND_ADD;
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: remote,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
            Op::CompareSwap {
                remote,
                rkey,
                compare,
                swap,
            } => {
                wr.opcode = o::IBV_WR_ATOMIC_CMP_AND_SWP;
                wr.wr.atomic = sys::atomic_t {
                    remote_addr: remote,
                    compare_add: compare,
                    swap,
                    rkey,
                };
            }
        }
    }
}

impl Qp {
    /// An RC queue pair on `pd` completing into `send_cq` and `recv_cq`, receiving
    /// through `srq` when given, for `port` and GID index `gid_index` (1 is RoCEv2 over
    /// IPv4 on rxe).
    pub fn create_rc(
        pd: &Pd,
        send_cq: &Cq,
        recv_cq: &Cq,
        srq: Option<&Srq>,
        caps: QpCaps,
        port: u8,
        gid_index: u8,
    ) -> Result<Qp> {
        let mut init = rc_init_attr(send_cq, recv_cq, srq, caps);
        // SAFETY: a live PD and CQs; `init` is filled in.
        let qp = unsafe { sys::ibv_create_qp(pd.inner.ptr.as_ptr(), &mut init) };
        let ptr = NonNull::new(qp).ok_or_else(|| call_error("ibv_create_qp", 0))?;
        let granted = QpCaps {
            max_send_wr: init.cap.max_send_wr,
            max_recv_wr: init.cap.max_recv_wr,
            max_inline: init.cap.max_inline_data,
        };
        Ok(Qp {
            ptr,
            _pd: pd.inner.clone(),
            _cqs: (send_cq.inner.clone(), recv_cq.inner.clone()),
            _srq: srq.map(|s| s.inner.clone()),
            cm: None,
            port,
            gid_index,
            caps: granted,
        })
    }

    /// The queue pair librdmacm made on `id` (it moves it to RTS on connect/accept).
    pub(crate) fn from_cm(
        id: &Arc<IdInner>,
        pd: &Pd,
        cq: &Cq,
        srq: Option<&Srq>,
        caps: QpCaps,
    ) -> Result<Qp> {
        let mut init = rc_init_attr(cq, cq, srq, caps);
        // SAFETY: a live id with a resolved route (or a connect request), a live PD,
        // CQ and SRQ of the same device.
        let rc = unsafe { sys::rdma_create_qp(id.ptr.as_ptr(), pd.inner.ptr.as_ptr(), &mut init) };
        if rc != 0 {
            return Err(call_error("rdma_create_qp", 0));
        }
        // SAFETY: rdma_create_qp succeeded, so the id's qp is set.
        let qp = unsafe { id.ptr.as_ref() }.qp;
        let ptr = NonNull::new(qp).ok_or_else(|| call_error("rdma_create_qp", libc::EINVAL))?;
        Ok(Qp {
            ptr,
            _pd: pd.inner.clone(),
            _cqs: (cq.inner.clone(), cq.inner.clone()),
            _srq: srq.map(|s| s.inner.clone()),
            cm: Some(id.clone()),
            port: 0,
            gid_index: 0,
            caps: QpCaps {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: init.cap.max_recv_wr,
                max_inline: init.cap.max_inline_data,
            },
        })
    }

    /// Its number.
    pub fn qpn(&self) -> u32 {
        qp_num(self.ptr)
    }

    /// RESET -> INIT, granting peers `access`.
    pub fn to_init(&mut self, access: MrAccess) -> Result<()> {
        to_init(self.ptr, self.port, access)
    }

    /// INIT -> RTR towards `peer`, with path MTU `mtu_enum` (an `ibv_mtu`).
    pub fn to_rtr(&mut self, peer: &QpEndpoint, mtu_enum: u32) -> Result<()> {
        let (mut a, mask) = responder_rtr_attr(peer, mtu_enum, self.port, self.gid_index);
        modify(self.ptr, &mut a, mask, "ibv_modify_qp(RTR)")
    }

    /// RTR -> RTS, sending from packet sequence number `psn`.
    pub fn to_rts(&mut self, psn: u32) -> Result<()> {
        to_rts(self.ptr, psn)
    }

    /// Any state -> ERR: the queue pair stops, and every work request posted on it and
    /// not yet completed completes with a flush error (`IBV_WC_WR_FLUSH_ERR`) into its
    /// completion queues, at once rather than when the device would give up on the
    /// peer. Moving a queue pair already in ERR there again does nothing.
    pub fn to_error(&mut self) -> Result<()> {
        use sys::ibv_qp_attr_mask as m;
        // SAFETY: plain C struct, zero is a valid value.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::ibv_qp_state::IBV_QPS_ERR;
        modify(self.ptr, &mut a, m::IBV_QP_STATE.0, "ibv_modify_qp(ERR)")
    }

    /// Post a receive into `[addr, addr+len)` of `mr`.
    ///
    /// # Safety
    ///
    /// The range must lie inside `mr` and stay untouched until the receive completes.
    #[inline]
    pub unsafe fn post_recv(&mut self, wr_id: u64, mr: &Mr, addr: u64, len: u32) -> Result<()> {
        let qp = self.ptr.as_ptr();
        // SAFETY: a live QP; the caller vouches for the memory.
        post_one_recv("ibv_post_recv", wr_id, mr, addr, len, |wr, bad| unsafe {
            sys::ibv_post_recv(qp, wr, bad)
        })
    }

    /// Post `op` on the local `[addr, addr+len)` of `mr`, signalled; inline when asked
    /// and small enough.
    ///
    /// # Safety
    ///
    /// The range must lie inside `mr` (unless inline) and stay valid and untouched
    /// until the request completes.
    pub unsafe fn post_send(
        &mut self,
        wr_id: u64,
        op: Op,
        mr: &Mr,
        addr: u64,
        len: u32,
        inline: bool,
    ) -> Result<()> {
        let sge = Sge {
            addr,
            len,
            lkey: mr.lkey(),
        };
        // SAFETY: forwarded contract.
        unsafe { self.post_send_sg(wr_id, op, &[sge], inline, true) }
    }

    /// Post `op` gathering `sges` (at most [`MAX_SEND_SGE`]); inline when asked and the
    /// total fits the queue pair's inline limit. An unsignalled request produces no
    /// completion: its send-queue entry comes back with the next signalled one's.
    ///
    /// # Safety
    ///
    /// Each piece must lie inside the registration its key names (unless inline) and
    /// stay valid and untouched until the request completes.
    #[inline(always)]
    pub unsafe fn post_send_sg(
        &mut self,
        wr_id: u64,
        op: Op,
        sges: &[Sge],
        inline: bool,
        signaled: bool,
    ) -> Result<()> {
        let inline_up_to = inline.then_some(self.caps.max_inline);
        // SAFETY: a live RC queue pair; the caller's contract for the memory.
        unsafe { post_send_request(self.ptr, wr_id, op, sges, inline_up_to, signaled, None) }
    }
}

/// The number of the live queue pair `qp` (it never changes).
pub(crate) fn qp_num(qp: NonNull<sys::ibv_qp>) -> u32 {
    // SAFETY: a live QP; qp_num never changes.
    unsafe { qp.as_ref() }.qp_num
}

/// Modify the live queue pair `qp` with `attr` for `mask`; errors name `what`.
pub(crate) fn modify(
    qp: NonNull<sys::ibv_qp>,
    attr: &mut sys::ibv_qp_attr,
    mask: u32,
    what: &'static str,
) -> Result<()> {
    // SAFETY: a live QP and a filled-in attr for `mask`.
    let rc = unsafe { sys::ibv_modify_qp(qp.as_ptr(), attr, mask as i32) };
    if rc != 0 {
        return Err(call_error(what, rc));
    }
    Ok(())
}

/// RESET -> INIT of the live queue pair `qp` on `port`, granting peers `access`.
pub(crate) fn to_init(qp: NonNull<sys::ibv_qp>, port: u8, access: MrAccess) -> Result<()> {
    use sys::ibv_qp_attr_mask as m;
    // SAFETY: plain C struct, zero is a valid value.
    let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = sys::ibv_qp_state::IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = access.0;
    let mask =
        m::IBV_QP_STATE.0 | m::IBV_QP_PKEY_INDEX.0 | m::IBV_QP_PORT.0 | m::IBV_QP_ACCESS_FLAGS.0;
    modify(qp, &mut a, mask, "ibv_modify_qp(INIT)")
}

/// The RTR attributes (and their mask) of every connected queue pair: the path to
/// `peer` from `port` and GID index `gid_index`, with path MTU `mtu_enum`, and the
/// peer's numbers.
pub(crate) fn rtr_attr(
    peer: &QpEndpoint,
    mtu_enum: u32,
    port: u8,
    gid_index: u8,
) -> (sys::ibv_qp_attr, u32) {
    use sys::ibv_qp_attr_mask as m;
    // SAFETY: plain C struct, zero is a valid value.
    let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = sys::ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = mtu_enum;
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid.raw = peer.gid;
    a.ah_attr.grh.sgid_index = gid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.port_num = port;
    let mask = m::IBV_QP_STATE.0
        | m::IBV_QP_AV.0
        | m::IBV_QP_PATH_MTU.0
        | m::IBV_QP_DEST_QPN.0
        | m::IBV_QP_RQ_PSN.0;
    (a, mask)
}

/// [`rtr_attr`] for a queue pair that serves the peer's requests: also how many of the
/// peer's RDMA reads and atomics it serves at once (one), and its minimum RNR NAK timer
/// (code 12).
pub(crate) fn responder_rtr_attr(
    peer: &QpEndpoint,
    mtu_enum: u32,
    port: u8,
    gid_index: u8,
) -> (sys::ibv_qp_attr, u32) {
    use sys::ibv_qp_attr_mask as m;
    let (mut a, mask) = rtr_attr(peer, mtu_enum, port, gid_index);
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    let mask = mask | m::IBV_QP_MAX_DEST_RD_ATOMIC.0 | m::IBV_QP_MIN_RNR_TIMER.0;
    (a, mask)
}

/// RTR -> RTS of the live queue pair `qp`, sending from packet sequence number `psn`.
pub(crate) fn to_rts(qp: NonNull<sys::ibv_qp>, psn: u32) -> Result<()> {
    use sys::ibv_qp_attr_mask as m;
    // SAFETY: plain C struct, zero is a valid value.
    let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
    a.qp_state = sys::ibv_qp_state::IBV_QPS_RTS;
    a.sq_psn = psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    let mask = m::IBV_QP_STATE.0
        | m::IBV_QP_TIMEOUT.0
        | m::IBV_QP_RETRY_CNT.0
        | m::IBV_QP_RNR_RETRY.0
        | m::IBV_QP_SQ_PSN.0
        | m::IBV_QP_MAX_QP_RD_ATOMIC.0;
    modify(qp, &mut a, mask, "ibv_modify_qp(RTS)")
}

/// What an RC queue pair over these completion queues (and shared receive queue, which
/// then takes every receive) is made with: `caps`, [`MAX_SEND_SGE`] gather entries.
fn rc_init_attr(
    send_cq: &Cq,
    recv_cq: &Cq,
    srq: Option<&Srq>,
    caps: QpCaps,
) -> sys::ibv_qp_init_attr {
    // SAFETY: plain C struct, zero is a valid value.
    let mut init: sys::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    init.send_cq = send_cq.inner.ptr.as_ptr();
    init.recv_cq = recv_cq.inner.ptr.as_ptr();
    init.cap.max_send_wr = caps.max_send_wr;
    init.cap.max_recv_wr = caps.max_recv_wr;
    init.cap.max_send_sge = MAX_SEND_SGE;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = caps.max_inline;
    init.qp_type = sys::ibv_qp_type::IBV_QPT_RC;
    if let Some(srq) = srq {
        init.srq = srq.inner.ptr.as_ptr();
        init.cap.max_recv_wr = 0;
    }
    init
}

/// Post one send request gathering `sges` (at most [`MAX_SEND_SGE`]) on `qp`: inline
/// when `inline_up_to` holds the queue pair's inline limit and the total fits it,
/// signalled when asked, naming the remote SRQ `xrc` on an XRC initiator.
///
/// # Safety
///
/// `qp` is live (and an XRC initiator when `xrc` is given); each piece lies inside the
/// registration its key names (unless inline) and stays valid and untouched until the
/// request completes.
#[inline(always)]
pub(crate) unsafe fn post_send_request(
    qp: NonNull<sys::ibv_qp>,
    wr_id: u64,
    op: Op,
    sges: &[Sge],
    inline_up_to: Option<u32>,
    signaled: bool,
    xrc: Option<u32>,
) -> Result<()> {
    if sges.is_empty() || sges.len() > MAX_SEND_SGE as usize {
        return Err(call_error("ibv_post_send", libc::EINVAL));
    }
    let total: u32 = sges.iter().map(|s| s.len).sum();
    // SAFETY: plain C struct, zero is a valid value.
    let mut wr: sys::ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    // Providers read the list and never write it (the C API just lacks `const`).
    wr.sg_list = sges.as_ptr().cast::<sys::ibv_sge>().cast_mut();
    wr.num_sge = sges.len() as i32;
    if signaled {
        wr.send_flags = sys::ibv_send_flags::IBV_SEND_SIGNALED.0;
    }
    if let Some(remote_srqn) = xrc {
        wr.qp_type.xrc = sys::xrc_t { remote_srqn };
    }
    let fits = inline_up_to.is_some_and(|most| total <= most);
    if fits && matches!(op, Op::Send | Op::Write { .. }) {
        wr.send_flags |= sys::ibv_send_flags::IBV_SEND_INLINE.0;
    }
    op.encode(&mut wr);
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP and a well-formed request; the caller vouches for memory.
    let rc = unsafe { sys::ibv_post_send(qp.as_ptr(), &mut wr, &mut bad) };
    if rc != 0 {
        return Err(call_error("ibv_post_send", rc));
    }
    Ok(())
}

/// Build a one-entry receive request and hand it to `post` (a queue pair's or a shared
/// receive queue's).
#[inline]
pub(crate) fn post_one_recv(
    call: &'static str,
    wr_id: u64,
    mr: &Mr,
    addr: u64,
    len: u32,
    post: impl FnOnce(*mut sys::ibv_recv_wr, *mut *mut sys::ibv_recv_wr) -> i32,
) -> Result<()> {
    let mut sge = sys::ibv_sge {
        addr,
        length: len,
        lkey: mr.lkey(),
    };
    // SAFETY: plain C struct, zero is a valid value.
    let mut wr: sys::ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad = std::ptr::null_mut();
    let rc = post(&mut wr, &mut bad);
    if rc != 0 {
        return Err(call_error(call, rc));
    }
    Ok(())
}
