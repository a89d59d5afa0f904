//! MPI-IO (MPI 4.1 chapter 14) over the operating system's files: each process
//! opens the file itself and reads and writes its own bytes with positioned
//! system calls (`pread`/`pwrite`), through its view ([`view`]). Nothing is cached
//! here: what a call wrote is in the file (the kernel's page cache) when it
//! returns, so another process of the node that reads after a barrier sees it;
//! across nodes, as their shared file system shows it (`MPI_File_sync` flushes it
//! to storage). Collective calls move each process's own data as
//! the independent ones do (no two-phase aggregation); those that change the file
//! as a whole (`set_size`, `preallocate`, closing with `MPI_MODE_DELETE_ON_CLOSE`)
//! are made by the first member, the others waiting for its outcome. In atomic
//! mode each access holds a lock on the whole file (`flock`, shared to read,
//! exclusive to write).
//!
//! The shared file pointer is kept in a file beside the data ([`shared`]).

pub mod access;
pub mod api;
pub mod data;
pub mod datarep;
pub mod shared;
pub mod view;

use crate::coll::{allgather_here, bcast_outcome, run_here, Inside};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::{Info, Mpi};
use std::path::PathBuf;
use view::View;

/// An open file.
pub struct File {
    pub fd: std::fs::File,
    pub path: PathBuf,
    /// A duplicate of the communicator it was opened on, for its collectives.
    pub comm: Handle,
    pub amode: c_int,
    pub view: View,
    /// The individual file pointer, in etypes of the view.
    pub pointer: u64,
    /// The shared one.
    pub shared: shared::Shared,
    pub atomic: bool,
    pub errhandler: Handle,
    pub info: Info,
    /// The outcome of a split collective begun and not yet ended.
    pub split: Option<(Status, Option<Error>)>,
}

/// The error of system call `what` on a file, in the standard's classes.
pub fn io_error(what: &str, e: std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    let class = match e.kind() {
        NotFound => MPI_ERR_NO_SUCH_FILE,
        PermissionDenied => MPI_ERR_ACCESS,
        AlreadyExists => MPI_ERR_FILE_EXISTS,
        StorageFull => MPI_ERR_NO_SPACE,
        ReadOnlyFilesystem => MPI_ERR_READ_ONLY,
        QuotaExceeded => MPI_ERR_QUOTA,
        InvalidFilename | IsADirectory | NotADirectory => MPI_ERR_BAD_FILE,
        _ => MPI_ERR_IO,
    };
    Error::new(class, format!("{what}: {e}"))
}

/// The error handler of file `h` (`MPI_FILE_NULL`'s: that of opening).
pub fn errhandler_of(mpi: &Mpi, h: Handle) -> Handle {
    match h {
        MPI_FILE_NULL => mpi.file_null_errhandler,
        _ => mpi
            .files
            .get(h)
            .map_or(mpi.file_null_errhandler, |f| f.errhandler),
    }
}

#[cold]
fn bad_file(h: Handle) -> Error {
    crate::error::bad_handle(h, (MPI_FILE_NULL, "MPI_FILE_NULL"), MPI_ERR_FILE, "a file")
}

/// Check access mode `amode` (MPI 4.1 §14.2.1): one of read-only, read-write and
/// write-only; no creation read-only; no sequential read-write.
fn check_amode(amode: c_int) -> Result<()> {
    let modes = [MPI_MODE_RDONLY, MPI_MODE_RDWR, MPI_MODE_WRONLY];
    let bad = |why: &str| {
        Err(Error::new(
            MPI_ERR_AMODE,
            format!("access mode {amode:#x}: {why}"),
        ))
    };
    if modes.iter().filter(|m| amode & **m != 0).count() != 1 {
        return bad("exactly one of MPI_MODE_RDONLY, MPI_MODE_RDWR and MPI_MODE_WRONLY");
    }
    if amode & MPI_MODE_RDONLY != 0 && amode & (MPI_MODE_CREATE | MPI_MODE_EXCL) != 0 {
        return bad("MPI_MODE_CREATE or MPI_MODE_EXCL with MPI_MODE_RDONLY");
    }
    if amode & MPI_MODE_RDWR != 0 && amode & MPI_MODE_SEQUENTIAL != 0 {
        return bad("MPI_MODE_SEQUENTIAL with MPI_MODE_RDWR");
    }
    let known = MPI_MODE_APPEND
        | MPI_MODE_CREATE
        | MPI_MODE_DELETE_ON_CLOSE
        | MPI_MODE_EXCL
        | MPI_MODE_SEQUENTIAL
        | MPI_MODE_UNIQUE_OPEN
        | modes.iter().fold(0, |a, m| a | m);
    if amode & !known != 0 {
        return bad("bits the standard does not define");
    }
    Ok(())
}

/// Open `path` as `amode` says; `create`: with its creation flags.
fn open_file(path: &PathBuf, amode: c_int, create: bool) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(amode & MPI_MODE_WRONLY == 0)
        .write(amode & MPI_MODE_RDONLY == 0);
    if create && amode & MPI_MODE_EXCL != 0 {
        o.create_new(true);
    } else if create && amode & MPI_MODE_CREATE != 0 {
        o.create(true);
    }
    o.open(path)
        .map_err(|e| io_error(&format!("opening {}", path.display()), e))
}

impl Mpi {
    /// File `h`.
    pub fn file(&self, h: Handle) -> Result<&File> {
        self.files.get(h).ok_or_else(|| bad_file(h))
    }

    /// File `h`, writable.
    pub fn file_mut(&mut self, h: Handle) -> Result<&mut File> {
        self.files.get_mut(h).ok_or_else(|| bad_file(h))
    }
}

/// A barrier over intracommunicator `comm`, run in `inside` (from a binding, other
/// threads' calls come in while it waits; so in every collective call below).
pub fn barrier_over(inside: &mut impl Inside, comm: Handle) -> Result<()> {
    let s = inside.state().build_barrier(comm)?;
    run_here(inside, s)
}

/// The class of the first member's outcome (`MPI_SUCCESS`), told by it to every
/// member of `comm`: its error there, an error of that class elsewhere.
pub(super) fn first_members_outcome(
    inside: &mut impl Inside,
    comm: Handle,
    mine: Option<Result<()>>,
) -> Result<()> {
    let failed = "the file's first member failed";
    bcast_outcome(inside, mine, &mut [MPI_SUCCESS], (0, comm), failed)
}

/// `MPI_File_open`, collective over `comm`: the first member opens (and creates)
/// the file, then the others open it; any member's failure is every member's.
pub fn file_open(
    inside: &mut impl Inside,
    comm: Handle,
    path: PathBuf,
    amode: c_int,
    info: Info,
) -> Result<Handle> {
    if inside.state().comm(comm)?.remote.is_some() {
        return Err(Error::new(
            MPI_ERR_COMM,
            "files are opened on intracommunicators",
        ));
    }
    check_amode(amode)?;
    if path.as_os_str().is_empty() {
        return Err(Error::new(MPI_ERR_BAD_FILE, "the file name is empty"));
    }
    let first = inside.state().comm(comm)?.rank == 0;
    let mut fd = None;
    let mine = first.then(|| open_file(&path, amode, true).map(|f| fd = Some(f)));
    first_members_outcome(inside, comm, mine)?;
    let opened = match fd {
        Some(f) => Ok(f),
        None => open_file(&path, amode, false),
    };
    let failed = allgather_here(
        inside,
        comm,
        &[opened.as_ref().map_or_else(|e| e.class as u64, |_| 0)],
    )?;
    let fd = opened?;
    if let Some(&class) = failed.iter().find(|c| **c != 0) {
        return Err(Error::new(
            class as c_int,
            "another member could not open the file (its error says why)",
        ));
    }
    let dup = crate::comm::create::dup(inside, comm)?;
    let end = match amode & MPI_MODE_APPEND {
        0 => 0,
        _ => fd
            .metadata()
            .map_err(|e| io_error("reading the file's size", e))?
            .len(),
    };
    let shared = shared::open_shared(inside, dup, &path, end)?;
    let mpi = inside.state();
    let byte = mpi.dtype(MPI_BYTE)?.clone();
    let f = File {
        fd,
        path,
        comm: dup,
        amode,
        view: View {
            disp: 0,
            etype: (MPI_BYTE, byte.clone()),
            filetype: (MPI_BYTE, byte),
            datarep: datarep::Rep::Native,
        },
        pointer: end,
        shared,
        atomic: false,
        errhandler: mpi.file_null_errhandler,
        info,
        split: None,
    };
    mpi.files.insert(f)
}

/// `MPI_File_close`, collective: every member's accesses end before the first
/// member deletes the file (`MPI_MODE_DELETE_ON_CLOSE`).
pub fn file_close(inside: &mut impl Inside, h: Handle) -> Result<()> {
    let comm = inside.state().file(h)?.comm;
    barrier_over(inside, comm)?;
    let mpi = inside.state();
    let f = mpi.files.remove(h).ok_or_else(|| bad_file(h))?;
    let first = mpi.comm(comm)?.rank == 0;
    if first {
        // Missing where no member moved the shared pointer.
        let _ = std::fs::remove_file(&f.shared.path);
    }
    let mine = (first && f.amode & MPI_MODE_DELETE_ON_CLOSE != 0).then(|| {
        std::fs::remove_file(&f.path).map_err(|e| io_error("deleting the file on close", e))
    });
    drop(f);
    let outcome = first_members_outcome(inside, comm, mine);
    inside.state().comm_free(comm)?;
    outcome
}

/// A change to the file as a whole, collective: made by the first member
/// (`change`) once every member has called, then every member has its outcome (so
/// no member's access before or after the call meets the change under way).
pub fn file_change(
    inside: &mut impl Inside,
    h: Handle,
    change: impl FnOnce(&File) -> Result<()>,
) -> Result<()> {
    let f = inside.state().file(h)?;
    if f.amode & MPI_MODE_RDONLY != 0 {
        return Err(Error::new(MPI_ERR_READ_ONLY, "the file is open read-only"));
    }
    let comm = f.comm;
    barrier_over(inside, comm)?;
    let mpi = inside.state();
    let mine = (mpi.comm(comm)?.rank == 0).then(|| change(mpi.file(h)?));
    first_members_outcome(inside, comm, mine)
}

impl File {
    /// Its size in bytes.
    pub fn size(&self) -> Result<u64> {
        Ok(self
            .fd
            .metadata()
            .map_err(|e| io_error("reading the file's size", e))?
            .len())
    }
}
