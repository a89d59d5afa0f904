//! Packing elements of a datatype into contiguous bytes, and back.

use super::Datatype;

/// Copy `count` elements of `ty` at `base` into `out`, packed in type-map order; the
/// bytes written (at most `out.len()`: a short `out` takes the first bytes).
///
/// # Safety
///
/// `base` with the type's runs of `count` elements is readable memory.
pub unsafe fn pack(ty: &Datatype, base: *const u8, count: usize, out: &mut [u8]) -> usize {
    let mut at = 0;
    walk(ty, count, out.len(), |disp, pos, len| {
        // SAFETY: the caller's contract covers the element's run at `disp`; `out` has
        // room for `pos + len` (walk stops at its length).
        unsafe { rbtl::btl::copy_bytes(base.offset(disp), out.as_mut_ptr().add(pos), len) };
        at = pos + len;
    });
    at
}

/// Copy packed bytes `input` into `count` elements of `ty` at `base` (the first
/// elements only, when `input` is shorter); the bytes consumed.
///
/// # Safety
///
/// `base` with the type's runs of `count` elements is writable memory that `input`
/// does not overlap.
pub unsafe fn unpack(ty: &Datatype, input: &[u8], base: *mut u8, count: usize) -> usize {
    let mut at = 0;
    walk(ty, count, input.len(), |disp, pos, len| {
        // SAFETY: as above, the other way.
        unsafe { rbtl::btl::copy_bytes(input.as_ptr().add(pos), base.offset(disp), len) };
        at = pos + len;
    });
    at
}

/// Call `f(displacement, packed position, length)` for each run of `count` elements
/// of `ty`, for at most `limit` packed bytes (the last run cut short).
fn walk(ty: &Datatype, count: usize, limit: usize, mut f: impl FnMut(isize, usize, usize)) {
    let extent = ty.extent();
    let mut pos = 0;
    if ty.contiguous {
        let n = ty.size.saturating_mul(count).min(limit);
        if n > 0 {
            f(ty.lb, 0, n);
        }
        return;
    }
    for k in 0..count as isize {
        let at = k * extent;
        for (off, len) in ty.blocks.iter() {
            if pos >= limit {
                return;
            }
            let n = len.min(limit - pos);
            f(at + off, pos, n);
            pos += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{predefined, Envelope, Layout};
    use crate::ffi::*;

    #[test]
    fn a_vector_round_trips() {
        let int = predefined::all()[MPI_INT - predefined::FIRST]
            .clone()
            .unwrap();
        let mut l = Layout::new();
        for i in 0..3 {
            l.push(i * 12, &int, 2);
        }
        let env = Envelope {
            combiner: MPI_COMBINER_VECTOR,
            ints: vec![3, 2, 3],
            addresses: vec![],
            counts: Vec::new(),
            types: vec![MPI_INT],
        };
        let t = l.finish(false, env).unwrap();
        let src: Vec<i32> = (0..18).collect();
        let mut packed = vec![0u8; t.size * 2];
        // SAFETY: two elements of the vector span 6 + 9 ints of `src`.
        let n = unsafe { pack(&t, src.as_ptr().cast(), 2, &mut packed) };
        assert_eq!(n, 48);
        let ints: Vec<i32> = packed
            .chunks(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(
            ints,
            [0, 1, 3, 4, 6, 7, 8, 9, 11, 12, 14, 15],
            "the second element starts one extent (8 ints) on"
        );
        let mut back = vec![-1i32; 18];
        // SAFETY: as above.
        let n = unsafe { unpack(&t, &packed[..20], back.as_mut_ptr().cast(), 2) };
        assert_eq!(n, 20, "a short input fills the first elements only");
        assert_eq!(&back[..8], &[0, 1, -1, 3, 4, -1, 6, -1]);
    }
}
