//! The device the unit tests that need one run on: the first there is (in the
//! soft-RoCE guest); elsewhere they say SKIP and pass, unless VERBS_REQUIRE_DEVICE is
//! set.

use crate::device::Context;

/// The first device, opened; `None` (after saying SKIP) where there is none.
pub(crate) fn device() -> Option<Context> {
    rbtl_testkit::found_or_skip(
        Context::open_first().unwrap(),
        "VERBS_REQUIRE_DEVICE",
        "no RDMA device here (run in the soft-RoCE guest: rdma/guest.sh)",
    )
}
