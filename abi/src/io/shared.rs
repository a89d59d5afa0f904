//! The shared file pointer (MPI 4.1 §14.4.4): one per open file, which every member
//! moves. It is kept in a small file beside the data file, as ROMIO and Open MPI's
//! `sharedfp/lockedfile` keep it: named by the first member at opening
//! (`.<name>.<pid>-<nanoseconds>.shfp`), made by the first member that moves the
//! pointer, removed at closing. A member moves it under an exclusive `flock` of that
//! file, so an independent access (`read_shared`, `write_shared`) takes its place
//! without the other members, on every node that shares the file system. Where that
//! file cannot be made (a folder nobody may write), the calls that move the pointer
//! fail with `MPI_ERR_IO`.

use super::data::{check_access, moved_status, Buffer, Locked};
use super::io_error;
use crate::coll::{allgather_here, bcast_in, Inside};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A shared file pointer: one native `u64` in its file, in etypes of the view.
pub struct Shared {
    /// Its file, opened (made, where it is missing) at its first use here.
    fd: Option<std::fs::File>,
    pub path: PathBuf,
    /// Its value while its file has none (before any member moved it).
    start: u64,
}

impl Shared {
    /// Its file, opened (made) now if need be.
    fn fd(&mut self) -> Result<&std::fs::File> {
        if self.fd.is_none() {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&self.path)
                .map_err(|e| io_error("opening the shared file pointer's file", e))?;
            self.fd = Some(f);
        }
        Ok(self.fd.as_ref().expect("opened above"))
    }

    /// Its value.
    pub fn get(&mut self) -> Result<u64> {
        if self.fd.is_none() && !self.path.exists() {
            return Ok(self.start);
        }
        let start = self.start;
        let fd = self.fd()?;
        let _lock = Locked::new(fd, false)?;
        read(fd, start)
    }

    /// Move it on by `n`: where it was.
    pub fn add(&mut self, n: u64) -> Result<u64> {
        let start = self.start;
        let fd = self.fd()?;
        let _lock = Locked::new(fd, true)?;
        let v = read(fd, start)?;
        write(fd, v + n)?;
        Ok(v)
    }

    /// Set it to `v` (its file written only where a member has made it).
    fn set(&mut self, v: u64) -> Result<()> {
        self.start = v;
        if self.fd.is_none() && !self.path.exists() {
            return Ok(());
        }
        let fd = self.fd()?;
        let _lock = Locked::new(fd, true)?;
        write(fd, v)
    }
}

/// The value in file `fd`, or `start` while it holds none.
fn read(fd: &std::fs::File, start: u64) -> Result<u64> {
    let mut b = [0u8; 8];
    match fd.read_exact_at(&mut b, 0) {
        Ok(()) => Ok(u64::from_ne_bytes(b)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(start),
        Err(e) => Err(io_error("reading the shared file pointer", e)),
    }
}

fn write(fd: &std::fs::File, v: u64) -> Result<()> {
    fd.write_all_at(&v.to_ne_bytes(), 0)
        .map_err(|e| io_error("writing the shared file pointer", e))
}

/// The name of the shared pointer's file for data file `data`.
fn beside(data: &Path) -> PathBuf {
    let name = data
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy().into_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    data.with_file_name(format!(".{name}.{}-{nanos}.shfp", std::process::id()))
}

impl Mpi {
    /// File `h`'s shared pointer.
    pub fn shared_mut(&mut self, h: Handle) -> Result<&mut Shared> {
        Ok(&mut self.file_mut(h)?.shared)
    }

    /// `MPI_File_read_shared` and `MPI_File_write_shared`: the data goes where the
    /// shared pointer was, which moves past it at once.
    ///
    /// # Safety
    ///
    /// As [`Mpi::file_access`].
    pub unsafe fn file_shared(
        &mut self,
        h: Handle,
        (buf, count, ty): Buffer,
        write: bool,
    ) -> Result<Status> {
        check_access(self.file(h)?, write)?;
        let etypes = self.etypes_of(h, count, ty)?;
        let at = self.shared_mut(h)?.add(etypes)?;
        // SAFETY: the caller's contract.
        let moved = unsafe { self.move_data(h, at, (buf, count, ty), write) }?;
        Ok(moved_status(moved))
    }
}

/// At opening, collective over `comm` (run in `inside`): the shared pointer of data
/// file `data`, at `start`, its file named by the first member.
pub fn open_shared(
    inside: &mut impl Inside,
    comm: Handle,
    data: &Path,
    start: u64,
) -> Result<Shared> {
    let mut name = match inside.state().comm(comm)?.rank {
        0 => beside(data).into_os_string().into_vec(),
        _ => Vec::new(),
    };
    // Its length, then its bytes.
    let mut len = [name.len() as u64];
    bcast_in(inside, &mut len, 0, comm)?;
    name.resize(len[0] as usize, 0);
    bcast_in(inside, &mut name, 0, comm)?;
    Ok(Shared {
        fd: None,
        path: PathBuf::from(OsString::from_vec(name)),
        start,
    })
}

/// `MPI_File_read_ordered` and `MPI_File_write_ordered`, collective (run in
/// `inside`): each member accesses its data after that of the members before it,
/// from the shared file pointer, which then moves past all of it (the first member
/// moves it, once every member has called, and tells the others where it was). A
/// member whose arguments are refused makes every member's call fail.
///
/// # Safety
///
/// As [`Mpi::file_access`].
pub unsafe fn file_ordered(
    inside: &mut impl Inside,
    h: Handle,
    (buf, count, ty): Buffer,
    write: bool,
) -> Result<Status> {
    let mpi = inside.state();
    let f = mpi.file(h)?;
    let comm = f.comm;
    let mine = check_access(f, write).and_then(|()| mpi.etypes_of(h, count, ty));
    let all = allgather_here(inside, comm, &[*mine.as_ref().unwrap_or(&u64::MAX)])?;
    mine?;
    if all.contains(&u64::MAX) {
        return Err(Error::new(
            MPI_ERR_ARG,
            "another member's arguments were refused",
        ));
    }
    let mpi = inside.state();
    let rank = mpi.comm(comm)?.rank as usize;
    let mut base = [0u64];
    if rank == 0 {
        base[0] = mpi.shared_mut(h)?.add(all.iter().sum())?;
    }
    bcast_in(inside, &mut base, 0, comm)?;
    let before: u64 = all[..rank].iter().sum();
    // SAFETY: the caller's contract.
    let moved = unsafe {
        inside
            .state()
            .move_data(h, base[0] + before, (buf, count, ty), write)
    }?;
    Ok(moved_status(moved))
}

/// Set file `h`'s shared pointer to `at` (collective, run in `inside`: the first
/// member finds the value and writes it, then every member has the outcome and the
/// value).
pub fn set_shared(
    inside: &mut impl Inside,
    h: Handle,
    at: impl FnOnce(&mut Mpi) -> Result<u64>,
) -> Result<()> {
    let mpi = inside.state();
    let comm = mpi.file(h)?.comm;
    let mut v = [0u64];
    let mine = (mpi.comm(comm)?.rank == 0).then(|| {
        v[0] = at(mpi)?;
        mpi.shared_mut(h)?.set(v[0])
    });
    super::first_members_outcome(inside, comm, mine)?;
    bcast_in(inside, &mut v, 0, comm)?;
    inside.state().shared_mut(h)?.start = v[0];
    Ok(())
}
