//! Collectives over every rank of the communicator, on the point-to-point layer.

use super::{Comm, ReqId, Result, Status};

/// Internal tags (negative, so that [`ANY_TAG`](super::ANY_TAG) never matches them).
const BARRIER_TAG: i32 = i32::MIN;
const ALLTOALL_TAG: i32 = i32::MIN + 64;
/// Largest blob [`Comm::alltoall`] carries.
const ALLTOALL_MAX: usize = 1024;

impl Comm {
    /// Wait until every rank has called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        let (n, me) = (self.size, self.rank);
        let mut byte = [0u8; 1];
        let zero = [0u8];
        // (Declared after the buffers, so dropped, withdrawing what is left, before them.)
        let mut started = Started::new(self);
        let mut step = 1;
        let mut round = 0;
        while step < n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let tag = BARRIER_TAG + round;
            // SAFETY: `byte` and `zero` outlive `started`, which waits for or withdraws
            // both requests before they go.
            let r = unsafe { started.irecv(byte.as_mut_ptr(), 1, from, tag) }?;
            // SAFETY: as above.
            let s = unsafe { started.isend(zero.as_ptr(), 1, to, tag) }?;
            started.wait(s)?;
            started.wait(r)?;
            step *= 2;
            round += 1;
        }
        Ok(())
    }

    /// Send `blobs[r]` to every rank `r` (itself included) and return what each sent
    /// here (blobs of at most 1 KiB; for handles and addresses).
    pub(crate) fn alltoall(&mut self, blobs: &[Vec<u8>]) -> Result<Vec<Vec<u8>>> {
        let n = self.size as usize;
        let mut bufs = vec![vec![0u8; ALLTOALL_MAX]; n];
        // (Declared after the buffers, so dropped, withdrawing what is left, before them.)
        let mut started = Started::new(self);
        let mut recvs = Vec::with_capacity(n);
        for (r, b) in bufs.iter_mut().enumerate() {
            // SAFETY: `bufs` outlives `started`, which waits for or withdraws every
            // request before it goes; its rows are not touched until then.
            recvs.push(unsafe {
                started.irecv(b.as_mut_ptr(), ALLTOALL_MAX, r as u32, ALLTOALL_TAG)
            }?);
        }
        let mut sends = Vec::with_capacity(n);
        for (r, b) in blobs.iter().enumerate() {
            // SAFETY: `blobs` is borrowed for the whole call, longer than `started`.
            sends.push(unsafe { started.isend(b.as_ptr(), b.len(), r as u32, ALLTOALL_TAG) }?);
        }
        for s in sends {
            started.wait(s)?;
        }
        let mut lens = Vec::with_capacity(n);
        for r in recvs {
            lens.push(started.wait(r)?.len);
        }
        drop(started);
        for (b, len) in bufs.iter_mut().zip(lens) {
            b.truncate(len);
        }
        Ok(bufs)
    }
}

/// The requests a collective started on buffers of its own. Those it has not waited for
/// when it returns (an error on the way) are withdrawn, or waited for where a transfer
/// is under way: no message may land in a buffer that is gone.
struct Started<'c> {
    comm: &'c mut Comm,
    live: Vec<ReqId>,
}

impl<'c> Started<'c> {
    fn new(comm: &'c mut Comm) -> Self {
        Started {
            comm,
            live: Vec::new(),
        }
    }

    /// Start receiving `cap` bytes at `buf` from `src` with (internal) `tag`.
    ///
    /// # Safety
    ///
    /// `buf` must be valid for writes of `cap` bytes, and not be read or written by
    /// anyone else, until this value is dropped.
    unsafe fn irecv(&mut self, buf: *mut u8, cap: usize, src: u32, tag: i32) -> Result<ReqId> {
        // SAFETY: forwarded contract; `Drop` ends the request before the buffer may go.
        let req = unsafe { self.comm.irecv_tagged(buf, cap, Some(src), Some(tag)) }?;
        self.live.push(req);
        Ok(req)
    }

    /// Start sending `len` bytes at `buf` to `dst` with (internal) `tag`.
    ///
    /// # Safety
    ///
    /// `buf` must be valid for reads of `len` bytes, and not be written, until this
    /// value is dropped.
    unsafe fn isend(&mut self, buf: *const u8, len: usize, dst: u32, tag: i32) -> Result<ReqId> {
        // SAFETY: forwarded contract; `Drop` ends the request before the buffer may go.
        let req = unsafe {
            self.comm
                .isend_tagged(buf, len, (dst, tag, super::WORLD), (true, false))
        }?;
        self.live.push(req);
        Ok(req)
    }

    /// Wait for `req`, one of these requests.
    fn wait(&mut self, req: ReqId) -> Result<Status> {
        self.live.retain(|r| *r != req);
        self.comm.wait(req)
    }
}

impl Drop for Started<'_> {
    fn drop(&mut self) {
        for req in std::mem::take(&mut self.live) {
            self.comm.withdraw_request(req);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::msg::state::lock;
    use crate::msg::{Comm, Error};

    #[test]
    fn a_collective_that_fails_part_way_leaves_no_receive_behind() {
        let mut comm = Comm::init(&[("btl", "self")]).unwrap();
        // One blob too many: the receive from rank 0 is posted and the blob for it
        // queued in the self transport, then the send to rank 1 (outside the job) fails.
        let e = comm.alltoall(&[vec![1, 2, 3], vec![4]]);
        assert!(matches!(e, Err(Error::BadRank(1, 1))), "{e:?}");
        {
            let s = lock(&comm.state);
            assert!(
                s.posted.is_empty(),
                "a receive into a freed buffer is posted"
            );
            assert_eq!(s.reqs.iter().count(), 0, "no request is left");
        }
        // The blob arrives later, and waits unmatched: it is written nowhere.
        while comm.progress() > 0 {}
        assert_eq!(lock(&comm.state).unexpected.len(), 1);
    }
}
