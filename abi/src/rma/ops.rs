//! A window's operations: `MPI_Put` and `MPI_Get` here, the accumulates
//! (`MPI_Accumulate`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`,
//! `MPI_Compare_and_swap`) in [`super::atomics`].
//!
//! Puts and gets move each contiguous run of the target datatype with one transfer,
//! from the origin's buffer or a packed copy of it, and complete at the next
//! synchronization. Accumulates are atomic per element with respect to each other
//! (the standard's default, `accumulate_ops` `same_op_no_op`): on 4- and 8-byte
//! integers aligned in the target's memory, sums, bitwise operations, replacement
//! and fetches are the transports' atomics, one per element; every other operation
//! and type runs under the target's accumulate mutex: in place where this process
//! maps the target's memory, else read and written back from here where the
//! transport needs nothing of the target's process (1 KiB and more), else shipped to
//! the target, which applies it there ([`super::shipped`]). Whether an accumulate
//! takes the atomics or the mutex depends only on its operation, its type and where
//! the elements lie at the target, so that concurrent ones of the same kind on the
//! same elements never mix the two; under an exclusive lock, where none is
//! concurrent, several elements take the mutex (combined at once). Accumulates
//! complete before they return.

use super::Win;
use crate::datatype::{pack, Datatype, Prim};
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::p2p::check_count;
use crate::state::Mpi;
use rbtl::msg::Target;

/// Work left for when a member's operations complete.
pub struct Staged {
    member: usize,
    buf: Vec<u8>,
    /// A get through `buf`: unpacked into `count` elements of the type at the address.
    unpack: Option<(*mut u8, usize, Box<Datatype>)>,
}

impl Mpi {
    /// Finish the staged work of member `r` (every member: `None`): unpack gets,
    /// release copies. Call only once their operations have completed.
    pub fn finish_staged(&mut self, h: Handle, r: Option<usize>) -> Result<()> {
        let w = self.win_mut(h)?;
        let (done, keep): (Vec<Staged>, Vec<Staged>) = std::mem::take(&mut w.staged)
            .into_iter()
            .partition(|s| r.is_none_or(|r| s.member == r));
        w.staged = keep;
        for s in done {
            if let Some((base, count, ty)) = s.unpack {
                // SAFETY: the get's caller keeps `base` (room for `count` elements of
                // `ty`) until the synchronization that completes it, which is now.
                unsafe { pack::unpack(&ty, &s.buf, base, count) };
            }
        }
        Ok(())
    }
}

impl Win {
    /// Whether member `r` has work staged for its operations' completion.
    pub(super) fn staged_for(&self, r: usize) -> bool {
        self.staged.iter().any(|s| s.member == r)
    }
}

/// The runs (offset in the target's window, length) of `count` elements of `ty`
/// from byte displacement `disp`: adjacent runs joined.
fn runs(disp: isize, ty: &Datatype, count: usize) -> Result<Runs> {
    let negative = || {
        Error::new(
            MPI_ERR_RMA_RANGE,
            "the access starts before the target's window",
        )
    };
    if ty.contiguous {
        let at = usize::try_from(disp + ty.lb).map_err(|_| negative())?;
        return Ok(Runs::One([(at, ty.size * count)]));
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for k in 0..count as isize {
        for (off, len) in ty.blocks.iter() {
            let at = usize::try_from(disp + k * ty.extent() + off).map_err(|_| negative())?;
            match out.last_mut() {
                Some(last) if last.0 + last.1 == at => last.1 += len,
                _ => out.push((at, len)),
            }
        }
    }
    Ok(Runs::Many(out))
}

/// The runs of an access: one (a contiguous type, kept without allocating), or
/// several.
#[derive(Debug, PartialEq)]
pub(super) enum Runs {
    One([(usize, usize); 1]),
    Many(Vec<(usize, usize)>),
}

impl std::ops::Deref for Runs {
    type Target = [(usize, usize)];

    fn deref(&self) -> &[(usize, usize)] {
        match self {
            Runs::One(r) => r,
            Runs::Many(v) => v,
        }
    }
}

/// An access's target: the member, its byte displacement, and the runs there.
pub(super) struct Access {
    pub(super) member: usize,
    pub(super) runs: Runs,
    pub(super) bytes: usize,
    /// The target type's basic kind.
    pub(super) prim: Option<Prim>,
    /// On a dynamic window, the region that holds the runs (their offsets are from
    /// its start). Boxed: a target is large, and an access moves on every call.
    pub(super) region: Option<Box<Target>>,
}

impl Access {
    /// The memory of window `w` it reaches: the member's, or its region's.
    pub(super) fn target<'a>(&'a self, w: &'a Win) -> &'a Target {
        self.region.as_deref().unwrap_or(&w.peers[self.member].mem)
    }
}

impl Mpi {
    /// Whether an operation on window `h` targets `MPI_PROC_NULL`, which makes it do
    /// nothing (MPI 4.1, 12.3); an error if `h` is no window.
    pub(super) fn to_proc_null(&self, h: Handle, rank: c_int) -> Result<bool> {
        self.win(h)?;
        Ok(rank == MPI_PROC_NULL)
    }

    /// Check an access to member `rank` of window `h` at `disp` with `count`
    /// elements of `ty`, in an open epoch (on a dynamic window, `disp` is an address
    /// in a region the member attached).
    pub(super) fn access(
        &mut self,
        h: Handle,
        rank: c_int,
        disp: Aint,
        count: c_int,
        ty: Handle,
    ) -> Result<Access> {
        let w = self.win(h)?;
        let member = w.peer(rank)?;
        w.check_access(member)?;
        let count = check_count(count)?;
        let t = self.dtype(ty)?;
        let unit = w.peers[member].disp_unit as isize;
        let disp = disp
            .checked_mul(unit)
            .ok_or_else(|| Error::new(MPI_ERR_DISP, format!("displacement {disp} overflows")))?;
        let a = Access {
            member,
            runs: runs(disp, t, count)?,
            bytes: t.size * count,
            prim: t.prim,
            region: None,
        };
        if w.is_dynamic() {
            return self.in_region(h, a);
        }
        Ok(a)
    }

    /// Access `a` to a dynamic window `h`, its runs' offsets addresses: the region
    /// that holds them found, the offsets made the region's.
    #[cold]
    #[inline(never)]
    fn in_region(&mut self, h: Handle, mut a: Access) -> Result<Access> {
        let lo = a.runs.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = a.runs.iter().map(|r| r.0 + r.1).max().unwrap_or(lo);
        let region = self.region_of(h, a.member, lo, hi - lo)?;
        let base = region.addr() as usize;
        a.runs = match a.runs {
            Runs::One([(at, len)]) => Runs::One([(at - base, len)]),
            Runs::Many(v) => Runs::Many(v.into_iter().map(|(at, len)| (at - base, len)).collect()),
        };
        a.region = Some(Box::new(region));
        Ok(a)
    }

    /// The origin's data for access `a` as packed bytes: its address (the buffer
    /// itself when it is contiguous, else a copy kept in `keep`); an error unless
    /// it is as many bytes as the target's.
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    pub(super) unsafe fn origin(
        &self,
        (buf, count, ty): (*const c_void, c_int, Handle),
        a: &Access,
        keep: &mut Vec<u8>,
    ) -> Result<*const u8> {
        let n = check_count(count)?;
        let t = self.dtype(ty)?;
        let len = t.size * n;
        if len != a.bytes {
            return Err(mismatch(len, a.bytes));
        }
        if t.contiguous {
            return Ok(buf.cast::<u8>().wrapping_offset(t.lb));
        }
        *keep = vec![0u8; len];
        // SAFETY: the caller's contract.
        unsafe { pack::pack(t, buf.cast(), n, keep) };
        Ok(keep.as_ptr())
    }
}

pub(super) fn mismatch(origin: usize, target: usize) -> Error {
    Error::new(MPI_ERR_TYPE, format!("the origin's {origin} bytes do not match the target's {target}: their datatypes' signatures differ"))
}

/// `MPI_Put` and `MPI_Get`: the origin `o` (buffer, count, type), the target `t`
/// (rank, displacement, count, type).
///
/// # Safety
///
/// The origin buffer holds its count elements of its type, until the operation
/// completes.
pub(super) unsafe fn rdma(
    mpi: &mut Mpi,
    put: bool,
    o: (*mut c_void, c_int, Handle),
    t: (c_int, Aint, c_int, Handle),
    win: Handle,
) -> Result<()> {
    // SAFETY: forwarded contract.
    if unsafe { super::direct::put_get(mpi, put, o, t, win) } {
        return Ok(());
    }
    let ((origin, ocount, otype), (rank, disp, tcount, ttype)) = (o, t);
    if mpi.to_proc_null(win, rank)? {
        return Ok(());
    }
    let a = mpi.access(win, rank, disp, tcount, ttype)?;
    let n = check_count(ocount)?;
    let ot = mpi.dtype(otype)?;
    let olen = ot.size * n;
    if olen != a.bytes {
        return Err(mismatch(olen, a.bytes));
    }
    // The origin's packed bytes: its own buffer, or a copy staged until completion.
    let (local, staged) = if ot.contiguous {
        (origin.cast::<u8>().wrapping_offset(ot.lb), None)
    } else {
        let mut buf = vec![0u8; olen];
        let unpack = if put {
            // SAFETY: the caller's contract.
            unsafe { pack::pack(ot, origin.cast(), n, &mut buf) };
            None
        } else {
            Some((origin.cast::<u8>(), n, Box::new(ot.clone())))
        };
        let p = buf.as_mut_ptr();
        (
            p,
            Some(Staged {
                member: a.member,
                buf,
                unpack,
            }),
        )
    };
    let Mpi { wins, msg, .. } = mpi;
    let w: &mut Win = wins.get_mut(win).expect("checked by access");
    let (target, pending) = (a.target(w), &w.pending[a.member]);
    let mut at = 0;
    for &(off, len) in a.runs.iter() {
        // SAFETY: `local` holds the bytes (the caller's buffer, or the staged copy,
        // whose heap buffer stays put inside `w.staged` until completion).
        unsafe {
            if put {
                msg.put_to(target, off, local.add(at), len, pending)?;
            } else {
                msg.get_from(target, off, local.add(at), len, pending)?;
            }
        }
        at += len;
    }
    let Some(s) = staged else {
        return Ok(());
    };
    let direct = target.is_direct();
    w.staged.push(s);
    // A direct target's transfers are done already; those to other members may
    // still be under way, so their staged work waits.
    if !direct {
        return Ok(());
    }
    mpi.finish_staged(win, Some(a.member))
}

/// A binding `$name` between an origin buffer and a target in a window (`MPI_Put`,
/// `MPI_Accumulate`, ...), its parameters in the standard's order: the origin (buffer
/// `$buf`, count, type), `$before` (a result buffer), the target (rank,
/// displacement, count, type; the `..`), `$after` (an operation), the window `$win`.
/// `$body` runs on the state `$mpi`, given the origin and the target as the tuples
/// `$origin` (buffer, count, type) and `$target` (rank, displacement, count, type).
/// After `->`, the name of a last parameter, the request handed out (`MPI_Rput`,
/// ...).
macro_rules! origin_target_binding {
    (
        $name:ident($buf:ident: $buf_ty:ty, $($before:ident: $before_ty:ty,)*
            .. $($after:ident: $after_ty:ty),*) $(-> $request:ident)?,
        |$mpi:ident, $origin:ident, $target:ident, $win:ident| $body:expr
    ) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $buf: $buf_ty,
            origin_count: c_int,
            origin_datatype: Handle,
            $($before: $before_ty,)*
            target_rank: c_int,
            target_disp: Aint,
            target_count: c_int,
            target_datatype: Handle,
            $($after: $after_ty,)*
            $win: Handle,
            $($request: *mut Handle,)?
        ) -> c_int {
            let $origin = ($buf, origin_count, origin_datatype);
            let $target = (target_rank, target_disp, target_count, target_datatype);
            $crate::entry::call(
                &stringify!($name)[1..],
                $crate::error::Object::Win($win),
                |$mpi| $body,
            )
        }
    };
}
pub(super) use origin_target_binding;

origin_target_binding!(PMPI_Put(origin_addr: *const c_void, ..), |mpi, origin, target, win| {
    let (buf, count, ty) = origin;
    // SAFETY: the binding's contract.
    unsafe { rdma(mpi, true, (buf.cast_mut(), count, ty), target, win) }
});
origin_target_binding!(PMPI_Get(origin_addr: *mut c_void, ..), |mpi, origin, target, win| {
    // SAFETY: the binding's contract.
    unsafe { rdma(mpi, false, origin, target, win) }
});

#[cfg(test)]
mod tests {
    use super::runs;
    use crate::datatype::{predefined, Envelope, Layout};
    use crate::ffi::*;

    #[test]
    fn runs_of_a_vector_join_where_they_touch() {
        let int = predefined::all()[MPI_INT - predefined::FIRST]
            .clone()
            .unwrap();
        assert_eq!(*runs(8, &int, 3).unwrap(), [(8, 12)]);
        let mut l = Layout::new();
        l.push(0, &int, 1);
        l.push(8, &int, 1);
        let env = Envelope {
            combiner: MPI_COMBINER_STRUCT,
            ints: vec![],
            addresses: vec![],
            counts: Vec::new(),
            types: vec![],
        };
        let t = l.finish(false, env).unwrap();
        assert_eq!(
            *runs(0, &t, 2).unwrap(),
            [(0, 4), (8, 8), (20, 4)],
            "the second element starts one extent (12 bytes) on"
        );
        assert!(runs(-4, &int, 1).is_err());
    }
}
