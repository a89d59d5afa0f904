//! The shared file pointer (MPI 4.1 §14.4.4): one per open file, which every member
//! moves. It is kept in a small file beside the data file, made by the first member
//! at opening (`.<name>.<pid>-<nanoseconds>.shfp`, removed at closing), as ROMIO and
//! Open MPI's `sharedfp/lockedfile` keep it: a member moves it under an exclusive
//! `flock` of that file. So an independent access (`read_shared`, `write_shared`)
//! takes its place without the other members, on every node that shares the file
//! system. Where that file cannot be made (a folder the first member may not write),
//! the file opens without a shared pointer and the calls that need one fail with
//! `MPI_ERR_IO`.

use super::data::{check_access, Buffer, Locked};
use super::io_error;
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file of a shared file pointer: one native `u64`, in etypes of the view.
pub struct Shared {
    fd: std::fs::File,
    pub path: PathBuf,
}

impl Shared {
    /// Its value.
    pub fn get(&self) -> Result<u64> {
        let _lock = Locked::new(&self.fd, false)?;
        self.read()
    }

    /// Move it on by `n`: where it was.
    pub fn add(&self, n: u64) -> Result<u64> {
        let _lock = Locked::new(&self.fd, true)?;
        let v = self.read()?;
        self.write(v + n)?;
        Ok(v)
    }

    /// Set it to `v`.
    pub fn set(&self, v: u64) -> Result<()> {
        let _lock = Locked::new(&self.fd, true)?;
        self.write(v)
    }

    fn read(&self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.fd
            .read_exact_at(&mut b, 0)
            .map_err(|e| io_error("reading the shared file pointer", e))?;
        Ok(u64::from_ne_bytes(b))
    }

    fn write(&self, v: u64) -> Result<()> {
        self.fd
            .write_all_at(&v.to_ne_bytes(), 0)
            .map_err(|e| io_error("writing the shared file pointer", e))
    }
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

/// Open (`create`: make, at `start`) the shared pointer's file `path`.
fn open_shared_file(path: &Path, create: bool, start: u64) -> Result<Shared> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(true).create_new(create);
    let fd = o
        .open(path)
        .map_err(|e| io_error("opening the shared file pointer's file", e))?;
    let s = Shared {
        fd,
        path: path.to_path_buf(),
    };
    if create {
        s.write(start)?;
    }
    Ok(s)
}

impl Mpi {
    /// At opening, collective over `comm`: the shared pointer of data file `data`,
    /// at `start`, or none where any member could not open its file.
    pub fn open_shared(&mut self, comm: Handle, data: &Path, start: u64) -> Result<Option<Shared>> {
        let first = self.comm(comm)?.rank == 0;
        let mut name = Vec::new();
        let mut made = None;
        if first {
            let path = beside(data);
            if let Ok(s) = open_shared_file(&path, true, start) {
                name = path.into_os_string().into_encoded_bytes();
                made = Some(s);
            }
        }
        let name = self.bcast_bytes(comm, name)?;
        let opened = match made {
            Some(s) => Some(s),
            None if name.is_empty() => None,
            // SAFETY: the first member's path, as it encoded it on this system.
            None => open_shared_file(
                Path::new(unsafe { std::ffi::OsStr::from_encoded_bytes_unchecked(&name) }),
                false,
                0,
            )
            .ok(),
        };
        let all = self.allgather_u64(comm, u64::from(opened.is_some()))?;
        if all.contains(&0) {
            if let (true, Some(s)) = (first, &opened) {
                let _ = std::fs::remove_file(&s.path);
            }
            return Ok(None);
        }
        Ok(opened)
    }

    /// `v`, a vector of bytes of the first member of `comm`, at every member.
    fn bcast_bytes(&mut self, comm: Handle, mut v: Vec<u8>) -> Result<Vec<u8>> {
        let mut len = [v.len() as u64];
        self.bcast_u64s(comm, &mut len)?;
        v.resize(len[0] as usize, 0);
        // SAFETY: `v` lives until the broadcast, run here, ends.
        let s = unsafe {
            self.build_bcast(v.as_mut_ptr().cast(), v.len() as c_int, MPI_BYTE, 0, comm)
        }?;
        self.run(s)?;
        Ok(v)
    }

    /// `v` of the first member of `comm`, at every member.
    fn bcast_u64s(&mut self, comm: Handle, v: &mut [u64]) -> Result<()> {
        // SAFETY: `v` lives until the broadcast, run here, ends.
        let s = unsafe {
            self.build_bcast(
                v.as_mut_ptr().cast(),
                v.len() as c_int,
                MPI_UINT64_T,
                0,
                comm,
            )
        }?;
        self.run(s)
    }

    /// File `h`'s shared pointer.
    pub fn shared_of(&self, h: Handle) -> Result<&Shared> {
        self.file(h)?.shared.as_ref().ok_or_else(|| {
            Error::new(
                MPI_ERR_IO,
                "this file has no shared file pointer: its file could not be made beside the file",
            )
        })
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
        let at = self.shared_of(h)?.add(etypes)?;
        // SAFETY: the caller's contract.
        let moved = unsafe { self.move_data(h, at, (buf, count, ty), write) }?;
        let mut status = Status::empty();
        status.set_bytes(moved);
        Ok(status)
    }

    /// `MPI_File_read_ordered` and `MPI_File_write_ordered`, collective: each member
    /// accesses its data after that of the members before it, from the shared file
    /// pointer, which then moves past all of it (the first member moves it, once
    /// every member has called, and tells the others where it was). A member whose
    /// arguments are refused makes every member's call fail.
    ///
    /// # Safety
    ///
    /// As [`Mpi::file_access`].
    pub unsafe fn file_ordered(
        &mut self,
        h: Handle,
        (buf, count, ty): Buffer,
        write: bool,
    ) -> Result<Status> {
        let f = self.file(h)?;
        let comm = f.comm;
        let mine = check_access(f, write)
            .and_then(|()| self.shared_of(h).map(|_| ()))
            .and_then(|()| self.etypes_of(h, count, ty));
        let all = self.allgather_u64(comm, *mine.as_ref().unwrap_or(&u64::MAX))?;
        mine?;
        if all.contains(&u64::MAX) {
            return Err(Error::new(
                MPI_ERR_ARG,
                "another member's arguments were refused",
            ));
        }
        let rank = self.comm(comm)?.rank as usize;
        let mut base = [0u64];
        if rank == 0 {
            base[0] = self.shared_of(h)?.add(all.iter().sum())?;
        }
        self.bcast_u64s(comm, &mut base)?;
        let before: u64 = all[..rank].iter().sum();
        // SAFETY: the caller's contract.
        let moved = unsafe { self.move_data(h, base[0] + before, (buf, count, ty), write) }?;
        let mut status = Status::empty();
        status.set_bytes(moved);
        Ok(status)
    }

    /// Set file `h`'s shared pointer to `at` (collective: the first member sets it,
    /// then every member has the outcome).
    pub fn set_shared(&mut self, h: Handle, at: impl FnOnce(&Mpi) -> Result<u64>) -> Result<()> {
        let comm = self.file(h)?.comm;
        let first = self.comm(comm)?.rank == 0;
        let mine = first.then(|| at(self).and_then(|v| self.shared_of(h)?.set(v)));
        self.first_members_outcome(comm, mine)
    }
}
