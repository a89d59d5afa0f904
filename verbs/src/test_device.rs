//! The device the unit tests that need one run on: the first there is (in the
//! soft-RoCE guest); elsewhere they say SKIP and pass, unless VERBS_REQUIRE_DEVICE is
//! set.

use crate::device::{device_names, Context};

/// The first device, opened; `None` (after saying SKIP) where there is none.
pub(crate) fn device() -> Option<Context> {
    match device_names().unwrap().first() {
        Some(name) => Some(Context::open(name).unwrap()),
        None => {
            assert!(
                std::env::var_os("VERBS_REQUIRE_DEVICE").is_none(),
                "no RDMA device, and VERBS_REQUIRE_DEVICE is set"
            );
            eprintln!("SKIP: no RDMA device here (run in the soft-RoCE guest)");
            None
        }
    }
}
