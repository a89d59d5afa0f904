//! Large rendezvous messages copied by both processes at once.
//!
//! Over a transport that reaches a peer's memory by its address alone
//! ([`BtlFlags::UNREGISTERED_REMOTE`]: `sm` by cross-memory attach), one process
//! copying a large message moves it at the rate one core copies pages through the
//! kernel; two processes copying half each, at the same time, move it about twice as
//! fast (docs/performance.md). So a sender that names its buffer by address offers to
//! write a part (an RTS with presence byte 2), and the receiver of a message of
//! `msg_split_from` bytes or more ([`SPLIT_FROM`] by default):
//!
//! 1. asks the sender for the second half (a PART naming its receive buffer by
//!    address), then reads the first half itself;
//! 2. finishes once both halves are in (its read's callback, and the sender's
//!    PART_DONE), with the FIN that frees the sender's buffer, as any rendezvous.
//!
//! Where the sender's transport finds no size worth naming by address alone
//! (`Attributes::unregistered_remote_below` 0: `sm` where cross-memory attach copies
//! slowly against `memcpy`), the offer (presence byte 3) carries a registration too,
//! and the receiver splits only a lone message: one that arrives while another from
//! that sender is being read or split is read whole with the registration, and the
//! transport then chooses its faster way (the rings there), unless the receiver's
//! transport now finds naming by address worth it (its rings turned slow).
//!
//! While the receiver has rendezvous sends of its own to that sender under way, the
//! sender's process is busy reading those: then only messages of 1 MiB and more are
//! split. A sender with rendezvous sends under way to other ranks offers no split
//! (as a root sending to every rank at once): each receiver reads alone, all at the
//! same time, where the sender's halves would be copied one after another.
//!
//! A half that cannot be had so is had the other way: a sender that could not write
//! its half lets the receiver read it; a receiver whose own read is refused
//! (`UnregisteredRemote`: its attach refused, though its transport offered it) asks
//! the sender for that half too. The receive never completes while the sender may
//! still write into its buffer. The price: the sender's process takes part (it writes
//! when it next progresses), as in Open MPI's `ob1` when the receiver asks its sender
//! to put (its RDMA-put protocol).

use super::pieces::transfer_in_pieces;
use super::protocol::{self, Fin, Part, Rts};
use super::state::{lock, Posted, Shared, State};
use super::{Error, Status};
use rbtl_btl::{BtlFlags, Endpoint, Local, Module, PeerFailure, RdmaCallback, Remote, Transfer};
use rbtl_config::{Config, Registry, Value};

/// The parameter: the size from which messages are split (0: never).
pub const SPLIT_FROM_PARAM: &str = "msg_split_from";

/// Its default: messages of this many bytes and more are split between the two
/// processes (measured: docs/performance.md).
pub const SPLIT_FROM: usize = 32 << 10;

/// Register the parameter.
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        SPLIT_FROM_PARAM,
        Value::Size(SPLIT_FROM),
        "rendezvous messages of this many bytes and more, over a transport that reaches memory by its address in both directions (sm with cross-memory attach), are copied by both processes, half each: about twice as fast, but the receive then waits for the sender's next call into the library (0: never; the receiver reads alone)",
    )?;
    Ok(())
}

/// The size from which messages are split, from `config`: `usize::MAX` for never.
pub(super) fn split_from(config: &Config) -> rbtl_config::Result<usize> {
    match config.size(SPLIT_FROM_PARAM) {
        Ok(0) => Ok(usize::MAX),
        Ok(n) => Ok(n),
        Err(rbtl_config::Error::NotRegistered(_)) => Ok(SPLIT_FROM),
        Err(e) => Err(e),
    }
}

/// While this process has rendezvous sends of its own under way to the sender (data
/// flowing both ways), only messages of this many bytes and more are split: below it
/// the sender's process is busy reading ours, and splitting was slower (measured:
/// docs/performance.md).
const SPLIT_BOTH_WAYS_FROM: usize = 1 << 20;

/// Where the halves are cut: a multiple of this (a page), so that both start aligned
/// where the buffers do.
const CUT_ALIGN: usize = 4096;

/// A receive whose message is copied by both processes.
pub struct Split {
    /// Halves not yet in.
    left: u8,
    /// The first failure among them.
    error: Option<Error>,
    /// The receive's status once complete.
    status: Status,
    /// The sender, its request, and the route to it (module index, endpoint).
    src: u32,
    sreq: u64,
    route: (usize, Endpoint),
    /// The receive buffer and the sender's, by address; where the halves are cut.
    local: usize,
    remote: u64,
    cut: usize,
    len: usize,
    /// Our own read of the first half was refused: the sender writes both halves.
    own_refused: bool,
}

impl State {
    /// Receiver: split the rendezvous `rts` from `src`, matched by receive `p`, where
    /// its sender offered it, it is large enough and this transport reads the sender's
    /// memory by address. `false`: not split (the caller reads it whole).
    pub fn start_split(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        route: (usize, Endpoint),
        p: &Posted,
        src: u32,
        rts: &Rts,
    ) -> bool {
        let reads_by_address = m.attributes().flags.contains(BtlFlags::UNREGISTERED_REMOTE);
        let busy_sender = self
            .rendezvous_out
            .get(src as usize)
            .is_some_and(|&n| n > 0);
        let from = if busy_sender {
            self.split_from.max(SPLIT_BOTH_WAYS_FROM)
        } else {
            self.split_from
        };
        if !rts.split || rts.len < from || !reads_by_address {
            return false;
        }
        // Offered with a registration too (the sender's transport finds no size worth
        // naming by address alone): split a lone message only; one of a stream is read
        // whole with the registration, which lets the transport choose its faster way,
        // while ours too finds no size worth naming by address alone.
        let streaming = || {
            self.reads_from.get(src as usize).is_some_and(|&n| n > 0)
                || self.splits.values().any(|sp| sp.src == src)
        };
        if rts.handle.is_some() && m.attributes().unregistered_remote_below == 0 && streaming() {
            return false;
        }
        if self.splits.contains_key(&p.req) {
            return false;
        }
        let cut = (rts.len / 2) & !(CUT_ALIGN - 1);
        let status = Status {
            source: src,
            tag: rts.tag,
            len: rts.len,
        };
        self.splits.insert(
            p.req,
            Split {
                left: 2,
                error: None,
                status,
                src,
                sreq: rts.sreq,
                route,
                local: p.addr,
                remote: rts.addr,
                cut,
                len: rts.len,
                own_refused: false,
            },
        );
        if !self.ask_for_part(m, p.req, cut, rts.len - cut) {
            self.splits.remove(&p.req);
            return false;
        }
        self.read_part(shared, m, p.req, 0, cut);
        true
    }

    /// Ask the sender of split receive `rreq` to write `len` bytes at `offset`;
    /// `false` if the message could not go.
    fn ask_for_part(&mut self, m: &mut dyn Module, rreq: u64, offset: usize, len: usize) -> bool {
        let Some(sp) = self.splits.get(&rreq) else {
            return false;
        };
        let part = Part {
            sreq: sp.sreq,
            rreq,
            addr: sp.local as u64,
            offset,
            len,
        };
        let (module, ep) = sp.route;
        self.send_or_defer(m, module, ep, protocol::PART, &part.encode(), &[])
            .is_ok()
    }

    /// Receiver: read `len` bytes at `offset` of split receive `rreq`'s message.
    fn read_part(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        rreq: u64,
        offset: usize,
        len: usize,
    ) {
        let Some(sp) = self.splits.get(&rreq) else {
            return;
        };
        let (ep, local, remote) = (sp.route.1, sp.local + offset, sp.remote + offset as u64);
        let (may_hand_over, sender) = (offset == 0 && !sp.own_refused, sp.status.source);
        let state = shared.clone();
        let done: RdmaCallback = Box::new(move |m, c| {
            let read = c.status.map_err(|e| Error::reading_from_sender(sender, e));
            lock(&state).part_done(m, rreq, read);
        });
        // SAFETY: the receive buffer stays valid until the receive completes, which
        // waits for this read's callback; the sender vouched for its buffer (an RTS
        // without a handle) until our FIN, sent after that.
        let started = unsafe { by_address(m, ep, (local, remote, len), false, done) };
        match started {
            Ok(()) => {}
            // Our attach refused: the sender writes this half too.
            Err(rbtl_btl::Error::UnregisteredRemote) if may_hand_over => {
                if self.ask_for_part(m, rreq, offset, len) {
                    if let Some(sp) = self.splits.get_mut(&rreq) {
                        sp.own_refused = true;
                    }
                } else {
                    self.part_done(m, rreq, Err(rbtl_btl::Error::UnregisteredRemote.into()));
                }
            }
            Err(e) => self.part_done(m, rreq, Err(e.into())),
        }
    }

    /// Receiver: one half of split receive `rreq` is in (or failed). The last one
    /// completes the receive and sends the FIN.
    pub fn part_done(&mut self, m: &mut dyn Module, rreq: u64, result: Result<(), Error>) {
        let Some(sp) = self.splits.get_mut(&rreq) else {
            return;
        };
        if let Err(e) = result {
            sp.error.get_or_insert(e);
        }
        sp.left -= 1;
        if sp.left > 0 {
            return;
        }
        let Some(sp) = self.splits.remove(&rreq) else {
            return;
        };
        let taken = sp.error.is_none();
        self.complete(rreq, sp.error.map_or(Ok(sp.status), Err));
        self.send_fin(m, sp.route, sp.sreq, Fin::from(taken));
    }

    /// Receiver: `src` wrote the part of split receive `rreq` asked of it, or could
    /// not (then this process reads it, unless its own reads are refused).
    pub fn sender_part_done(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        src: u32,
        (rreq, landed): (u64, bool),
    ) {
        let Some(sp) = self.splits.get(&rreq).filter(|sp| sp.src == src) else {
            return;
        };
        if landed {
            return self.part_done(m, rreq, Ok(()));
        }
        if sp.own_refused {
            // Neither process can copy this part.
            return self.part_done(m, rreq, Err(rbtl_btl::Error::UnregisteredRemote.into()));
        }
        let (cut, len) = (sp.cut, sp.len);
        self.read_part(shared, m, rreq, cut, len - cut);
    }

    /// Sender: `src` (reached through `route`) asks for `part` of a rendezvous send.
    /// Written from the send's buffer into the receiver's, by address; answered with a
    /// PART_DONE saying whether it landed (not landed for a part that is not of a live
    /// send to `src` named by address).
    pub fn write_part(
        &mut self,
        shared: &Shared,
        m: &mut dyn Module,
        (module, ep): (usize, Endpoint),
        src: u32,
        part: Part,
    ) {
        let buf = self.reqs.get(part.sreq).and_then(|r| {
            let inside = part
                .offset
                .checked_add(part.len)
                .is_some_and(|end| end <= r.status.len);
            let live = r.peer == Some(src) && r.outcome.is_none();
            r.named.filter(|_| live && inside && part.len > 0)
        });
        let rreq = part.rreq;
        let answer = move |s: &mut State, m: &mut dyn Module, landed: bool| {
            let done = protocol::part_done(rreq, landed);
            if let Err(e) = s.send_or_defer(m, module, ep, protocol::PART_DONE, &done, &[]) {
                tracing::warn!(%e, "could not answer a part of a rendezvous");
            }
        };
        let Some(buf) = buf else {
            return answer(self, m, false);
        };
        let local = buf.get() as usize + part.offset;
        let state = shared.clone();
        let done: RdmaCallback = Box::new(move |m, c| {
            answer(&mut lock(&state), m, c.status.is_ok());
        });
        let remote = part.addr + part.offset as u64;
        // SAFETY: the send's buffer stays valid until its request completes, at the
        // receiver's FIN, which waits for this write's answer; the receiver named its
        // buffer by address for this part, valid until its receive completes.
        let started = unsafe { by_address(m, ep, (local, remote, part.len), true, done) };
        if started.is_err() {
            answer(self, m, false);
        }
    }

    /// `rank` failed: the receives it was copying into fail (it writes no more).
    pub fn fail_splits(&mut self, rank: u32, why: &PeerFailure) {
        let stuck: Vec<u64> = self
            .splits
            .iter()
            .filter(|(_, sp)| sp.src == rank)
            .map(|(&req, _)| req)
            .collect();
        for req in stuck {
            self.splits.remove(&req);
            let why = why.clone();
            self.complete(req, Err(Error::PeerFailed { rank, why }));
        }
    }
}

/// Start a put (`put`: from `local` here to `remote` in the peer's memory) or a get of
/// `len` bytes, both sides named by address, in pieces within the transport's limit;
/// `done` runs once for the whole.
///
/// # Safety
///
/// Both ranges stay valid, and are named so with the consent of their owners, until
/// `done` has run (as [`Local::unregistered`] and [`Remote::unregistered`]).
unsafe fn by_address(
    m: &mut dyn Module,
    ep: Endpoint,
    (local, remote, len): (usize, u64, usize),
    put: bool,
    done: RdmaCallback,
) -> rbtl_btl::Result<()> {
    // SAFETY: the caller's contract.
    let whole = unsafe {
        Transfer::new(
            ep,
            Local::unregistered(local),
            Remote::unregistered(remote),
            len,
        )
    };
    transfer_in_pieces(m, &whole, put, done)
}
