//! Rendezvous buffers named by their address alone, and the way back to a
//! registration.
//!
//! Where the transport to a peer reads this process's memory by its address
//! ([`BtlFlags::UNREGISTERED_REMOTE`](rbtl_btl::BtlFlags::UNREGISTERED_REMOTE)), a
//! rendezvous send registers nothing: its RTS carries the address alone. The peer's
//! transport may still refuse that read (the kernel refused its cross-memory attach
//! to us, though our own attach to it works). Then, instead of failing the message:
//!
//! 1. the receiver keeps its matched receive and answers with a FIN of
//!    [`Fin::Register`];
//! 2. the sender registers the buffer (it is still live: its request ends at the
//!    final FIN), answers with a [`HANDLE`](protocol::HANDLE) message, and from then
//!    on registers every rendezvous buffer it sends to that peer;
//! 3. the receiver reads with the handle (through whatever path its transport takes
//!    with one), then finishes as any rendezvous.
//!
//! A sender that cannot register its buffer answers without a handle: both requests
//! fail with the registration's error. Open MPI's `ob1` falls back in the same spirit
//! when its RDMA get fails (the sender then pushes the data); `vader` itself does not.

use super::protocol::{self, Fin, Rts};
use super::state::{Posted, Shared, State};
use super::Error;
use rbtl_btl::{Access, Endpoint, Module, PeerFailure, RemoteHandle};

impl State {
    /// Whether rendezvous sends to `rank` may name their buffer by address alone
    /// (not once `rank`'s transport refused to read one so).
    #[inline(always)]
    pub fn names_by_address_to(&self, rank: u32) -> bool {
        !self
            .named_refused
            .get(rank as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Receiver: the read of `rts` from `src`, its buffer named by address alone, was
    /// refused. Keep the matched receive `p` and ask the sender (through `route`:
    /// module index and endpoint) for a registration.
    pub fn ask_for_handle(
        &mut self,
        m: &mut dyn Module,
        route: (usize, Endpoint),
        p: &Posted,
        src: u32,
        rts: Rts,
    ) {
        let sreq = rts.sreq;
        self.awaiting_handle
            .insert((src, sreq), (p.clone(), Box::new(rts)));
        // A FIN that cannot go: the peer is gone, and its failure fails the receive.
        self.send_fin(m, route, sreq, Fin::Register);
    }

    /// Sender: `src` (reached through `route`) asks for the registration of request
    /// `sreq`'s buffer. A request that is not a live rendezvous send to `src` named by
    /// address is left alone (the peer is out of protocol).
    pub fn send_handle(
        &mut self,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        src: u32,
        sreq: u64,
    ) {
        let (addr, len) = {
            let Some(r) = self.reqs.get_mut(sreq) else {
                return;
            };
            if r.peer != Some(src) || r.outcome.is_some() {
                return;
            }
            let Some(addr) = r.named.take() else {
                return;
            };
            (addr.get() as usize, r.status.len)
        };
        // SAFETY: the caller of the send promised its buffer stays valid until the
        // request completes (not yet: checked above), which drops the handle.
        let registered = unsafe {
            m.register_mem(
                Some(ep),
                addr,
                len,
                Access::LOCAL_READ | Access::REMOTE_READ,
            )
        };
        let answer = match registered {
            Ok(h) => {
                let answer = protocol::handle_message(sreq, Some(h.remote()));
                if let Some(r) = self.reqs.get_mut(sreq) {
                    r.handle = Some(Box::new(h));
                }
                answer
            }
            Err(e) => {
                self.complete(sreq, Err(e.into()));
                protocol::handle_message(sreq, None)
            }
        };
        *super::state::slot(&mut self.named_refused, src as usize) = true;
        if let Err(e) = self.send_or_defer(m, module, ep, protocol::HANDLE, &answer, &[]) {
            self.complete(sreq, Err(e));
        }
    }

    /// Receiver: `src`'s answer to [`State::ask_for_handle`] for its request `sreq`:
    /// the read starts again with the handle, or the receive fails without one. An
    /// answer nothing waits for is dropped.
    pub fn handle_arrived(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        route: (usize, Endpoint),
        src: u32,
        (sreq, handle): (u64, Option<RemoteHandle>),
    ) {
        let Some((p, mut rts)) = self.awaiting_handle.remove(&(src, sreq)) else {
            return;
        };
        match handle {
            Some(h) => {
                rts.handle = Some(h);
                // Read by this process alone, through the registration.
                rts.split = false;
                self.start_get(shared, m, route, &p, src, *rts);
            }
            None => self.complete(p.req, Err(rbtl_btl::Error::UnregisteredRemote.into())),
        }
    }

    /// `rank` failed: the receives waiting for its registrations fail.
    pub fn fail_awaiting_handles(&mut self, rank: u32, why: &PeerFailure) {
        let stuck: Vec<(u32, u64)> = self
            .awaiting_handle
            .keys()
            .filter(|(src, _)| *src == rank)
            .copied()
            .collect();
        for key in stuck {
            if let Some((p, _)) = self.awaiting_handle.remove(&key) {
                let why = why.clone();
                self.complete(p.req, Err(Error::PeerFailed { rank, why }));
            }
        }
    }
}
