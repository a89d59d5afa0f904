//! The cores ranks are bound to under `--bind-to core`.

use std::io;

/// The physical cores this process may run on, each as the logical CPUs (hardware
/// threads) it holds: from hwloc's topology with the `hwloc` feature (an error if
/// hwloc cannot read it: no silent fallback), else from
/// `/sys/devices/system/cpu/cpuN/topology`; one core per allowed CPU if neither says.
pub(super) fn cores() -> io::Result<Vec<Vec<usize>>> {
    let allowed = allowed_cpus()?;
    #[cfg(feature = "hwloc")]
    let topology = hwloc_cores()?;
    #[cfg(not(feature = "hwloc"))]
    let topology = sysfs_cores(&allowed);
    let cores: Vec<Vec<usize>> = topology
        .into_iter()
        .map(|core| {
            core.into_iter()
                .filter(|cpu| allowed.contains(cpu))
                .collect::<Vec<_>>()
        })
        .filter(|core| !core.is_empty())
        .collect();
    if cores.is_empty() {
        return Ok(allowed.into_iter().map(|cpu| vec![cpu]).collect());
    }
    Ok(cores)
}

/// Every core's hardware threads, from hwloc.
#[cfg(feature = "hwloc")]
fn hwloc_cores() -> io::Result<Vec<Vec<usize>>> {
    use hwlocality::object::types::ObjectType;
    let topology = hwlocality::Topology::new()
        .map_err(|e| io::Error::other(format!("hwloc could not read the topology: {e}")))?;
    Ok(topology
        .objects_with_type(ObjectType::Core)
        .filter_map(|core| Some(core.cpuset()?.iter_set().map(usize::from).collect()))
        .collect())
}

/// The cores of the `allowed` CPUs, each as those of its hardware threads that are
/// allowed, from sysfs: CPUs sharing a package and core id.
#[cfg_attr(feature = "hwloc", allow(dead_code))] // compared with hwloc's in a test
fn sysfs_cores(allowed: &[usize]) -> Vec<Vec<usize>> {
    let read = |cpu: usize, what: &str| {
        std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{what}"))
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    let mut cores: Vec<((i64, i64), Vec<usize>)> = Vec::new();
    for &cpu in allowed {
        let (Some(package), Some(core)) = (read(cpu, "physical_package_id"), read(cpu, "core_id"))
        else {
            continue;
        };
        match cores.iter_mut().find(|(key, _)| *key == (package, core)) {
            Some((_, cpus)) => cpus.push(cpu),
            None => cores.push(((package, core), vec![cpu])),
        }
    }
    cores.into_iter().map(|(_, cpus)| cpus).collect()
}

/// The logical CPUs this process may run on, in ascending order.
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    let is_set = |cpu: usize| {
        // SAFETY: CPU_ISSET reads one bit of `set`; `cpu` is below its size in bits.
        unsafe { libc::CPU_ISSET(cpu, &set) }
    };
    let cpus: Vec<usize> = (0..max).filter(|&cpu| is_set(cpu)).collect();
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            "no CPU in the affinity mask",
        ));
    }
    Ok(cpus)
}

#[cfg(all(test, feature = "hwloc"))]
mod tests {
    use super::*;

    /// hwloc reads the topology here (the launcher's `--bind-to core` would fail
    /// otherwise), and its cores of the allowed CPUs are sysfs's.
    #[test]
    fn hwloc_reads_the_cores_sysfs_shows() {
        let allowed = allowed_cpus().unwrap();
        let mut from_hwloc: Vec<Vec<usize>> = hwloc_cores()
            .expect("hwloc reads the topology")
            .into_iter()
            .map(|c| c.into_iter().filter(|cpu| allowed.contains(cpu)).collect())
            .filter(|c: &Vec<usize>| !c.is_empty())
            .collect();
        let mut from_sysfs = sysfs_cores(&allowed);
        from_hwloc.sort();
        from_sysfs.sort();
        assert!(
            !from_hwloc.is_empty(),
            "hwloc found no core of CPUs {allowed:?}"
        );
        assert_eq!(from_hwloc, from_sysfs);
    }
}
