//! `msg_progress_thread`: how often a layer above drives this process's progress
//! from a thread of its own, while none of its calls is inside.
//!
//! A [`Comm`](super::Comm) has no lock: only its owner drives it, inside the owner's
//! calls (weak progress). A layer above that serializes its calls behind a lock of
//! its own (the MPI library does) may run such a thread, as MPICH's
//! `MPIR_CVAR_ASYNC_PROGRESS` does: then what needs this process while the program
//! computes (an accumulate shipped to it, a transport atomic on its lock words, a
//! rendezvous) advances without the program calling in. The message layer only
//! reads the parameter; the layer above runs the thread.

use rbtl_config::{Config, Registry, Value};
use std::time::Duration;

/// The parameter: microseconds between two rounds of the thread, 0 for none.
pub const PARAM: &str = "msg_progress_thread";

/// Register the parameter.
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        PARAM,
        Value::Int(0),
        "microseconds between two progress rounds of a thread that the MPI library runs in each process while none of the program's calls is inside, so that what needs this process (accumulates shipped to it, atomics on its lock words, rendezvous) advances while the program computes; 0: no thread, progress only inside calls",
    )?;
    Ok(())
}

/// The interval `config` sets, `None` for no thread. A configuration made without
/// the message layer's parameters gets none.
pub(super) fn interval(config: &Config) -> super::Result<Option<Duration>> {
    super::liveness::duration_or_none(
        config,
        (PARAM, 0),
        Duration::from_micros,
        "give the microseconds between two rounds of the progress thread, or 0 for none",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_is_read_and_a_negative_one_refused() {
        let config = |v: &str| crate::configure(&[(PARAM, v)]).unwrap();
        assert_eq!(interval(&config("0")).unwrap(), None);
        assert_eq!(
            interval(&config("250")).unwrap(),
            Some(Duration::from_micros(250))
        );
        let e = interval(&config("-1")).unwrap_err().to_string();
        assert!(e.contains(PARAM), "{e}");
    }
}
