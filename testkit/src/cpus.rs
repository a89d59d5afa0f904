//! The processors a test may run on: its own (the calling thread's affinity), and
//! another process's, as `/proc/PID/status` lists them.

/// The processors the calling thread may run on, in increasing order.
///
/// # Panics
///
/// Where the kernel does not say (`sched_getaffinity` fails).
pub fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a writable cpu_set_t of the size given.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads one bit of `set`, `c` being below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// The processors of the `Cpus_allowed_list` line of `status`, the text of a
/// `/proc/PID/status` ("0-3,8": processors 0 to 3 and 8), in its order; none where it
/// has no such line or a part of it is not a number or a range of them.
pub fn allowed_in_status(status: &str) -> Vec<usize> {
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let range: Option<(usize, usize)> = match part.split_once('-') {
            Some((a, b)) => a.parse().ok().zip(b.parse().ok()),
            None => part.parse().ok().map(|c| (c, c)),
        };
        match range {
            Some((first, last)) => cpus.extend(first..=last),
            None => return Vec::new(),
        }
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_read_as_the_kernel_writes_them() {
        let status =
            "Name:\tcat\nCpus_allowed:\t10f\nCpus_allowed_list:\t0-3,8\nMems_allowed:\t1\n";
        assert_eq!(allowed_in_status(status), [0, 1, 2, 3, 8]);
        assert_eq!(allowed_in_status("Cpus_allowed_list:\t5\n"), [5]);
        assert!(allowed_in_status("Name:\tcat\n").is_empty());
        assert!(allowed_in_status("Cpus_allowed_list:\tsome\n").is_empty());
    }

    #[test]
    fn this_thread_runs_where_its_status_says() {
        // The main thread's status is the process's; a test runs on a thread of its
        // own, spawned with the process's affinity.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let mine = allowed();
        assert!(!mine.is_empty());
        assert_eq!(mine, allowed_in_status(&status));
    }
}
