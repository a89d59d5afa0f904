//! Receives: handing each received message to the expected receive or its tag's
//! callback, taking the credits it returns, and reposting its buffer (the peer's own,
//! or that of the shared receive queue or the XRC one).

use super::OpenibModule;
use crate::core::{Repost, RECV_BIT};
use crate::peer::Link;
use crate::srq::{SRQ_BIT, XRC_BIT};
use crate::wire::{self, CREDIT_ONLY};
use rbtl_btl::{Endpoint, Error, PeerFailure, Received, Tag, MAX_SEGMENTS};
use rbtl_mpool::Frag;
use rbtl_verbs::Completion;

impl OpenibModule {
    #[inline(always)]
    pub(super) fn on_receive(&mut self, c: Completion) {
        let slot = (c.wr_id & 0xffff_ffff) as usize;
        if c.wr_id & SRQ_BIT != 0 {
            return self.on_shared_receive(c, slot);
        }
        let ep = ((c.wr_id & !RECV_BIT) >> 32) as usize;
        let Some(frag) = self
            .core
            .peers
            .get_mut(ep)
            .and_then(|p| p.recv.get_mut(slot)?.take())
        else {
            return;
        };
        let Some(credit_only) = self.deliver(&c, ep, &frag) else {
            self.core.recv_frags.put(frag);
            return;
        };
        // The buffer is reposted, and owed to the peer, by the next progress call
        // (or once the queue pair is here: the peer may send before this side's CPC
        // has finished).
        let peer = &mut self.core.peers[ep];
        if matches!(peer.link, Link::Failed(_)) {
            self.core.recv_frags.put(frag);
            return;
        }
        peer.recv[slot] = Some(frag);
        if peer.qp.is_none() {
            peer.unposted.push((slot, credit_only));
        } else {
            self.core.to_repost.push(Repost::Peer {
                ep,
                slot,
                credit_only,
            });
        }
        // Credits the message returned may let waiting sends go.
        if !self.core.peers[ep].waiting.is_empty() {
            self.drain(ep);
        }
    }

    /// A receive through a shared queue (the basic one, or the XRC one): the sender is
    /// known by the queue pair it came in on (over XRC, the node's target that serves
    /// it); the buffer goes back to its queue whatever became of the message.
    fn on_shared_receive(&mut self, c: Completion, slot: usize) {
        let xrc = c.wr_id & XRC_BIT != 0;
        let Some(shared) = self.core.receives(xrc) else {
            return;
        };
        let Some(frag) = shared.take(slot) else {
            return;
        };
        let ep = shared.endpoint(c.qp_num);
        if let Some(ep) = ep {
            self.deliver(&c, ep, &frag);
        } else {
            tracing::warn!(
                qpn = c.qp_num,
                "openib: a message on an unknown queue pair dropped"
            );
        }
        if let Some(shared) = self.core.receives(xrc) {
            shared.keep(slot, frag);
        }
        self.core.to_repost.push(Repost::Shared { ep, slot, xrc });
        if let Some(ep) = ep.filter(|&ep| !self.core.peers[ep].waiting.is_empty()) {
            self.drain(ep);
        }
    }

    /// Hand a received fragment from `ep` to its callback, taking the credits its
    /// trailer returns; whether it was a credit-only message. `None` (the peer has
    /// failed) for an error completion or a malformed fragment, and for anything from
    /// a peer removed (`del_procs`) before it was polled: the caller takes nothing
    /// more from it. (What a peer that failed sent before is delivered, as its other
    /// messages were.)
    #[inline(always)]
    fn deliver(&mut self, c: &Completion, ep: usize, frag: &Frag) -> Option<bool> {
        if self.core.peers[ep].removed {
            return None;
        }
        if let Err(e) = c.result() {
            self.core
                .fail(ep, PeerFailure::Broken(format!("queue pair error: {e}")));
            return None;
        }
        let bytes = &frag.as_slice()[..c.byte_len as usize];
        let mut lens = [0usize; MAX_SEGMENTS];
        let Some((t, nseg)) = wire::parse(bytes, &mut lens) else {
            self.core.fail(
                ep,
                PeerFailure::Protocol(format!("a malformed fragment of {} bytes", c.byte_len)),
            );
            return None;
        };
        let credit_only = t.flags & CREDIT_ONLY != 0;
        self.core.peers[ep].credits.returned(t.credits, t.rsv);
        if !credit_only {
            let tag = Tag(t.tag);
            let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
            let mut at = 0;
            for (s, &l) in segs.iter_mut().zip(&lens[..nseg]) {
                *s = &bytes[at..at + l];
                at += l;
            }
            // SAFETY: the buffer is valid as `Module::expect` requires.
            if unsafe { self.expected.fill(Endpoint(ep as u32), tag, &segs[..nseg]) } {
                self.filled = true;
                return Some(false);
            }
            match self.core.am.take(tag) {
                Some(mut cb) => {
                    let r = Received {
                        endpoint: Endpoint(ep as u32),
                        tag,
                        segments: &segs[..nseg],
                    };
                    self.delivering += 1;
                    cb(self, &r);
                    self.delivering -= 1;
                    self.core.am.restore(tag, cb);
                }
                None => self.core.report(
                    ep,
                    Error::BadTag {
                        tag,
                        why: "a message arrived for it, but no receive callback is registered; dropped",
                    },
                ),
            }
        }
        Some(credit_only)
    }

    /// Repost the receive buffers the last poll consumed, then send what their
    /// credits let go, or the credits themselves when enough are owed.
    pub(super) fn repost(&mut self) -> usize {
        // (Nothing below receives, so nothing is added meanwhile.)
        let mut reposts = std::mem::take(&mut self.core.to_repost);
        for &r in &reposts {
            let (ep, slot, credit_only) = match r {
                Repost::Shared { slot, xrc, .. } => {
                    let core = &mut self.core;
                    let list = &core.recv_frags;
                    let shared = match xrc {
                        true => core.xrc.as_mut().map(|x| &mut x.receives),
                        false => core.shared.as_mut(),
                    };
                    if let Some(Err(e)) = shared.map(|s| s.post(list, slot)) {
                        tracing::error!("{e}");
                    }
                    continue;
                }
                Repost::Peer {
                    ep,
                    slot,
                    credit_only,
                } => (ep, slot, credit_only),
            };
            if matches!(self.core.peers[ep].link, Link::Failed(_)) {
                continue;
            }
            if let Err(e) = self.core.post_recv_slot(ep, slot) {
                self.core.fail(ep, PeerFailure::Broken(e.to_string()));
                continue;
            }
            self.core.peers[ep].credits.reposted(credit_only);
        }
        for (i, r) in reposts.iter().enumerate() {
            // Once per peer (and not for a message from no known peer).
            let Some(ep) = r.endpoint() else { continue };
            if reposts[..i].iter().any(|o| o.endpoint() == Some(ep)) {
                continue;
            }
            self.drain(ep);
        }
        let n = reposts.len();
        reposts.clear();
        self.core.to_repost = reposts;
        n
    }
}
