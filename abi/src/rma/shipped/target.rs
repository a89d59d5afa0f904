//! The target's side of shipped accumulates: the server that applies each request
//! to this process's memory under the window's accumulate mutex ([`super`] has the
//! protocol and the origin's side).

use super::super::dynamic::{self, Attached};
use super::super::element_atomics::{apply_each, hardware};
use super::super::lock_word::EXCLUSIVE;
use super::super::ACC_WORD;
use super::{decode_prim, Kind, ALONE, FETCH, HEADER, REASON};
use crate::datatype::{Pair, Prim};
use crate::ffi::*;
use crate::op;
use rbtl::msg::{Served, ServedRequest, Server, SERVED};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A window's memory and control block, as its own process reaches them.
#[derive(Clone)]
pub struct Exposure {
    pub(super) base: *mut u8,
    pub(super) size: usize,
    pub(super) control: *mut u8,
    /// A dynamic window's regions (`base` is then 0, offsets are addresses).
    pub(super) regions: Option<Attached>,
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
    /// The origin holds the member's lock exclusively ([`super::Ship::alone`]).
    alone: bool,
    prim: Prim,
    op: Handle,
    ranges: Ranges<'a>,
    operand: &'a [u8],
}

/// The ranges of the target a request names: one (offset and length from the
/// header), or several ([`Kind::Runs`]: 16 bytes each, every value checked to fit).
enum Ranges<'a> {
    One(usize, usize),
    Many(&'a [u8]),
}

impl Ranges<'_> {
    fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let (one, many) = match *self {
            Ranges::One(off, len) => (Some((off, len)), &[][..]),
            Ranges::Many(b) => (None, b),
        };
        let u = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
        one.into_iter()
            .chain(many.chunks_exact(16).map(move |r| (u(&r[..8]), u(&r[8..]))))
    }
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
        3 => Kind::Runs,
        k => return Err(format!("unknown request kind {k}")),
    };
    if b[1] & !(FETCH | ALONE) != 0 {
        return Err(format!("unknown request flags {:#x}", b[1]));
    }
    let prim = decode_prim([b[2], b[3], b[4]]).ok_or("an unknown basic kind")?;
    let offset = usize::try_from(u64_at(13)).map_err(|_| "offset beyond the address space")?;
    let len = usize::try_from(u64_at(21)).map_err(|_| "length beyond the address space")?;
    let (ranges, operand) = if kind == Kind::Runs {
        // The header's offset counts the ranges.
        let bytes = offset
            .checked_mul(16)
            .filter(|&n| n <= b.len() - HEADER)
            .ok_or_else(|| format!("{offset} ranges in a request of {} bytes", b.len()))?;
        let (ranges, operand) = b[HEADER..].split_at(bytes);
        let fits = |r: &[u8]| usize::try_from(u64::from_le_bytes(r.try_into().expect("8 bytes")));
        if ranges.chunks_exact(8).any(|r| fits(r).is_err()) {
            return Err("a range beyond the address space".to_string());
        }
        (Ranges::Many(ranges), operand)
    } else {
        (Ranges::One(offset, len), &b[HEADER..])
    };
    Ok(Parsed {
        kind,
        fetch: b[1] & FETCH != 0,
        alone: b[1] & ALONE != 0,
        prim,
        op: usize::try_from(u64_at(5)).map_err(|_| "an unknown operation")?,
        ranges,
        operand,
    })
}

/// Apply request `body` from job rank `source` to `e` under its accumulate mutex,
/// the answer in `answer`: `Ok(false)` when the mutex is held (to be offered again).
///
/// # Safety
///
/// `e` describes live memory of this process.
pub(super) unsafe fn apply(
    e: &Exposure,
    body: &[u8],
    source: u32,
    answer: &mut Vec<u8>,
) -> std::result::Result<bool, String> {
    let p = parse(body)?;
    if let (Kind::Region, Ranges::One(offset, len)) = (p.kind, &p.ranges) {
        let regions = e.regions.as_ref().ok_or("the window is not dynamic")?;
        answer.push(0);
        answer.extend(dynamic::answer(regions, source, *offset, *len)?);
        return Ok(true);
    }
    let psize = p.prim.size();
    // A pair with a gap lies in memory as its C struct, and travels packed.
    let unit = gapped(p.prim).map_or(psize, Pair::extent);
    let mut total = 0usize;
    for (offset, len) in p.ranges.iter() {
        inside(e, offset, len)?;
        if len % unit != 0 {
            return Err(format!(
                "{len} bytes are no whole number of {unit}-byte elements"
            ));
        }
        total = total
            .checked_add(len)
            .ok_or("ranges beyond the address space")?;
    }
    let need = match (p.kind, &p.ranges) {
        (Kind::Accumulate | Kind::Runs, _) if p.op == MPI_NO_OP => 0,
        (Kind::Accumulate | Kind::Runs, _) => total / unit * psize,
        (Kind::CompareSwap, Ranges::One(..)) => 2 * total,
        _ => return Err("a request of this kind names one range".to_string()),
    };
    if p.operand.len() != need {
        return Err(format!(
            "an operand of {} bytes where {need} belong",
            p.operand.len()
        ));
    }
    if p.kind != Kind::CompareSwap && !(op::is_predefined(p.op) && op::supports(p.op, p.prim)) {
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
    answer.push(0);
    let mut operand = p.operand;
    let mut applied = Ok(());
    for (offset, len) in p.ranges.iter() {
        let n = len / unit;
        let take = match p.kind {
            Kind::CompareSwap => need,
            _ if need == 0 => 0,
            _ => n * psize,
        };
        let (mine, rest) = operand.split_at(take);
        operand = rest;
        // The range lies inside the window or one of its regions (checked; a
        // dynamic window's base is 0); the mutex keeps other accumulates from it.
        let at = e.base.wrapping_add(offset);
        // SAFETY: as above; `mine` holds the range's operand (checked).
        applied = unsafe { apply_range(&p, at, len, mine, answer) };
        if applied.is_err() {
            break;
        }
    }
    mutex.fetch_sub(EXCLUSIVE, Ordering::Release);
    applied.map(|()| true)
}

/// `[offset, offset + len)` lies inside `e`'s memory (on a dynamic window, in a
/// region attached, or a run of them: offsets are addresses).
fn inside(e: &Exposure, offset: usize, len: usize) -> std::result::Result<(), String> {
    match &e.regions {
        Some(regions) if !dynamic::is_attached(regions, offset, len) => Err(format!(
            "{len} bytes at {offset:#x} lie in no region attached to the window"
        )),
        Some(_) => Ok(()),
        None if offset.checked_add(len).is_some_and(|end| end <= e.size) => Ok(()),
        None => Err(format!(
            "{len} bytes at offset {offset} fall outside the window's {} bytes",
            e.size
        )),
    }
}

/// Apply request `p` to the `len` bytes at `at` with `operand` (its part for
/// them), the old data appended to `answer` when asked for.
///
/// # Safety
///
/// `at` holds `len` bytes of this process, whole elements, which the window's
/// mutex (held) keeps from other accumulates; `operand` holds their operand.
unsafe fn apply_range(
    p: &Parsed<'_>,
    at: *mut u8,
    len: usize,
    operand: &[u8],
    answer: &mut Vec<u8>,
) -> std::result::Result<(), String> {
    let psize = p.prim.size();
    if let Some(pair) = gapped(p.prim) {
        let n = len / pair.extent();
        // SAFETY: the caller's contract: `n` structs, `n` packed pairs.
        return unsafe { apply_gapped(pair, p.op, operand, at, n, p.fetch.then_some(answer)) };
    }
    let n = len / psize;
    // An operation transports perform atomically, on aligned words: with the
    // processor's atomic instructions, which the transports' atomics to this
    // memory mix with (their origins ship only over such transports); at once where
    // the origin holds the member alone.
    let atomic = match p.kind {
        Kind::Accumulate | Kind::Runs => {
            hardware(p.op, Some(p.prim)).filter(|_| at as usize % psize == 0 && !p.alone)
        }
        _ => None,
    };
    if let Some(atomic) = atomic {
        let fetched = if p.fetch {
            let start = answer.len();
            answer.resize(start + n * psize, 0);
            answer[start..].as_mut_ptr()
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: the caller's contract: `n` aligned words (other processes reach
        // them meanwhile only atomically: the origin holds no exclusive lock), `n`
        // operands; `fetched` has room for `n`.
        unsafe {
            apply_each(
                atomic,
                p.op == MPI_NO_OP,
                operand.as_ptr(),
                at,
                n,
                psize,
                fetched,
            )
        };
        return Ok(());
    }
    if p.fetch {
        // SAFETY: the caller's contract.
        answer.extend_from_slice(unsafe { rbtl::btl::slice_at(at, len) });
    }
    match p.kind {
        Kind::Accumulate | Kind::Runs => {
            // SAFETY: the operand and the target hold `n` elements each.
            unsafe { op::reduce_basic(p.op, p.prim, operand.as_ptr(), at, n) }
                .map_err(|e| e.message)
        }
        Kind::CompareSwap => {
            let (value, compare) = operand.split_at(len);
            // SAFETY: the caller's contract.
            let now = unsafe { rbtl::btl::slice_at_mut(at, len) };
            if now == compare {
                now.copy_from_slice(value);
            }
            Ok(())
        }
        Kind::Region => Err("a region request applies nothing".to_string()),
    }
}

/// The pair kind of `p` when its index does not follow its value in its C struct
/// (`MPI_SHORT_INT`): packed and in memory, its elements differ.
pub(super) fn gapped(p: Prim) -> Option<Pair> {
    match p {
        Prim::Pair(q) if q.index_offset() != q.parts().0.size() => Some(q),
        _ => None,
    }
}

/// Apply predefined `op` with the `n` packed pairs of `operand` (none for
/// `MPI_NO_OP`) to the `n` C structs of `pair` at `at`, one by one; their
/// previous values, packed, appended to `fetched` when given.
///
/// # Safety
///
/// `at` holds `n` structs of `pair`, reached by no other process meanwhile;
/// `operand` holds `n` packed pairs unless `op` is `MPI_NO_OP`.
unsafe fn apply_gapped(
    pair: Pair,
    op: Handle,
    operand: &[u8],
    at: *mut u8,
    n: usize,
    mut fetched: Option<&mut Vec<u8>>,
) -> std::result::Result<(), String> {
    let (value, index) = pair.parts();
    let (v, i, io) = (value.size(), index.size(), pair.index_offset());
    let mut packed = [0u8; 64];
    let packed = &mut packed[..v + i];
    for k in 0..n {
        // SAFETY: the caller's contract: struct `k` lies at `at + k * extent`.
        let (vs, is) = unsafe {
            let s = at.add(k * pair.extent());
            (
                rbtl::btl::slice_at_mut(s, v),
                rbtl::btl::slice_at_mut(s.add(io), i),
            )
        };
        packed[..v].copy_from_slice(vs);
        packed[v..].copy_from_slice(is);
        if let Some(out) = fetched.as_deref_mut() {
            out.extend_from_slice(packed);
        }
        if op == MPI_NO_OP {
            continue;
        }
        let from = operand[k * (v + i)..(k + 1) * (v + i)].as_ptr();
        // SAFETY: one packed pair on either side.
        unsafe { op::reduce_basic(op, Prim::Pair(pair), from, packed.as_mut_ptr(), 1) }
            .map_err(|e| e.message)?;
        vs.copy_from_slice(&packed[..v]);
        is.copy_from_slice(&packed[v..]);
    }
    Ok(())
}
