//! Errors: every failed verbs call, with the call and the errno.

/// A failed verbs call or a refused request.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A libibverbs call failed.
    #[error("{call} failed: {source}")]
    Call {
        /// The call.
        call: &'static str,
        /// The errno it reported.
        source: std::io::Error,
    },
    /// Registering memory failed with ENOMEM: almost always the locked-memory limit.
    #[error(
        "ibv_reg_mr of {len} bytes failed with ENOMEM: the locked-memory limit (ulimit -l) is \
         probably too low (now {limit}); raise it (e.g. `ulimit -l unlimited`, or memlock in \
         /etc/security/limits.conf)"
    )]
    Memlock {
        /// Bytes asked for.
        len: usize,
        /// The current soft limit, as `ulimit -l` would say it.
        limit: String,
    },
    /// No device of that name.
    #[error("no RDMA device `{name}`; devices here: {}", if found.is_empty() { "none".to_string() } else { found.join(", ") })]
    NoDevice {
        /// The name asked for.
        name: String,
        /// The devices found.
        found: Vec<String>,
    },
    /// A work completion with an error status.
    #[error("work request {wr_id} completed with {status}")]
    Completion {
        /// Its id.
        wr_id: u64,
        /// `ibv_wc_status_str` of the status.
        status: String,
    },
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The error of `call` from errno (or from a returned error number when non-zero).
pub fn call_error(call: &'static str, rc: i32) -> Error {
    let source = if rc > 0 {
        std::io::Error::from_raw_os_error(rc)
    } else {
        std::io::Error::last_os_error()
    };
    Error::Call { call, source }
}

/// The error of `call` where the provider has no op for it: EOPNOTSUPP.
pub(crate) fn unsupported(call: &'static str) -> Error {
    call_error(call, libc::EOPNOTSUPP)
}

/// `ulimit -l` as text.
pub fn memlock_limit() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return "unknown".into();
    }
    if lim.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} KiB", lim.rlim_cur / 1024)
    }
}
