//! Helpers the workspace's test suites share.

pub mod cpus;
pub mod fork;
pub mod fuzz;
pub mod mem;
pub mod process;
pub mod rng;

/// The variable that says every test must run: set by `.ci/run`, which runs as root
/// with every package installed (not `RBTL_*`, which names configuration parameters).
pub const REQUIRED_VAR: &str = "NODES_REQUIRED";

/// A test that cannot run on this machine, for `why`: it says SKIP and the caller
/// returns, unless [`REQUIRED_VAR`] is `1`, where a test that cannot run is a failure.
///
/// # Panics
///
/// Under [`REQUIRED_VAR`]`=1`.
pub fn cannot_run(test: &str, why: &str) {
    if std::env::var(REQUIRED_VAR).as_deref() == Ok("1") {
        panic!("{REQUIRED_VAR}=1 but {test} cannot run: {why}");
    }
    eprintln!("SKIP {test}: {why}");
}

/// `found`, or where it is `None` (a test that cannot run here because `missing`: a
/// device, a guest pair), `None` after saying SKIP, for the caller to return; unless
/// the environment variable `required` is set, which makes a test that cannot run a
/// failure.
///
/// # Panics
///
/// Where `found` is `None` and `required` is set.
pub fn found_or_skip<T>(found: Option<T>, required: &str, missing: &str) -> Option<T> {
    if found.is_none() {
        assert!(
            std::env::var_os(required).is_none(),
            "{missing}, and {required} is set"
        );
        eprintln!("SKIP: {missing}");
    }
    found
}

/// `CAP_IPC_LOCK`'s bit among the capabilities.
const CAP_IPC_LOCK: u32 = 14;

/// Make this process an ordinary user as far as locked memory goes: drop
/// `CAP_IPC_LOCK` and lower `RLIMIT_MEMLOCK` to `bytes`, so that registering more than
/// that fails as it would for a user whose `ulimit -l` is that low. It cannot be undone:
/// call it in a process made for the test.
///
/// # Panics
///
/// If the kernel refuses (the process may only lower what it has, so it does not).
pub fn restrict_memlock(bytes: u64) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut hdr = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data words, as
    // capabilities(7) describes; this process alone is affected.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()),
            0,
            "capget"
        );
        data[0].effective &= !(1 << CAP_IPC_LOCK);
        data[0].permitted &= !(1 << CAP_IPC_LOCK);
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut hdr, data.as_ptr()),
            0,
            "capset"
        );
    }
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: a plain rlimit for this process.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) };
    assert_eq!(rc, 0, "setrlimit");
}
