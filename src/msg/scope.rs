//! Scopes: non-blocking operations whose buffers outlive the call that starts them,
//! all waited for when the scope ends.

use super::{Comm, ReqId, Result, Status};
use std::marker::PhantomData;

impl Comm {
    /// Run `f` with a scope in which non-blocking operations may borrow buffers that
    /// outlive the call; returns once every operation started in it has completed.
    pub fn scope<'env, T>(&mut self, f: impl FnOnce(&mut Scope<'_, 'env>) -> T) -> Result<T> {
        let mut scope = Scope {
            comm: self,
            reqs: Vec::new(),
            _env: PhantomData,
        };
        let out = f(&mut scope);
        let mut first_err = None;
        for req in std::mem::take(&mut scope.reqs) {
            if let Err(e) = scope.comm.wait(req) {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// Non-blocking operations whose buffers live at least as long as `'env`.
pub struct Scope<'c, 'env> {
    comm: &'c mut Comm,
    reqs: Vec<ReqId>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'env> Scope<'_, 'env> {
    /// Start sending `buf`.
    pub fn isend(&mut self, buf: &'env [u8], dst: u32, tag: i32) -> Result<ReqId> {
        // SAFETY: `buf` outlives the scope, which waits for the request.
        let req = unsafe { self.comm.isend_raw(buf.as_ptr(), buf.len(), dst, tag) }?;
        self.reqs.push(req);
        Ok(req)
    }

    /// Start receiving into `buf`.
    pub fn irecv(
        &mut self,
        buf: &'env mut [u8],
        src: Option<u32>,
        tag: Option<i32>,
    ) -> Result<ReqId> {
        // SAFETY: `buf` is borrowed mutably beyond the scope, which waits for the request.
        let req = unsafe { self.comm.irecv_raw(buf.as_mut_ptr(), buf.len(), src, tag) }?;
        self.reqs.push(req);
        Ok(req)
    }

    /// Wait for one request of this scope.
    pub fn wait(&mut self, req: ReqId) -> Result<Status> {
        self.reqs.retain(|r| *r != req);
        self.comm.wait(req)
    }

    /// The communicator (for progress, rank, size).
    pub fn comm(&mut self) -> &mut Comm {
        self.comm
    }
}
