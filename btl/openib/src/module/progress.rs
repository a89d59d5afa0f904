//! One progress call: the connection methods' own I/O (while connections are being set
//! up, and now and then otherwise) and the connections' deadlines, reposting receive
//! buffers, polling the completion queue, delivering receives in the order polled, and
//! reporting completions to their callbacks.

use super::OpenibModule;
use crate::core::{Posted, RECV_BIT};
use crate::peer::Link;
use rbtl_btl::transport_kit::{complete_send, Done};
use rbtl_btl::{Endpoint, Error, PeerFailure, RdmaCompletion};
use rbtl_verbs::Completion;
use std::mem::MaybeUninit;

/// Progress calls between two looks at the connection methods' own I/O while no
/// connection is being set up (requests from peers may arrive at any time).
const CPC_POLL_INTERVAL: u32 = 1 << 14;
/// Completions one progress call polls at most.
const BATCH: usize = 16;
/// Progress calls after a peer's end was seen by which it fails, even where every
/// poll meanwhile found a full batch (other peers' traffic).
const ENDED_WAIT: u32 = 1 << 10;

impl OpenibModule {
    /// (`Module::progress`) One progress call; how much it did.
    pub(super) fn run_progress(&mut self) -> usize {
        let mut n = 0;
        self.calls = self.calls.wrapping_add(1);
        if self.core.connecting > 0 || self.calls % CPC_POLL_INTERVAL == 0 {
            for i in 0..self.cpcs.len() {
                n += self.cpcs[i].0.progress(&mut self.core);
            }
            if self.core.connecting > 0 {
                n += self.expire_connections();
            }
            for ep in std::mem::take(&mut self.core.ready) {
                n += 1 + self.drain(ep);
            }
        }
        if !self.core.to_repost.is_empty() {
            n += self.repost();
        }
        // Receives are delivered in the order polled. Those of this batch go at once
        // unless older ones wait; receives that a callback's own progress call polls
        // meanwhile are newer, and wait in `received` until after the batch.
        // A receive that fills the expected one ends the delivering: the caller
        // learns of it before any later message arrives.
        let direct = self.delivering == 0 && self.received.is_empty();
        let mut wc = [MaybeUninit::uninit(); BATCH];
        let mut drained = false;
        match self.core.cq.poll(&mut wc) {
            Ok(batch) => {
                drained = batch.len() < BATCH;
                for &c in batch {
                    if c.wr_id & RECV_BIT == 0 {
                        self.on_send_completion(c);
                    } else if direct && !self.filled {
                        self.on_receive(c);
                    } else {
                        self.received.push_back(c);
                    }
                }
                n += batch.len();
            }
            Err(e) => tracing::error!("openib: polling the completion queue: {e}"),
        }
        if self.delivering == 0 {
            while !self.filled {
                let Some(c) = self.received.pop_front() else {
                    break;
                };
                self.on_receive(c);
                n += 1;
            }
        }
        if !self.core.ended.is_empty() {
            n += self.fail_ended(drained && self.received.is_empty());
        }
        if std::mem::take(&mut self.filled) {
            return n;
        }
        if !self.core.done.is_empty() {
            n += self.run_done();
        }
        n
    }

    /// Fail the peers seen gone (`core.ended`) once what they sent is delivered: `delivered`
    /// (this call's poll found less than a full batch, and every receive polled went
    /// up), or [`ENDED_WAIT`] calls after their end was seen. How many failed.
    fn fail_ended(&mut self, delivered: bool) -> usize {
        let since = *self.ended_since.get_or_insert(self.calls);
        if !delivered && self.calls.wrapping_sub(since) < ENDED_WAIT {
            return 0;
        }
        self.fail_ended_now()
    }

    /// Fail the peers seen gone (`core.ended`) at once; how many.
    pub(super) fn fail_ended_now(&mut self) -> usize {
        self.ended_since = None;
        let ended = std::mem::take(&mut self.core.ended);
        let n = ended.len();
        for (rank, why) in ended {
            self.core.fail_rank(rank, why);
        }
        n
    }

    /// A send-queue completion: its work is done. Each tracked request completes once
    /// (a flushed one too), so its callback runs once and its send-queue entries and
    /// in-flight count come back once; unsignalled requests, flushed with their own
    /// completion, are not tracked and only their signalled successor counts them.
    fn on_send_completion(&mut self, c: Completion) {
        let Some((posted, covers)) = self.core.untrack(c.wr_id) else {
            return;
        };
        let ep = posted.endpoint();
        self.core.peers[ep].sq_free += covers;
        // The peer's device answered (a flush waiting for it counts this).
        self.core.answers.heard(ep);
        let failed = c.result().err().map(|e| e.to_string());
        let status = |m: &Self, what: &str| match &failed {
            None => Ok(()),
            Some(e) => Err(m.failure(ep, what, e)),
        };
        match posted {
            Posted::Send(_) => {
                if let Some(des) = self.core.take_sent(c.wr_id) {
                    let status = status(self, "send");
                    self.finish_send(des, status);
                }
            }
            Posted::Inline(_) => {}
            Posted::Credit(_) => {
                let peer = &mut self.core.peers[ep];
                peer.credit_in_flight = false;
                if peer.credit_due && failed.is_none() {
                    self.send_credits(ep);
                }
            }
            Posted::Rdma(_, cb, local, size) => {
                self.core.peers[ep].rdma_in_flight -= 1;
                let status = match &failed {
                    Some(e) if c.is_remote_access_error() => Err(Error::BadRemoteHandle(format!(
                        "the target's device refused the access: {e}"
                    ))),
                    _ => status(self, "operation"),
                };
                let c = RdmaCompletion {
                    endpoint: Endpoint(ep as u32),
                    local_address: local,
                    size,
                    status,
                };
                // At once when nothing completed earlier waits to be reported (this
                // is inside progress).
                if self.core.done.is_empty() && failed.is_none() {
                    cb(self, c);
                } else {
                    self.core.done.push_back(Done::Rdma(cb, c));
                }
            }
        }
        if let Some(e) = failed {
            // (Nothing more for a peer that had already failed: its queue pair was
            // moved to error, which flushed this request.)
            self.core
                .fail_link(ep, PeerFailure::Broken(format!("queue pair error: {e}")));
        } else if !self.core.peers[ep].waiting.is_empty() {
            self.drain(ep);
        }
    }

    /// Why posted work (`what`) to peer `ep` failed with the completion error `e`: the
    /// peer's failure when it had already failed (its queue pair then went to error and
    /// flushed the work), else this error, which fails the peer.
    fn failure(&self, ep: usize, what: &str, e: &str) -> Error {
        let peer = &self.core.peers[ep];
        let why = match &peer.link {
            Link::Failed(why) => why.clone(),
            _ => PeerFailure::Broken(format!("the {what} did not complete: {e}")),
        };
        Error::PeerFailed {
            rank: peer.rank,
            why,
        }
    }

    fn run_done(&mut self) -> usize {
        let mut n = 0;
        while let Some(d) = self.core.done.pop_front() {
            n += 1;
            match d {
                Done::Send {
                    callback,
                    endpoint,
                    descriptor,
                    status,
                } => complete_send(self, callback, endpoint, descriptor, status, |m, d| {
                    m.core.send_frags.put(d.into_frag())
                }),
                Done::Rdma(cb, c) => cb(self, c),
                Done::Error(event) => {
                    if let Some(cb) = self.core.on_error.as_mut() {
                        cb(&event);
                    }
                }
            }
        }
        n
    }
}
