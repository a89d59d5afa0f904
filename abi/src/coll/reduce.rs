//! Collectives that combine data: reduce, all-reduce, reduce-scatter and scans, on
//! packed elements in places of a schedule.
//!
//! A combination `a op b` keeps the standard's order (lower ranks on the left), so
//! that operations that do not commute get the result the standard defines: the
//! algorithms for those follow the rank order, the others may not.

use super::{Loc, Local, Members, Schedule, Xfer};
use crate::datatype::Datatype;
use crate::op::Op;

/// What is combined: `count` packed elements of a type, by an operation.
pub struct Combine<'a> {
    pub op: Op,
    pub ty: &'a Datatype,
    /// The type's handle, for a user's function.
    pub handle: crate::ffi::Handle,
    pub count: usize,
}

impl Combine<'_> {
    fn bytes(&self) -> usize {
        self.ty.size * self.count
    }

    /// `into = from op into` over `count` elements at the given places.
    fn local(&self, from: Loc, into: Loc, count: usize) -> Local {
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
    fn after(&self, then: &mut Vec<Local>, acc: Loc, other: Loc, count: usize) {
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

/// Reduce to `root` down a binomial tree: each member combines what its children
/// send into its own, then sends the result to its parent. An operation that does
/// not commute is reduced to rank 0 in rank order, then sent to the root.
/// `acc` holds this member's operand and becomes the result at the root.
pub fn reduce(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc, root: u32) {
    let (n, me) = (m.size, m.rank);
    let len = c.bytes();
    let ordered = !c.op.commutative();
    let top = if ordered { 0 } else { root };
    let vr = (me + n - top) % n;
    let job = |v: u32| m.job((v + top) % n);
    let tmp = s.scratch(len);
    let mut mask = 1;
    while mask < n {
        if vr & mask == 0 {
            let child = vr | mask;
            if child < n {
                let r = s.round();
                r.xfers.push(Xfer::Recv {
                    into: tmp,
                    len,
                    from: job(child),
                });
                c.after(r.then, acc, tmp, c.count);
            }
        } else {
            s.round().xfers.push(Xfer::Send {
                from: acc,
                len,
                to: job(vr - mask),
            });
            break;
        }
        mask <<= 1;
    }
    if top != root {
        if me == top {
            s.round().xfers.push(Xfer::Send {
                from: acc,
                len,
                to: m.job(root),
            });
        } else if me == root {
            s.round().xfers.push(Xfer::Recv {
                into: acc,
                len,
                from: m.job(top),
            });
        }
    }
}

/// All-reduce in place at `acc` (this member's operand, then the result): recursive
/// doubling for short vectors or operations that do not commute, a ring
/// (reduce-scatter then all-gather) for long ones.
pub fn allreduce(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    if m.size == 1 || c.count == 0 {
        return;
    }
    if c.op.commutative() && c.bytes() >= RING_MIN && c.count >= m.size as usize {
        ring(s, m, c, acc)
    } else {
        doubling(s, m, c, acc)
    }
}

/// Smallest all-reduce (bytes) done around a ring.
const RING_MIN: usize = 64 << 10;

/// Recursive doubling, with the members beyond the largest power of two folded
/// into their neighbours first (MPICH's algorithm).
fn doubling(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    let (n, me) = (m.size, m.rank);
    let len = c.bytes();
    let pof2 = 1 << (31 - n.leading_zeros());
    let rem = n - pof2;
    let tmp = s.scratch(len);
    let newrank = if me < 2 * rem {
        if me % 2 == 0 {
            s.round().xfers.push(Xfer::Send {
                from: acc,
                len,
                to: m.job(me + 1),
            });
            None
        } else {
            let r = s.round();
            r.xfers.push(Xfer::Recv {
                into: tmp,
                len,
                from: m.job(me - 1),
            });
            // The neighbour is lower: acc = tmp op acc.
            r.then.push(c.local(tmp, acc, c.count));
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    };
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < pof2 {
            let nd = nr ^ mask;
            let dst = if nd < rem { nd * 2 + 1 } else { nd + rem };
            let r = s.round();
            r.xfers.push(Xfer::Send {
                from: acc,
                len,
                to: m.job(dst),
            });
            r.xfers.push(Xfer::Recv {
                into: tmp,
                len,
                from: m.job(dst),
            });
            if dst < me {
                r.then.push(c.local(tmp, acc, c.count));
            } else {
                c.after(r.then, acc, tmp, c.count);
            }
            mask <<= 1;
        }
    }
    if me < 2 * rem {
        let r = s.round();
        if me % 2 == 1 {
            r.xfers.push(Xfer::Send {
                from: acc,
                len,
                to: m.job(me - 1),
            });
        } else {
            r.xfers.push(Xfer::Recv {
                into: acc,
                len,
                from: m.job(me + 1),
            });
        }
    }
}

/// The ring: the vector in n chunks; n - 1 steps pass chunks right, each member
/// combining the one it receives into its own, until each holds one chunk fully
/// combined; n - 1 more pass the combined chunks around.
fn ring(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    let (n, me) = (m.size as usize, m.rank as usize);
    let size = c.ty.size;
    let chunk = |i: usize| {
        let (a, b) = (i * c.count / n, (i + 1) * c.count / n);
        (a * size, b - a)
    };
    let largest = c.count.div_ceil(n) * size;
    let tmp = s.scratch(largest);
    let (right, left) = (
        m.job(((me + 1) % n) as u32),
        m.job(((me + n - 1) % n) as u32),
    );
    for k in 0..n - 1 {
        let (out, inn) = ((me + n - k) % n, (me + 2 * n - k - 1) % n);
        let (oat, on) = chunk(out);
        let (iat, inum) = chunk(inn);
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from: acc.offset(oat),
            len: on * size,
            to: right,
        });
        r.xfers.push(Xfer::Recv {
            into: tmp,
            len: inum * size,
            from: left,
        });
        r.then.push(c.local(tmp, acc.offset(iat), inum));
    }
    for k in 0..n - 1 {
        let (out, inn) = ((me + 1 + n - k) % n, (me + n - k) % n);
        let (oat, on) = chunk(out);
        let (iat, inum) = chunk(inn);
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from: acc.offset(oat),
            len: on * size,
            to: right,
        });
        r.xfers.push(Xfer::Recv {
            into: acc.offset(iat),
            len: inum * size,
            from: left,
        });
    }
}

/// Inclusive (`exclusive` false) or exclusive prefix combination along the ranks:
/// each member waits for the prefix of those before it. `mine` holds this member's
/// operand, `out` receives the result (they may be the same place only for the
/// inclusive scan).
pub fn scan(s: &mut Schedule, m: &Members, c: &Combine, mine: Loc, out: Loc, exclusive: bool) {
    let (n, me) = (m.size, m.rank);
    let len = c.bytes();
    // The prefix this member passes on: its own operand combined after what came.
    let pass = if exclusive { s.scratch(len) } else { out };
    let r = s.round();
    r.then.push(Local::Copy {
        from: mine,
        to: pass,
        len,
    });
    if me > 0 {
        let prefix = if exclusive { out } else { s.scratch(len) };
        let r = s.round();
        r.xfers.push(Xfer::Recv {
            into: prefix,
            len,
            from: m.job(me - 1),
        });
        // pass = prefix op pass.
        r.then.push(c.local(prefix, pass, c.count));
    }
    if me + 1 < n {
        s.round().xfers.push(Xfer::Send {
            from: pass,
            len,
            to: m.job(me + 1),
        });
    }
}
