//! `msg_allreduce_algorithm`: the all-reduce algorithm a layer above runs, chosen by
//! the user instead of by size, count and placement (as Open MPI's
//! `coll_tuned_allreduce_algorithm` and MPICH's `MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM`
//! do). The message layer only reads the parameter; the MPI library's all-reduce
//! follows it where the algorithm applies, and chooses as by default where it does
//! not (see [`AllreduceAlgorithm`]).

use super::placement::choice;
use rbtl_config::{Config, Registry, Value};

/// The parameter.
pub const PARAM: &str = "msg_allreduce_algorithm";
/// Its values, in the order of [`AllreduceAlgorithm`].
const CHOICES: [&str; 5] = ["auto", "doubling", "ring", "halving", "gathered"];

/// An all-reduce algorithm. All but `Doubling` need an operation that commutes, and
/// `Ring` and `Halving` a vector of at least as many elements as they cut it into
/// blocks (as many as members, or as the largest power of two not above them):
/// otherwise the choice is the default one.
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

/// Register the parameter.
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        PARAM,
        Value::Str("auto".into()),
        "the MPI library's all-reduce algorithm, the same at every rank: auto (by the vector's length, the ranks' count and where they run), doubling (recursive doubling), ring, halving (Rabenseifner's), gathered (at rank 0); one that does not apply (an operation that does not commute, a vector shorter than its blocks) gives way to auto",
    )?;
    Ok(())
}

/// The algorithm `config` sets. A configuration made without the message layer's
/// parameters gets `Auto`.
pub(super) fn chosen(config: &Config) -> super::Result<AllreduceAlgorithm> {
    Ok(match choice(config, PARAM, &CHOICES)? {
        "doubling" => AllreduceAlgorithm::Doubling,
        "ring" => AllreduceAlgorithm::Ring,
        "halving" => AllreduceAlgorithm::Halving,
        "gathered" => AllreduceAlgorithm::Gathered,
        _ => AllreduceAlgorithm::Auto,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_algorithm_is_read_and_an_unknown_one_refused() {
        let config = |v: &str| crate::configure(&[(PARAM, v)]).unwrap();
        let read: Vec<AllreduceAlgorithm> = CHOICES
            .iter()
            .map(|v| chosen(&config(v)).unwrap())
            .collect();
        use AllreduceAlgorithm::*;
        assert_eq!(read, [Auto, Doubling, Ring, Halving, Gathered]);
        let e = chosen(&config("butterfly")).unwrap_err().to_string();
        assert!(e.contains(PARAM) && e.contains("halving"), "{e}");
    }
}
