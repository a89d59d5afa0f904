//! A module going away lets the sends it posted arrive first (as UCX's endpoint close
//! in flush mode): a process that sends its last message and exits must not close its
//! out-of-band connection, or destroy its queue pairs, while the message is still on
//! its send queue. The peer would see the connection close, fail the link and drop
//! the message still in flight (a queue pair in error takes nothing more).
//!
//! Each connected peer with work not yet acknowledged gets a signalled zero-byte RDMA
//! write behind it: a reliable connection completes in order, so its completion means
//! everything before it reached the peer's receive queue. Nothing is reported any
//! more: completions are only counted, and callbacks go with the module.

use super::OpenibModule;
use crate::core::{Posted, RECV_BIT};
use crate::peer::Link;
use rbtl_verbs::{Op, Sge};
use std::mem::MaybeUninit;
use std::time::Instant;

/// Empty polls between two looks at the connection methods (which learn of peers
/// that ended, whose work then never completes by itself).
const POLLS_PER_LOOK: u32 = 256;

impl OpenibModule {
    /// Wait until every connected peer has acknowledged the sends posted to it, or a
    /// peer's connection ended, or `btl_openib_flush_timeout` passed.
    pub(super) fn let_sends_arrive(&mut self) {
        let mut waiting: Vec<usize> = (0..self.core.peers.len())
            .filter(|&ep| self.unacknowledged(ep))
            .collect();
        let deadline = Instant::now() + self.core.settings.flush_timeout;
        let mut fenced = vec![false; self.core.peers.len()];
        let mut empty = 0u32;
        while !waiting.is_empty() {
            for &ep in &waiting {
                if !fenced[ep] && self.fence(ep) {
                    fenced[ep] = true;
                }
            }
            if self.count_completions() > 0 {
                empty = 0;
            } else {
                empty += 1;
                if empty % POLLS_PER_LOOK == 0 {
                    for i in 0..self.cpcs.len() {
                        self.cpcs[i].0.progress(&mut self.core);
                    }
                    // Nothing is delivered any more: a peer seen gone fails at once.
                    self.fail_ended_now();
                    if Instant::now() >= deadline {
                        tracing::warn!(
                            peers = waiting.len(),
                            "openib: leaving with sends not acknowledged within {}",
                            crate::FLUSH_TIMEOUT_PARAM
                        );
                        return;
                    }
                    std::thread::yield_now();
                }
            }
            waiting.retain(|&ep| self.unacknowledged(ep));
        }
    }

    /// Whether connected peer `ep` has posted work not yet acknowledged.
    fn unacknowledged(&self, ep: usize) -> bool {
        let peer = &self.core.peers[ep];
        if !matches!(peer.link, Link::Up) {
            return false;
        }
        peer.unsignaled > 0
            || self
                .core
                .posted
                .iter()
                .flatten()
                .any(|(p, _)| p.endpoint() == ep)
    }

    /// Post the zero-byte write that covers peer `ep`'s unsignalled sends, when it has
    /// any and room for it (with no room, signalled work is in flight and covers them
    /// when it completes); whether it went, or is not needed.
    fn fence(&mut self, ep: usize) -> bool {
        let peer = &self.core.peers[ep];
        if peer.unsignaled == 0 {
            return true;
        }
        if peer.sq_free == 0 {
            return false;
        }
        let (addr, lkey) = self.core.control.scratch();
        let sge = Sge {
            addr: addr as u64,
            len: 0,
            lkey,
        };
        let id = self.core.track(Posted::Inline(ep));
        // A zero-byte write needs no remote address or key (the InfiniBand
        // specification, 9.4.3).
        let op = Op::Write { remote: 0, rkey: 0 };
        // SAFETY: no byte is read: the piece is empty, inside the control area.
        match unsafe { self.core.post_send(ep, id, op, &[sge], true, true) } {
            Ok(()) => self.core.peers[ep].sq_free -= 1,
            Err(e) => {
                self.core.unpost(id);
                tracing::debug!(ep, %e, "openib: leaving: the last write did not go");
                // Nothing will cover the unsignalled sends: stop waiting for them.
                self.core.peers[ep].unsignaled = 0;
            }
        }
        true
    }

    /// Poll the completion queue once, taking back the send-queue work that completed
    /// (an error ends the peer's wait: nothing behind it completes); how many
    /// completions came.
    fn count_completions(&mut self) -> usize {
        let mut wc = [MaybeUninit::uninit(); 16];
        let batch = match self.core.cq.poll(&mut wc) {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!("openib: leaving: polling the completion queue: {e}");
                return 0;
            }
        };
        for c in batch.iter().filter(|c| c.wr_id & RECV_BIT == 0) {
            let Some((posted, covers)) = self.core.untrack(c.wr_id) else {
                continue;
            };
            let peer = &mut self.core.peers[posted.endpoint()];
            peer.sq_free += covers;
            if let Err(e) = c.result() {
                peer.link = Link::Failed(rbtl_btl::PeerFailure::Broken(e.to_string()));
            }
        }
        batch.len()
    }
}
