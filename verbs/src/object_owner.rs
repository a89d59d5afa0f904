//! The owner of an object libibverbs or librdmacm made: sent (and maybe shared)
//! between threads, the object destroyed when the owner drops.

/// Makes `$owner`, the owner of the library object at its field `ptr`, `Send` (and
/// `Sync` when asked), and destroys the object with `$destroy` when `$owner` drops.
///
/// For that to be sound the object must be usable from any thread (from several at
/// once for `Sync`), `ptr` must be what the object's create call made (destroyed
/// nowhere else), every object made from it must hold an `Arc` of `$owner` (so none
/// is left when it drops), and what it was made from must be kept alive by the
/// owner's fields. A comment at each use says why these hold.
macro_rules! object_owner {
    ($owner:ident: Send + Sync, $destroy:path) => {
        object_owner!($owner: Send, $destroy);
        // SAFETY: the object may be used from several threads at once (see the
        // macro's use).
        unsafe impl Sync for $owner {}
    };
    ($owner:ident: Send, $destroy:path) => {
        // SAFETY: the object may be used from any thread (see the macro's use).
        unsafe impl Send for $owner {}

        impl Drop for $owner {
            fn drop(&mut self) {
                // SAFETY: made by the object's create call, destroyed only here, once,
                // after every object made from it (each holds an Arc of its owner) and
                // before what it was made from (which the owner's fields keep alive).
                unsafe { $destroy(self.ptr.as_ptr()) };
            }
        }
    };
}
