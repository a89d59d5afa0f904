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
        "whether a rank binds itself, during start-up, to processor (its index on the node) mod (the processors it may run on): auto (where this node runs more ranks than the processors they may run on between them), core (always), none; processors are numbered as the kernel does, and a rank its launcher bound to one processor stays there",
    )?;
    Ok(())
}

/// Whether waits yield early (`msg_yield_when_idle`: `auto`, where the node is
/// `oversubscribed`; `always`; `never`). A configuration made without the message
/// layer's parameters gets `auto`, as for every choice here.
pub(super) fn yield_chosen(config: &Config, oversubscribed: bool) -> Result<bool> {
    match choice(config, YIELD_PARAM, &YIELD_CHOICES)? {
        "always" => Ok(true),
        "never" => Ok(false),
        _ => Ok(oversubscribed),
    }
}

/// Whether a rank binds itself ([`BIND_PARAM`]), its node being `oversubscribed` or
/// not.
pub(super) fn bind_chosen(config: &Config, oversubscribed: bool) -> Result<bool> {
    match choice(config, BIND_PARAM, &BIND_CHOICES)? {
        "core" => Ok(true),
        "none" => Ok(false),
        _ => Ok(oversubscribed),
    }
}

/// The value of string parameter `param`, one of `choices` (the first, `auto`, where
/// the parameter is not registered).
pub(super) fn choice<'a>(
    config: &'a Config,
    param: &str,
    choices: &[&'static str],
) -> Result<&'a str> {
    match config.str(param) {
        Ok(v) if choices.contains(&v) => Ok(v),
        Ok(other) => Err(Error::BadParameter(format!(
            "{param} = {other:?}: use one of {choices:?}"
        ))),
        Err(rbtl_config::Error::NotRegistered(_)) => Ok(choices[0]),
        Err(e) => Err(e.into()),
    }
}

/// The modex key under which each rank says which processors it may run on, before
/// it binds itself: the bits of its affinity mask, processor 0 the lowest bit of the
/// first byte ([`cpu_mask`]).
pub(super) const CPUS_KEY: &str = "cpus";

/// The processors the calling thread may run on, as [`CPUS_KEY`]'s bytes (none past
/// the last processor); `None` where the kernel does not say.
pub(super) fn cpu_mask() -> Option<Vec<u8>> {
    let cpus = cpus_of(&affinity().ok()?);
    let mut mask = vec![0u8; cpus.last()? / 8 + 1];
    for c in cpus {
        mask[c / 8] |= 1 << (c % 8);
    }
    Some(mask)
}

/// How many processors the ranks of a node may run on between them, from each rank's
/// [`cpu_mask`]: the processors of their union. `None` where a rank's is unknown.
pub(super) fn processors_of(masks: impl IntoIterator<Item = Option<Vec<u8>>>) -> Option<usize> {
    let mut union: Vec<u8> = Vec::new();
    for mask in masks {
        let mask = mask?;
        if union.len() < mask.len() {
            union.resize(mask.len(), 0);
        }
        for (u, m) in union.iter_mut().zip(&mask) {
            *u |= m;
        }
    }
    Some(union.iter().map(|b| b.count_ones() as usize).sum())
}

/// Whether a node's `ranks_here` ranks outnumber the processors they may run on
/// between them (`processors`, [`processors_of`]; a rank bound to one core still
/// shares the node with the others), or its online processors where that is unknown:
/// a job confined to some of a node's processors (a cpuset, as Slurm's cgroups give
/// a job step, or the affinity the ranks were started with) takes turns on those.
pub(super) fn oversubscribed(ranks_here: usize, processors: Option<usize>) -> bool {
    let online = || {
        // SAFETY: sysconf only reads the system's configuration.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        usize::try_from(n).unwrap_or(1)
    };
    ranks_here > processors.unwrap_or_else(online).max(1)
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
    fn the_choices_follow_whether_the_node_is_oversubscribed() {
        let config = |p: &str, v: &str| crate::configure(&[(p, v)]).unwrap();
        let yields = |v: &str, over| yield_chosen(&config(YIELD_PARAM, v), over);
        let binds = |v: &str, over| bind_chosen(&config(BIND_PARAM, v), over);
        assert!(!binds("auto", false).unwrap());
        assert!(binds("auto", true).unwrap());
        assert!(binds("core", false).unwrap());
        assert!(!binds("none", true).unwrap());
        assert!(!yields("auto", false).unwrap());
        assert!(yields("auto", true).unwrap());
        for bad in [yields("sometimes", false), binds("socket", false)] {
            match bad {
                Err(e @ Error::BadParameter(_)) => {
                    assert!(e.to_string().contains("use one of"), "{e}")
                }
                other => panic!("expected BadParameter, got {other:?}"),
            }
        }
    }

    #[test]
    fn ranks_count_the_processors_they_may_run_on_between_them() {
        // This process's mask holds the processors it may run on, and only those.
        let mask = cpu_mask().unwrap();
        let cpus = cpus_of(&affinity().unwrap());
        assert_eq!(processors_of([Some(mask.clone())]), Some(cpus.len()));
        assert_ne!(mask.last(), Some(&0), "no byte past the last processor");
        // Two ranks bound to processors 0 and 9, a third free on 0-3.
        let union = processors_of([Some(vec![1]), Some(vec![0, 2]), Some(vec![0x0f])]);
        assert_eq!(union, Some(5));
        // One rank's unknown: the count is too.
        assert_eq!(processors_of([Some(vec![1]), None]), None);
        // Three ranks on two processors take turns; on three they do not.
        assert!(oversubscribed(3, Some(2)));
        assert!(!oversubscribed(3, Some(3)));
        // Processors unknown: the node's online ones count.
        assert!(oversubscribed(1_000_000, None));
        assert!(!oversubscribed(1, None));
        assert!(oversubscribed(2, Some(0)), "no processor counts as one");
    }
}
