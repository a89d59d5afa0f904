//! The accessors every handle to a span of bytes offers.

/// Implements `as_ptr`, `len` and `is_empty` for `$ty`, a handle to the `len` bytes
/// at `ptr` (its fields `ptr: NonNull<u8>` and `len: usize`); `$noun` names it in
/// the docs.
///
/// With `slices`, also `as_slice` and `as_mut_slice`, for a type that owns its span:
/// initialized memory that stays mapped and in place while the value lives, and that
/// nothing else hands out meanwhile.
macro_rules! byte_span {
    ($ty:ident, $noun:literal) => {
        impl $ty {
            #[doc = concat!("Start of the ", $noun, ".")]
            pub fn as_ptr(&self) -> *mut u8 {
                self.ptr.as_ptr()
            }

            #[doc = concat!("Length of the ", $noun, " in bytes.")]
            pub fn len(&self) -> usize {
                self.len
            }

            #[doc = concat!("Whether the ", $noun, " has no bytes.")]
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
        }
    };
    ($ty:ident, $noun:literal, slices) => {
        byte_span!($ty, $noun);

        impl $ty {
            #[doc = concat!("The ", $noun, "'s bytes.")]
            pub fn as_slice(&self) -> &[u8] {
                // SAFETY: the value owns `ptr..ptr + len`, initialized memory that
                // outlives this borrow and that nothing else hands out; `&self`
                // excludes writes through `as_mut_slice`.
                unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
            }

            #[doc = concat!("The ", $noun, "'s bytes, writable.")]
            pub fn as_mut_slice(&mut self) -> &mut [u8] {
                // SAFETY: as for `as_slice`, and `&mut self` gives exclusive access.
                unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
            }
        }
    };
}
