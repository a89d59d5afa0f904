//! The launcher's PMI-1 server: one thread per rank on its end of the rank's
//! socketpair, one key-value space and one barrier for the whole job, and what each
//! rank has done with PMI (for the job to judge how it ended).

use super::event::Event;
use super::kvs::{KeyValueStore, KEYLEN_MAX, KVSNAME_MAX, REQUEST_MAX, VALLEN_MAX};
use crate::pmi::wire::{self, Message};
use std::io::{BufReader, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// What one rank has done with its PMI connection so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RankPmi {
    /// It sent at least one well-formed request: it is a PMI client, expected to
    /// `finalize` before it exits.
    pub spoke: bool,
    /// It sent `finalize`.
    pub finalized: bool,
    /// Why the server dropped its connection (a malformed or over-long request), if
    /// it did.
    pub broken: Option<String>,
    /// The server is done with the connection (end of stream, broken or shut down):
    /// nothing more it sent will be read.
    pub closed: bool,
}

struct State {
    kvs: KeyValueStore,
    ranks: Vec<RankPmi>,
    /// Whether each rank is inside the current barrier.
    in_barrier: Vec<bool>,
    /// Barriers completed so far.
    generation: u64,
    /// Set when the job is failing or over: barrier waiters give up.
    shutdown: bool,
}

/// What every rank's server thread shares.
pub(super) struct Shared {
    size: u32,
    kvsname: String,
    state: Mutex<State>,
    barrier: Condvar,
}

impl Shared {
    pub fn new(size: u32, kvsname: String) -> Arc<Self> {
        Arc::new(Self {
            size,
            kvsname,
            state: Mutex::new(State {
                kvs: KeyValueStore::new(size),
                ranks: vec![RankPmi::default(); size as usize],
                in_barrier: vec![false; size as usize],
                generation: 0,
                shutdown: false,
            }),
            barrier: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes every rank waiting in a barrier, and any that enters one later; they get
    /// no `barrier_out` and their connections are closed.
    pub fn shut_down(&self) {
        self.lock().shutdown = true;
        self.barrier.notify_all();
    }

    /// What `rank` has done with PMI so far.
    pub fn rank_pmi(&self, rank: u32) -> RankPmi {
        self.lock().ranks[rank as usize].clone()
    }

    /// The ranks waiting in the current barrier, in ascending order.
    pub fn barrier_waiters(&self) -> Vec<u32> {
        let state = self.lock();
        (0..self.size)
            .filter(|&r| state.in_barrier[r as usize])
            .collect()
    }

    fn update(&self, rank: u32, f: impl FnOnce(&mut RankPmi)) {
        f(&mut self.lock().ranks[rank as usize]);
    }

    /// Enters the barrier; true once all ranks have, false if the job ended first.
    fn barrier(&self, rank: u32) -> bool {
        let mut state = self.lock();
        if state.shutdown {
            return false;
        }
        let generation = state.generation;
        state.in_barrier[rank as usize] = true;
        if state.in_barrier.iter().all(|&b| b) {
            state.in_barrier.fill(false);
            state.generation += 1;
            self.barrier.notify_all();
            return true;
        }
        while state.generation == generation && !state.shutdown {
            state = self.barrier.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if state.generation == generation {
            state.in_barrier[rank as usize] = false;
            return false;
        }
        true
    }
}

/// Serves `rank` on `stream` until the rank closes it, sends what cannot be served
/// (then the connection is closed, so that the rank sees the end of it), or the
/// launcher shuts the job down.
pub(super) fn serve(rank: u32, stream: UnixStream, shared: Arc<Shared>, events: Sender<Event>) {
    let broken = serve_requests(rank, &stream, &shared, &events);
    // The launcher keeps another handle on this socket: shut it down rather than only
    // drop ours, so that the rank reads the end of the stream.
    let _ = stream.shutdown(Shutdown::Both);
    shared.update(rank, |pmi| {
        if broken.is_some() {
            pmi.broken = broken;
        }
        pmi.closed = true;
    });
}

/// The request loop of [`serve`]; returns why the connection broke, if it did.
fn serve_requests(
    rank: u32,
    stream: &UnixStream,
    shared: &Shared,
    events: &Sender<Event>,
) -> Option<String> {
    let mut reader = BufReader::new(stream);
    let mut writer = stream;
    let broken = |why: String| {
        warn(rank, &format!("closing its PMI connection: {why}"));
        Some(why)
    };
    loop {
        let line = match wire::read_line(&mut reader, REQUEST_MAX) {
            Ok(Some(line)) => line,
            Ok(None) => return None,
            Err(e) => return broken(e.to_string()),
        };
        let message = match Message::parse(&line) {
            Ok(m) => m,
            Err(e) => return broken(e),
        };
        shared.update(rank, |pmi| pmi.spoke = true);
        let reply = match handle(rank, &message, shared, events) {
            Reply::Line(reply) => reply,
            Reply::Nothing => continue,
            Reply::Hangup => return None,
        };
        let mut bytes = reply.into_bytes();
        bytes.push(b'\n');
        if writer.write_all(&bytes).is_err() {
            return None;
        }
    }
}

enum Reply {
    Line(String),
    Nothing,
    Hangup,
}

fn warn(rank: u32, what: &str) {
    eprintln!("[rbtl launcher] rank {rank}: {what}");
}

fn handle(rank: u32, m: &Message, shared: &Shared, events: &Sender<Event>) -> Reply {
    let kvs_ok = |m: &Message| m.get("kvsname").is_none_or(|k| k == shared.kvsname);
    let line = match m.cmd.as_str() {
        "init" => {
            let rc = if m.get("pmi_version") == Some("1") {
                0
            } else {
                -1
            };
            format!("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc={rc}")
        }
        "get_maxes" => format!(
            "cmd=maxes kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} vallen_max={VALLEN_MAX}"
        ),
        "get_appnum" => "cmd=appnum appnum=0".to_string(),
        "get_my_kvsname" => format!("cmd=my_kvsname kvsname={}", shared.kvsname),
        "get_universe_size" => format!("cmd=universe_size size={}", shared.size),
        "put" if !kvs_ok(m) => "cmd=put_result rc=-1 msg=unknown_kvsname".to_string(),
        "put" => {
            let key = m.get("key").unwrap_or("");
            let value = m.get("value").unwrap_or("");
            match shared.lock().kvs.put(rank, key, value) {
                Ok(()) => "cmd=put_result rc=0 msg=success".to_string(),
                Err(refusal) => format!("cmd=put_result rc=-1 msg={}", refusal.msg()),
            }
        }
        "get" => {
            let key = m.get("key").unwrap_or("");
            let found = if kvs_ok(m) {
                shared.lock().kvs.get(key).map(|v| v.map(wire::escape))
            } else {
                Ok(None)
            };
            match found {
                Ok(Some(v)) => format!("cmd=get_result rc=0 msg=success value={v}"),
                Ok(None) => format!(
                    "cmd=get_result rc=-1 msg=key_{}_not_found value=unknown",
                    wire::escape(key)
                ),
                Err(refusal) => {
                    format!("cmd=get_result rc=-1 msg={} value=unknown", refusal.msg())
                }
            }
        }
        "barrier_in" => {
            if !shared.barrier(rank) {
                return Reply::Hangup;
            }
            "cmd=barrier_out".to_string()
        }
        "finalize" => {
            shared.update(rank, |pmi| pmi.finalized = true);
            "cmd=finalize_ack".to_string()
        }
        "abort" => {
            let code = m
                .get_int("exitcode")
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(1);
            let message = m.get("message").unwrap_or("").to_string();
            let _ = events.send(Event::Abort {
                rank,
                code,
                message,
            });
            return Reply::Nothing;
        }
        other => {
            let other = wire::escape(other);
            warn(
                rank,
                &format!("unsupported PMI command {other:?}; answering with an error"),
            );
            format!("cmd={other}_result rc=-1 msg=unsupported_by_the_rbtl_launcher")
        }
    };
    Reply::Line(line)
}
