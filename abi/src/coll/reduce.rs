//! Collectives that combine data: reduce and scans, on packed elements in places of
//! a schedule, and the rounds they and the all-reduce ([`super::allreduce`]) are
//! made of.
//!
//! A combination `a op b` keeps the standard's order (lower ranks on the left), so
//! that operations that do not commute get the result the standard defines: the
//! algorithms for those follow the rank order, the others may not.

use super::schedule::Round;
use super::{Loc, Local, Members, Schedule, Xfer};
use crate::datatype::Datatype;
use crate::op::Op;
use std::ops::Range;

/// What is combined: `count` packed elements of a type, by an operation.
pub struct Combine<'a> {
    pub op: Op,
    pub ty: &'a Datatype,
    /// The type's handle, for a user's function.
    pub handle: crate::ffi::Handle,
    pub count: usize,
}

impl Combine<'_> {
    /// The bytes of the elements combined.
    pub fn bytes(&self) -> usize {
        self.ty.size * self.count
    }

    /// `into = from op into` over `count` elements at the given places.
    pub(super) fn local(&self, from: Loc, into: Loc, count: usize) -> Local {
        match (self.op, self.ty.prim) {
            (Op::Predefined(op), Some(prim)) => Local::ReduceBasic {
                op,
                prim,
                from,
                into,
                n: count * self.ty.size / prim.size(),
            },
            _ => Local::Reduce {
                op: self.op,
                ty: self.ty.clone(),
                handle: self.handle,
                from,
                into,
                count,
            },
        }
    }

    /// `acc = acc op other` where `other` holds the operand of higher rank: in place
    /// for a commutative operation, through `other` (then copied back) otherwise.
    /// The steps go to `then`.
    pub(super) fn after(&self, then: &mut Vec<Local>, acc: Loc, other: Loc, count: usize) {
        if self.op.commutative() {
            then.push(self.local(other, acc, count));
            return;
        }
        then.push(self.local(acc, other, count));
        then.push(Local::Copy {
            from: other,
            to: acc,
            len: count * self.ty.size,
        });
    }
}

/// The member at the top of [`reduce`]'s tree: the root, or rank 0 for an operation
/// that does not commute.
fn reduce_top(c: &Combine, root: u32) -> u32 {
    if c.op.commutative() {
        root
    } else {
        0
    }
}

/// Whether this member combines anything in [`reduce`]: the root does, and so does a
/// member with children in the tree; the others only send their operand, which then
/// need not be copied first.
pub fn reduce_combines(m: &Members, c: &Combine, root: u32) -> bool {
    let vr = (m.rank + m.size - reduce_top(c, root)) % m.size;
    // A member's first child is the one after it (round 1); a member without that
    // one has none (its later children would be further still).
    m.rank == root || (vr % 2 == 0 && vr + 1 < m.size)
}

/// Reduce to `root` down a binomial tree: each member combines what its children
/// send into its own, then sends the result to its parent. An operation that does
/// not commute is reduced to rank 0 in rank order, then sent to the root.
/// `input` holds this member's operand, and `acc` becomes the result at the root.
/// They may be one place; where they are not, `input` is only read: the first
/// child's result lands in `acc` and is combined there with the operand
/// (`acc = input op acc`), which saves copying the operand first, and a member
/// that combines nothing ([`reduce_combines`]) sends its operand from `input`.
pub fn reduce(s: &mut Schedule, m: &Members, c: &Combine, (input, acc): (Loc, Loc), root: u32) {
    let (n, me) = (m.size, m.rank);
    let len = c.bytes();
    let top = reduce_top(c, root);
    let vr = (me + n - top) % n;
    let job = |v: u32| m.job((v + top) % n);
    // Where this member's partial result is.
    let mut held = input;
    let mut tmp = None;
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < n {
                if held != acc {
                    let r = receive(s, acc, len, job(child));
                    r.then.push(c.local(held, acc, c.count));
                    held = acc;
                } else {
                    let tmp = *tmp.get_or_insert_with(|| s.scratch_to_fill(len));
                    let r = receive(s, tmp, len, job(child));
                    c.after(r.then, acc, tmp, c.count);
                }
            }
        } else {
            send(s, held, len, job(vr - mask));
            break;
        }
        mask <<= 1;
    }
    if top != root {
        if me == top {
            send(s, held, len, m.job(root));
        } else if me == root {
            receive(s, acc, len, m.job(top));
            held = acc;
        }
    }
    if me == root && held != acc {
        s.round().then.push(Local::Copy {
            from: held,
            to: acc,
            len,
        });
    }
}

/// The most members of a reduce-scatter run pairwise (n - 1 rounds; beyond, the
/// reduce's log2 n rounds and the scatter's one).
pub const PAIRWISE_REDUCE_SCATTER_MAX: u32 = 16;

/// The most bytes of an operand (every member's blocks) that a reduce-scatter
/// halves recursively ([`halves`]), as Open MPI's `tuned` does: beyond, the halves'
/// messages grow with the operand, and on a node with more ranks than processors the
/// pairwise exchange of blocks measured faster (docs/performance.md).
pub const HALVING_REDUCE_SCATTER_MAX: usize = 12 << 10;

/// Whether a reduce-scatter of an operation that commutes, of `bytes` in all among
/// `n` members, halves recursively: a power of two of more than two members (at two,
/// pairwise sends the same), up to [`HALVING_REDUCE_SCATTER_MAX`].
pub fn halves(n: u32, bytes: usize) -> bool {
    n > 2 && n.is_power_of_two() && bytes <= HALVING_REDUCE_SCATTER_MAX
}

/// Whether [`reduce_scatter`] runs pairwise for `n` members and an operand of
/// `bytes`: then it only reads the operand (which need not be a copy).
pub fn reduce_scatters_pairwise(c: &Combine, n: u32, bytes: usize) -> bool {
    c.op.commutative() && !halves(n, bytes) && n <= PAIRWISE_REDUCE_SCATTER_MAX
}

/// Reduce-scatter the operand at `acc` (`counts` elements for each member, in
/// order: a copy the rounds may change, unless [`reduce_scatters_pairwise`], which
/// only reads it) into `out` (this member's block, `olen` bytes, apart from the
/// operand), where the operation commutes: by recursive halving where
/// [`halves`] says so (log2 n rounds, as MPICH's and Open MPI's for short operands;
/// the same bytes sent and combined as pairwise), pairwise on up to
/// [`PAIRWISE_REDUCE_SCATTER_MAX`] members otherwise (as MPICH's pairwise
/// reduce-scatter); else a reduce to member 0, then a scatter from it.
pub fn reduce_scatter(
    s: &mut Schedule,
    m: &Members,
    c: &Combine,
    acc: Loc,
    counts: &[usize],
    (out, olen): (Loc, usize),
) {
    let mut blocks = Vec::with_capacity(counts.len());
    let mut off = 0;
    for &k in counts {
        blocks.push((acc.offset(off), k * c.ty.size));
        off += k * c.ty.size;
    }
    let me = m.rank as usize;
    if reduce_scatters_pairwise(c, m.size, off) {
        reduce_scatter_pairwise(s, m, c, &blocks, (counts[me], out));
    } else if c.op.commutative() && halves(m.size, off) {
        reduce_scatter_halving(s, m, c, &blocks, counts);
        s.round().then.push(Local::Copy {
            from: blocks[me].0,
            to: out,
            len: olen,
        });
    } else {
        reduce(s, m, c, (acc, acc), 0);
        super::basic::scatterv(s, m, &blocks, Some((out, olen)), 0);
    }
}

/// Reduce-scatter pairwise, for an operation that commutes: in round k, this
/// member sends its operand's block of the member k after it to that member and
/// receives its own block's operand from the member k before it, which it combines
/// with its own into `acc` (`acc = received op own`; the first received lands in
/// `acc`, the others in a place of their own). `blocks` are this member's operand,
/// one block per member (`mine` elements in its own), only read; `acc` is apart.
fn reduce_scatter_pairwise(
    s: &mut Schedule,
    m: &Members,
    c: &Combine,
    blocks: &[(Loc, usize)],
    (mine, acc): (usize, Loc),
) {
    let (n, me) = (m.size, m.rank);
    let (own, len) = blocks[me as usize];
    // Where this member's partial result is.
    let mut held = own;
    let mut tmp = None;
    for k in 1..n {
        let (to, from) = ((me + k) % n, (me + n - k) % n);
        let out = (blocks[to as usize], m.job(to));
        if held != acc {
            let r = shift(s, out, ((acc, len), m.job(from)));
            r.then.push(c.local(held, acc, mine));
            held = acc;
        } else {
            let tmp = *tmp.get_or_insert_with(|| s.scratch_to_fill(len));
            let r = shift(s, out, ((tmp, len), m.job(from)));
            r.then.push(c.local(tmp, acc, mine));
        }
    }
    if held != acc {
        s.round().then.push(Local::Copy {
            from: held,
            to: acc,
            len,
        });
    }
}

/// One round of a recursive halving: the member this one exchanges with, the
/// members whose blocks this one goes on combining, and those whose blocks it gives
/// up to that member.
pub struct Halving {
    /// The member exchanged with.
    pub peer: usize,
    /// The members whose blocks this one goes on combining (its own among them).
    pub keep: Range<usize>,
    /// The members whose blocks go to `peer`.
    pub give: Range<usize>,
}

/// The rounds of a recursive halving among `n` members (a power of two) at member
/// `me`: in each, the members' blocks this one still combines are split in halves,
/// it keeps the half of its own block and gives the other to the member at the
/// same place in the other half (`me ^ half`), who does the opposite.
pub fn halving_rounds(n: usize, me: usize) -> impl Iterator<Item = Halving> {
    let mut range = 0..n;
    std::iter::from_fn(move || {
        let half = range.len() / 2;
        if half == 0 {
            return None;
        }
        let mid = range.start + half;
        let (keep, give) = match me < mid {
            true => (range.start..mid, mid..range.end),
            false => (mid..range.end, range.start..mid),
        };
        range = keep.clone();
        Some(Halving {
            peer: me ^ half,
            keep,
            give,
        })
    })
}

/// Where the blocks of the members `r` start in `blocks` (each where it starts, its
/// bytes), and their bytes together: they lie one after another.
pub fn span<L: Copy>(blocks: &[(L, usize)], r: &Range<usize>) -> (L, usize) {
    (
        blocks[r.start].0,
        blocks[r.clone()].iter().map(|b| b.1).sum(),
    )
}

/// Reduce-scatter by recursive halving ([`halving_rounds`]), for an operation that
/// commutes on a power of two of members: each round sends the half given up and
/// combines the peer's copy of the half kept into this member's (`acc = received op
/// acc`). `blocks` are this member's operand, one block per member (`counts`
/// elements each), its own block becoming the result.
fn reduce_scatter_halving(
    s: &mut Schedule,
    m: &Members,
    c: &Combine,
    blocks: &[(Loc, usize)],
    counts: &[usize],
) {
    let me = m.rank as usize;
    let Some(first) = halving_rounds(blocks.len(), me).next() else {
        return;
    };
    let tmp = s.scratch_to_fill(span(blocks, &first.keep).1);
    for h in halving_rounds(blocks.len(), me) {
        let (keep, give) = (span(blocks, &h.keep), span(blocks, &h.give));
        let r = swap(s, give, (tmp, keep.1), m.job(h.peer as u32));
        r.then
            .push(c.local(tmp, keep.0, counts[h.keep].iter().sum()));
    }
}

/// A round that sends `len` bytes at `from` to job rank `peer` and receives as many
/// from it into `into`.
pub(super) fn exchange(s: &mut Schedule, from: Loc, into: Loc, len: usize, peer: u32) -> Round<'_> {
    swap(s, (from, len), (into, len), peer)
}

/// A round that sends the bytes `out` names (where, how many) to job rank `peer` and
/// receives those `inn` names from it.
pub(super) fn swap(s: &mut Schedule, out: (Loc, usize), inn: (Loc, usize), peer: u32) -> Round<'_> {
    shift(s, (out, peer), (inn, peer))
}

/// A round that sends the bytes `out` names (where, how many) to job rank `to` and
/// receives those `inn` names from job rank `from`.
fn shift(
    s: &mut Schedule,
    (out, to): ((Loc, usize), u32),
    (inn, from): ((Loc, usize), u32),
) -> Round<'_> {
    let r = s.round();
    r.xfers.push(Xfer::Send {
        from: out.0,
        len: out.1,
        to,
    });
    r.xfers.push(Xfer::Recv {
        into: inn.0,
        len: inn.1,
        from,
    });
    r
}

/// A round that sends `len` bytes at `from` to job rank `to`.
pub(super) fn send(s: &mut Schedule, from: Loc, len: usize, to: u32) {
    s.round().xfers.push(Xfer::Send { from, len, to });
}

/// A round that receives `len` bytes into `into` from job rank `from`, its local
/// steps to fill.
pub(super) fn receive(s: &mut Schedule, into: Loc, len: usize, from: u32) -> Round<'_> {
    let r = s.round();
    r.xfers.push(Xfer::Recv { into, len, from });
    r
}

/// Inclusive (`exclusive` false) or exclusive prefix combination along the ranks:
/// each member waits for the prefix of those before it. `mine` holds this member's
/// operand, read in the first step only (before anything is received), `out`
/// receives the result; they may be the same place (in place).
pub fn scan(s: &mut Schedule, m: &Members, c: &Combine, mine: Loc, out: Loc, exclusive: bool) {
    let (n, me) = (m.size, m.rank);
    let len = c.bytes();
    // The prefix this member passes on: its own operand combined after what came.
    let pass = if exclusive {
        s.scratch_to_fill(len)
    } else {
        out
    };
    let r = s.round();
    if mine != pass {
        r.then.push(Local::Copy {
            from: mine,
            to: pass,
            len,
        });
    }
    if me > 0 {
        let prefix = if exclusive {
            out
        } else {
            s.scratch_to_fill(len)
        };
        let r = receive(s, prefix, len, m.job(me - 1));
        // pass = prefix op pass.
        r.then.push(c.local(prefix, pass, c.count));
    }
    if me + 1 < n {
        send(s, pass, len, m.job(me + 1));
    }
}
