//! A small, safe-where-it-can-be wrapper over libibverbs (through `rdma-sys`), one
//! resource per module: devices and contexts, protection domains and memory regions,
//! completion queues, reliable-connected queue pairs. Every failure is a typed error
//! naming the call and the errno; a registration refused with ENOMEM names the
//! locked-memory limit. Resources are owned values that keep what they were made from
//! alive (a queue pair its CQs and PD, a PD its context), so they drop in a safe order.
//!
//! Also: shared receive queues, completion channels, XRC (domains, XRC SRQs, initiator
//! and target queue pairs, through libibverbs' `verbs_context` as verbs.h does; soft
//! devices refuse the domain with EOPNOTSUPP), and librdmacm (ids, address and route
//! resolution, listen/connect/accept with private data, events).

#![warn(missing_docs)]

#[macro_use]
mod object_owner;
mod cq;
mod device;
mod error;
mod extended;
mod pd;
mod qp;
mod rdmacm;
mod registrar;
mod srq;
#[cfg(test)]
mod test_device;
mod xrc;

pub use cq::{CompChannel, Completion, Cq};
pub use device::{device_names, Context, DeviceAttr, PortAttr};
pub use error::{memlock_limit, Error, Result};
pub use pd::{Mr, MrAccess, Pd};
pub use qp::{Op, Qp, QpCaps, QpEndpoint, Sge, MAX_SEND_SGE};
pub use rdmacm::{devices as cm_devices, CmEvent, CmEventKind, CmId, EventChannel};
pub use registrar::{fork_copies_pinned_pages, mr_access, VerbsRegistrar};
pub use srq::Srq;
pub use xrc::{XrcInitiator, XrcSrq, XrcTarget, Xrcd};
