//! Where the ranks of a node run when they outnumber its processors: the choices
//! that depend on it (`msg_yield_when_idle`, `msg_bind_to`) and the binding of a rank
//! to its share of the processors (see the message layer's documentation, "Ranks and
//! processors").

use super::liveness::YIELD_PARAM;
use super::{Error, Result};
use rbtl_config::{Config, Registry, Value};
use std::io;

/// The parameter that says when a rank binds itself to one processor.
pub const BIND_PARAM: &str = "msg_bind_to";
/// Its values.
const BIND_CHOICES: [&str; 3] = ["auto", "core", "none"];
/// The values of `msg_yield_when_idle`.
const YIELD_CHOICES: [&str; 3] = ["auto", "always", "never"];

/// Register [`BIND_PARAM`].
pub(super) fn register_params(registry: &mut Registry) -> rbtl_config::Result<()> {
    registry.register(
        BIND_PARAM,
        Value::Str("auto".into()),
        "whether a rank binds itself, during start-up, to processor (its index on the node) mod (the processors it may run on): auto (where this node runs more ranks than it has online processors), core (always), none; processors are numbered as the kernel does, and a rank its launcher bound to one processor stays there",
    )?;
    Ok(())
}

/// Whether waits on a node of `ranks_here` ranks yield early (`msg_yield_when_idle`:
/// `auto`, where they outnumber its online processors; `always`; `never`). A
/// configuration made without the message layer's parameters gets `auto`, as for
/// every choice here.
pub(super) fn yield_chosen(config: &Config, ranks_here: usize) -> Result<bool> {
    match choice(config, YIELD_PARAM, &YIELD_CHOICES)? {
        "always" => Ok(true),
        "never" => Ok(false),
        _ => Ok(oversubscribed(ranks_here)),
    }
}

/// Whether a rank of a node of `ranks_here` ranks binds itself ([`BIND_PARAM`]).
pub(super) fn bind_chosen(config: &Config, ranks_here: usize) -> Result<bool> {
    match choice(config, BIND_PARAM, &BIND_CHOICES)? {
        "core" => Ok(true),
        "none" => Ok(false),
        _ => Ok(oversubscribed(ranks_here)),
    }
}

/// The value of string parameter `param`, one of `choices` (the first, `auto`, where
/// the parameter is not registered).
fn choice<'a>(config: &'a Config, param: &str, choices: &[&'static str]) -> Result<&'a str> {
    match config.str(param) {
        Ok(v) if choices.contains(&v) => Ok(v),
        Ok(other) => Err(Error::BadParameter(format!(
            "{param} = {other:?}: use one of {choices:?}"
        ))),
        Err(rbtl_config::Error::NotRegistered(_)) => Ok(choices[0]),
        Err(e) => Err(e.into()),
    }
}

/// Whether a node of `ranks_here` ranks has fewer online processors (not this
/// process's affinity: a rank bound to one core still shares the node with the
/// others).
pub(super) fn oversubscribed(ranks_here: usize) -> bool {
    // SAFETY: sysconf only reads the system's configuration.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    ranks_here > usize::try_from(n).unwrap_or(1).max(1)
}

/// Bind the calling thread to processor `index mod n` of the `n` it may run on: that
/// processor, or `None` where it may run on one only (bound already).
pub(super) fn bind_to_share(index: usize) -> io::Result<Option<usize>> {
    let cpus = cpus_of(&affinity()?);
    if cpus.len() < 2 {
        return Ok(None);
    }
    let cpu = cpus[index % cpus.len()];
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit of `one`, `cpu` being below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut one) };
    set_affinity(&one)?;
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

    #[test]
    fn a_rank_binds_to_its_share_and_a_bound_one_stays() {
        let cpus = cpus_of(&affinity().unwrap());
        for index in 0..cpus.len() + 1 {
            let cpus = cpus.clone();
            // On threads of their own: the harness's threads keep their affinity.
            std::thread::spawn(move || {
                let bound = bind_to_share(index).unwrap();
                let now = cpus_of(&affinity().unwrap());
                if cpus.len() < 2 {
                    assert_eq!(bound, None);
                    assert_eq!(now, cpus);
                } else {
                    let share = cpus[index % cpus.len()];
                    assert_eq!(bound, Some(share), "index {index}");
                    assert_eq!(now, [share], "index {index}");
                    // Bound now: a second call moves nothing.
                    assert_eq!(bind_to_share(index + 1).unwrap(), None);
                    assert_eq!(cpus_of(&affinity().unwrap()), [share]);
                }
            })
            .join()
            .unwrap();
        }
    }

    #[test]
    fn the_choices_follow_the_ranks_of_the_node() {
        let config = |p: &str, v: &str| crate::configure(&[(p, v)]).unwrap();
        let yields = |v: &str, n| yield_chosen(&config(YIELD_PARAM, v), n);
        let binds = |v: &str, n| bind_chosen(&config(BIND_PARAM, v), n);
        // A node of one rank has a processor for it; one of a million has not.
        assert!(!binds("auto", 1).unwrap());
        assert!(binds("auto", 1_000_000).unwrap());
        assert!(binds("core", 1).unwrap());
        assert!(!binds("none", 1_000_000).unwrap());
        for bad in [yields("sometimes", 1), binds("socket", 1)] {
            match bad {
                Err(e @ Error::BadParameter(_)) => {
                    assert!(e.to_string().contains("use one of"), "{e}")
                }
                other => panic!("expected BadParameter, got {other:?}"),
            }
        }
    }
}
