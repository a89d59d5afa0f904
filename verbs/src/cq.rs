//! Completion queues.

use crate::device::{Context, ContextInner};
use crate::error::{call_error, Error, Result};
use rdma_sys as sys;
use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

pub(crate) struct CqInner {
    pub(crate) ptr: NonNull<sys::ibv_cq>,
    _channel: Option<Arc<ChannelInner>>,
    _ctx: Arc<ContextInner>,
}

pub(crate) struct ChannelInner {
    ptr: NonNull<sys::ibv_comp_channel>,
    _ctx: Arc<ContextInner>,
}

// A completion channel is a file descriptor the library reads; waiting takes `&self`
// and is safe from any thread. Created by ibv_create_comp_channel; the CQs using it
// hold an Arc to this.
object_owner!(ChannelInner: Send + Sync, sys::ibv_destroy_comp_channel);

/// A completion channel: a file descriptor that becomes readable when a CQ asked to
/// notify ([`Cq::req_notify`]) gets a completion, so a progress thread can sleep.
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

impl CompChannel {
    /// Its file descriptor (for the caller's own poll loop).
    pub fn fd(&self) -> i32 {
        // SAFETY: a live channel; fd never changes.
        unsafe { self.inner.ptr.as_ref() }.fd
    }

    /// Wait up to `timeout` for a notification; whether one came (then acknowledged).
    pub fn wait(&self, timeout: std::time::Duration) -> Result<bool> {
        let n = poll_readable(self.fd(), timeout);
        if n < 0 {
            return Err(call_error("poll(completion channel)", 0));
        }
        if n == 0 {
            return Ok(false);
        }
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: a live channel with an event pending (poll said readable).
        let rc = unsafe { sys::ibv_get_cq_event(self.inner.ptr.as_ptr(), &mut cq, &mut ctx) };
        if rc != 0 {
            return Err(call_error("ibv_get_cq_event", 0));
        }
        // SAFETY: `cq` is the CQ the event came from; every event is acknowledged once,
        // which ibv_destroy_cq waits for.
        unsafe { sys::ibv_ack_cq_events(cq, 1) };
        Ok(true)
    }
}

/// Wait up to `timeout` (at most `i32::MAX` ms) for `fd` to become readable; what
/// `poll` answers: 1 when it is, 0 when the time ran out, negative on failure.
pub(crate) fn poll_readable(fd: i32, timeout: std::time::Duration) -> i32 {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis().min(i32::MAX as u128) as i32) }
}

// Completion queues may be used from any thread; polling takes `&mut Cq`. Created by
// ibv_create_cq; queue pairs using it hold an Arc to this.
object_owner!(CqInner: Send + Sync, sys::ibv_destroy_cq);

/// A completion queue.
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// `IBV_WC_SUCCESS` (0) or an error status.
    pub status: u32,
    /// Bytes received (receives only).
    pub byte_len: u32,
    /// The queue pair it belongs to: for a receive through a shared receive queue,
    /// the one the message came in on.
    pub qp_num: u32,
}

impl Completion {
    /// Whether the peer's device refused the access (a wrong key, or outside or beyond
    /// the rights of its memory region).
    pub fn is_remote_access_error(&self) -> bool {
        self.status == sys::ibv_wc_status::IBV_WC_REM_ACCESS_ERR
    }

    /// `Ok` for a successful completion, else the error with the status's name.
    #[inline]
    pub fn result(&self) -> Result<()> {
        if self.status == sys::ibv_wc_status::IBV_WC_SUCCESS {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    #[cold]
    #[inline(never)]
    fn error(&self) -> Error {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let name = unsafe { CStr::from_ptr(sys::ibv_wc_status_str(self.status)) };
        Error::Completion {
            wr_id: self.wr_id,
            status: name.to_string_lossy().into_owned(),
        }
    }
}

impl Context {
    /// A completion queue of at least `depth` entries.
    pub fn create_cq(&self, depth: i32) -> Result<Cq> {
        self.new_cq(depth, None)
    }

    /// A completion channel.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        // SAFETY: a live context.
        let ch = unsafe { sys::ibv_create_comp_channel(self.inner.ptr.as_ptr()) };
        let ptr = NonNull::new(ch).ok_or_else(|| call_error("ibv_create_comp_channel", 0))?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                ptr,
                _ctx: self.inner.clone(),
            }),
        })
    }

    /// A completion queue that notifies through `channel`.
    pub fn create_cq_with_channel(&self, depth: i32, channel: &CompChannel) -> Result<Cq> {
        self.new_cq(depth, Some(channel))
    }

    /// A completion queue of at least `depth` entries, notifying through `channel` when
    /// one is given.
    fn new_cq(&self, depth: i32, channel: Option<&CompChannel>) -> Result<Cq> {
        let ch = channel.map_or(std::ptr::null_mut(), |c| c.inner.ptr.as_ptr());
        // SAFETY: a live context and, if any, a live channel; no context pointer.
        let cq = unsafe {
            sys::ibv_create_cq(self.inner.ptr.as_ptr(), depth, std::ptr::null_mut(), ch, 0)
        };
        let ptr = NonNull::new(cq).ok_or_else(|| call_error("ibv_create_cq", 0))?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                ptr,
                _channel: channel.map(|c| c.inner.clone()),
                _ctx: self.inner.clone(),
            }),
        })
    }
}

impl Cq {
    /// Ask for one notification on the completion channel at the next completion.
    pub fn req_notify(&self) -> Result<()> {
        // SAFETY: a live CQ.
        let rc = unsafe { sys::ibv_req_notify_cq(self.inner.ptr.as_ptr(), 0) };
        if rc != 0 {
            return Err(call_error("ibv_req_notify_cq", rc));
        }
        Ok(())
    }

    /// Up to `out.len()` completions (at most 16 per call), written to the front of
    /// `out`; they are returned. (`out` may be uninitialised: this runs on every
    /// progress call, and only the entries returned are written.)
    #[inline]
    pub fn poll<'a>(&mut self, out: &'a mut [MaybeUninit<Completion>]) -> Result<&'a [Completion]> {
        let mut wc = [const { MaybeUninit::<sys::ibv_wc>::uninit() }; 16];
        let want = out.len().min(wc.len()) as i32;
        // SAFETY: a live CQ and `want` writable entries.
        let n = unsafe { sys::ibv_poll_cq(self.inner.ptr.as_ptr(), want, wc.as_mut_ptr().cast()) };
        if n < 0 {
            return Err(call_error("ibv_poll_cq", -n));
        }
        let n = n as usize;
        for (o, w) in out.iter_mut().zip(&wc[..n]) {
            // SAFETY: ibv_poll_cq wrote the first `n` entries.
            let w = unsafe { w.assume_init_ref() };
            o.write(Completion {
                wr_id: w.wr_id,
                status: w.status,
                byte_len: w.byte_len,
                qp_num: w.qp_num,
            });
        }
        // SAFETY: the first `n` entries were written just now (n <= want <= out.len()).
        Ok(unsafe { std::slice::from_raw_parts(out.as_ptr().cast::<Completion>(), n) })
    }

    /// Poll until one completion arrives (a hang guard gives up after `timeout`).
    pub fn wait_one(&mut self, timeout: std::time::Duration) -> Result<Completion> {
        let start = std::time::Instant::now();
        let mut one = [MaybeUninit::uninit()];
        loop {
            if let [c] = self.poll(&mut one)? {
                return Ok(*c);
            }
            if start.elapsed() > timeout {
                return Err(call_error("ibv_poll_cq (timed out)", libc::ETIMEDOUT));
            }
            std::thread::yield_now();
        }
    }
}
