//! The launcher's PMI-1 server: one thread per rank on its end of the rank's
//! socketpair, one key-value space and one barrier for the whole job.

use crate::pmi::wire::{self, Message};
use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// The maxima announced by `get_maxes` (hydra's).
const KVSNAME_MAX: usize = 256;
const KEYLEN_MAX: usize = 64;
const VALLEN_MAX: usize = 1024;

/// What a rank's server thread tells the launcher.
#[derive(Debug)]
pub(super) enum Event {
    /// The rank sent `cmd=abort`.
    Abort {
        rank: u32,
        code: i32,
        message: String,
    },
}

#[derive(Default)]
struct State {
    kvs: HashMap<String, String>,
    /// Ranks inside the current barrier.
    waiting: u32,
    /// Barriers completed so far.
    generation: u64,
    /// Set when the job is over: waiters give up.
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
            state: Mutex::new(State::default()),
            barrier: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes every rank waiting in a barrier; they get no `barrier_out`.
    pub fn shut_down(&self) {
        self.lock().shutdown = true;
        self.barrier.notify_all();
    }

    /// Enters the barrier; true once all ranks have, false if the job ended first.
    fn barrier(&self) -> bool {
        let mut state = self.lock();
        if state.shutdown {
            return false;
        }
        let generation = state.generation;
        state.waiting += 1;
        if state.waiting == self.size {
            state.waiting = 0;
            state.generation += 1;
            self.barrier.notify_all();
            return true;
        }
        while state.generation == generation && !state.shutdown {
            state = self.barrier.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.generation != generation
    }
}

/// Serves `rank` on `stream` until the rank closes it (or the launcher shuts it down).
pub(super) fn serve(rank: u32, stream: UnixStream, shared: Arc<Shared>, events: Sender<Event>) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = stream;
    loop {
        let line = match wire::read_line(&mut reader) {
            Ok(Some(line)) => line,
            Ok(None) => return,
            Err(e) => {
                warn(rank, &format!("dropping its PMI connection: {e}"));
                return;
            }
        };
        let message = match Message::parse(&line) {
            Ok(m) => m,
            Err(e) => {
                warn(rank, &format!("dropping its PMI connection: {e}"));
                return;
            }
        };
        let reply = match handle(rank, &message, &shared, &events) {
            Reply::Line(reply) => reply,
            Reply::Nothing => continue,
            Reply::Hangup => return,
        };
        let mut bytes = reply.into_bytes();
        bytes.push(b'\n');
        if writer.write_all(&bytes).is_err() {
            return;
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
        "put" => match m.get("key") {
            _ if !kvs_ok(m) => "cmd=put_result rc=-1 msg=unknown_kvsname".to_string(),
            Some(key) if !key.is_empty() => {
                let value = m.get("value").unwrap_or("").to_string();
                shared.lock().kvs.insert(key.to_string(), value);
                "cmd=put_result rc=0 msg=success".to_string()
            }
            _ => "cmd=put_result rc=-1 msg=no_key_given".to_string(),
        },
        "get" => {
            let key = m.get("key").unwrap_or("");
            let value = if kvs_ok(m) {
                shared.lock().kvs.get(key).cloned()
            } else {
                None
            };
            match value {
                Some(v) => format!("cmd=get_result rc=0 msg=success value={}", wire::escape(&v)),
                None => format!(
                    "cmd=get_result rc=-1 msg=key_{}_not_found value=unknown",
                    wire::escape(key)
                ),
            }
        }
        "barrier_in" => {
            if !shared.barrier() {
                return Reply::Hangup;
            }
            "cmd=barrier_out".to_string()
        }
        "finalize" => "cmd=finalize_ack".to_string(),
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
            warn(
                rank,
                &format!("unsupported PMI command {other:?}; answering with an error"),
            );
            format!("cmd={other}_result rc=-1 msg=unsupported_by_the_rbtl_launcher")
        }
    };
    Reply::Line(line)
}
