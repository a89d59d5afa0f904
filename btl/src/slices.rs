//! A program's buffers as slices. A buffer of no elements may be any pointer (MPI
//! programs pass null with a count of 0), which `slice::from_raw_parts` forbids:
//! these give an empty slice for it.

/// The `n` elements at `p`: an empty slice when `n` is 0, whatever `p` is.
///
/// # Safety
///
/// When `n` > 0, as `std::slice::from_raw_parts`.
#[inline(always)]
pub unsafe fn slice_at<'a, T>(p: *const T, n: usize) -> &'a [T] {
    if n == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// The `n` elements at `p`, writable: an empty slice when `n` is 0, whatever `p` is.
///
/// # Safety
///
/// When `n` > 0, as `std::slice::from_raw_parts_mut`.
#[inline(always)]
pub unsafe fn slice_at_mut<'a, T>(p: *mut T, n: usize) -> &'a mut [T] {
    if n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p, n) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_elements_at_null_is_an_empty_slice() {
        // SAFETY: no elements.
        let (a, b) = unsafe {
            (
                slice_at(std::ptr::null::<u64>(), 0),
                slice_at_mut(std::ptr::null_mut::<u8>(), 0),
            )
        };
        assert!(a.is_empty() && b.is_empty());
    }

    #[test]
    fn elements_are_those_at_the_pointer() {
        let mut v = [1u32, 2, 3];
        // SAFETY: `v` holds 3 elements.
        let s = unsafe { slice_at_mut(v.as_mut_ptr(), 3) };
        s[1] = 7;
        assert_eq!(v, [1, 7, 3]);
    }
}
