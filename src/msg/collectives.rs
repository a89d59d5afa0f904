//! Collectives over every rank of the communicator, on the point-to-point layer.

use super::{Comm, Result};

/// Internal tags (negative, so that [`ANY_TAG`](super::ANY_TAG) never matches them).
const BARRIER_TAG: i32 = i32::MIN;
const ALLTOALL_TAG: i32 = i32::MIN + 64;
/// Largest blob [`Comm::alltoall`] carries.
const ALLTOALL_MAX: usize = 1024;

impl Comm {
    /// Wait until every rank has called `barrier`.
    pub fn barrier(&mut self) -> Result<()> {
        let (n, me) = (self.size, self.rank);
        let mut step = 1;
        let mut round = 0;
        while step < n {
            let to = (me + step) % n;
            let from = (me + n - step) % n;
            let tag = BARRIER_TAG + round;
            let mut byte = [0u8; 1];
            let r = self.irecv_tagged(byte.as_mut_ptr(), 1, Some(from), Some(tag))?;
            let zero = [0u8];
            let s = self.isend_tagged(zero.as_ptr(), 1, to, tag)?;
            self.wait(s)?;
            self.wait(r)?;
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
        let mut recvs = Vec::with_capacity(n);
        for (r, b) in bufs.iter_mut().enumerate() {
            recvs.push(self.irecv_tagged(
                b.as_mut_ptr(),
                ALLTOALL_MAX,
                Some(r as u32),
                Some(ALLTOALL_TAG),
            )?);
        }
        let mut sends = Vec::with_capacity(n);
        for (r, b) in blobs.iter().enumerate() {
            sends.push(self.isend_tagged(b.as_ptr(), b.len(), r as u32, ALLTOALL_TAG)?);
        }
        for s in sends {
            self.wait(s)?;
        }
        for (b, r) in bufs.iter_mut().zip(recvs) {
            let st = self.wait(r)?;
            b.truncate(st.len);
        }
        Ok(bufs)
    }
}
