//! Where the ranks of a node run when they outnumber its processors: the choices
//! that depend on it (`msg_yield_when_idle`, `msg_spread_at_start`) and the one move
//! to a rank's share of the processors (see the message layer's documentation, "Ranks
//! and processors").

use super::{Error, Result};
use rbtl_config::{Config, Registry, Value};
use std::io;

/// The parameter that says when ranks move to their share of the processors.
pub const SPREAD_PARAM: &str = "msg_spread_at_start";
/// The values of [`SPREAD_PARAM`] and of `msg_yield_when_idle`.
const CHOICES: [&str; 3] = ["auto", "always", "never"];

/// Register [`SPREAD_PARAM`].
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        SPREAD_PARAM,
        Value::Str("auto".into()),
        "whether each rank moves once, when start-up is over, to processor (its index on the node) mod (the processors it may run on), then runs anywhere again: auto (when this node runs more ranks than it has online processors), always, never",
    )?;
    Ok(())
}

/// Whether `param` (`auto`, `always` or `never`) holds for a node of `ranks_here`
/// ranks: `auto` where they outnumber its online processors. A configuration made
/// without the message layer's parameters gets `auto`.
pub(super) fn chosen(config: &Config, param: &str, ranks_here: usize) -> Result<bool> {
    match config.str(param) {
        Ok("auto") | Err(rbtl_config::Error::NotRegistered(_)) => Ok(ranks_here > online_cpus()),
        Ok("always") => Ok(true),
        Ok("never") => Ok(false),
        Ok(other) => Err(Error::BadParameter(format!(
            "{param} = {other:?}: use one of {CHOICES:?}"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// The node's online processors (not this process's affinity: a rank bound to one
/// core still shares the node with the others).
fn online_cpus() -> usize {
    // SAFETY: sysconf only reads the system's configuration.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Move the calling thread to processor `index mod n` of the `n` it may run on, then
/// let it run on all `n` again: the processor it moved to, or `None` where it may run
/// on one only (a rank bound by its launcher stays where it is bound). When the second
/// step fails the thread stays bound to that processor, and the error says so.
pub(super) fn move_to_share(index: usize) -> io::Result<Option<usize>> {
    let allowed = affinity()?;
    let cpus = cpus_of(&allowed);
    if cpus.len() < 2 {
        return Ok(None);
    }
    let cpu = cpus[index % cpus.len()];
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `one`, `cpu` being below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    set_affinity(&one)?;
    set_affinity(&allowed).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("left bound to processor {cpu}: restoring the affinity failed: {e}"),
        )
    })?;
    Ok(Some(cpu))
}

/// The processors the calling thread may run on.
pub(super) fn affinity() -> io::Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    match r {
        0 => Ok(set),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The processors in `set`, in order.
pub(super) fn cpus_of(set: &libc::cpu_set_t) -> Vec<usize> {
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads one bit of `set`, `c` being below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, set) })
        .collect()
}

fn set_affinity(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: `set` is a cpu_set_t of the size given, only read.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &libc::cpu_set_t, b: &libc::cpu_set_t) -> bool {
        // SAFETY: CPU_EQUAL reads both sets.
        unsafe { libc::CPU_EQUAL(a, b) }
    }

    #[test]
    fn a_move_lands_on_the_share_and_leaves_the_thread_free() {
        // On a thread of its own: the test harness's threads keep their affinity.
        std::thread::spawn(|| {
            let before = affinity().unwrap();
            let cpus = cpus_of(&before);
            for index in 0..cpus.len() + 1 {
                let moved = move_to_share(index).unwrap();
                if cpus.len() < 2 {
                    assert_eq!(moved, None);
                    continue;
                }
                assert_eq!(moved, Some(cpus[index % cpus.len()]), "index {index}");
                assert!(
                    same(&affinity().unwrap(), &before),
                    "the affinity was not restored"
                );
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_bound_to_one_processor_stays_there() {
        std::thread::spawn(|| {
            let first = cpus_of(&affinity().unwrap())[0];
            // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
            let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
            // SAFETY: CPU_SET writes one bit of `one`, `first` being below CPU_SETSIZE.
            unsafe { libc::CPU_SET(first, &mut one) };
            set_affinity(&one).unwrap();
            assert_eq!(move_to_share(1).unwrap(), None);
            assert!(
                same(&affinity().unwrap(), &one),
                "a bound thread was unbound"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_choice_follows_the_ranks_of_the_node() {
        let config = |v: &str| crate::configure(&[(SPREAD_PARAM, v)]).unwrap();
        assert!(!chosen(&config("auto"), SPREAD_PARAM, 1).unwrap());
        assert!(chosen(&config("auto"), SPREAD_PARAM, 1_000_000).unwrap());
        assert!(chosen(&config("always"), SPREAD_PARAM, 1).unwrap());
        assert!(!chosen(&config("never"), SPREAD_PARAM, 1_000_000).unwrap());
        match chosen(&config("often"), SPREAD_PARAM, 1) {
            Err(e @ Error::BadParameter(_)) => assert!(e.to_string().contains(SPREAD_PARAM), "{e}"),
            other => panic!("expected BadParameter, got {other:?}"),
        }
    }
}
