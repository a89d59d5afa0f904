//! The target's side of shipped accumulates: the server that applies each request
//! to this process's memory under the window's accumulate mutex ([`super`] has the
//! protocol and the origin's side).

use super::super::atomics::hardware;
use super::super::dynamic::{self, Attached};
use super::super::sync::EXCLUSIVE;
use super::super::ACC_WORD;
use super::{decode_prim, Kind, HEADER, REASON};
use crate::datatype::{Pair, Prim};
use crate::ffi::*;
use crate::op;
use rbtl::btl::{AtomicOp, AtomicRequest, AtomicWidth};
use rbtl::msg::{Served, ServedRequest, Server, SERVED};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
pub(super) unsafe fn apply(
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
    // A pair with a gap lies in memory as its C struct, and travels packed.
    let unit = gapped(p.prim).map_or(psize, Pair::extent);
    if p.len % unit != 0 {
        return Err(format!(
            "{} bytes are no whole number of {unit}-byte elements",
            p.len
        ));
    }
    let n = p.len / unit;
    let need = match p.kind {
        Kind::Accumulate if p.op == MPI_NO_OP => 0,
        Kind::Accumulate => n * psize,
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
    if let Some(pair) = gapped(p.prim) {
        // SAFETY: the target holds `n` structs, the operand `n` packed pairs
        // (checked); the mutex keeps other accumulates from them.
        let applied = unsafe {
            apply_gapped(
                pair,
                p.op,
                p.operand,
                at,
                n,
                p.fetch.then_some(&mut *answer),
            )
        };
        mutex.fetch_sub(EXCLUSIVE, Ordering::Release);
        return applied.map(|()| true);
    }
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
