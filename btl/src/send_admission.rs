//! The checks a transport makes of a `send` before anything goes out, and the refusal
//! that hands the descriptor back.

use crate::{Descriptor, ModuleId, Result, SendError};

/// `descriptor`, for a `send` of module `owner`, once it is found to be that module's
/// and `check` (the transport's own: the endpoint, the tag, ...) passes, with what
/// `check` returned; else the first failure, in a [`SendError`] that hands the
/// descriptor back unchanged.
// (The contract's own result: a failed send hands its descriptor back.)
#[allow(clippy::result_large_err)]
#[inline]
pub fn admit_send<T>(
    descriptor: Descriptor,
    owner: ModuleId,
    check: impl FnOnce(&Descriptor) -> Result<T>,
) -> Result<(Descriptor, T), SendError> {
    match descriptor
        .check_owner(owner)
        .and_then(|()| check(&descriptor))
    {
        Ok(value) => Ok((descriptor, value)),
        Err(error) => Err(SendError { error, descriptor }),
    }
}
