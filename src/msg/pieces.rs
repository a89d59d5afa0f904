//! Puts and gets longer than a transport takes at once (its `put_limit` or
//! `get_limit`), started as pieces within the limit and completed as one; and their
//! local side, registered only where the transport needs it.

use rbtl_btl::{
    Access, Attributes, BtlFlags, Endpoint, Error, Local, MemHandle, Module, RdmaCallback,
    RdmaCompletion, Transfer,
};
use std::sync::{Arc, Mutex};

/// A registration of a transfer's local side (`len` bytes at `addr`, for `access`)
/// where module `m` needs one ([`BtlFlags::REGISTRATION_REQUIRED`]: it reaches memory
/// through a device); `None` where it reaches this process's memory by its address.
///
/// # Safety
///
/// As [`Module::register_mem`]; without a handle, the bytes stay mapped until the
/// transfer's callback has run.
pub unsafe fn register_local(
    m: &mut dyn Module,
    ep: Endpoint,
    (addr, len): (usize, usize),
    access: Access,
) -> Result<Option<MemHandle>, Error> {
    if !m
        .attributes()
        .flags
        .contains(BtlFlags::REGISTRATION_REQUIRED)
    {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { m.register_mem(Some(ep), addr, len, access) }.map(Some)
}

/// The local side at `addr`: inside `handle`, or, without one, unregistered.
///
/// # Safety
///
/// Without a handle, as [`Local::unregistered`].
pub unsafe fn local_side(addr: usize, handle: Option<&MemHandle>) -> Local<'_> {
    match handle {
        Some(h) => Local::new(addr, h),
        // SAFETY: the caller's contract.
        None => unsafe { Local::unregistered(addr) },
    }
}

/// Bytes of each piece of a put (`put`) or get with these attributes: the limit,
/// rounded down to the alignment (so that pieces after the first stay aligned when the
/// first is).
pub fn piece_len(attrs: &Attributes, put: bool) -> usize {
    let (limit, align) = if put {
        (attrs.put_limit, attrs.put_alignment)
    } else {
        (attrs.get_limit, attrs.get_alignment)
    };
    let align = align.max(1);
    match (limit / align) * align {
        0 => limit.max(1),
        n => n,
    }
}

/// The pieces of `len` bytes, `piece` at most each: (offset, length); one empty piece
/// for zero bytes.
pub fn pieces(len: usize, piece: usize) -> impl Iterator<Item = (usize, usize)> {
    let piece = piece.max(1);
    let n = len.div_ceil(piece).max(1);
    (0..n).map(move |i| (i * piece, piece.min(len - i * piece)))
}

/// Start `op`: a put (`put`) or a get.
pub fn put_or_get(
    m: &mut dyn Module,
    op: &Transfer<'_>,
    put: bool,
    done: RdmaCallback,
) -> Result<(), Error> {
    if put {
        m.put(op, done)
    } else {
        m.get(op, done)
    }
}

/// Start `whole`, a put (`put`) or a get, in pieces of [`piece_len`] for the
/// transport, completing as one through `done` (as [`start_in_pieces`] says).
pub fn transfer_in_pieces(
    m: &mut dyn Module,
    whole: &Transfer<'_>,
    put: bool,
    done: RdmaCallback,
) -> Result<(), Error> {
    let piece = piece_len(m.attributes(), put);
    let (ep, local, len) = (whole.endpoint, whole.local.addr, whole.len);
    start_in_pieces(m, ep, local, len, piece, done, |m, off, n, cb| {
        put_or_get(m, &whole.piece(off, n), put, cb)
    })
}

/// What the pieces of one transfer share: how many are left, the first failure, and
/// the callback of the whole.
struct Joint {
    left: usize,
    status: Result<(), Error>,
    done: Option<RdmaCallback>,
}

fn lock(j: &Mutex<Joint>) -> std::sync::MutexGuard<'_, Joint> {
    // Updates are single assignments: a panic elsewhere cannot leave it torn.
    j.lock().unwrap_or_else(|e| e.into_inner())
}

/// Start a transfer of `len` bytes from `local` (to or from the peer `endpoint`) in
/// pieces of at most `piece` bytes, each through `start(module, offset, length,
/// callback)`. `done` runs once, after the last started piece completes, with the first
/// failure. If the first piece cannot start, nothing started: its error comes back
/// and `done` is dropped. If a later one cannot start, the pieces already started
/// finish and `done` gets that error.
pub fn start_in_pieces(
    m: &mut dyn Module,
    endpoint: Endpoint,
    local: usize,
    len: usize,
    piece: usize,
    done: RdmaCallback,
    mut start: impl FnMut(&mut dyn Module, usize, usize, RdmaCallback) -> rbtl_btl::Result<()>,
) -> rbtl_btl::Result<()> {
    if len <= piece {
        // One piece: its completion is the whole's (the same endpoint, address and
        // size), with nothing to join.
        return start(m, 0, len, done);
    }
    let all: Vec<(usize, usize)> = pieces(len, piece).collect();
    let joint = Arc::new(Mutex::new(Joint {
        left: all.len(),
        status: Ok(()),
        done: Some(done),
    }));
    for (i, &(off, n)) in all.iter().enumerate() {
        let j = Arc::clone(&joint);
        let cb: RdmaCallback = Box::new(move |m, c: RdmaCompletion| {
            let finished = {
                let mut g = lock(&j);
                if g.status.is_ok() {
                    g.status = c.status;
                }
                g.left -= 1;
                match g.left {
                    0 => g
                        .done
                        .take()
                        .map(|d| (d, std::mem::replace(&mut g.status, Ok(())))),
                    _ => None,
                }
            };
            if let Some((d, status)) = finished {
                let whole = RdmaCompletion {
                    endpoint,
                    local_address: local,
                    size: len,
                    status,
                };
                d(m, whole);
            }
        });
        if let Err(e) = start(m, off, n, cb) {
            if i == 0 {
                return Err(e);
            }
            // Pieces i.. never started (and no callback ran yet: callbacks run only
            // from progress): the started ones finish the whole, with this error.
            let mut g = lock(&joint);
            g.left -= all.len() - i;
            if g.status.is_ok() {
                g.status = Err(e);
            }
            return Ok(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rbtl_btl::{Access, Proc, SingletonModex};
    use rbtl_btl::{Local, Remote, Transfer};
    use rbtl_self::{default_attributes, Limits, SelfModule};

    /// A `self` module with its endpoint, and a registered source and target of `len`
    /// bytes each (the source numbered).
    fn module(len: usize) -> (SelfModule, Endpoint, Vec<u8>, Vec<u8>) {
        let mut m = SelfModule::new(default_attributes(), Limits::default(), 0).unwrap();
        let me = Proc {
            rank: 0,
            node: "here".into(),
        };
        let ep = m.add_procs(&[me], &mut SingletonModex::new()).unwrap()[0].unwrap();
        let src: Vec<u8> = (0..len).map(|i| i as u8).collect();
        (m, ep, src, vec![0; len])
    }

    /// Registrations of `src` and `dst` for every access.
    ///
    /// # Safety
    ///
    /// Both buffers outlive the handles.
    unsafe fn registered(m: &mut SelfModule, src: &[u8], dst: &mut [u8]) -> (MemHandle, MemHandle) {
        let all = Access::all();
        // SAFETY: the caller's contract.
        unsafe {
            (
                m.register_mem(None, src.as_ptr() as usize, src.len(), all)
                    .unwrap(),
                m.register_mem(None, dst.as_mut_ptr() as usize, dst.len(), all)
                    .unwrap(),
            )
        }
    }

    /// A callback of the whole transfer that keeps the completions it gets.
    fn collecting() -> (Arc<Mutex<Vec<RdmaCompletion>>>, RdmaCallback) {
        let whole: Arc<Mutex<Vec<RdmaCompletion>>> = Arc::default();
        let w = whole.clone();
        (whole, Box::new(move |_, c| w.lock().unwrap().push(c)))
    }

    #[test]
    fn a_piece_refused_after_others_started_fails_the_whole_once_they_finish() {
        let (mut m, ep, src, mut dst) = module(1000);
        // SAFETY: both vectors outlive their handles (dropped at the end of the test).
        let (sh, dh) = unsafe { registered(&mut m, &src, &mut dst) };
        let rh = *dh.remote();
        let (whole, done) = collecting();
        let (l, r) = (src.as_ptr() as usize, dst.as_ptr() as u64);
        let mut started = 0;
        let t = Transfer::new(ep, Local::new(l, &sh), Remote::new(r, &rh), 1000);
        let res = start_in_pieces(&mut m, ep, l, 1000, 300, done, |m, off, n, cb| {
            if off >= 600 {
                return Err(Error::OutOfResource("test"));
            }
            started += 1;
            m.put(&t.piece(off, n), cb)
        });
        assert!(res.is_ok(), "two pieces started: {res:?}");
        assert_eq!(started, 2);
        assert!(whole.lock().unwrap().is_empty(), "nothing before progress");
        m.flush(None).unwrap();
        let got = whole.lock().unwrap();
        assert_eq!(got.len(), 1, "the whole completes once");
        assert!(matches!(got[0].status, Err(Error::OutOfResource("test"))));
        assert_eq!((got[0].size, got[0].local_address), (1000, l));
        assert_eq!(&dst[..600], &src[..600], "the started pieces landed");
        assert!(dst[600..].iter().all(|&b| b == 0));
        drop((sh, dh));
    }

    #[test]
    fn a_transfer_of_one_piece_completes_once_as_the_whole() {
        let (mut m, ep, src, mut dst) = module(300);
        // SAFETY: both vectors outlive their handles (dropped at the end of the test).
        let (sh, dh) = unsafe { registered(&mut m, &src, &mut dst) };
        let rh = *dh.remote();
        let (whole, done) = collecting();
        let (l, r) = (src.as_ptr() as usize, dst.as_ptr() as u64);
        let t = Transfer::new(ep, Local::new(l, &sh), Remote::new(r, &rh), 300);
        let mut calls = Vec::new();
        let res = start_in_pieces(&mut m, ep, l, 300, 300, done, |m, off, n, cb| {
            calls.push((off, n));
            m.put(&t.piece(off, n), cb)
        });
        assert!(res.is_ok(), "{res:?}");
        assert_eq!(calls, [(0, 300)], "one piece, the whole");
        m.flush(None).unwrap();
        let got = whole.lock().unwrap();
        assert_eq!(got.len(), 1, "the whole completes once");
        assert!(got[0].status.is_ok());
        assert_eq!((got[0].size, got[0].local_address), (300, l));
        assert_eq!(dst, src);
        drop((sh, dh));
    }

    #[test]
    fn a_first_piece_refused_starts_nothing_and_drops_the_callback() {
        let (mut m, ep, _, _) = module(0);
        let done: RdmaCallback = Box::new(|_, _| panic!("a transfer that never started completed"));
        let res = start_in_pieces(&mut m, ep, 0, 1000, 300, done, |_, _, _, _| {
            Err(Error::NotAvailable("test".into()))
        });
        assert!(matches!(res, Err(Error::NotAvailable(_))));
        m.flush(None).unwrap();
    }

    #[test]
    fn pieces_stay_within_the_limit_and_keep_the_alignment() {
        let mut a = rbtl_self::default_attributes();
        a.get_limit = 1000;
        a.get_alignment = 16;
        assert_eq!(piece_len(&a, false), 992);
        assert_eq!(piece_len(&a, true), usize::MAX, "no put limit");
        assert_eq!(pieces(0, 992).collect::<Vec<_>>(), vec![(0, 0)]);
        assert_eq!(
            pieces(2000, 992).collect::<Vec<_>>(),
            vec![(0, 992), (992, 992), (1984, 16)]
        );
    }
}
