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

/// Where a rank runs, as a spawn's info asks (MPI 4.1, 11.8.4): its working folder
/// (`wdir`; the launcher's without), and folders, `:` between them, where its
/// program is looked for before `PATH` (`path`); and the variables its program's
/// ranks get after the job's (`env`: a program's own in a job of several).
#[derive(Clone, Copy, Default)]
pub(super) struct Place<'a> {
    pub wdir: Option<&'a Path>,
    pub path: Option<&'a str>,
    pub env: &'a [(String, String)],
}

/// The program to run from `place`: a name with a `/` as given (from the launcher's
/// working folder); a bare name from the first of `place`'s folders, `PATH` and the
/// working folder that holds it (as Open MPI's `mpirun` and MPICH's `mpiexec` find
/// it); as given when none does (the start then fails, naming it).
fn located(program: &Path, place: Place<'_>) -> PathBuf {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return std::path::absolute(program).unwrap_or_else(|_| program.to_path_buf());
    }
    let executable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    let here = place
        .wdir
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let folders = (place
        .path
        .unwrap_or("")
        .split(':')
        .filter(|d| !d.is_empty()))
    .map(PathBuf::from)
    .chain(std::env::split_paths(&path))
    .chain([here]);
    for d in folders {
        let p = d.join(program);
        if executable(&p) {
            return std::path::absolute(&p).unwrap_or(p);
        }
    }
    program.to_path_buf()
}

/// Starts one rank, in a process group of its own (see
/// [`rank_process`](super::rank_process) for the one exception).
/// `size` is the size of the rank's job; only the first job's rank 0 reads the
/// launcher's standard input (`first`).
pub(super) fn start_rank(
    (program, place): (&Path, Place<'_>),
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
    let mut command = Command::new(located(program, place));
    if let Some(wdir) = place.wdir {
        command.current_dir(wdir);
    }
    command
        .args(args)
        .envs(opts.env.iter().chain(place.env).map(|(k, v)| (k, v)))
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
