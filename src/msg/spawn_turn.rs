//! A process's turn to ask its launcher for a spawn, where two asking at once go
//! wrong.
//!
//! - Hydra (MPICH 4.0): a spawn reaches `mpiexec` as one message per command, and
//!   `mpiexec` gathers them in one list for every process it serves, until it has as
//!   many as the first said (`totspawns`). Two processes spawning at once under two
//!   of its proxies (on two nodes) get one spawn made of both their commands, and one of them gets both
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
    /// Not needed: the launcher reads each spawn whole from its process's
    /// connection (`rbtlrun`).
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
    /// `client`'s job, met as `meeting`, in `client`'s launcher.
    pub(super) fn take(client: &mut Client, meeting: Meeting, me: u32) -> Result<Self> {
        match meeting {
            Meeting::Kvs => Ok(SpawnTurn::Free),
            Meeting::Names => take_named(client, me, TURN_LIMIT),
            Meeting::Steps => Ok(SpawnTurn::Node {
                _bound: take_node(client.kvsname(), TURN_LIMIT)?,
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

/// Try `take` (`Ok(None)`: not yet) until it succeeds or fails; `None` once
/// `limit` passed.
fn waiting<T>(limit: Duration, mut take: impl FnMut() -> Result<Option<T>>) -> Result<Option<T>> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    while start.elapsed() <= limit {
        if let Some(turn) = take()? {
            return Ok(Some(turn));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(PAUSE_MAX);
    }
    Ok(None)
}

/// Publish [`NAMED_TURN`] as held by `me`, once no other process holds it (for at
/// most `limit`).
fn take_named(client: &mut Client, me: u32, limit: Duration) -> Result<SpawnTurn> {
    let mut holder = None;
    let turn = waiting(limit, || {
        match client.publish_name(NAMED_TURN, &format!("u{me}")) {
            Ok(()) => Ok(Some(SpawnTurn::Named)),
            // (Held: by whom, for the error at the limit.)
            Err(crate::pmi::Error::Refused { .. }) => {
                holder = client.lookup_name(NAMED_TURN)?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    })?;
    turn.ok_or_else(|| {
        Error::BadParameter(format!(
            "process {} of the jobs that meet held the turn to spawn ({NAMED_TURN} in the \
             launcher's name service) for {} s",
            holder.as_deref().unwrap_or("u?").trim_start_matches('u'),
            limit.as_secs_f32()
        ))
    })
}

/// Bind the node's turn for job `kvs`, once no other process holds it (for at most
/// `limit`).
fn take_node(kvs: &str, limit: Duration) -> Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    // (Abstract names hold 107 bytes.)
    let name = format!("rbtl-spawn-{}", kvs.get(..90).unwrap_or(kvs));
    let addr = SocketAddr::from_abstract_name(&name)
        .map_err(|e| Error::BadParameter(format!("the spawn turn {name:?}: {e}")))?;
    let turn = waiting(limit, || match UnixListener::bind_addr(&addr) {
        Ok(turn) => Ok(Some(turn)),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Ok(None),
        Err(e) => Err(Error::BadParameter(format!(
            "taking the node's turn to spawn ({name:?}): {e}"
        ))),
    })?;
    turn.ok_or_else(|| {
        Error::BadParameter(format!(
            "another process of this node held its turn to spawn ({name:?}) for {} s",
            limit.as_secs_f32()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{BufRead, BufReader, Write};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    /// A client of a name service that answers as hydra's does while process 7
    /// holds the turn, for `refusals` tries to publish it: the requests it was sent,
    /// once the client is dropped.
    fn held_by_7(mut refusals: usize) -> (Client, JoinHandle<Vec<String>>) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut seen = Vec::new();
            for line in BufReader::new(&theirs).lines() {
                let line = line.unwrap();
                let reply = match line.split(' ').next().unwrap() {
                    "cmd=publish_name" if refusals > 0 => {
                        refusals -= 1;
                        "cmd=publish_result info=ok rc=1 msg=key_already_present"
                    }
                    "cmd=publish_name" => "cmd=publish_result info=ok rc=0 msg=success",
                    "cmd=lookup_name" => "cmd=lookup_result port=u7 info=ok rc=0 msg=success",
                    _ => "cmd=unpublish_result info=ok rc=0 msg=success",
                };
                (&theirs)
                    .write_all(format!("{reply}\n").as_bytes())
                    .unwrap();
                seen.push(line);
            }
            seen
        });
        let client = Client::over(File::from(OwnedFd::from(ours))).unwrap();
        (client, server)
    }

    #[test]
    fn a_named_turn_is_taken_once_its_holder_gives_it_back_and_is_given_back() {
        let (mut client, server) = held_by_7(2);
        let turn = take_named(&mut client, 3, Duration::from_secs(10)).unwrap();
        assert!(matches!(turn, SpawnTurn::Named));
        turn.give_back(&mut client).unwrap();
        drop(client);
        let publish = format!("cmd=publish_name service={NAMED_TURN} port=u3");
        let lookup = format!("cmd=lookup_name service={NAMED_TURN}");
        let unpublish = format!("cmd=unpublish_name service={NAMED_TURN}");
        let expected = [&publish, &lookup, &publish, &lookup, &publish, &unpublish];
        assert_eq!(server.join().unwrap(), expected.map(String::as_str));
    }

    #[test]
    fn a_turn_held_past_the_limit_fails_naming_its_holder() {
        let (mut client, server) = held_by_7(usize::MAX);
        let Err(e) = take_named(&mut client, 3, Duration::from_millis(30)) else {
            panic!("a held turn was taken");
        };
        assert!(e.to_string().contains("process 7 of the jobs"), "{e}");
        drop(client);
        server.join().unwrap();
        // The node's: bound by one holder at a time.
        let kvs = format!("turn-test-{}", std::process::id());
        let first = take_node(&kvs, Duration::from_secs(1)).unwrap();
        let Err(e) = take_node(&kvs, Duration::from_millis(30)) else {
            panic!("a node's turn was taken twice");
        };
        assert!(
            e.to_string().contains("another process of this node"),
            "{e}"
        );
        drop(first);
        take_node(&kvs, Duration::from_millis(30)).unwrap();
    }
}
