//! Accumulates shipped to their target: an accumulate that no transport atomic
//! performs, or a long one that transport atomics would perform element by element
//! where the target applies them with the processor's atomic instructions
//! ([`AtomicFlags::GLOB`](rbtl::btl::AtomicFlags::GLOB)), on a member whose memory
//! this process does not map, goes to the target as a message (the message layer's served contexts,
//! [`rbtl::msg::SERVED`]), which applies it to its own memory under the window's
//! accumulate mutex and answers with the data it replaced: one round trip, where
//! taking the mutex remotely, reading, writing back and releasing took four (as
//! Open MPI's `osc/pt2pt` ships its accumulates).
//!
//! A request carries one piece of one run of the target: whole elements, as many
//! as one eager message of the route holds (each piece is applied atomically,
//! every element whole: what MPI asks of concurrent accumulates). A type of several
//! basic kinds (which only `MPI_REPLACE` and `MPI_NO_OP` take) moves as bytes, cut
//! where the target's memory is aligned to 16: its elements, naturally aligned,
//! stay whole. An operation transports perform atomically, on aligned words, is
//! applied with the processor's atomic instructions, one per element, so that the
//! transports' atomics on the same words lose nothing. The target applies a request at its next call into the library,
//! like any message it receives; the origin waits for every piece's answer before
//! the call returns.
//!
//! Request (little-endian): kind (0 accumulate, 1 compare-and-swap, 2 the region
//! of a dynamic window that holds the bytes), whether the old data is wanted, the
//! basic kind (3 bytes), the operation (u64), the offset and length in the target's
//! window (u64 each; on a dynamic window the offset is an address), then the
//! operand (for a compare-and-swap, the value then the comparand). Answer: 0 then
//! the old data when wanted (for a region: its base, size and card), or 1 then the
//! reason it was refused.

use super::atomics::hardware;
use super::dynamic::{self, Attached};
use super::ops::Access;
use super::sync::EXCLUSIVE;
use super::ACC_WORD;
use crate::datatype::{Pair, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::op;
use crate::state::Mpi;
use rbtl::btl::{AtomicOp, AtomicRequest, AtomicWidth};
use rbtl::msg::{ReqId, Served, ServedRequest, Server, SERVED};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Tags of the answers: this plus the piece's index.
const ANSWER_TAG: i32 = 1 << 20;
/// Bytes of a request before its operand.
const HEADER: usize = 29;
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
}

/// A window's memory and control block, as its own process reaches them.
#[derive(Clone)]
pub struct Exposure {
    base: *mut u8,
    size: usize,
    control: *mut u8,
    /// A dynamic window's regions (`base` is then 0, offsets are addresses).
    regions: Option<Attached>,
}

/// This process's windows, by the context of each window's communicator: what
/// the server applies requests to.
pub type Exposures = Rc<RefCell<HashMap<u32, Exposure>>>;

/// Add window `ctx` (its memory `base`/`size`, its control block `control`; a
/// dynamic window's `regions`) to `exposures`, before any member can know of it.
pub fn expose(
    exposures: &Exposures,
    ctx: u32,
    (base, size): (*mut u8, usize),
    control: *mut u8,
    regions: Option<Attached>,
) {
    exposures.borrow_mut().insert(
        ctx,
        Exposure {
            base,
            size,
            control,
            regions,
        },
    );
}

/// The server of shipped requests over `exposures`.
pub fn server(exposures: Exposures) -> Server {
    Box::new(move |r: ServedRequest<'_>, answer: &mut Vec<u8>| {
        let ctx = r.ctx & !SERVED;
        let Some(e) = exposures.borrow().get(&ctx).cloned() else {
            return refuse(
                answer,
                r.tag,
                ctx,
                "no window of this process has that context",
            );
        };
        // SAFETY: the exposure's memory lives until the window is freed, which
        // removes it first (after every member has passed its last access).
        match unsafe { apply(&e, r.body, r.source, answer) } {
            Ok(true) => Served::Reply { tag: r.tag, ctx },
            Ok(false) => Served::Later,
            Err(why) => refuse(answer, r.tag, ctx, &why),
        }
    })
}

fn refuse(answer: &mut Vec<u8>, tag: i32, ctx: u32, why: &str) -> Served {
    answer.clear();
    answer.push(1);
    let why = &why.as_bytes()[..why.len().min(REASON - 1)];
    answer.extend_from_slice(why);
    Served::Reply { tag, ctx }
}

/// A request, decoded.
struct Parsed<'a> {
    kind: Kind,
    fetch: bool,
    prim: Prim,
    op: Handle,
    offset: usize,
    len: usize,
    operand: &'a [u8],
}

fn parse(b: &[u8]) -> std::result::Result<Parsed<'_>, String> {
    if b.len() < HEADER {
        return Err(format!(
            "a request of {} bytes (at least {HEADER})",
            b.len()
        ));
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let kind = match b[0] {
        0 => Kind::Accumulate,
        1 => Kind::CompareSwap,
        2 => Kind::Region,
        k => return Err(format!("unknown request kind {k}")),
    };
    let prim = decode_prim([b[2], b[3], b[4]]).ok_or("an unknown basic kind")?;
    let offset = usize::try_from(u64_at(13)).map_err(|_| "offset beyond the address space")?;
    let len = usize::try_from(u64_at(21)).map_err(|_| "length beyond the address space")?;
    Ok(Parsed {
        kind,
        fetch: b[1] != 0,
        prim,
        op: usize::try_from(u64_at(5)).map_err(|_| "an unknown operation")?,
        offset,
        len,
        operand: &b[HEADER..],
    })
}

/// Apply request `body` from job rank `source` to `e` under its accumulate mutex,
/// the answer in `answer`: `Ok(false)` when the mutex is held (to be offered again).
///
/// # Safety
///
/// `e` describes live memory of this process.
unsafe fn apply(
    e: &Exposure,
    body: &[u8],
    source: u32,
    answer: &mut Vec<u8>,
) -> std::result::Result<bool, String> {
    let p = parse(body)?;
    match &e.regions {
        Some(regions) if p.kind == Kind::Region => {
            answer.push(0);
            answer.extend(dynamic::answer(regions, source, p.offset, p.len)?);
            return Ok(true);
        }
        Some(regions) if !dynamic::is_attached(regions, p.offset, p.len) => {
            return Err(format!(
                "{} bytes at {:#x} lie in no region attached to the window",
                p.len, p.offset
            ));
        }
        Some(_) => {}
        None if p.kind == Kind::Region => {
            return Err("the window is not dynamic".to_string());
        }
        None => {
            let end = p.offset.checked_add(p.len).filter(|&end| end <= e.size);
            if end.is_none() {
                return Err(format!(
                    "{} bytes at offset {} fall outside the window's {} bytes",
                    p.len, p.offset, e.size
                ));
            }
        }
    }
    let psize = p.prim.size();
    if p.len % psize != 0 {
        return Err(format!(
            "{} bytes are no whole number of {psize}-byte elements",
            p.len
        ));
    }
    let need = match p.kind {
        Kind::Accumulate if p.op == MPI_NO_OP => 0,
        Kind::Accumulate => p.len,
        Kind::CompareSwap => 2 * p.len,
        Kind::Region => unreachable!("answered above"),
    };
    if p.operand.len() != need {
        return Err(format!(
            "an operand of {} bytes where {need} belong",
            p.operand.len()
        ));
    }
    if p.kind == Kind::Accumulate && !(op::is_predefined(p.op) && op::supports(p.op, p.prim)) {
        return Err(format!(
            "{} does not apply to this basic kind",
            op::name(p.op)
        ));
    }
    // SAFETY: the control block holds the aligned mutex word, reached only
    // atomically by every process.
    let mutex = unsafe { AtomicU64::from_ptr(e.control.add(ACC_WORD).cast()) };
    if mutex
        .compare_exchange(0, EXCLUSIVE, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return Ok(false);
    }
    // The range lies inside the window or one of its regions (checked; a dynamic
    // window's base is 0); the mutex keeps other accumulates from it meanwhile.
    let at = e.base.wrapping_add(p.offset);
    answer.push(0);
    let n = p.len / psize;
    // An operation transports perform atomically, on aligned words: with the
    // processor's atomic instructions, which the transports' atomics to this
    // memory mix with (their origins ship only over such transports).
    let atomic = match p.kind {
        Kind::Accumulate => hardware(p.op, Some(p.prim)).filter(|_| at as usize % psize == 0),
        _ => None,
    };
    if let Some(atomic) = atomic {
        let fetched = p.fetch.then_some(&mut *answer);
        // SAFETY: the target holds `n` aligned words (checked), reached only
        // atomically by every process; the operand holds `n` (checked).
        unsafe { apply_atomically(atomic, p.op == MPI_NO_OP, p.operand, at, n, psize, fetched) };
        mutex.fetch_sub(EXCLUSIVE, Ordering::Release);
        return Ok(true);
    }
    if p.fetch {
        // SAFETY: as above.
        answer.extend_from_slice(unsafe { rbtl::btl::slice_at(at, p.len) });
    }
    let applied = match p.kind {
        // SAFETY: the operand and the target hold `n` elements each (checked).
        Kind::Accumulate => unsafe { op::reduce_basic(p.op, p.prim, p.operand.as_ptr(), at, n) }
            .map_err(|e| e.message),
        Kind::CompareSwap => {
            let (value, compare) = p.operand.split_at(p.len);
            // SAFETY: as above.
            let now = unsafe { rbtl::btl::slice_at_mut(at, p.len) };
            if now == compare {
                now.copy_from_slice(value);
            }
            Ok(())
        }
        Kind::Region => unreachable!("answered above"),
    };
    mutex.fetch_sub(EXCLUSIVE, Ordering::Release);
    applied.map(|()| true)
}

/// Apply `atomic` with each of the `n` words of `bytes` (4 or 8) in `operand` (none
/// for `MPI_NO_OP`, `no_op`: the words are only read) to the words at `at`, each with
/// one atomic instruction; their previous values appended to `fetched` when given.
///
/// # Safety
///
/// `at` holds `n` words aligned to `bytes`, which every process reaches only
/// atomically; `operand` holds `n` unless `no_op`.
unsafe fn apply_atomically(
    atomic: AtomicOp,
    no_op: bool,
    operand: &[u8],
    at: *mut u8,
    n: usize,
    bytes: usize,
    mut fetched: Option<&mut Vec<u8>>,
) {
    let width = if bytes == 4 {
        AtomicWidth::W32
    } else {
        AtomicWidth::W64
    };
    let request = AtomicRequest {
        op: Some(atomic),
        width,
    };
    for i in 0..n {
        // SAFETY: the caller's contract: word `i` is aligned and reached atomically.
        let word = unsafe { at.add(i * bytes) };
        let old = if no_op {
            // SAFETY: as above.
            unsafe { load(word, width) }
        } else {
            let mut v = [0u8; 8];
            v[..bytes].copy_from_slice(&operand[i * bytes..(i + 1) * bytes]);
            // SAFETY: as above.
            unsafe { request.apply(word, u64::from_ne_bytes(v), 0) }
        };
        if let Some(out) = fetched.as_deref_mut() {
            out.extend_from_slice(&old.to_ne_bytes()[..bytes]);
        }
    }
}

/// The word of `width` at `at`, read atomically (zero-extended).
///
/// # Safety
///
/// `at` holds an aligned word of `width`, reached only atomically.
unsafe fn load(at: *mut u8, width: AtomicWidth) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        match width {
            AtomicWidth::W32 => u64::from(AtomicU32::from_ptr(at.cast()).load(Ordering::Acquire)),
            AtomicWidth::W64 => AtomicU64::from_ptr(at.cast()).load(Ordering::Acquire),
        }
    }
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

/// What shipping an accumulate uses on every call, kept for the next: a
/// get-accumulate of a few bytes otherwise spent more on allocating them than on the
/// rest of its path.
#[derive(Default)]
pub struct Buffers {
    /// The pieces: (offset in the target, length, offset in the packed data).
    pieces: Vec<(usize, usize, usize)>,
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
}

/// Start `out` (emptied) with the header of a request `s` on the `len` bytes at
/// `offset` of the target's window.
fn header(out: &mut Vec<u8>, s: &Ship, fetch: bool, offset: usize, len: usize) {
    out.clear();
    out.push(s.kind as u8);
    out.push(u8::from(fetch));
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
            Kind::Accumulate | Kind::Region => room / psize * psize,
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
            answers,
            posted,
            request,
        } = &mut b;
        pieces.clear();
        let mut packed = 0;
        for &(off, len) in runs.iter() {
            let mut done = 0;
            while done < len {
                let mut n = step.min(len - done);
                if s.prim == Prim::Byte && n < len - done && n > ALIGN {
                    // Bytes of a type of several kinds: cut where the target's memory
                    // is aligned to 16, which no naturally aligned element straddles.
                    n -= ((base + (off + done + n) as u64) % ALIGN as u64) as usize;
                }
                pieces.push((off + done, n, packed + done));
                done += n;
            }
            packed += len;
        }
        let cap = |n: usize| 1 + if fetched.is_null() { 0 } else { n } + REASON;
        let room: usize = pieces.iter().map(|p| cap(p.1)).sum();
        if answers.len() < room {
            answers.resize(room, 0);
        }
        posted.clear();
        let mut sent = Ok(());
        let mut at = 0;
        for (i, &(off, n, from)) in pieces.iter().enumerate() {
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
            header(request, s, !fetched.is_null(), added + off, n);
            // SAFETY: the caller's contract: the operand holds the piece.
            unsafe {
                match s.kind {
                    Kind::Accumulate if s.op == MPI_NO_OP => {}
                    Kind::Region => {}
                    Kind::Accumulate => {
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
                    unsafe { std::ptr::copy_nonoverlapping(old.as_ptr(), fetched.add(from), n) };
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
