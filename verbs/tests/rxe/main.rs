//! The wrapper against a real RDMA device: two RC queue pairs of one process,
//! connected to each other over the device's port, moving bytes with send/receive,
//! RDMA write and read and atomics, and refusing what the remote registration does not
//! allow. There is no RDMA device on the development hosts: CI runs this binary in the
//! soft-RoCE guest (`rdma/guest.sh`) with `VERBS_REQUIRE_DEVICE=1`, where a
//! missing device is a failure; elsewhere the tests say SKIP and pass.
//!
//! One binary, one file per part of the wrapper: `rc_queue_pairs` (moving bytes and
//! refused accesses), `memlock`, `registration_cache`, `shared_receive_queues` (with a
//! completion channel), `xrc` and `rdma_cm`; `support` holds the device, buffers and
//! connected pair they share.

mod memlock;
mod rc_queue_pairs;
mod rdma_cm;
mod registration_cache;
mod shared_receive_queues;
mod support;
mod xrc;
