//! All-reduce: its algorithms (recursive doubling, a ring, Rabenseifner's halving,
//! gathered at one member) and the choice between them, by the vector's length, the
//! members' count and where they run, or by the user (`msg_allreduce_algorithm`).

use super::reduce::{exchange, receive, send, swap, Combine};
use super::{Loc, Local, Members, Schedule, Xfer};
use rbtl::msg::AllreduceAlgorithm;

/// Where the members of an all-reduce run, as every one of them sees it alike.
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    /// All on one node.
    pub one_node: bool,
    /// On one node that runs more of the job's ranks than it has processors.
    pub oversubscribed: bool,
}

/// The shortest vector, in bytes, that more than two members all-reduce around a
/// ring, or by halving it where they run on several nodes ([`allreduce`]).
pub const RING_FROM: usize = 32 << 10;

/// The most members an all-reduce gathers at one member ([`gathers`]).
pub const GATHERED_ALLREDUCE_MAX: u32 = 8;

/// The ways an all-reduce runs ([`allreduce`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Doubling,
    Ring,
    Halving,
    Gathered,
}

/// All-reduce of this member's operand at `input` into `acc` (the same place when in
/// place), among members placed as `at`, by the algorithm `chosen` where it applies
/// (`msg_allreduce_algorithm`), else as `default_way` chooses: recursive doubling
/// for short vectors or operations that do not commute, a ring (reduce-scatter then
/// all-gather) for long ones, or Rabenseifner's (halving) for those up to a few
/// hundred KiB a member on several nodes (`halves`), and short vectors gathered at
/// member 0 where ranks take turns on processors ([`gathers`]).
///
/// Where the operation commutes and `input` is apart from `acc`, no member writes
/// memory a peer has just read: each round's result goes to a place not yet sent
/// from, the last one to `acc`, and `input` is only read (so nothing is copied into
/// `acc` first). Over cross-memory attach a peer's read leaves the lines shared in its
/// cache, and writing them again waits for each to be taken back.
pub fn allreduce(
    s: &mut Schedule,
    m: &Members,
    c: &Combine,
    (input, acc): (Loc, Loc),
    (at, chosen): (Placement, AllreduceAlgorithm),
) {
    let way = forced(c, m.size, chosen).unwrap_or_else(|| default_way(c, m.size, at));
    let apart = input != acc
        && c.op.commutative()
        && m.size > 1
        && matches!(way, Way::Ring | Way::Doubling);
    if !apart && input != acc {
        s.round().then.push(Local::Copy {
            from: input,
            to: acc,
            len: c.bytes(),
        });
    }
    if m.size == 1 || c.count == 0 {
        return;
    }
    match (way, apart) {
        (Way::Halving, _) => halving(s, m, c, acc),
        (Way::Ring, _) => ring(s, m, c, apart.then_some(input), acc),
        (Way::Gathered, _) => gathered(s, m, c, acc),
        (Way::Doubling, true) => doubling_apart(s, m, c, input, acc),
        (Way::Doubling, false) => doubling(s, m, c, acc),
    }
}

/// The way of an all-reduce of `c` among `n` members placed as `at`, by default (the
/// way a small all-reduce run without a schedule must take too, [`super::small`]).
pub fn default_way(c: &Combine, n: u32, at: Placement) -> Way {
    // Where the ring would take 2(n - 1) rounds across nodes, halving takes
    // 2 log2(n) among a power of two of members, moving as many bytes; up to
    // [`HALVING_BLOCK_BELOW`] a block. On one node the ring stays: its chunks go
    // eagerly where halving's first halves would wait for a rendezvous.
    match by_ring(c, n, at.one_node) {
        true if !at.one_node && n > 2 && halves(c.bytes(), n) => Way::Halving,
        true => Way::Ring,
        false if gathers(c.op.commutative(), n, || at) => Way::Gathered,
        false => Way::Doubling,
    }
}

/// The longest block, in bytes, of the vector cut among the largest power of two of
/// the members, that a long all-reduce across nodes halves rather than passes
/// around a ring; half as long where members beyond the power of two fold in first
/// (their whole vectors cross twice more). Beyond, the ring's steps of one block
/// each measured faster across nodes (docs/performance.md).
pub const HALVING_BLOCK_BELOW: usize = 256 << 10;

/// Whether a long all-reduce of `bytes` among `n` members across nodes halves
/// ([`HALVING_BLOCK_BELOW`]).
fn halves(bytes: usize, n: u32) -> bool {
    let (pof2, rem, _) = folding(n, 0);
    let below = match rem {
        0 => HALVING_BLOCK_BELOW,
        _ => HALVING_BLOCK_BELOW / 2,
    };
    bytes < below * pof2 as usize
}

/// The way the user `chosen` for an all-reduce of `c` among `n` members, where it
/// applies: every way but recursive doubling needs an operation that commutes, and
/// the ring and halving at least one element a block.
fn forced(c: &Combine, n: u32, chosen: AllreduceAlgorithm) -> Option<Way> {
    let commutes = c.op.commutative();
    let (pof2, _, _) = folding(n.max(1), 0);
    match chosen {
        AllreduceAlgorithm::Doubling => Some(Way::Doubling),
        AllreduceAlgorithm::Ring if commutes && c.count >= n as usize => Some(Way::Ring),
        AllreduceAlgorithm::Halving if commutes && c.count >= pof2 as usize => Some(Way::Halving),
        AllreduceAlgorithm::Gathered if commutes => Some(Way::Gathered),
        _ => None,
    }
}

/// Whether an all-reduce of a short vector among `n` members placed as `at` is
/// gathered at member 0, which sends the result back to each: an operation that
/// commutes, on one node whose ranks take turns on its processors, among at most
/// [`GATHERED_ALLREDUCE_MAX`] members that recursive doubling would take more than
/// two rounds for. Each round waits for every member to have run; gathered, the
/// result is two hops away, at the price of member 0 receiving and sending once per
/// member. `at` is asked last, only where the rest allows gathering.
pub fn gathers(commutative: bool, n: u32, at: impl FnOnce() -> Placement) -> bool {
    // Recursive doubling's rounds: one per power of two, and folding in and out
    // beyond the largest.
    let (pof2, rem, _) = folding(n.max(1), 0);
    let doubling_rounds = pof2.trailing_zeros() + if rem == 0 { 0 } else { 2 };
    commutative && n <= GATHERED_ALLREDUCE_MAX && doubling_rounds > 2 && {
        let at = at();
        at.one_node && at.oversubscribed
    }
}

/// All-reduce gathered at member 0, in place at `acc`: every other member sends its
/// operand there, which combines them (an operation that commutes) and sends the
/// result back to each, all at once.
fn gathered(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    let len = c.bytes();
    let root = m.job(0);
    if m.rank != 0 {
        send(s, acc, len, root);
        receive(s, acc, len, root);
        return;
    }
    let slots: Vec<Loc> = (1..m.size).map(|_| s.scratch_to_fill(len)).collect();
    let r = s.round();
    for (v, &slot) in (1..m.size).zip(&slots) {
        r.xfers.push(Xfer::Recv {
            into: slot,
            len,
            from: m.job(v),
        });
        c.after(r.then, acc, slot, c.count);
    }
    let r = s.round();
    r.xfers.extend((1..m.size).map(|v| Xfer::Send {
        from: acc,
        len,
        to: m.job(v),
    }));
}

/// Whether an all-reduce of `c` among `n` members goes around a ring: long vectors of
/// an operation that commutes. The ring passes a member's share at a time, in eager
/// messages where recursive doubling would exchange the whole vector by rendezvous,
/// each waiting for its receiver to run. At two members the ring moves the same bytes
/// as one exchange, in two steps: on one node (`one_node`: every member sees it
/// alike), where the exchange measured faster up to 512 KiB, it waits for longer
/// vectors; across nodes it does not (docs/performance.md).
fn by_ring(c: &Combine, n: u32, one_node: bool) -> bool {
    let from = match (n, one_node) {
        (2, true) => 1 << 20,
        (2, false) => 64 << 10,
        _ => RING_FROM,
    };
    c.op.commutative() && c.bytes() >= from && c.count >= n as usize
}

/// Where recursive doubling puts the members beyond the largest power of two:
/// `(pof2, rem, newrank)`, `newrank` `None` for a member folded into its
/// neighbour (MPICH's algorithm).
fn folding(n: u32, me: u32) -> (u32, u32, Option<u32>) {
    let pof2 = 1 << (31 - n.leading_zeros());
    let rem = n - pof2;
    let newrank = match me < 2 * rem {
        true if me % 2 == 0 => None,
        true => Some(me / 2),
        false => Some(me - rem),
    };
    (pof2, rem, newrank)
}

/// The rank of the member of new rank `nr` in recursive doubling.
fn unfolded(rem: u32, nr: u32) -> u32 {
    if nr < rem {
        nr * 2 + 1
    } else {
        nr + rem
    }
}

/// Recursive doubling, with the members beyond the largest power of two folded
/// into their neighbours first (MPICH's algorithm), in place at `acc`.
fn doubling(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    let me = m.rank;
    let len = c.bytes();
    let (pof2, rem, newrank) = folding(m.size, me);
    let tmp = s.scratch_to_fill(len);
    fold(s, m, c, (acc, tmp), rem);
    if let Some(nr) = newrank {
        let mut mask = 1;
        while mask < pof2 {
            let dst = unfolded(rem, nr ^ mask);
            let r = exchange(s, acc, tmp, len, m.job(dst));
            if dst < me {
                r.then.push(c.local(tmp, acc, c.count));
            } else {
                c.after(r.then, acc, tmp, c.count);
            }
            mask <<= 1;
        }
    }
    unfold(s, m, rem, acc, len);
}

/// The members beyond the largest power of two fold their operands into their
/// neighbours (those below `2 rem`: each even one sends its operand at `acc` to the
/// odd one above, which receives it into `tmp` and combines it into its own).
fn fold(s: &mut Schedule, m: &Members, c: &Combine, (acc, tmp): (Loc, Loc), rem: u32) {
    let (me, len) = (m.rank, c.bytes());
    match (me < 2 * rem, me % 2) {
        (true, 0) => send(s, acc, len, m.job(me + 1)),
        (true, _) => {
            let r = receive(s, tmp, len, m.job(me - 1));
            // The neighbour is lower: acc = tmp op acc.
            r.then.push(c.local(tmp, acc, c.count));
        }
        (false, _) => {}
    }
}

/// Rabenseifner's all-reduce (MPICH's for long vectors), for an operation that
/// commutes, in place at `acc`. The members beyond the largest power of two fold
/// their operands into their neighbours first ([`fold`]); the members left, a power
/// of two, cut the vector into as many blocks (it has at least as many elements).
/// Recursive halving: each round a member gives a partner half of the blocks it
/// still holds and combines the partner's copy of the other half into its own,
/// until it holds one block, combined over every member. Recursive doubling then
/// gathers the combined blocks back, the partners in reverse order, and the folded
/// members get the result from their neighbours.
fn halving(s: &mut Schedule, m: &Members, c: &Combine, acc: Loc) {
    let (pof2, rem, newrank) = folding(m.size, m.rank);
    let tmp = s.scratch_to_fill(c.bytes());
    fold(s, m, c, (acc, tmp), rem);
    if let Some(me) = newrank {
        halve_among(s, (m, pof2, rem, me), c, (acc, tmp));
    }
    unfold(s, m, rem, acc, c.bytes());
}

/// The halving and doubling of [`halving`] among the `n` (a power of two) members
/// left after folding, this one `me` among them.
fn halve_among(
    s: &mut Schedule,
    (m, n, rem, me): (&Members, u32, u32, u32),
    c: &Combine,
    (acc, tmp): (Loc, Loc),
) {
    let size = c.ty.size;
    let first = |b: u32| b as usize * c.count / n as usize;
    // The byte offset and element count of blocks lo..hi.
    let span = |(lo, hi): (u32, u32)| (first(lo) * size, first(hi) - first(lo));
    let mut held = (0, n);
    // Each halving round's partner and the blocks held before it.
    let mut rounds = Vec::new();
    let mut mask = 1;
    while mask < n {
        let peer = m.job(unfolded(rem, me ^ mask));
        let mid = (held.0 + held.1) / 2;
        let (keep, give) = match me & mask {
            0 => ((held.0, mid), (mid, held.1)),
            _ => ((mid, held.1), (held.0, mid)),
        };
        let ((gat, gn), (kat, kn)) = (span(give), span(keep));
        let out = (acc.offset(gat), gn * size);
        let r = swap(s, out, (tmp.offset(kat), kn * size), peer);
        r.then.push(c.local(tmp.offset(kat), acc.offset(kat), kn));
        rounds.push((peer, held));
        held = keep;
        mask <<= 1;
    }
    while let Some((peer, whole)) = rounds.pop() {
        let theirs = match held.0 == whole.0 {
            true => (held.1, whole.1),
            false => (whole.0, held.0),
        };
        let ((hat, hn), (tat, tn)) = (span(held), span(theirs));
        let out = (acc.offset(hat), hn * size);
        swap(s, out, (acc.offset(tat), tn * size), peer);
        held = whole;
    }
}

/// The members folded into their neighbours get the result from them.
fn unfold(s: &mut Schedule, m: &Members, rem: u32, acc: Loc, len: usize) {
    let me = m.rank;
    if me < 2 * rem {
        if me % 2 == 1 {
            send(s, acc, len, m.job(me - 1));
        } else {
            receive(s, acc, len, m.job(me + 1));
        }
    }
}

/// Recursive doubling for an operation that commutes, from `input` (only read) into
/// `acc`: each round receives into a place of its own and combines there what was
/// sent from, so nothing a peer read is written again; the last round's place is
/// `acc`.
fn doubling_apart(s: &mut Schedule, m: &Members, c: &Combine, input: Loc, acc: Loc) {
    let me = m.rank;
    let len = c.bytes();
    let (pof2, rem, newrank) = folding(m.size, me);
    let Some(nr) = newrank else {
        send(s, input, len, m.job(me + 1));
        unfold(s, m, rem, acc, len);
        return;
    };
    let steps = pof2.trailing_zeros() as usize + usize::from(me < 2 * rem);
    let mut cur = input;
    let mut step = 0;
    let mut next_place = |s: &mut Schedule| {
        step += 1;
        match step == steps {
            true => acc,
            false => s.scratch_to_fill(len),
        }
    };
    if me < 2 * rem {
        let into = next_place(s);
        let r = receive(s, into, len, m.job(me - 1));
        r.then.push(c.local(cur, into, c.count));
        cur = into;
    }
    let mut mask = 1;
    while mask < pof2 {
        let dst = unfolded(rem, nr ^ mask);
        let into = next_place(s);
        let r = exchange(s, cur, into, len, m.job(dst));
        r.then.push(c.local(cur, into, c.count));
        cur = into;
        mask <<= 1;
    }
    unfold(s, m, rem, acc, len);
}

/// The ring: the vector in n chunks; n - 1 steps pass chunks right, each member
/// combining the one it receives into its own, until each holds one chunk fully
/// combined; n - 1 more pass the combined chunks around. With `input` apart from
/// `acc` (an operation that commutes), chunks are received straight into `acc` and
/// combined there with `input`'s.
fn ring(s: &mut Schedule, m: &Members, c: &Combine, input: Option<Loc>, acc: Loc) {
    let (n, me) = (m.size as usize, m.rank as usize);
    let size = c.ty.size;
    let chunk = |i: usize| {
        let (a, b) = (i * c.count / n, (i + 1) * c.count / n);
        (a * size, b - a)
    };
    /// Where a received chunk lands: in a scratch chunk, combined from there into
    /// `acc`; or, with `input` apart, in `acc` itself, combined there with `input`'s.
    enum Landing {
        Scratch(Loc),
        Apart(Loc),
    }
    let landing = match input {
        Some(input) => Landing::Apart(input),
        None => Landing::Scratch(s.scratch_to_fill(c.count.div_ceil(n) * size)),
    };
    let (right, left) = (
        m.job(((me + 1) % n) as u32),
        m.job(((me + n - 1) % n) as u32),
    );
    for k in 0..n - 1 {
        let (out, inn) = ((me + n - k) % n, (me + 2 * n - k - 1) % n);
        let (oat, on) = chunk(out);
        let (iat, inum) = chunk(inn);
        let from = match landing {
            Landing::Apart(input) if k == 0 => input.offset(oat),
            _ => acc.offset(oat),
        };
        let (into, combine) = match landing {
            Landing::Scratch(tmp) => (tmp, c.local(tmp, acc.offset(iat), inum)),
            Landing::Apart(input) => (
                acc.offset(iat),
                c.local(input.offset(iat), acc.offset(iat), inum),
            ),
        };
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from,
            len: on * size,
            to: right,
        });
        r.xfers.push(Xfer::Recv {
            into,
            len: inum * size,
            from: left,
        });
        r.then.push(combine);
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

#[cfg(test)]
mod tests {
    use super::{gathers, halves, Placement};

    /// Across nodes, halving while a block of the largest power of two of members is
    /// under 256 KiB, under 128 KiB where members fold in first.
    #[test]
    fn long_all_reductions_halve_while_blocks_are_short() {
        let kib = |k: usize| k << 10;
        assert!(halves(kib(1023), 4) && !halves(kib(1024), 4));
        assert!(halves(kib(2047), 8) && !halves(kib(2048), 8));
        assert!(halves(kib(255), 3) && !halves(kib(256), 3));
        assert!(halves(kib(511), 7) && !halves(kib(512), 7));
        assert!(halves(kib(1023), 12) && !halves(kib(1024), 12));
    }

    /// Gathered only where ranks take turns on one node's processors, among at most 8
    /// members that recursive doubling takes more than two rounds for, with an
    /// operation that commutes.
    #[test]
    fn short_all_reductions_gather_where_ranks_take_turns() {
        let shared = Placement {
            one_node: true,
            oversubscribed: true,
        };
        let gathered: Vec<u32> = (1..=16).filter(|&n| gathers(true, n, || shared)).collect();
        assert_eq!(gathered, [3, 5, 6, 7, 8]);
        let own = Placement {
            one_node: true,
            oversubscribed: false,
        };
        let apart = Placement {
            one_node: false,
            oversubscribed: false,
        };
        assert!((1..=16).all(|n| !gathers(true, n, || own) && !gathers(true, n, || apart)));
        assert!(!gathers(false, 8, || shared));
    }
}
