//! A window's operations: `MPI_Put`, `MPI_Get`, and the accumulates
//! (`MPI_Accumulate`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`,
//! `MPI_Compare_and_swap`).
//!
//! Puts and gets move each contiguous run of the target datatype with one transfer,
//! from the origin's buffer or a packed copy of it, and complete at the next
//! synchronization. Accumulates are atomic per element with respect to each other
//! (the standard's default, `accumulate_ops` `same_op_no_op`): on 4- and 8-byte
//! integers aligned in the target's memory, sums, bitwise operations, replacement
//! and fetches are the transports' atomics, one per element; every other operation
//! and type runs under the target's accumulate mutex (read, combine here, write
//! back). Which way an accumulate goes depends only on its operation, its type and
//! where the elements lie at the target, so that concurrent ones of the same kind on
//! the same elements always take the same way. Accumulates complete before they
//! return.

use super::{Win, ACC_WORD};
use crate::datatype::{pack, Datatype, Prim};
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::op::{self, Op};
use crate::p2p::check_count;
use crate::state::Mpi;
use rbtl::btl::AtomicOp;
use rbtl::msg::{Atomic, Pending};

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
        for &(off, len) in ty.blocks.iter() {
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
enum Runs {
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
struct Access {
    member: usize,
    runs: Runs,
    bytes: usize,
    /// The target type's basic kind.
    prim: Option<Prim>,
}

impl Mpi {
    /// Whether an operation on window `h` targets `MPI_PROC_NULL`, which makes it do
    /// nothing (MPI 4.1, 12.3); an error if `h` is no window.
    fn to_proc_null(&self, h: Handle, rank: c_int) -> Result<bool> {
        self.win(h)?;
        Ok(rank == MPI_PROC_NULL)
    }

    /// Check an access to member `rank` of window `h` at `disp` with `count`
    /// elements of `ty`, in an open epoch.
    fn access(
        &self,
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
        let runs = runs(disp, t, count)?;
        let bytes = t.size * count;
        Ok(Access {
            member,
            runs,
            bytes,
            prim: t.prim,
        })
    }

    /// The origin's data as packed bytes: its address (the buffer itself when it is
    /// contiguous, else a copy kept in `keep`).
    ///
    /// # Safety
    ///
    /// `buf` holds `count` elements of `ty`.
    unsafe fn origin(
        &self,
        buf: *const c_void,
        count: c_int,
        ty: Handle,
        keep: &mut Vec<u8>,
    ) -> Result<(*const u8, usize)> {
        let n = check_count(count)?;
        let t = self.dtype(ty)?;
        let len = t.size * n;
        if t.contiguous {
            return Ok((buf.cast::<u8>().wrapping_offset(t.lb), len));
        }
        *keep = vec![0u8; len];
        // SAFETY: the caller's contract.
        unsafe { pack::pack(t, buf.cast(), n, keep) };
        Ok((keep.as_ptr(), len))
    }
}

fn mismatch(origin: usize, target: usize) -> Error {
    Error::new(MPI_ERR_TYPE, format!("the origin's {origin} bytes do not match the target's {target}: their datatypes' signatures differ"))
}

/// `MPI_Put` and `MPI_Get`.
///
/// # Safety
///
/// The origin buffer holds `ocount` elements of `otype`, until the operation
/// completes.
unsafe fn rdma(
    mpi: &mut Mpi,
    put: bool,
    origin: *mut c_void,
    ocount: c_int,
    otype: Handle,
    rank: c_int,
    disp: Aint,
    tcount: c_int,
    ttype: Handle,
    win: Handle,
) -> Result<()> {
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
    let (target, pending) = (&w.peers[a.member].mem, &w.pending[a.member]);
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
    w.staged.push(s);
    // A direct target's transfers are done already; those to other members may
    // still be under way, so their staged work waits.
    if !target.is_direct() {
        return Ok(());
    }
    mpi.finish_staged(win, Some(a.member))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Put(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    target_count: c_int,
    target_datatype: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Put", Object::Win(win), |mpi| {
        // SAFETY: the binding's contract.
        unsafe {
            rdma(
                mpi,
                true,
                origin_addr.cast_mut(),
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                win,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get(
    origin_addr: *mut c_void,
    origin_count: c_int,
    origin_datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    target_count: c_int,
    target_datatype: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Get", Object::Win(win), |mpi| {
        // SAFETY: the binding's contract.
        unsafe {
            rdma(
                mpi,
                false,
                origin_addr,
                origin_count,
                origin_datatype,
                target_rank,
                target_disp,
                target_count,
                target_datatype,
                win,
            )
        }
    })
}

/// The transport atomic that performs predefined `op` on an integer of 4 or 8
/// bytes (`MPI_NO_OP`, a fetch, adds nothing); `None` when `op` or the type needs
/// the mutex.
fn hardware(op: Handle, prim: Option<Prim>) -> Option<AtomicOp> {
    let Some(Prim::Int { bytes: 4 | 8, .. }) = prim else {
        return None;
    };
    Some(match op {
        MPI_SUM | MPI_NO_OP => AtomicOp::Add,
        MPI_BAND => AtomicOp::And,
        MPI_BOR => AtomicOp::Or,
        MPI_BXOR => AtomicOp::Xor,
        MPI_REPLACE => AtomicOp::Swap,
        _ => return None,
    })
}

/// Read element `i` of `bytes` (4 or 8) at `p` as a u64.
///
/// # Safety
///
/// `p` holds element `i`.
unsafe fn word(p: *const u8, i: usize, bytes: usize) -> u64 {
    // SAFETY: the caller's contract.
    unsafe {
        if bytes == 4 {
            u64::from(p.cast::<u32>().add(i).read_unaligned())
        } else {
            p.cast::<u64>().add(i).read_unaligned()
        }
    }
}

impl Mpi {
    /// An accumulate of packed `origin` (`a.bytes` bytes) into the target with
    /// predefined `op`; the target's previous data into `fetched` (as many packed
    /// bytes) when given. Complete when it returns.
    ///
    /// # Safety
    ///
    /// `origin` holds `a.bytes` bytes (unless `op` is `MPI_NO_OP`); `fetched` is null
    /// or has room for them.
    unsafe fn accumulate(
        &mut self,
        win: Handle,
        a: &Access,
        ty: Handle,
        origin: *const u8,
        op: Handle,
        fetched: *mut u8,
    ) -> Result<()> {
        let prim = a.prim;
        let bytes = match prim {
            Some(Prim::Int { bytes, .. }) => bytes as usize,
            _ => 0,
        };
        let (addr, direct) = {
            let mem = &self.win(win)?.peers[a.member].mem;
            let direct = match *a.runs {
                [(off, len)] => mem.direct_range(off, len),
                _ => None,
            };
            (mem.addr(), direct)
        };
        // Atomics need each element aligned in the target's memory (a window made
        // over the user's memory may start anywhere).
        let aligned = bytes > 0
            && a.runs
                .iter()
                .all(|&(off, len)| (addr + off as u64) % bytes as u64 == 0 && len % bytes == 0);
        let atomic = hardware(op, prim).filter(|_| aligned);
        // A target in shared memory, one run, no atomics: combined where it lies,
        // under the mutex.
        if let (Some(at), None) = (direct, atomic) {
            self.win_acquire(win, a.member, ACC_WORD, true)?;
            let combined = self.dtype(ty).and_then(|t| {
                let n = a.bytes.checked_div(t.size).unwrap_or(0);
                // SAFETY: `at` holds the packed bytes of `n` elements, which the
                // mutex keeps from other accumulates meanwhile; `fetched` has room
                // for them (the caller's contract); `origin` holds them.
                unsafe {
                    if !fetched.is_null() {
                        std::ptr::copy_nonoverlapping(at, fetched, a.bytes);
                    }
                    if op != MPI_NO_OP {
                        op::reduce(Op::Predefined(op), t, ty, origin, at, n)?;
                    }
                }
                Ok(())
            });
            let released = self.win_release(win, a.member, ACC_WORD, true);
            return combined.and(released);
        }
        let p = Pending::default();
        let (target, job) = {
            let w = self.win(win)?;
            (w.peers[a.member].mem.clone(), w.peers[a.member].job)
        };
        if let Some(atomic) = atomic {
            let mut at = 0;
            for &(off, len) in a.runs.iter() {
                for i in 0..len / bytes {
                    // SAFETY: the caller's contract: element `at + i` of the origin
                    // and of `fetched`, which live until the wait below.
                    unsafe {
                        let v = if op == MPI_NO_OP {
                            0
                        } else {
                            word(origin, at / bytes + i, bytes)
                        };
                        let out = if fetched.is_null() {
                            std::ptr::null_mut()
                        } else {
                            fetched.add(at + i * bytes)
                        };
                        self.msg.atomic_on(
                            &target,
                            off + i * bytes,
                            Atomic::Op(atomic, v),
                            bytes == 4,
                            out,
                            &p,
                        )?;
                    }
                }
                at += len;
            }
            return Ok(self.msg.complete(&p, Some(job))?);
        }
        // Under the mutex: read, combine, write back.
        let t = self.dtype(ty)?.clone();
        let n = a.bytes.checked_div(t.size).unwrap_or(0);
        self.win_exclusive(win, a.member, |mpi| {
            let mut data = vec![0u8; a.bytes];
            let mut at = 0;
            for &(off, len) in a.runs.iter() {
                // SAFETY: `data` lives until the wait below.
                unsafe {
                    mpi.msg
                        .get_from(&target, off, data.as_mut_ptr().add(at), len, &p)
                }?;
                at += len;
            }
            mpi.msg.complete(&p, Some(job))?;
            if !fetched.is_null() {
                // SAFETY: the caller's contract: room for `a.bytes`.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), fetched, a.bytes) };
            }
            if op == MPI_NO_OP {
                return Ok(());
            }
            // SAFETY: both hold `n` packed elements of `t`.
            unsafe { op::reduce(Op::Predefined(op), &t, ty, origin, data.as_mut_ptr(), n) }?;
            let mut at = 0;
            for &(off, len) in a.runs.iter() {
                // SAFETY: `data` lives until the wait below.
                unsafe { mpi.msg.put_to(&target, off, data.as_ptr().add(at), len, &p) }?;
                at += len;
            }
            Ok(mpi.msg.complete(&p, Some(job))?)
        })
    }

    /// Check `op` for an accumulate on `ty`: predefined, and defined on its kind.
    fn accumulate_op(&self, op: Handle, ty: Handle) -> Result<()> {
        if !op::is_predefined(op) {
            return Err(Error::new(
                MPI_ERR_OP,
                "accumulates take predefined operations only",
            ));
        }
        let t = self.dtype(ty)?;
        match t.prim {
            Some(p) if op::supports(op, p) => Ok(()),
            None if matches!(op, MPI_REPLACE | MPI_NO_OP) => Ok(()),
            _ => op::check(Op::Predefined(op), t),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    target_count: c_int,
    target_datatype: Handle,
    op: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Accumulate", Object::Win(win), |mpi| {
        if op == MPI_NO_OP {
            return Err(Error::new(
                MPI_ERR_OP,
                "MPI_Accumulate does not take MPI_NO_OP",
            ));
        }
        mpi.accumulate_op(op, target_datatype)?;
        if mpi.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = mpi.access(win, target_rank, target_disp, target_count, target_datatype)?;
        let mut keep = Vec::new();
        // SAFETY: the binding's contract.
        let (origin, len) =
            unsafe { mpi.origin(origin_addr, origin_count, origin_datatype, &mut keep) }?;
        if len != a.bytes {
            return Err(mismatch(len, a.bytes));
        }
        // SAFETY: `origin` holds the bytes; nothing is fetched.
        unsafe { mpi.accumulate(win, &a, target_datatype, origin, op, std::ptr::null_mut()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Get_accumulate(
    origin_addr: *const c_void,
    origin_count: c_int,
    origin_datatype: Handle,
    result_addr: *mut c_void,
    result_count: c_int,
    result_datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    target_count: c_int,
    target_datatype: Handle,
    op: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Get_accumulate", Object::Win(win), |mpi| {
        mpi.accumulate_op(op, target_datatype)?;
        if mpi.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = mpi.access(win, target_rank, target_disp, target_count, target_datatype)?;
        let mut keep = Vec::new();
        let origin = if op == MPI_NO_OP {
            std::ptr::null()
        } else {
            // SAFETY: the binding's contract.
            let (origin, len) =
                unsafe { mpi.origin(origin_addr, origin_count, origin_datatype, &mut keep) }?;
            if len != a.bytes {
                return Err(mismatch(len, a.bytes));
            }
            origin
        };
        let rn = check_count(result_count)?;
        let rt = mpi.dtype(result_datatype)?.clone();
        if rt.size * rn != a.bytes {
            return Err(mismatch(rt.size * rn, a.bytes));
        }
        let mut fetched = vec![0u8; a.bytes];
        // SAFETY: `origin` holds the bytes, `fetched` has room for them.
        unsafe { mpi.accumulate(win, &a, target_datatype, origin, op, fetched.as_mut_ptr()) }?;
        // SAFETY: the binding's contract: room for `result_count` elements.
        unsafe { pack::unpack(&rt, &fetched, result_addr.cast(), rn) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Fetch_and_op(
    origin_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    op: Handle,
    win: Handle,
) -> c_int {
    // SAFETY: the binding's contract: one element of each.
    unsafe {
        PMPI_Get_accumulate(
            origin_addr,
            1,
            datatype,
            result_addr,
            1,
            datatype,
            target_rank,
            target_disp,
            1,
            datatype,
            op,
            win,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Compare_and_swap(
    origin_addr: *const c_void,
    compare_addr: *const c_void,
    result_addr: *mut c_void,
    datatype: Handle,
    target_rank: c_int,
    target_disp: Aint,
    win: Handle,
) -> c_int {
    call("MPI_Compare_and_swap", Object::Win(win), |mpi| {
        let t = mpi.dtype(datatype)?;
        if !t.predefined
            || !matches!(
                t.prim,
                Some(Prim::Int { .. } | Prim::Logical(_) | Prim::Byte)
            )
        {
            return Err(Error::new(
                MPI_ERR_TYPE,
                "MPI_Compare_and_swap takes one integer, logical or byte element",
            ));
        }
        let size = t.size;
        if mpi.to_proc_null(win, target_rank)? {
            return Ok(());
        }
        let a = mpi.access(win, target_rank, target_disp, 1, datatype)?;
        let off = a.runs[0].0;
        let (target, job) = {
            let w = mpi.win(win)?;
            (w.peers[a.member].mem.clone(), w.peers[a.member].job)
        };
        if origin_addr.is_null() || compare_addr.is_null() || result_addr.is_null() {
            return Err(Error::new(
                MPI_ERR_BUFFER,
                "a buffer of MPI_Compare_and_swap is null",
            ));
        }
        let p = Pending::default();
        if (size == 4 || size == 8) && (target.addr() + off as u64) % size as u64 == 0 {
            // SAFETY: the binding's contract: one element of `size` at each.
            unsafe {
                let value = word(origin_addr.cast(), 0, size);
                let compare = word(compare_addr.cast(), 0, size);
                mpi.msg.atomic_on(
                    &target,
                    off,
                    Atomic::CompareSwap { compare, value },
                    size == 4,
                    result_addr.cast(),
                    &p,
                )?;
            }
            return Ok(mpi.msg.complete(&p, Some(job))?);
        }
        mpi.win_exclusive(win, a.member, |mpi| {
            let mut old = [0u8; 16];
            // SAFETY: `old` has room for the element and lives until the wait.
            unsafe { mpi.msg.get_from(&target, off, old.as_mut_ptr(), size, &p) }?;
            mpi.msg.complete(&p, Some(job))?;
            // SAFETY: the binding's contract: one element of `size` at each.
            unsafe {
                let equal =
                    std::slice::from_raw_parts(compare_addr.cast::<u8>(), size) == &old[..size];
                std::ptr::copy_nonoverlapping(old.as_ptr(), result_addr.cast::<u8>(), size);
                if equal {
                    mpi.msg.put_to(&target, off, origin_addr.cast(), size, &p)?;
                }
            }
            Ok(mpi.msg.complete(&p, Some(job))?)
        })
    })
}

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
