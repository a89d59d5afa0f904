//! A process's turn to ask its launcher for a spawn, where two asking at once go
//! wrong.
//!
//! - Hydra (MPICH 4.0): a spawn reaches `mpiexec` as one message per command, and
//!   `mpiexec` gathers them in one list for every process it serves, until it has as
//!   many as the first said (`totspawns`). Two processes spawning at once, on any
//!   nodes, get one spawn made of both their commands, and one of them gets both
//!   answers: the second comes as the answer to its next request (a name's lookup
//!   answered `cmd=spawn_result`), and the other waits. The turn is a name in
//!   hydra's name service, which every job of the `mpiexec` shares and where only
//!   one process can publish a name: published while the process asks, withdrawn
//!   once answered.
//! - Slurm's `pmi2` plugin (Slurm 22.05): the step daemon of a node crashed when
//!   two of its tasks asked at once, ending the job step. Its name service replaces
//!   a name published again rather than refusing it, so the turn is the node's: an
//!   abstract Unix socket named for the job (one per node: per network namespace),
//!   which only one process can bind, and which ends with its process.

use super::meeting::Meeting;
use super::{Error, Result};
use crate::pmi::Client;
use std::time::{Duration, Instant};

/// The longest a process waits for its turn.
const TURN_LIMIT: Duration = crate::pmi::DEFAULT_TIMEOUT;
/// The name that holds the turn in hydra's name service.
const NAMED_TURN: &str = "rbtl-spawn-turn";
/// The longest pause between two tries to take the turn.
const PAUSE_MAX: Duration = Duration::from_millis(50);

/// A turn to spawn, held until given back (or, on a node, until dropped).
pub(super) enum SpawnTurn {
    /// Not needed: the launcher serves spawns one at a time (`rbtlrun`).
    Free,
    /// Among every process of the launcher, under hydra.
    Named,
    /// Among this node's processes of the job, under Slurm: held while bound.
    Node {
        _bound: std::os::unix::net::UnixListener,
    },
}

impl SpawnTurn {
    /// Wait for the turn of process `me` (its number among the jobs that meet) of
    /// the job `kvs`, met as `meeting`, in `client`'s launcher.
    pub(super) fn take(client: &mut Client, meeting: Meeting, kvs: &str, me: u32) -> Result<Self> {
        match meeting {
            Meeting::Kvs => Ok(SpawnTurn::Free),
            Meeting::Names => take_named(client, me),
            Meeting::Steps => Ok(SpawnTurn::Node {
                _bound: take_node(kvs)?,
            }),
        }
    }

    /// Let the next process ask. A named turn that cannot be withdrawn stays held:
    /// the next process to want it fails at the limit, naming who held it.
    pub(super) fn give_back(self, client: &mut Client) -> Result<()> {
        if let SpawnTurn::Named = self {
            client.unpublish_name(NAMED_TURN)?;
        }
        Ok(())
    }
}

/// Try `take` (`Ok(None)`: not yet) until it succeeds or fails; `None` once the
/// limit passed.
fn waiting<T>(mut take: impl FnMut() -> Result<Option<T>>) -> Result<Option<T>> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    while start.elapsed() <= TURN_LIMIT {
        if let Some(turn) = take()? {
            return Ok(Some(turn));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(PAUSE_MAX);
    }
    Ok(None)
}

/// Publish [`NAMED_TURN`] as held by `me`, once no other process holds it.
fn take_named(client: &mut Client, me: u32) -> Result<SpawnTurn> {
    let mut holder = None;
    let turn = waiting(
        || match client.publish_name(NAMED_TURN, &format!("u{me}")) {
            Ok(()) => Ok(Some(SpawnTurn::Named)),
            // (Held: by whom, for the error at the limit.)
            Err(crate::pmi::Error::Refused { .. }) => {
                holder = client.lookup_name(NAMED_TURN)?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        },
    )?;
    turn.ok_or_else(|| {
        Error::BadParameter(format!(
            "process {} of the jobs that meet held the turn to spawn ({NAMED_TURN} in the \
             launcher's name service) for {} s",
            holder.as_deref().unwrap_or("u?").trim_start_matches('u'),
            TURN_LIMIT.as_secs()
        ))
    })
}

/// Bind the node's turn for job `kvs`, once no other process holds it.
fn take_node(kvs: &str) -> Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    // (Abstract names hold 107 bytes.)
    let name = format!("rbtl-spawn-{}", kvs.get(..90).unwrap_or(kvs));
    let addr = SocketAddr::from_abstract_name(&name)
        .map_err(|e| Error::BadParameter(format!("the spawn turn {name:?}: {e}")))?;
    let turn = waiting(|| match UnixListener::bind_addr(&addr) {
        Ok(turn) => Ok(Some(turn)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(Error::BadParameter(format!(
            "taking the node's turn to spawn ({name:?}): {e}"
        ))),
    })?;
    turn.ok_or_else(|| {
        Error::BadParameter(format!(
            "another process of this node held its turn to spawn ({name:?}) for {} s",
            TURN_LIMIT.as_secs()
        ))
    })
}
