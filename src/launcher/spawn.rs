//! Starting one rank: its PMI socket, its environment, its binding, its process
//! group, and a child that dies with the launcher.

use super::{Error, LaunchOptions};
use std::ffi::OsString;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A started rank: its process, whether it leads a process group of its own, and the
/// launcher's end of its PMI socketpair.
pub(super) struct Started {
    pub child: Child,
    pub leads_group: bool,
    pub pmi: UnixStream,
}

/// The program to run: as given, or, for a bare name that no folder of `PATH`
/// holds but the working folder does, that one (as Open MPI's `mpirun` and MPICH's
/// `mpiexec` find it).
fn located(program: &Path) -> PathBuf {
    let bare = !program.as_os_str().as_bytes().contains(&b'/');
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let in_path = std::env::var_os("PATH")
        .is_some_and(|dirs| std::env::split_paths(&dirs).any(|d| executable(&d.join(program))));
    match bare && !in_path && executable(program) {
        true => Path::new(".").join(program),
        false => program.to_path_buf(),
    }
}

/// Starts one rank, in a process group of its own (see
/// [`rank_process`](super::rank_process) for the one exception).
/// `size` is the size of the rank's job; only the first job's rank 0 reads the
/// launcher's standard input (`first`).
pub(super) fn start_rank(
    program: &Path,
    args: &[OsString],
    opts: &LaunchOptions,
    (rank, size, first): (u32, u32, bool),
    cpus: Option<&[usize]>,
) -> Result<Started, Error> {
    let (ours, theirs) = UnixStream::pair().map_err(|source| Error::Socket { rank, source })?;
    let mut theirs = OwnedFd::from(theirs);
    if theirs.as_raw_fd() < 3 {
        // Never let it sit where stdin/stdout/stderr get installed in the child
        // (try_clone_to_owned duplicates to descriptor 3 or above).
        theirs = theirs
            .as_fd()
            .try_clone_to_owned()
            .map_err(|source| Error::Socket { rank, source })?;
    }
    let fd = theirs.as_raw_fd();
    let cpu_set = cpus.map(|cpus| {
        // SAFETY: cpu_set_t is plain bits; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &cpu in cpus {
            // SAFETY: CPU_SET writes one bit inside `set`; `cores` keeps only CPUs
            // below CPU_SETSIZE.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
        set
    });
    let launcher_pid = std::process::id() as libc::pid_t;

    let reads_stdin = first && rank == 0;
    let mut command = Command::new(located(program));
    command
        .args(args)
        .envs(opts.env.iter().map(|(k, v)| (k, v)))
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env("PMI_FD", fd.to_string())
        .env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", size.to_string())
        .stdin(if reads_stdin {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Rank 0 reading a terminal must stay in the terminal's foreground group.
    let leads_group = !reads_stdin || !io::stdin().is_terminal();
    if leads_group {
        command.process_group(0);
    }
    // SAFETY: the hook runs in the child between fork and exec and calls only
    // async-signal-safe functions (fcntl, prctl, getppid, sched_setaffinity) on data
    // copied into the closure beforehand; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // The PMI socket is close-on-exec like every descriptor std makes: keep
            // this one, in this child only.
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags == -1 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == -1 {
                return Err(io::Error::last_os_error());
            }
            // Die with the launcher rather than outlive it unsupervised.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != launcher_pid {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(set) = cpu_set {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|source| Error::Spawn {
        rank,
        program: program.to_path_buf(),
        source,
    })?;
    drop(theirs);
    Ok(Started {
        child,
        leads_group,
        pmi: ours,
    })
}
