// Over 600 lines with its tests, which check each shape against the others; the code
// itself is about 500 lines.
//! Collectives that move data: barrier, broadcast, gathers, scatters, all-gathers
//! and all-to-alls, on places of a schedule and lengths in bytes.

use super::schedule::Round;
use super::{Loc, Local, Members, Schedule, Xfer};
use rbtl::msg::{AllgatherAlgorithm, BarrierAlgorithm};

/// A place for messages of no bytes.
fn nowhere() -> Loc {
    Loc::User(std::ptr::NonNull::<u8>::dangling().as_ptr())
}

/// The largest communicator whose barrier gathers at member 0 ([`barrier`]).
const GATHERED_BARRIER_MAX: u32 = 8;

/// Barrier. From 3 to 8 members (`GATHERED_BARRIER_MAX`), as Open MPI's `tuned` does
/// for small communicators: every member signals member 0, which releases all once it
/// has heard from each, so member 0 leaves first (a broadcast from it that follows
/// finds its leaves already waiting) and no member waits through more than two
/// hops, where ranks share processors. Where the members run on several nodes, each
/// node's lowest member (`leaders` gives each member's, as every member sees it)
/// gathers its node's signals first and stands for them at member 0, so that one
/// signal each way crosses between nodes, not one per member. Otherwise
/// dissemination: in round k each member signals the one 2^k after it and hears from
/// the one 2^k before (ceil(log2 n) rounds). The user may choose either
/// (`msg_barrier_algorithm`, `chosen`): gathering then from 2 members, still up to
/// `GATHERED_BARRIER_MAX`.
pub fn barrier<'a>(
    s: &mut Schedule,
    m: &Members,
    chosen: BarrierAlgorithm,
    leaders: impl FnOnce() -> &'a [u32],
) {
    let (n, me) = (m.size, m.rank);
    let gathers = match chosen {
        BarrierAlgorithm::Dissemination => false,
        BarrierAlgorithm::Gathered => (2..=GATHERED_BARRIER_MAX).contains(&n),
        BarrierAlgorithm::Auto => barrier_gathers(n),
    };
    if gathers {
        return gathered_barrier(s, m, leaders());
    }
    for (to, from) in dissemination(n, me) {
        let r = s.round();
        r.xfers.push(Xfer::Recv {
            into: nowhere(),
            len: 0,
            from: m.job(from),
        });
        r.xfers.push(Xfer::Send {
            from: nowhere(),
            len: 0,
            to: m.job(to),
        });
    }
}

/// Whether the barrier of `n` members gathers at member 0 ([`barrier`]); else it
/// disseminates ([`dissemination`]).
pub fn barrier_gathers(n: u32) -> bool {
    n > 2 && n <= GATHERED_BARRIER_MAX
}

/// The rounds of the dissemination barrier among `n` members, as member `me` sees
/// them: in round k, the member 2^k after it (signalled) and the one 2^k before
/// (heard from).
pub fn dissemination(n: u32, me: u32) -> impl Iterator<Item = (u32, u32)> {
    std::iter::successors(Some(1u32), |&step| step.checked_mul(2))
        .take_while(move |&step| step < n)
        .map(move |step| ((me + step) % n, (me + n - step) % n))
}

/// The barrier that gathers at member 0 and releases from it, through each node's
/// leader (see [`barrier`]).
fn gathered_barrier(s: &mut Schedule, m: &Members, leader: &[u32]) {
    let signal = |to| Xfer::Send {
        from: nowhere(),
        len: 0,
        to,
    };
    let hear = |from| Xfer::Recv {
        into: nowhere(),
        len: 0,
        from,
    };
    // A member hears from those it stands for: member 0 from the other leaders
    // (first: their signals cross nodes) and its own node's members, another leader
    // from its node's members, any other member from none. Then each but member 0
    // signals the one above (its leader, or member 0 for a leader) and hears its
    // release, in one round: the release cannot come before the signal. Then each
    // releases those it heard from.
    let (me, mine) = (m.rank, leader[m.rank as usize]);
    let leaders = (1..m.size).filter(|&v| me == 0 && leader[v as usize] == v);
    let node = (me + 1..m.size).filter(|&v| mine == me && leader[v as usize] == me);
    // (At most GATHERED_BARRIER_MAX members: no allocation.)
    let mut below = [0; GATHERED_BARRIER_MAX as usize];
    let mut count = 0;
    for v in leaders.chain(node) {
        below[count] = v;
        count += 1;
    }
    let below = &below[..count];
    if !below.is_empty() {
        let heard = s.round();
        heard.xfers.extend(below.iter().map(|&v| hear(m.job(v))));
    }
    if me != 0 {
        let above = m.job(if mine == me { 0 } else { mine });
        let r = s.round();
        r.xfers.push(signal(above));
        r.xfers.push(hear(above));
    }
    if !below.is_empty() {
        let released = s.round();
        released
            .xfers
            .extend(below.iter().map(|&v| signal(m.job(v))));
    }
}

/// The pieces of a broadcast sent in pieces ([`bcast_piece`]): one eager message over
/// `sm` and `tcp` (a rendezvous each over a transport with a smaller eager limit:
/// slower, the same messages). A constant, as every member must cut alike whatever
/// transports it uses.
pub const BCAST_PIECE: usize = 16 << 10;
/// The largest broadcast sent in pieces; larger ones go whole, each hop by
/// rendezvous.
const BCAST_IN_PIECES_MAX: usize = 128 << 10;

/// The largest communicator whose members, all on one node, a broadcast of any size
/// reaches from the root at once ([`Tree::Flat`]).
pub const BCAST_FLAT_MEMBERS: u32 = 8;
/// The smallest broadcast that reaches every member from the root at once where all
/// members share a node, however many they are; down the in-order tree instead where
/// the node has more ranks than processors.
pub const BCAST_FLAT_FROM: usize = 32 << 10;
/// The pieces a broadcast down the in-order tree is cut into (each of 8 to 16 KiB).
const IN_ORDER_PIECES: usize = 8;

/// The shape of a broadcast: who passes the data to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tree {
    /// Each member passes it on to those below it (ceil(log2 n) hops).
    Binomial,
    /// Open MPI's in-order binomial tree: member `v` passes it on to `v + 2^k` for
    /// each power of two above its highest set bit, smallest first. Where a node's
    /// ranks are bound to its `p` processors in turn (`msg_bind_to`), `p` a power of
    /// two, every member from `p` on hears from one on its own processor: only the
    /// first `p` members' hops cross between processors.
    InOrder,
    /// The root sends it to every other member (one hop).
    Flat,
}

/// The tree of a broadcast of `len` bytes among `n` members, `one_node` telling
/// whether they all share a node, `oversubscribed` whether that node (this member's)
/// has more ranks than processors. On a node, sends through shared memory cost the
/// root little next to a hop, which a member of a tree makes only once it has the
/// data (and, where ranks share processors, once it runs): the root sends to every
/// member, as Open MPI's `tuned` does at 4-7 ranks from 8 KiB, at up to
/// [`BCAST_FLAT_MEMBERS`] members, and at any number from [`BCAST_FLAT_FROM`], where
/// each receiver reads the root's buffer alone, all at the same time, where a tree
/// would make each copy wait for the one before it. From that size on a node with
/// more ranks than processors, though, readers sharing a processor take turns while
/// the root waits for the last: there the in-order tree, in pieces, keeps both sides
/// of each of its few hops between processors copying at once (measured:
/// docs/performance.md). Elsewhere the binomial tree. A function of what every member
/// knows alike, so that all choose the same.
pub fn bcast_tree(
    n: u32,
    len: usize,
    one_node: impl FnOnce() -> bool,
    oversubscribed: bool,
) -> Tree {
    if n <= 2 || !(n <= BCAST_FLAT_MEMBERS || len >= BCAST_FLAT_FROM) || !one_node() {
        Tree::Binomial
    } else if oversubscribed && len >= BCAST_FLAT_FROM {
        Tree::InOrder
    } else {
        Tree::Flat
    }
}

/// The piece size for a broadcast of `len` bytes among `n` members down `tree`
/// ([`bcast`]): 16 KiB from 16 KiB to 128 KiB among more than two down the binomial
/// tree, and between two where `two_in_pieces`; an eighth of `len`, within 8-16 KiB,
/// down the in-order tree; else `len` (whole: from the root at once, each receiver
/// reads the whole alone; between two members, one rendezvous, whose read beats the
/// pieces' copies in and out wherever reads by address run fast: the caller says
/// `two_in_pieces` where they do not, alike at every member, see `build_bcast`).
pub fn bcast_piece(len: usize, n: u32, tree: Tree, two_in_pieces: bool) -> usize {
    match tree {
        Tree::Binomial
            if (n > 2 || two_in_pieces) && len > BCAST_PIECE && len <= BCAST_IN_PIECES_MAX =>
        {
            BCAST_PIECE
        }
        Tree::InOrder => (len / IN_ORDER_PIECES).clamp(BCAST_PIECE / 2, BCAST_PIECE),
        _ => len,
    }
}

/// Broadcast `len` bytes at `buf` from `root` down `tree`, in pieces of `piece` bytes
/// (`len` or more: whole), pipelined: in each round a member receives the next piece
/// from its parent while it passes the last one on to its children. With pieces that
/// go in one send (no rendezvous), no member waits for a receiver to answer before
/// it passes data on.
pub fn bcast(
    s: &mut Schedule,
    m: &Members,
    (buf, len): (Loc, usize),
    root: u32,
    tree: Tree,
    piece: usize,
) {
    let (n, me) = (m.size, m.rank);
    let vr = (me + n - root) % n;
    let job = |v: u32| m.job((v + root) % n);
    let (parent, children) = bcast_links(tree, vr, n);
    let parent = parent.map(job);
    let children: Vec<u32> = children.map(job).collect();
    let piece = piece.max(1);
    let count = len.div_ceil(piece);
    let at = |i: usize| (buf.offset(i * piece), piece.min(len - i * piece));
    for i in 0..=count {
        let heard = parent.filter(|_| i < count);
        // The root has every piece at the start: it passes each on a round earlier.
        let passed = if parent.is_none() {
            Some(i)
        } else {
            i.checked_sub(1)
        };
        let passed = passed.filter(|&j| j < count && !children.is_empty());
        if heard.is_none() && passed.is_none() {
            continue;
        }
        let r = s.round();
        if let Some(from) = heard {
            let (into, len) = at(i);
            r.xfers.push(Xfer::Recv { into, len, from });
        }
        if let Some(j) = passed {
            let (from, len) = at(j);
            r.xfers
                .extend(children.iter().map(|&to| Xfer::Send { from, len, to }));
        }
    }
}

/// Member `vr`'s links in `tree` of `n` members, counted from the root: its parent
/// and its children, in the order it sends to them. Binomial: the parent is this
/// member less its lowest set bit, the children this member plus each lower power of
/// two, largest first. In order: the parent is this member less its highest set bit,
/// the children this member plus each higher power of two, smallest first. Flat:
/// every member's parent is the root, whose children are all the others.
pub fn bcast_links(tree: Tree, vr: u32, n: u32) -> (Option<u32>, impl Iterator<Item = u32>) {
    let low = if vr == 0 {
        n.next_power_of_two()
    } else {
        1 << vr.trailing_zeros()
    };
    // The power of two above the highest set bit (1 for the root).
    let above = if vr == 0 { 1 } else { 2 << vr.ilog2() };
    let parent = (vr != 0).then(|| match tree {
        Tree::Flat => 0,
        Tree::Binomial => vr - low,
        Tree::InOrder => vr - above / 2,
    });
    let from_root = 1..if tree == Tree::Flat && vr == 0 { n } else { 1 };
    let bits = if tree == Tree::Binomial {
        low.trailing_zeros()
    } else {
        0
    };
    let binomial = (0..bits)
        .rev()
        .map(move |k| vr + (1 << k))
        .filter(move |&c| c < n);
    let in_order = std::iter::successors(Some(u64::from(above)), |&k| Some(k * 2))
        .map(move |k| u64::from(vr) + k)
        .take_while(move |&c| tree == Tree::InOrder && c < u64::from(n))
        .map(|c| c as u32);
    (parent, from_root.chain(binomial).chain(in_order))
}

/// Gather: every member's `send` lands in `recvs[rank]` at `root` (one round; the
/// root's own block is copied, or already in place when `send` is `None`).
pub fn gatherv(
    s: &mut Schedule,
    m: &Members,
    send: Option<(Loc, usize)>,
    recvs: &[(Loc, usize)],
    root: u32,
) {
    rooted(s, m, send, recvs, root, true);
}

/// Scatter: `sends[rank]` at `root` lands in each member's `recv` (one round; the
/// root's own block is copied, or left in place when `recv` is `None`).
pub fn scatterv(
    s: &mut Schedule,
    m: &Members,
    sends: &[(Loc, usize)],
    recv: Option<(Loc, usize)>,
    root: u32,
) {
    rooted(s, m, recv, sends, root, false);
}

/// One round between `root` and every member: each member's `own` block and the
/// root's `blocks[rank]`, moved to the root (`to_root`: a gather) or from it (a
/// scatter); the root's own block is copied, or left as it is when `own` is `None`.
fn rooted(
    s: &mut Schedule,
    m: &Members,
    own: Option<(Loc, usize)>,
    blocks: &[(Loc, usize)],
    root: u32,
    to_root: bool,
) {
    // A transfer of `len` bytes at `at` with member `peer`, sent or received.
    let xfer = |at: Loc, len: usize, peer: u32, send: bool| {
        let peer = m.job(peer);
        if send {
            Xfer::Send {
                from: at,
                len,
                to: peer,
            }
        } else {
            Xfer::Recv {
                into: at,
                len,
                from: peer,
            }
        }
    };
    if let (true, Some((_, n))) = (m.rank == root, own) {
        let len = blocks[root as usize].1;
        let (sent, room) = if to_root { (n, len) } else { (len, n) };
        s.own_block(sent, room);
    }
    let r = s.round();
    if m.rank != root {
        let (at, len) = own.expect("a non-root member sends or receives");
        r.xfers.push(xfer(at, len, root, to_root));
        return;
    }
    for (i, &(block, len)) in blocks.iter().enumerate() {
        let i = i as u32;
        if i != root {
            r.xfers.push(xfer(block, len, i, !to_root));
        } else if let Some((at, n)) = own {
            let (from, to) = if to_root { (at, block) } else { (block, at) };
            r.then.push(Local::Copy {
                from,
                to,
                len: n.min(len),
            });
        }
    }
}

/// All-gather into `blocks` (one per member): by recursive doubling when the size is
/// a power of two and the blocks are equal and small, around a ring otherwise (n - 1
/// rounds, each passing on the block received in the last). The choice rests on what
/// every member knows alike (the size and the blocks' lengths), never on where a
/// member's blocks lie. The user may choose either (`msg_allgather_algorithm`,
/// `chosen`): recursive doubling then at any length, still only for a power of two of
/// members and blocks of one length.
///
/// This member's block is already in its place, or at `own` (as long as its place):
/// then the first round sends it from there and copies it into its place after its
/// transfers, as Open MPI's two-member all-gather does. The others read a buffer
/// nobody writes meanwhile, and the copy waits for no one.
pub fn allgatherv(
    s: &mut Schedule,
    m: &Members,
    blocks: &[(Loc, usize)],
    own: Option<Loc>,
    chosen: AllgatherAlgorithm,
) {
    let (n, me) = (m.size, m.rank);
    let place = |r: Round<'_>| {
        if let Some(from) = own {
            let (to, len) = blocks[me as usize];
            r.then.push(Local::Copy { from, to, len });
        }
    };
    if n == 1 {
        place(s.round());
        return;
    }
    let equal = blocks.windows(2).all(|w| w[0].1 == w[1].1);
    let short = blocks[0].1 * n as usize <= DOUBLING_MAX;
    let doubles = match chosen {
        AllgatherAlgorithm::Ring => false,
        AllgatherAlgorithm::Doubling => true,
        AllgatherAlgorithm::Auto => short,
    };
    if n.is_power_of_two() && equal && doubles {
        doubling(s, m, blocks, own);
        return;
    }
    let (right, left) = (m.job((me + 1) % n), m.job((me + n - 1) % n));
    for step in 0..n - 1 {
        let out = ((me + n - step) % n) as usize;
        let inn = ((me + n - step - 1) % n) as usize;
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from: own.filter(|_| step == 0).unwrap_or(blocks[out].0),
            len: blocks[out].1,
            to: right,
        });
        r.xfers.push(Xfer::Recv {
            into: blocks[inn].0,
            len: blocks[inn].1,
            from: left,
        });
        if step == 0 {
            place(r);
        }
    }
}

/// The recursive doubling of [`allgatherv`]: in round k, the k blocks gathered so
/// far go to the member k away as one message. Blocks that do not follow each other
/// in memory here gather in one scratch buffer first, and leave it at the end.
fn doubling(s: &mut Schedule, m: &Members, blocks: &[(Loc, usize)], own: Option<Loc>) {
    let (n, me) = (m.size, m.rank);
    let len = blocks[0].1;
    let in_order = blocks.windows(2).all(|w| same_buffer_next(w[0], w[1]));
    let mine_at = blocks[me as usize].0;
    // `own`: where the first round reads this member's block, which is copied into its
    // place after that round (blocks out of order copy it at once, and `own` is done).
    let (base, mut own) = if in_order {
        (blocks[0].0, own)
    } else {
        let base = s.scratch(len * n as usize);
        let r = s.round();
        let from = own.unwrap_or(mine_at);
        r.then.push(Local::Copy {
            from,
            to: base.offset(len * me as usize),
            len,
        });
        if own.is_some() {
            r.then.push(Local::Copy {
                from,
                to: mine_at,
                len,
            });
        }
        (base, None)
    };
    let mut k = 1;
    while k < n {
        let mine = me & !(k - 1);
        let theirs = mine ^ k;
        let r = s.round();
        r.xfers.push(Xfer::Send {
            from: own.unwrap_or(base.offset(len * mine as usize)),
            len: len * k as usize,
            to: m.job(me ^ k),
        });
        r.xfers.push(Xfer::Recv {
            into: base.offset(len * theirs as usize),
            len: len * k as usize,
            from: m.job(me ^ k),
        });
        if let Some(from) = own.take() {
            r.then.push(Local::Copy {
                from,
                to: mine_at,
                len,
            });
        }
        k <<= 1;
    }
    if !in_order {
        let r = s.round();
        for (i, b) in blocks.iter().enumerate().filter(|&(i, _)| i != me as usize) {
            r.then.push(Local::Copy {
                from: base.offset(len * i),
                to: b.0,
                len,
            });
        }
    }
}

/// Largest all-gather (in bytes, all blocks) done by recursive doubling.
pub(super) const DOUBLING_MAX: usize = 64 << 10;

/// Whether block `b` starts where block `a` ends, in the same buffer.
fn same_buffer_next(a: (Loc, usize), b: (Loc, usize)) -> bool {
    match (a.0, b.0) {
        (Loc::User(p), Loc::User(q)) => p.wrapping_add(a.1) == q,
        (Loc::Scratch { at }, Loc::Scratch { at: at2 }) => at + a.1 == at2,
        _ => false,
    }
}

/// All-to-all: `sends[i]` goes to member i, `recvs[i]` comes from it (this member's
/// own block copied). Small exchanges post everything in one round; large ones go in
/// n - 1 rounds of one pair each (member + k and member - k), so that no member is
/// flooded.
pub fn alltoallv(s: &mut Schedule, m: &Members, sends: &[(Loc, usize)], recvs: &[(Loc, usize)]) {
    let (n, me) = (m.size, m.rank);
    let total: usize = sends.iter().map(|b| b.1).sum();
    let (sent, room) = (sends[me as usize].1, recvs[me as usize].1);
    s.own_block(sent, room);
    let own = Local::Copy {
        from: sends[me as usize].0,
        to: recvs[me as usize].0,
        len: sent.min(room),
    };
    if total <= ALL_AT_ONCE_MAX || n <= 2 {
        let r = s.round();
        for k in 1..n {
            let from = (me + n - k) % n;
            r.xfers.push(Xfer::Recv {
                into: recvs[from as usize].0,
                len: recvs[from as usize].1,
                from: m.job(from),
            });
        }
        for k in 1..n {
            let to = (me + k) % n;
            r.xfers.push(Xfer::Send {
                from: sends[to as usize].0,
                len: sends[to as usize].1,
                to: m.job(to),
            });
        }
        r.then.push(own);
        return;
    }
    s.round().then.push(own);
    for k in 1..n {
        let (to, from) = ((me + k) % n, (me + n - k) % n);
        let r = s.round();
        r.xfers.push(Xfer::Recv {
            into: recvs[from as usize].0,
            len: recvs[from as usize].1,
            from: m.job(from),
        });
        r.xfers.push(Xfer::Send {
            from: sends[to as usize].0,
            len: sends[to as usize].1,
            to: m.job(to),
        });
    }
}

/// Largest all-to-all (bytes this member sends) posted in one round.
pub(super) const ALL_AT_ONCE_MAX: usize = 256 << 10;

/// Equal blocks of `len` bytes one after the other from `at`.
pub fn blocks(at: Loc, len: usize, n: u32) -> Vec<(Loc, usize)> {
    (0..n as usize).map(|i| (at.offset(i * len), len)).collect()
}

#[cfg(test)]
mod tests {
    use super::{
        bcast_links, bcast_piece, bcast_tree, dissemination, Tree, BCAST_FLAT_FROM,
        BCAST_FLAT_MEMBERS, BCAST_PIECE,
    };

    /// Each round of the dissemination barrier pairs a signal with the member that
    /// hears it: whom `me` signals in round k hears from `me` in round k.
    #[test]
    fn dissemination_rounds_pair_up() {
        let rounds: Vec<_> = dissemination(5, 0).collect();
        assert_eq!(rounds, [(1, 4), (2, 3), (4, 1)]);
        for n in 1..=33u32 {
            for me in 0..n {
                let mine: Vec<_> = dissemination(n, me).collect();
                assert_eq!(mine.len(), n.next_power_of_two().trailing_zeros() as usize);
                for (k, &(to, _)) in mine.iter().enumerate() {
                    let theirs = dissemination(n, to).nth(k).map(|(_, from)| from);
                    assert_eq!(theirs, Some(me), "{n} members, {me}'s round {k}");
                }
            }
        }
    }

    /// Down each tree, every member but the root hears from exactly one parent,
    /// which counts it among its children, and the data reaches every member.
    #[test]
    fn each_tree_reaches_every_member_once() {
        for tree in [Tree::Binomial, Tree::InOrder, Tree::Flat] {
            for n in 1..=33u32 {
                let mut heard = vec![0u32; n as usize];
                for vr in 0..n {
                    let (parent, children) = bcast_links(tree, vr, n);
                    assert_eq!(
                        parent.is_none(),
                        vr == 0,
                        "{tree:?}, {n} members: {vr}'s parent"
                    );
                    if let Some(p) = parent {
                        let (_, siblings) = bcast_links(tree, p, n);
                        assert!(
                            siblings.into_iter().any(|c| c == vr),
                            "{tree:?}, {n}: {p} does not send to {vr}"
                        );
                    }
                    for c in children {
                        assert!(c < n && c != vr, "{tree:?}, {n}: {vr} sends to {c}");
                        heard[c as usize] += 1;
                    }
                }
                let expected: Vec<u32> = (0..n).map(|v| u32::from(v != 0)).collect();
                assert_eq!(heard, expected, "{tree:?}, {n} members");
            }
        }
        let (_, root) = bcast_links(Tree::Flat, 0, 5);
        assert_eq!(root.collect::<Vec<_>>(), [1, 2, 3, 4]);
        let (_, root) = bcast_links(Tree::Binomial, 0, 5);
        assert_eq!(root.collect::<Vec<_>>(), [4, 2, 1]);
        let (_, root) = bcast_links(Tree::InOrder, 0, 5);
        assert_eq!(root.collect::<Vec<_>>(), [1, 2, 4]);
        let (parent, children) = bcast_links(Tree::InOrder, 3, 12);
        assert_eq!(
            (parent, children.collect::<Vec<_>>()),
            (Some(1), vec![7, 11])
        );
    }

    /// Down the in-order tree, ranks bound to `p` processors in turn (`p` a power of
    /// two): every member from `p` on hears from one on its own processor.
    #[test]
    fn in_order_members_beyond_the_first_hear_from_their_own_processor() {
        for p in [1u32, 2, 4, 8] {
            for n in p..=40 {
                for vr in p..n {
                    let (parent, _) = bcast_links(Tree::InOrder, vr, n);
                    let parent = parent.expect("every member but the root has a parent");
                    assert_eq!(
                        parent % p,
                        vr % p,
                        "{n} members on {p}: {vr} hears from {parent}"
                    );
                }
            }
        }
    }

    /// The root sends to all at once on one node, up to `BCAST_FLAT_MEMBERS` members
    /// at any size and beyond from `BCAST_FLAT_FROM` bytes, a node with more ranks
    /// than processors taking the in-order tree from that size instead; never across
    /// nodes, and never asked about the node between two members.
    #[test]
    fn a_broadcast_goes_flat_or_in_order_only_on_one_node() {
        for over in [false, true] {
            let from_root = if over { Tree::InOrder } else { Tree::Flat };
            assert_eq!(
                bcast_tree(2, 1 << 20, || panic!("asked about two members' node"), over),
                Tree::Binomial
            );
            assert_eq!(bcast_tree(4, 1, || true, over), Tree::Flat);
            assert_eq!(
                bcast_tree(4, BCAST_FLAT_FROM - 1, || true, over),
                Tree::Flat
            );
            assert_eq!(bcast_tree(4, BCAST_FLAT_FROM, || true, over), from_root);
            assert_eq!(bcast_tree(BCAST_FLAT_MEMBERS, 1, || true, over), Tree::Flat);
            assert_eq!(
                bcast_tree(BCAST_FLAT_MEMBERS + 1, 1, || true, over),
                Tree::Binomial
            );
            assert_eq!(bcast_tree(64, BCAST_FLAT_FROM, || true, over), from_root);
            assert_eq!(bcast_tree(4, 1, || false, over), Tree::Binomial);
            assert_eq!(
                bcast_tree(64, BCAST_FLAT_FROM, || false, over),
                Tree::Binomial
            );
        }
    }

    /// Pieces: eight of 8-16 KiB down the in-order tree, 16 KiB down the binomial
    /// tree up to 128 KiB, else whole.
    #[test]
    fn a_broadcast_is_cut_by_its_tree() {
        assert_eq!(bcast_piece(32 << 10, 4, Tree::InOrder, false), 8 << 10);
        assert_eq!(bcast_piece(96 << 10, 4, Tree::InOrder, false), 12 << 10);
        assert_eq!(bcast_piece(1 << 20, 4, Tree::InOrder, false), BCAST_PIECE);
        assert_eq!(
            bcast_piece(64 << 10, 16, Tree::Binomial, false),
            BCAST_PIECE
        );
        assert_eq!(bcast_piece(64 << 10, 2, Tree::Binomial, false), 64 << 10);
        assert_eq!(bcast_piece(64 << 10, 2, Tree::Binomial, true), BCAST_PIECE);
        assert_eq!(
            bcast_piece(BCAST_PIECE, 2, Tree::Binomial, true),
            BCAST_PIECE
        );
        assert_eq!(bcast_piece(1 << 20, 2, Tree::Binomial, true), 1 << 20);
        assert_eq!(bcast_piece(1 << 20, 16, Tree::Binomial, false), 1 << 20);
        assert_eq!(bcast_piece(1 << 20, 4, Tree::Flat, false), 1 << 20);
    }
}
