//! The client side of PMI-1, the "simple" wire protocol that MPICH's hydra
//! (`mpiexec.mpich`), slurm's PMI-1 plugin and this crate's own launcher
//! ([`crate::launcher`], the `rbtlrun` binary) serve to the processes they start.
//!
//! A launcher hands each process a connection to its PMI server, either as an
//! inherited socket whose descriptor number is in `PMI_FD` (with the rank and job
//! size in `PMI_RANK` and `PMI_SIZE`), or as `PMI_PORT=host:port` to connect to (then,
//! when `PMI_ID` is set, rank and size come from an `initack` handshake). Requests and
//! replies are single lines of `key=value` tokens:
//!
//! | request | reply |
//! | --- | --- |
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | `cmd=get_maxes` | `cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024` |
//! | `cmd=get_appnum` | `cmd=appnum appnum=0` (-1 from Slurm: not numbered) |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=...` |
//! | `cmd=get_universe_size` | `cmd=universe_size size=N` (-1: no bound) |
//! | `cmd=put kvsname=K key=X value=V` | `cmd=put_result rc=0` |
//! | `cmd=get kvsname=K key=X` | `cmd=get_result rc=0 value=V` (rc non-zero when missing) |
//! | `cmd=barrier_in` | `cmd=barrier_out` |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//! | `cmd=abort exitcode=N message=...` | none: the launcher ends the job |
//!
//! [`Client`] speaks this protocol; [`PmiModex`] runs the BTL modex over it, and
//! [`job`] picks PMI when a launcher is present and a one-process job otherwise.
//! [`NodeId`] says which node the process runs on: its host name, boot id and
//! namespaces, and the launcher's placement (`PMI_process_mapping`, which hydra and
//! Slurm's `pmi2` plugin both serve to PMI-1 clients, so that no PMI-2 client is
//! needed for it).
//!
//! The client never waits forever: a reply has [`PMI_TIMEOUT`](TIMEOUT_ENV) seconds
//! to come (300 by default), a barrier [`PMI_BARRIER_TIMEOUT`](BARRIER_TIMEOUT_ENV)
//! (no limit by default: it waits for the slowest rank, and a launcher that ends the
//! job closes the connection, which ends the wait); 0 means no limit.

mod client;
mod environment;
mod error;
#[cfg(test)]
pub(crate) mod fuzz;
pub(crate) mod hostlist;
mod modex;
mod names;
mod node;
mod reply_reader;
pub(crate) mod spawn;
pub(crate) mod wire;

pub use client::Client;
pub use environment::{BARRIER_TIMEOUT_ENV, DEFAULT_TIMEOUT, TIMEOUT_ENV};
pub use error::Error;
pub use modex::{base64_decode, base64_encode, job, Job, PmiModex};
pub use node::{host_name, parse_process_mapping, NodeId, PROCESS_MAPPING_KEY};
pub use spawn::{SpawnCommand, Spawned};
