//! Expected receives: a blocking receive handed to the transport that reaches its
//! source, when that transport matches receives itself
//! ([`Module::expect`](rbtl_btl::Module::expect)).

use super::liveness::{IdleWait, Needs};
use super::state::{self, lock};
use super::{protocol, Comm, Error, Result, Status};
use rbtl_btl::Expected;
use std::sync::atomic::Ordering;

/// A blocking receive handed to its transport ([`Module::expect`](rbtl_btl::Module::expect)).
#[derive(Clone, Copy)]
pub(super) struct Offload {
    module: usize,
    source: u32,
    tag: i32,
    ctx: u32,
}

/// Withdraws the blocking receive from its transport, if it is still there, however
/// the receive ends (a callback may panic): the transport must never write a buffer
/// that `recv` has given back.
pub(super) struct Withdraw<'a>(pub(super) &'a mut Comm);

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        self.0.withdraw();
    }
}

impl Comm {
    /// Hand the blocking receive into `buf` from `src` with `tag` to the transport
    /// that reaches `src`, if that transport matches receives itself and nothing
    /// comes first (no receive posted before it, no message waiting): the message
    /// then lands without a callback, a request or a look at the matching state.
    pub(super) fn offload(
        &mut self,
        buf: &mut [u8],
        src: u32,
        tag: i32,
        ctx: u32,
    ) -> Result<Option<Offload>> {
        let (mi, ep) = match self.route(src) {
            Ok(route) => route,
            // (The posted receive decides: what arrived before the end still matches.)
            Err(Error::PeerFailed { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        {
            let mut s = lock(&self.state);
            if !s.posted.is_empty() || !s.unexpected.is_empty() {
                return Ok(None);
            }
            s.offloaded_ctx = ctx;
        }
        let e = Expected {
            endpoint: ep,
            tag: protocol::EAGER,
            key: protocol::eager_header(tag, ctx),
            buf: buf.as_mut_ptr(),
            cap: buf.len(),
        };
        // SAFETY: `buf` is borrowed mutably by `recv`, which withdraws the receive
        // (`Withdraw`) before it returns.
        if !unsafe { self.modules[mi].expect(e) } {
            return Ok(None);
        }
        state::set(&self.signals.offloaded, state::offload_key(src, tag));
        let o = Offload {
            module: mi,
            source: src,
            tag,
            ctx,
        };
        self.offload = Some(o);
        Ok(Some(o))
    }

    /// Take the offloaded receive back from its transport, if it is there.
    fn withdraw(&mut self) {
        if let Some(o) = self.offload.take() {
            self.modules[o.module].cancel_expected();
            state::set(&self.signals.offloaded, 0);
        }
    }

    /// Progress until the transport fills the offloaded receive `o` (into `buf`), or
    /// a callback withdraws it (a message from its source with its tag that the
    /// transport did not take, or the source's failure): then it is posted as usual,
    /// behind that message.
    pub(super) fn wait_offloaded(&mut self, o: Offload, buf: &mut [u8]) -> Result<Status> {
        let mut idle = IdleWait::new();
        loop {
            if self.progress() == 0 {
                if idle.idle() {
                    // (`recv` withdraws the receive from its transport.)
                    if let Some(e) = self.look_for(Needs::Rank(o.source), &mut idle) {
                        return Err(e);
                    }
                }
                rbtl_btl::idle::between_idle_polls();
                continue;
            }
            idle.busy();
            if let Some(len) = self.modules[o.module].take_expected() {
                self.offload = None;
                state::set(&self.signals.offloaded, 0);
                return Ok(Status {
                    source: o.source,
                    tag: o.tag,
                    len,
                });
            }
            if self.signals.offloaded.load(Ordering::Relaxed) == 0 {
                self.withdraw();
                return self.recv_posted(buf, Some(o.source), Some(o.tag), o.ctx);
            }
        }
    }
}
