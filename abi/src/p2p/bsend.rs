//! Buffered sends: the message is copied out of the user's buffer at once and sent
//! from the copy, within the room of the buffer the user attached
//! (`MPI_Buffer_attach`), which `MPI_Buffer_detach` hands back once every buffered
//! send has left.

use crate::entry::{call, call_held};
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::p2p::wait::Step;
use crate::request::Request;
use crate::state::Mpi;

/// The attached buffer: where it is, its size, and how much buffered sends in
/// flight take of it.
#[derive(Default)]
pub struct Buffer {
    attached: Option<(usize, usize)>,
    pub used: usize,
}

impl Mpi {
    /// A buffered send ([`super::Mode::Buffered`]): copy, then send from the copy (a
    /// request that is complete).
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    pub unsafe fn bsend(
        &mut self,
        (buf, count, ty): (*const c_void, c_int, Handle),
        dest: c_int,
        tag: c_int,
        comm: Handle,
    ) -> Result<Request> {
        // SAFETY: the caller's contract.
        let copy = unsafe { self.packed_copy((buf, count, ty)) }?;
        let len = copy.len();
        let Some((_, size)) = self.bsend.attached else {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "no buffer is attached for buffered sends: call MPI_Buffer_attach first",
            ));
        };
        let need = len + MPI_BSEND_OVERHEAD as usize;
        if self.bsend.used + need > size {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                format!("the attached buffer of {size} bytes has {} free, and this send needs {need} (its {len} bytes and MPI_BSEND_OVERHEAD)", size - self.bsend.used),
            ));
        }
        self.send_detached(copy, dest, tag, comm, need)?;
        self.bsend.used += need;
        Ok(Request::Done(Status::empty()))
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", Object::None, |mpi| {
        if mpi.bsend.attached.is_some() {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "a buffer is attached already: detach it first",
            ));
        }
        let size = usize::try_from(size)
            .map_err(|_| Error::new(MPI_ERR_ARG, format!("size {size} is negative")))?;
        mpi.bsend.attached = Some((buffer as usize, size));
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) -> c_int {
    call_held("MPI_Buffer_detach", Object::None, |mpi| {
        let Some((addr, len)) = mpi.bsend.attached else {
            return Err(Error::new(MPI_ERR_BUFFER, "no buffer is attached"));
        };
        // Every buffered send leaves before the buffer goes back.
        mpi.wait_for(|mpi, look| {
            if mpi.bsend.used == 0 {
                return Ok(Step::Done);
            }
            Ok(Step::Pending(
                look.then(|| {
                    mpi.detached
                        .iter()
                        .find_map(|(r, _)| crate::request::pending_id(r))
                })
                .flatten(),
            ))
        })?;
        mpi.bsend.attached = None;
        // SAFETY: the binding's contract: `buffer_addr` points to a pointer, `size` to
        // an int (either may be null here, ignored).
        unsafe {
            put(buffer_addr.cast::<usize>(), addr);
            put(size, len as c_int);
        }
        Ok(())
    })
}
