//! Accumulates shipped to their target: an accumulate that no transport atomic
//! performs, or a long one that transport atomics would perform element by element
//! where the target applies them with the processor's atomic instructions
//! ([`AtomicFlags::GLOB`](rbtl::btl::AtomicFlags::GLOB)), on a member whose memory
//! this process does not map, goes to the target as a message (the message layer's
//! served contexts, [`rbtl::msg::SERVED`]), which applies it to its own memory under
//! the window's
//! accumulate mutex and answers with the data it replaced: one round trip, where
//! taking the mutex remotely, reading, writing back and releasing took four (as
//! Open MPI's `osc/pt2pt` ships its accumulates).
//!
//! A request carries one piece of one run of the target, or several short runs
//! whole: whole elements, as many as one eager message of the route holds (each
//! request is applied atomically, every element whole: what MPI asks of concurrent
//! accumulates). A type of several basic kinds (which only `MPI_REPLACE` and
//! `MPI_NO_OP` take) moves as bytes, cut where the target's memory is aligned to
//! 16: its elements, naturally aligned, stay whole. A pair type whose index does
//! not follow its value in its C struct (`MPI_SHORT_INT`) names whole structs one
//! after the other in the target's memory and carries them packed. An operation
//! transports perform atomically, on aligned words, is applied with the processor's
//! atomic instructions, one per element, so that the transports' atomics on the
//! same words lose nothing; at once where the origin holds the member's lock
//! exclusively, as no other accumulate reaches them then (Open MPI's `osc/rdma`
//! takes no accumulate lock under an exclusive lock either). The target applies a
//! request at its next call into the library, like any message it receives; the
//! origin waits for every request's answer before the call returns.
//!
//! Request (little-endian): kind (0 accumulate, 1 compare-and-swap, 2 the region
//! of a dynamic window that holds the bytes, 3 an accumulate over several ranges),
//! flags (1: the old data is wanted; 2: the origin holds the member's lock
//! exclusively), the basic kind (3 bytes), the operation (u64), the offset and
//! length in the target's window (u64 each; on a dynamic window the offset is an
//! address; for kind 3, the count of ranges and their bytes in all, the ranges
//! following as offset and length, u64 each), then the operand (for a
//! compare-and-swap, the value then the comparand). Answer: 0 then the old data
//! when wanted (for a region: its base, size and card), or 1 then the reason it was
//! refused.

use super::ops::Access;
use crate::datatype::{Pair, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::msg::{ReqId, SERVED};

mod target;
use target::gapped;
pub use target::{expose, server, Exposure, Exposures};

/// Tags of the answers: this plus the piece's index.
const ANSWER_TAG: i32 = 1 << 20;
/// Bytes of a request before its operand.
const HEADER: usize = 29;
/// A request's flags: the old data is wanted.
const FETCH: u8 = 1;
/// A request's flags: the origin holds the member's lock exclusively ([`Ship::alone`]).
const ALONE: u8 = 2;
/// Room for a refusal's reason in an answer.
const REASON: usize = 256;
/// The alignment of the cuts through bytes of a type of several kinds.
const ALIGN: usize = 16;

/// What a shipped request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    /// `target = operand op target`.
    Accumulate = 0,
    /// `target = value` where `target == comparand`.
    CompareSwap = 1,
    /// No change: the card of the dynamic window's region that holds the bytes
    /// ([`super::dynamic`]).
    Region = 2,
    /// An accumulate over several ranges of the target, one after the other.
    Runs = 3,
}

/// The three bytes that name a basic kind.
fn encode_prim(p: Prim) -> [u8; 3] {
    match p {
        Prim::Int { bytes, signed } => [0, bytes, u8::from(signed)],
        Prim::Float(b) => [1, b, 0],
        Prim::LongDouble => [2, 0, 0],
        Prim::Complex(b) => [3, b, 0],
        Prim::ComplexLongDouble => [4, 0, 0],
        Prim::Logical(b) => [5, b, 0],
        Prim::Byte => [6, 0, 0],
        Prim::Pair(pair) => [
            7,
            PAIRS.iter().position(|&q| q == pair).unwrap_or(0) as u8,
            0,
        ],
    }
}

const PAIRS: [Pair; 8] = [
    Pair::FloatInt,
    Pair::DoubleInt,
    Pair::LongInt,
    Pair::TwoInt,
    Pair::ShortInt,
    Pair::LongDoubleInt,
    Pair::TwoFloat,
    Pair::TwoDouble,
];

/// The basic kind of [`encode_prim`]; `None` for bytes that name none.
fn decode_prim(b: [u8; 3]) -> Option<Prim> {
    let sized = |ok: &[u8]| ok.contains(&b[1]).then_some(b[1]);
    Some(match b[0] {
        0 if b[2] < 2 => Prim::Int {
            bytes: sized(&[1, 2, 4, 8, 16])?,
            signed: b[2] == 1,
        },
        1 => Prim::Float(sized(&[2, 4, 8, 16])?),
        2 => Prim::LongDouble,
        3 => Prim::Complex(sized(&[2, 4, 8, 16])?),
        4 => Prim::ComplexLongDouble,
        5 => Prim::Logical(sized(&[1, 2, 4, 8, 16])?),
        6 => Prim::Byte,
        7 => Prim::Pair(*PAIRS.get(b[1] as usize)?),
        _ => return None,
    })
}

/// One request: its ranges (in [`Buffers::ranges`]), its offset in the packed data,
/// its length packed.
type Piece = (std::ops::Range<usize>, usize, usize);

/// Bytes each range of a request of several takes.
const RANGE: usize = 16;

/// What shipping an accumulate uses on every call, kept for the next: a
/// get-accumulate of a few bytes otherwise spent more on allocating them than on the
/// rest of its path.
#[derive(Default)]
pub struct Buffers {
    /// The requests.
    pieces: Vec<Piece>,
    /// The ranges of the target the requests name: (offset, length there).
    ranges: Vec<(usize, usize)>,
    /// Room for every piece's answer (not shrunk between calls, so not zeroed again:
    /// each answer is read only as far as it was received).
    answers: Vec<u8>,
    /// The receives of the answers: (request, where in `answers`, length, offset in
    /// the packed data).
    posted: Vec<(ReqId, usize, usize, usize)>,
    /// The request being built.
    request: Vec<u8>,
}

/// The most answer room kept between calls.
const ANSWERS_KEPT: usize = 1 << 20;

/// The tag of the answer to a question ([`Mpi::ask`]).
const ASK_TAG: i32 = ANSWER_TAG - 1;
/// Room for that answer: a region's base, size and card, or a refusal.
const ASK_ROOM: usize = 4096;

/// One request to ship.
pub(super) struct Ship {
    pub(super) kind: Kind,
    pub(super) prim: Prim,
    pub(super) op: Handle,
    /// The origin holds the member's lock exclusively: no other accumulate reaches
    /// the elements, which the target may combine at once, without atomics.
    pub(super) alone: bool,
}

/// The pieces of an access to the runs `runs` of elements of `pair`, which has a
/// gap ([`gapped`]), into `pieces`: runs of whole C structs one after the other in
/// the target, at most `step` packed bytes each.
fn gapped_pieces(
    runs: &[(usize, usize)],
    pair: Pair,
    step: usize,
    pieces: &mut Vec<Piece>,
    ranges: &mut Vec<(usize, usize)>,
) {
    let (psize, extent) = (pair.size(), pair.extent());
    let most = (step / psize).max(1);
    let mut packed: usize = 0;
    for &(off, len) in runs {
        // Where each element starts: a run is contiguous, packed as it lies.
        let mut at = packed.next_multiple_of(psize);
        while at < packed + len {
            let start = off + (at - packed);
            match (pieces.last_mut(), ranges.last_mut()) {
                (Some(p), Some(r)) if r.0 + r.1 == start && p.2 / psize < most => {
                    r.1 += extent;
                    p.2 += psize;
                }
                _ => {
                    ranges.push((start, extent));
                    pieces.push((ranges.len() - 1..ranges.len(), at, psize));
                }
            }
            at += psize;
        }
        packed += len;
    }
}

/// The requests of an access to the runs `runs` with `s` into `pieces` (their
/// ranges into `ranges`): a run longer than half of `step` (the packed bytes a
/// request carries) cut into pieces of one range each; shorter ones gathered, one
/// after another, into requests of several ranges (each range taking 16 bytes of
/// the message too). Bytes of a type of several kinds are cut where the target's
/// memory (at `base`) is aligned to 16, which no naturally aligned element
/// straddles.
fn pieces_of(
    runs: &[(usize, usize)],
    s: &Ship,
    (step, base): (usize, u64),
    pieces: &mut Vec<Piece>,
    ranges: &mut Vec<(usize, usize)>,
) {
    let gather = s.kind == Kind::Accumulate;
    let mut packed = 0;
    // The request gathering short runs: its first range and bytes so far, ended
    // (made a piece) when the next run does not fit or is long.
    let mut open: Option<(usize, usize)> = None;
    let end = |open: Option<(usize, usize)>, pieces: &mut Vec<Piece>, ranges: usize, packed| {
        if let Some((first, n)) = open {
            pieces.push((first..ranges, packed - n, n));
        }
    };
    for &(off, len) in runs {
        if gather && len <= step / 2 {
            let (first, n) = match open {
                Some((first, n)) if n + len + RANGE * (ranges.len() - first + 1) <= step => {
                    (first, n)
                }
                other => {
                    end(other, pieces, ranges.len(), packed);
                    (ranges.len(), 0)
                }
            };
            ranges.push((off, len));
            open = Some((first, n + len));
            packed += len;
            continue;
        }
        end(open.take(), pieces, ranges.len(), packed);
        let mut done = 0;
        while done < len {
            let mut n = step.min(len - done);
            if s.prim == Prim::Byte && n < len - done && n > ALIGN {
                n -= ((base + (off + done + n) as u64) % ALIGN as u64) as usize;
            }
            ranges.push((off + done, n));
            pieces.push((ranges.len() - 1..ranges.len(), packed + done, n));
            done += n;
        }
        packed += len;
    }
    end(open, pieces, ranges.len(), packed);
}

/// Start `out` (emptied) with the header of a request `s` on the `len` bytes at
/// `offset` of the target's window.
fn header(out: &mut Vec<u8>, s: &Ship, fetch: bool, offset: usize, len: usize) {
    out.clear();
    out.push(s.kind as u8);
    out.push(if fetch { FETCH } else { 0 } | if s.alone { ALONE } else { 0 });
    out.extend_from_slice(&encode_prim(s.prim));
    out.extend_from_slice(&(s.op as u64).to_le_bytes());
    out.extend_from_slice(&(offset as u64).to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
}

impl Mpi {
    /// Ship `s` over the runs of access `a` to window `win`: the operand's packed
    /// bytes at `operand` (for a compare-and-swap, one element's value then its
    /// comparand at `operand + len`), the old data into `fetched` (packed) when not
    /// null. Complete when it returns. On a dynamic window the request names
    /// addresses (the runs' offsets from the region's start).
    ///
    /// # Safety
    ///
    /// `operand` holds the bytes the runs take (none for `MPI_NO_OP`; twice them for
    /// a compare-and-swap); `fetched` is null or has room for the runs' bytes.
    pub(super) unsafe fn ship(
        &mut self,
        win: Handle,
        a: &Access,
        s: &Ship,
        operand: *const u8,
        fetched: *mut u8,
    ) -> Result<()> {
        let runs = &a.runs;
        let (job, ctx, base) = {
            let w = self.win(win)?;
            (
                w.peers[a.member].job,
                self.comm(w.comm)?.ctx,
                a.target(w).addr(),
            )
        };
        // The target's server counts offsets from its window's base; on a dynamic
        // window it takes addresses: the region's base added here.
        let added = if a.region.is_some() { base as usize } else { 0 };
        let psize = s.prim.size();
        let room = self
            .msg
            .eager_payload_to(job)
            .unwrap_or(0)
            .saturating_sub(HEADER);
        let step = match s.kind {
            Kind::Accumulate | Kind::Runs | Kind::Region => room / psize * psize,
            Kind::CompareSwap => room / 2,
        };
        if step < psize {
            return Err(Error::new(
                MPI_ERR_INTERN,
                format!(
                    "the route to rank {job} carries no whole {psize}-byte element in one message"
                ),
            ));
        }
        let mut b = std::mem::take(&mut self.shipping);
        let Buffers {
            pieces,
            ranges,
            answers,
            posted,
            request,
        } = &mut b;
        pieces.clear();
        ranges.clear();
        match gapped(s.prim) {
            Some(pair) => gapped_pieces(runs, pair, step, pieces, ranges),
            None => pieces_of(runs, s, (step, base), pieces, ranges),
        }
        let cap = |n: usize| 1 + if fetched.is_null() { 0 } else { n } + REASON;
        let room: usize = pieces.iter().map(|p| cap(p.2)).sum();
        if answers.len() < room {
            answers.resize(room, 0);
        }
        posted.clear();
        let mut sent = Ok(());
        let mut at = 0;
        for (i, (these, from, n)) in pieces.iter().enumerate() {
            let (these, from, n) = (&ranges[these.clone()], *from, *n);
            let tag = ANSWER_TAG + i as i32;
            // SAFETY: `answers` outlives every receive: each is waited for below.
            let r = unsafe {
                self.msg.irecv_in(
                    ctx,
                    answers.as_mut_ptr().add(at),
                    cap(n),
                    Some(job),
                    Some(tag),
                )
            };
            match r {
                Ok(r) => posted.push((r, at, n, from)),
                Err(e) => {
                    sent = Err(e.into());
                    break;
                }
            }
            at += cap(n);
            let fetch = !fetched.is_null();
            if let [(off, span)] = *these {
                header(request, s, fetch, added + off, span);
            } else {
                let runs = Ship {
                    kind: Kind::Runs,
                    prim: s.prim,
                    op: s.op,
                    alone: s.alone,
                };
                let span = these.iter().map(|r| r.1).sum();
                header(request, &runs, fetch, these.len(), span);
                for &(off, len) in these {
                    request.extend_from_slice(&((added + off) as u64).to_le_bytes());
                    request.extend_from_slice(&(len as u64).to_le_bytes());
                }
            }
            // SAFETY: the caller's contract: the operand holds the piece.
            unsafe {
                match s.kind {
                    Kind::Accumulate | Kind::Runs if s.op == MPI_NO_OP => {}
                    Kind::Region => {}
                    Kind::Accumulate | Kind::Runs => {
                        request.extend_from_slice(rbtl::btl::slice_at(operand.add(from), n))
                    }
                    Kind::CompareSwap => {
                        request.extend_from_slice(rbtl::btl::slice_at(operand, 2 * n))
                    }
                }
            }
            if let Err(e) = self.msg.send_in(ctx | SERVED, request, job, tag) {
                sent = Err(e.into());
                break;
            }
        }
        let mut first = sent;
        for (r, at, n, from) in posted.drain(..) {
            if first.is_err() {
                // Nothing may land in `answers` once it is gone.
                self.msg.cancel(r);
                let _ = self.msg.wait(r);
                continue;
            }
            let got = match self.msg.wait(r) {
                Ok(status) => status.len,
                Err(e) => {
                    first = Err(e.into());
                    continue;
                }
            };
            match answered(job, &answers[at..at + got], "an accumulate") {
                Ok(_) if fetched.is_null() => {}
                Ok(old) if old.len() == n => {
                    // SAFETY: the caller's contract: room for the packed bytes.
                    unsafe { rbtl::btl::copy_bytes(old.as_ptr(), fetched.add(from), n) };
                }
                Ok(_) => {
                    first = Err(Error::new(
                        MPI_ERR_INTERN,
                        format!("rank {job} answered an accumulate with {got} bytes"),
                    ))
                }
                Err(e) => first = Err(e),
            }
        }
        if b.answers.len() > ANSWERS_KEPT {
            b.answers = Vec::new();
        }
        self.shipping = b;
        first
    }
}

impl Mpi {
    /// Ask member `member` of window `win` question `s` (a [`Kind::Region`]) about
    /// `len` bytes at `addr`, and wait for the answer: its bytes after the status.
    pub(super) fn ask(
        &mut self,
        win: Handle,
        member: usize,
        s: &Ship,
        addr: usize,
        len: usize,
    ) -> Result<Vec<u8>> {
        let (job, ctx) = {
            let w = self.win(win)?;
            (w.peers[member].job, self.comm(w.comm)?.ctx)
        };
        let mut request = Vec::with_capacity(HEADER);
        header(&mut request, s, false, addr, len);
        let mut answer = vec![0u8; ASK_ROOM];
        // SAFETY: `answer` outlives the receive, waited for (or cancelled) below.
        let r = unsafe {
            self.msg
                .irecv_in(ctx, answer.as_mut_ptr(), ASK_ROOM, Some(job), Some(ASK_TAG))
        }?;
        if let Err(e) = self.msg.send_in(ctx | SERVED, &request, job, ASK_TAG) {
            self.msg.cancel(r);
            let _ = self.msg.wait(r);
            return Err(e.into());
        }
        let got = self.msg.wait(r)?.len;
        Ok(answered(job, &answer[..got], "a question")?.to_vec())
    }
}

/// The body of `answer`, from job rank `job`, to `what` (a request): its bytes after
/// the status; a refusal, or an answer with no status, is an error.
fn answered<'a>(job: u32, answer: &'a [u8], what: &str) -> Result<&'a [u8]> {
    match answer.split_first() {
        Some((0, body)) => Ok(body),
        Some((1, why)) => Err(Error::new(
            MPI_ERR_RMA_RANGE,
            format!(
                "rank {job} refused {what}: {}",
                String::from_utf8_lossy(why)
            ),
        )),
        _ => Err(Error::new(
            MPI_ERR_INTERN,
            format!("rank {job} answered {what} with {} bytes", answer.len()),
        )),
    }
}

#[cfg(test)]
mod tests;
