//! Reading and writing a file through its view, at an explicit offset or at the
//! individual file pointer (the shared one: [`super::shared`]).

use super::datarep::Datarep;
use super::{io_error, File};
use crate::datatype::external::{from_external, to_external};
use crate::datatype::pack;
use crate::datatype::Datatype;
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

/// Where an access starts in the view.
#[derive(Clone, Copy)]
pub enum Start {
    /// At an offset, in etypes.
    At(Count),
    /// At the individual file pointer, which moves past what was moved.
    Pointer,
}

/// A program's buffer: `count` elements of a type at an address.
pub type Buffer = (*mut c_void, c_int, Handle);

/// A lock on the whole file for one access in atomic mode (`flock`).
pub(super) struct Locked<'a>(&'a std::fs::File);

impl<'a> Locked<'a> {
    pub(super) fn new(fd: &'a std::fs::File, exclusive: bool) -> Result<Locked<'a>> {
        let how = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: `fd` is an open descriptor for as long as the borrow.
        if unsafe { libc::flock(fd.as_raw_fd(), how) } != 0 {
            return Err(io_error(
                "locking the file",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Locked(fd))
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        // SAFETY: as above; unlocking cannot harm the descriptor.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// The status of an access that moved `bytes`.
pub(super) fn moved_status(bytes: u64) -> Status {
    let mut status = Status::empty();
    status.set_bytes(bytes);
    status
}

/// Check that file `f` may be read (`write` false) or written.
pub(super) fn check_access(f: &File, write: bool) -> Result<()> {
    if write && f.amode & MPI_MODE_RDONLY != 0 {
        return Err(Error::new(MPI_ERR_READ_ONLY, "the file is open read-only"));
    }
    if !write && f.amode & MPI_MODE_WRONLY != 0 {
        return Err(Error::new(MPI_ERR_ACCESS, "the file is open write-only"));
    }
    Ok(())
}

/// Write `data` at the file's `spans`.
fn write_spans(fd: &std::fs::File, spans: &[(u64, u64)], data: &[u8]) -> Result<u64> {
    let mut at = 0;
    for &(offset, len) in spans {
        let len = len as usize;
        fd.write_all_at(&data[at..at + len], offset)
            .map_err(|e| io_error("writing the file", e))?;
        at += len;
    }
    Ok(at as u64)
}

/// Read the file's `spans` into `data`: the bytes read (fewer at the end of the
/// file).
fn read_spans(fd: &std::fs::File, spans: &[(u64, u64)], data: &mut [u8]) -> Result<u64> {
    let mut at = 0;
    for &(offset, len) in spans {
        let (first, end) = (at, at + len as usize);
        while at < end {
            let n = fd
                .read_at(&mut data[at..end], offset + (at - first) as u64)
                .map_err(|e| io_error("reading the file", e))?;
            if n == 0 {
                return Ok(at as u64);
            }
            at += n;
        }
    }
    Ok(at as u64)
}

/// Move `n` elements of `buf` (`ty`, `t`) between memory and the file's `spans`
/// through representation `rep`'s conversion function: the bytes moved.
///
/// # Safety
///
/// As [`Mpi::file_access`].
unsafe fn converted(
    rep: &Datarep,
    fd: &std::fs::File,
    spans: &[(u64, u64)],
    (buf, ty, t): (*mut c_void, Handle, &Datatype),
    n: usize,
    write: bool,
) -> Result<u64> {
    let len = spans.iter().map(|s| s.1 as usize).sum();
    let mut file = vec![0u8; len];
    if write {
        let items = t.elements.saturating_mul(n);
        // SAFETY: the caller's contract.
        unsafe { rep.convert(true, (buf, ty, t), items, &mut file) }?;
        return write_spans(fd, spans, &file);
    }
    let got = read_spans(fd, spans, &mut file)? as usize;
    // Only the data items read whole are converted.
    let (items, bytes) = match t.size {
        0 => (0, 0),
        size => {
            let (rest_items, rest_bytes) =
                t.sig.whole_elements_within(got % size).unwrap_or((0, 0));
            (
                t.elements * (got / size) + rest_items,
                size * (got / size) + rest_bytes,
            )
        }
    };
    // SAFETY: the caller's contract.
    unsafe { rep.convert(false, (buf, ty, t), items, &mut file[..bytes]) }?;
    Ok(bytes as u64)
}

impl Mpi {
    /// The etypes `count` elements of `ty` make in file `h`'s view.
    pub(super) fn etypes_of(&self, h: Handle, count: c_int, ty: Handle) -> Result<u64> {
        let n = check_count(count)?;
        let t = self.dtype(ty)?;
        let bytes = crate::coll::args::bytes(t, n)? as u64;
        let es = self.file(h)?.view.etype_size();
        if bytes % es != 0 {
            return Err(Error::new(
                MPI_ERR_TYPE,
                format!("{bytes} bytes are not a whole number of the view's etypes of {es} bytes"),
            ));
        }
        Ok(bytes / es)
    }

    /// Read (`write` false) or write `buf` in file `h` from `start`: the status,
    /// which counts the bytes moved.
    ///
    /// # Safety
    ///
    /// `buf` holds its elements (readable to write, writable to read).
    pub unsafe fn file_access(
        &mut self,
        h: Handle,
        start: Start,
        (buf, count, ty): Buffer,
        write: bool,
    ) -> Result<Status> {
        let f = self.file(h)?;
        check_access(f, write)?;
        if f.amode & MPI_MODE_SEQUENTIAL != 0 {
            return Err(Error::new(
                MPI_ERR_UNSUPPORTED_OPERATION,
                "a file opened with MPI_MODE_SEQUENTIAL is accessed at the shared file pointer only",
            ));
        }
        let pos = match start {
            Start::At(offset) => u64::try_from(offset)
                .map_err(|_| Error::new(MPI_ERR_ARG, format!("offset {offset} is negative")))?,
            Start::Pointer => f.pointer,
        };
        // SAFETY: the caller's contract.
        let moved = unsafe { self.move_data(h, pos, (buf, count, ty), write) }?;
        if let Start::Pointer = start {
            let f = self.file_mut(h)?;
            f.pointer = pos + moved / f.view.etype_size();
        }
        Ok(moved_status(moved))
    }

    /// Move `buf` between memory and file `h` from view position `pos` (etypes):
    /// the bytes moved.
    ///
    /// # Safety
    ///
    /// As [`Mpi::file_access`].
    pub(super) unsafe fn move_data(
        &self,
        h: Handle,
        pos: u64,
        (buf, count, ty): Buffer,
        write: bool,
    ) -> Result<u64> {
        let etypes = self.etypes_of(h, count, ty)?;
        let (f, t) = (self.file(h)?, self.dtype(ty)?);
        let es = f.view.etype_size();
        let len = etypes * es;
        let spans = f.view.segments(pos * es, len);
        let _lock = f.atomic.then(|| Locked::new(&f.fd, write)).transpose()?;
        let n = check_count(count)?;
        let base = buf.cast::<u8>().wrapping_offset(t.lb);
        let external = f.view.external();
        self.check_layout(f.view.datarep, (ty, t), "buffer's datatype")?;
        let len = len as usize;
        if let Some(rep) = self.datarep(f.view.datarep).filter(|r| r.converts(write)) {
            // SAFETY: the caller's contract.
            return unsafe { converted(rep, &f.fd, &spans, (buf, ty, t), n, write) };
        }
        if write {
            let mut packed = Vec::new();
            let mut data: &[u8] = if t.contiguous {
                // SAFETY: the caller's contract: `len` bytes from the type's lower bound.
                unsafe { rbtl::btl::slice_at(base, len) }
            } else {
                packed.resize(len, 0);
                // SAFETY: the caller's contract.
                unsafe { pack::pack(t, buf.cast(), n, &mut packed) };
                &packed
            };
            let converted;
            if external {
                let mut out = vec![0u8; len];
                to_external(&t.sig, n, data, &mut out)?;
                converted = out;
                data = &converted;
            }
            return write_spans(&f.fd, &spans, data);
        }
        if t.contiguous && !external {
            // SAFETY: the caller's contract, as above, writable.
            let data = unsafe { rbtl::btl::slice_at_mut(base, len) };
            return read_spans(&f.fd, &spans, data);
        }
        let mut data = vec![0u8; len];
        let got = read_spans(&f.fd, &spans, &mut data)? as usize;
        data.truncate(got);
        if external {
            if t.contiguous {
                // SAFETY: the caller's contract, as above, writable.
                let mem = unsafe { rbtl::btl::slice_at_mut(base, len) };
                return Ok(from_external(&t.sig, n, &data, mem)? as u64);
            }
            let mut native = vec![0u8; got];
            let converted = from_external(&t.sig, n, &data, &mut native)?;
            native.truncate(converted);
            data = native;
        }
        // SAFETY: the caller's contract.
        unsafe { pack::unpack(t, &data, buf.cast(), n) };
        Ok(data.len() as u64)
    }

    /// The view position (etypes) that `MPI_File_seek` (`shared` false) or
    /// `MPI_File_seek_shared` of `offset` from `whence` gives.
    pub fn seek_target(
        &mut self,
        h: Handle,
        offset: Count,
        whence: c_int,
        shared: bool,
    ) -> Result<u64> {
        let from = match whence {
            MPI_SEEK_SET => 0,
            MPI_SEEK_CUR if shared => self.shared_mut(h)?.get()?,
            MPI_SEEK_CUR => self.file(h)?.pointer,
            MPI_SEEK_END => {
                let f = self.file(h)?;
                f.view.position_below(f.size()?) / f.view.etype_size()
            }
            w => {
                return Err(Error::new(
                    MPI_ERR_ARG,
                    format!("whence {w} is not MPI_SEEK_SET, _CUR or _END"),
                ))
            }
        };
        from.checked_add_signed(offset).ok_or_else(|| {
            Error::new(
                MPI_ERR_ARG,
                format!("seeking {offset} from {from} goes before the view's start"),
            )
        })
    }
}
