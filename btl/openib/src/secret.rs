//! The secret a connection method's listener asks of whoever connects: random bytes
//! published in the modex, which only the job's processes read. A listener reachable
//! from the network thereby hears only the job.

use crate::core::cpc_error;

/// Bytes of a secret.
pub const LEN: usize = 16;

/// A secret.
pub type Secret = [u8; LEN];

/// Fresh random bytes from the kernel.
pub fn fresh(cpc: &str) -> Result<Secret, rbtl_cpc::Error> {
    let mut s = [0u8; LEN];
    // SAFETY: getrandom writes at most `s.len()` bytes into `s`.
    let n = unsafe { libc::getrandom(s.as_mut_ptr().cast(), s.len(), 0) };
    if n != LEN as isize {
        let e = std::io::Error::last_os_error();
        return Err(cpc_error(format!(
            "{cpc}: no random bytes for a secret: {e}"
        )));
    }
    Ok(s)
}

/// The secret at the start of `bytes`, if there is one.
pub fn read(bytes: &[u8]) -> Option<Secret> {
    bytes.get(..LEN)?.try_into().ok()
}
