//! `msg_allreduce_algorithm`, `msg_bcast_algorithm`, `msg_barrier_algorithm`,
//! `msg_allgather_algorithm`: the collective algorithms a layer above runs, chosen
//! by the user instead of by size, count and placement (as Open MPI's
//! `coll_tuned_<collective>_algorithm` and MPICH's
//! `MPIR_CVAR_<COLLECTIVE>_INTRA_ALGORITHM` do). The message layer only reads the
//! parameters; the MPI library's collectives follow them where the algorithm
//! applies, and choose as by default where it does not.

use super::placement::choice;
use rbtl_config::{Config, Registry, Value};

/// The all-reduce's parameter.
pub const ALLREDUCE_PARAM: &str = "msg_allreduce_algorithm";
/// The broadcast's parameter.
pub const BCAST_PARAM: &str = "msg_bcast_algorithm";
/// The barrier's parameter.
pub const BARRIER_PARAM: &str = "msg_barrier_algorithm";
/// The all-gather's parameter.
pub const ALLGATHER_PARAM: &str = "msg_allgather_algorithm";

/// An all-reduce algorithm. All but `Doubling` need an operation that commutes, and
/// `Ring` and `Halving` a vector of at least as many elements as they cut it into
/// blocks (as many as members, or as the largest power of two not above them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllreduceAlgorithm {
    /// Chosen by the vector's length, the members' count and where they run.
    Auto,
    /// Recursive doubling, the members beyond the largest power of two folded into
    /// their neighbours first.
    Doubling,
    /// Reduce-scatter then all-gather around a ring.
    Ring,
    /// Rabenseifner's: recursive halving, then recursive doubling of the blocks, the
    /// members beyond the largest power of two folded in first.
    Halving,
    /// Every operand gathered at member 0, which sends the result back to each.
    Gathered,
}

/// A broadcast's tree (each cuts the data into pieces as it does by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BcastAlgorithm {
    /// Chosen by the data's length, the members' count and where they run.
    Auto,
    /// Each member passes the data on to those below it.
    Binomial,
    /// Open MPI's in-order binomial tree.
    InOrder,
    /// The root sends to every other member.
    Flat,
}

/// A barrier's algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierAlgorithm {
    /// Chosen by the members' count.
    Auto,
    /// In round k each member signals the one 2^k after it.
    Dissemination,
    /// Every member signals member 0 (through its node's lowest member), which
    /// releases them; up to 8 members.
    Gathered,
}

/// An all-gather's algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllgatherAlgorithm {
    /// Chosen by the members' count and the blocks' lengths.
    Auto,
    /// Recursive doubling: a power of two of members, blocks of one length.
    Doubling,
    /// Around a ring.
    Ring,
}

/// The algorithms chosen, one per collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CollAlgorithms {
    /// `MPI_Allreduce`'s (and its nonblocking and persistent forms').
    pub allreduce: AllreduceAlgorithm,
    /// `MPI_Bcast`'s.
    pub bcast: BcastAlgorithm,
    /// `MPI_Barrier`'s.
    pub barrier: BarrierAlgorithm,
    /// `MPI_Allgather`'s and `MPI_Allgatherv`'s.
    pub allgather: AllgatherAlgorithm,
}

const ALLREDUCE: [(&str, AllreduceAlgorithm); 5] = [
    ("auto", AllreduceAlgorithm::Auto),
    ("doubling", AllreduceAlgorithm::Doubling),
    ("ring", AllreduceAlgorithm::Ring),
    ("halving", AllreduceAlgorithm::Halving),
    ("gathered", AllreduceAlgorithm::Gathered),
];
const BCAST: [(&str, BcastAlgorithm); 4] = [
    ("auto", BcastAlgorithm::Auto),
    ("binomial", BcastAlgorithm::Binomial),
    ("in_order", BcastAlgorithm::InOrder),
    ("flat", BcastAlgorithm::Flat),
];
const BARRIER: [(&str, BarrierAlgorithm); 3] = [
    ("auto", BarrierAlgorithm::Auto),
    ("dissemination", BarrierAlgorithm::Dissemination),
    ("gathered", BarrierAlgorithm::Gathered),
];
const ALLGATHER: [(&str, AllgatherAlgorithm); 3] = [
    ("auto", AllgatherAlgorithm::Auto),
    ("doubling", AllgatherAlgorithm::Doubling),
    ("ring", AllgatherAlgorithm::Ring),
];

/// Register the parameters.
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    let auto = || Value::Str("auto".into());
    registry.register(
        ALLREDUCE_PARAM,
        auto(),
        "the MPI library's all-reduce algorithm, the same at every rank: auto (by the vector's length, the ranks' count and where they run), doubling (recursive doubling), ring, halving (Rabenseifner's), gathered (at rank 0); one that does not apply (an operation that does not commute, a vector shorter than its blocks) gives way to auto",
    )?;
    registry.register(
        BCAST_PARAM,
        auto(),
        "the MPI library's broadcast tree, the same at every rank: auto (by the data's length, the ranks' count and where they run), binomial, in_order (Open MPI's in-order binomial tree), flat (from the root to each)",
    )?;
    registry.register(
        BARRIER_PARAM,
        auto(),
        "the MPI library's barrier, the same at every rank: auto (by the ranks' count), dissemination, gathered (at rank 0 through each node's lowest rank; up to 8 ranks, else auto)",
    )?;
    registry.register(
        ALLGATHER_PARAM,
        auto(),
        "the MPI library's all-gather, the same at every rank: auto (by the ranks' count and the blocks' lengths), doubling (recursive doubling; a power of two of ranks and blocks of one length, else auto), ring",
    )?;
    Ok(())
}

/// The value of parameter `param`, one of `table`'s names (the first where the
/// configuration was made without the message layer's parameters).
fn chosen_one<T: Copy>(
    config: &Config,
    param: &str,
    table: &[(&'static str, T)],
) -> super::Result<T> {
    let names: Vec<&'static str> = table.iter().map(|(name, _)| *name).collect();
    let name = choice(config, param, &names)?;
    Ok(table
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(table[0].1, |(_, v)| *v))
}

/// The modex key under which rank 0 says which algorithms it runs
/// ([`CollAlgorithms::described`]), for every other rank to compare with its own.
pub(super) const CHOSEN_KEY: &str = "coll_algorithms";

/// The name under which `table` lists `value`.
fn name_of<T: PartialEq>(table: &[(&'static str, T)], value: &T) -> &'static str {
    table
        .iter()
        .find(|(_, v)| v == value)
        .map_or("auto", |(name, _)| name)
}

impl CollAlgorithms {
    /// Each parameter with its value, `name = value` a line.
    pub(super) fn described(&self) -> String {
        [
            (ALLREDUCE_PARAM, name_of(&ALLREDUCE, &self.allreduce)),
            (BCAST_PARAM, name_of(&BCAST, &self.bcast)),
            (BARRIER_PARAM, name_of(&BARRIER, &self.barrier)),
            (ALLGATHER_PARAM, name_of(&ALLGATHER, &self.allgather)),
        ]
        .map(|(param, name)| format!("{param} = {name}\n"))
        .concat()
    }
}

/// Whether rank `rank`'s algorithms, `mine`, are those rank 0 described (`first`,
/// absent where rank 0 said nothing): members of one collective that run different
/// algorithms would wait for messages none of them sends, so a job whose ranks
/// chose differently is refused at start-up, every parameter that differs named.
pub(super) fn same_as_first(
    mine: &CollAlgorithms,
    rank: u32,
    first: Option<&[u8]>,
) -> super::Result<()> {
    let Some(first) = first else {
        return Ok(());
    };
    let (first, mine) = (String::from_utf8_lossy(first), mine.described());
    if first == mine {
        return Ok(());
    }
    let why = if first.lines().count() == mine.lines().count() {
        first
            .lines()
            .zip(mine.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("{a} at rank 0, {b} at rank {rank}"))
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        format!("rank 0 chose {first:?}, rank {rank} {mine:?}")
    };
    Err(super::Error::BadParameter(format!(
        "the collectives' algorithms must be the same at every rank: {why}"
    )))
}

/// The algorithms `config` sets.
pub(super) fn chosen(config: &Config) -> super::Result<CollAlgorithms> {
    Ok(CollAlgorithms {
        allreduce: chosen_one(config, ALLREDUCE_PARAM, &ALLREDUCE)?,
        bcast: chosen_one(config, BCAST_PARAM, &BCAST)?,
        barrier: chosen_one(config, BARRIER_PARAM, &BARRIER)?,
        allgather: chosen_one(config, ALLGATHER_PARAM, &ALLGATHER)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_algorithm_is_read_and_an_unknown_one_refused() {
        let read = |param: &str, v: &str| chosen(&crate::configure(&[(param, v)]).unwrap());
        for (name, a) in ALLREDUCE {
            assert_eq!(read(ALLREDUCE_PARAM, name).unwrap().allreduce, a);
        }
        for (name, b) in BCAST {
            assert_eq!(read(BCAST_PARAM, name).unwrap().bcast, b);
        }
        for (name, b) in BARRIER {
            assert_eq!(read(BARRIER_PARAM, name).unwrap().barrier, b);
        }
        for (name, a) in ALLGATHER {
            assert_eq!(read(ALLGATHER_PARAM, name).unwrap().allgather, a);
        }
        let e = read(ALLREDUCE_PARAM, "butterfly").unwrap_err().to_string();
        assert!(e.contains(ALLREDUCE_PARAM) && e.contains("halving"), "{e}");
        let e = read(BARRIER_PARAM, "tree").unwrap_err().to_string();
        assert!(
            e.contains(BARRIER_PARAM) && e.contains("dissemination"),
            "{e}"
        );
    }

    /// A rank whose algorithms are not rank 0's is refused, each difference named.
    #[test]
    fn a_rank_that_chose_otherwise_than_rank_0_is_refused() {
        let read = |settings: &[(&str, &str)]| chosen(&crate::configure(settings).unwrap());
        let first = read(&[]).unwrap().described();
        let ring = read(&[(ALLREDUCE_PARAM, "ring"), (BCAST_PARAM, "flat")]).unwrap();
        assert!(same_as_first(&read(&[]).unwrap(), 3, Some(first.as_bytes())).is_ok());
        assert!(same_as_first(&ring, 3, None).is_ok());
        let e = same_as_first(&ring, 3, Some(first.as_bytes()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("msg_allreduce_algorithm = auto at rank 0, msg_allreduce_algorithm = ring at rank 3")
                && e.contains("msg_bcast_algorithm = flat at rank 3")
                && !e.contains(BARRIER_PARAM),
            "{e}"
        );
        let e = same_as_first(&ring, 1, Some(b"from another version"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("rank 0 chose"), "{e}");
    }
}
