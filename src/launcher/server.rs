//! The launcher's PMI-1 server: one thread per rank on its end of the rank's
//! socketpair, one key-value space and one barrier for the whole job, and what each
//! rank has done with PMI (for the job to judge how it ended).

use super::event::Event;
use super::kvs::{KeyValueStore, KEYLEN_MAX, KVSNAME_MAX, REQUEST_MAX, VALLEN_MAX};
use super::universe::Universe;
use crate::pmi::spawn::{self, Segment};
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

/// Each rank's executable (`get_appnum`) in a job of programs of `ranks` ranks each,
/// in order: program `k`'s ranks answer `k`.
pub(super) fn appnums(ranks: impl IntoIterator<Item = u32>) -> Vec<i32> {
    (0i32..)
        .zip(ranks)
        .flat_map(|(k, n)| std::iter::repeat_n(k, n as usize))
        .collect()
}

/// What every rank's server thread of one job shares.
pub(super) struct Shared {
    size: u32,
    kvsname: String,
    /// Where the job's ranks start in the launcher's numbering of every process it
    /// started (0 for the first job; a spawned job's follow).
    base: u32,
    /// Each rank's executable, for `get_appnum`.
    appnums: Vec<i32>,
    /// Every job of the launcher, this one among them.
    universe: Arc<Universe>,
    state: Mutex<State>,
    barrier: Condvar,
}

impl Shared {
    /// The first job: `size` ranks of one executable.
    #[cfg(test)]
    pub fn new(size: u32, kvsname: String) -> Arc<Self> {
        Self::of_programs(vec![0; size as usize], kvsname)
    }

    /// The first job: `appnums.len()` ranks, rank `r` of executable `appnums[r]`.
    pub fn of_programs(appnums: Vec<i32>, kvsname: String) -> Arc<Self> {
        let size = appnums.len() as u32;
        Self::in_universe(size, kvsname, 0, appnums, Universe::new())
    }

    /// A job of `appnums.len()` ranks (rank `r` of executable `appnums[r]`),
    /// numbered from `base` in `universe`, which it joins.
    pub fn in_universe(
        size: u32,
        kvsname: String,
        base: u32,
        appnums: Vec<i32>,
        universe: Arc<Universe>,
    ) -> Arc<Self> {
        let shared = Arc::new(Self {
            size,
            kvsname,
            base,
            appnums,
            universe: universe.clone(),
            state: Mutex::new(State {
                kvs: KeyValueStore::new(size),
                ranks: vec![RankPmi::default(); size as usize],
                in_barrier: vec![false; size as usize],
                generation: 0,
                shutdown: false,
            }),
            barrier: Condvar::new(),
        });
        universe.join(&shared);
        shared
    }

    /// The launcher's jobs.
    pub fn universe(&self) -> &Arc<Universe> {
        &self.universe
    }

    /// The name of the job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Where its ranks start in the launcher's numbering, and how many there are.
    pub fn span(&self) -> (u32, u32) {
        (self.base, self.size)
    }

    /// Store `value` under `key` as rank 0 of the job (pairs a spawn pre-puts, or
    /// that another job's rank stores here).
    pub fn put_as_first(&self, key: &str, value: &str) -> Result<(), String> {
        self.lock().kvs.put(0, key, value).map_err(|r| r.msg())
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

    /// Whether the job is ending ([`Shared::shut_down`]).
    pub fn is_shut_down(&self) -> bool {
        self.lock().shutdown
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
    let mut owes_finalize = false;
    shared.update(rank, |pmi| {
        if broken.is_some() {
            pmi.broken = broken;
        }
        pmi.closed = true;
        owes_finalize = (pmi.spoke || pmi.broken.is_some()) && !pmi.finalized;
    });
    if owes_finalize && !shared.is_shut_down() {
        // The job loop judges it once the rank had time to be seen ending.
        let _ = events.send(Event::PmiClosed {
            rank: shared.base + rank,
        });
    }
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
    let global = shared.base + rank;
    let broken = |why: String| {
        warn(global, &format!("closing its PMI connection: {why}"));
        Some(why)
    };
    // The segments of a spawn read so far (one per executable).
    let mut segments: Vec<Segment> = Vec::new();
    loop {
        let line = match wire::read_line(&mut reader, REQUEST_MAX) {
            Ok(Some(line)) => line,
            Ok(None) => return None,
            Err(e) => return broken(e.to_string()),
        };
        if spawn::starts_spawn(&line) {
            shared.update(rank, |pmi| pmi.spoke = true);
            let segment = match read_segment(&mut reader) {
                Ok(Ok(s)) => s,
                Ok(Err(why)) => {
                    segments.clear();
                    if writer
                        .write_all(format!("{}\n", spawn::spawn_refusal(&why)).as_bytes())
                        .is_err()
                    {
                        return None;
                    }
                    continue;
                }
                Err(e) => return broken(e),
            };
            let last = segment.spawnssofar >= segment.totspawns;
            segments.push(segment);
            if !last {
                continue;
            }
            let reply = match shared.universe.spawn(std::mem::take(&mut segments), shared) {
                Ok((kvsname, base)) => spawn::spawn_result(&kvsname, base),
                Err(why) => spawn::spawn_refusal(&why),
            };
            if writer.write_all(format!("{reply}\n").as_bytes()).is_err() {
                return None;
            }
            continue;
        }
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

/// The lines of one spawn segment, up to `endcmd`: the segment, or why it is
/// malformed (`Err` outside: the connection broke, or the segment is too long).
fn read_segment(reader: &mut BufReader<&UnixStream>) -> Result<Result<Segment, String>, String> {
    /// More lines than any spawn of `arg`s and pre-put pairs within reason.
    const MOST_LINES: usize = 4096;
    let mut lines = Vec::new();
    loop {
        let line = match wire::read_line(reader, REQUEST_MAX) {
            Ok(Some(line)) => line,
            Ok(None) => return Err("the connection ended inside a spawn".into()),
            Err(e) => return Err(e.to_string()),
        };
        let line = line.trim_end_matches(['\n', '\r']).to_string();
        if line == "endcmd" {
            return Ok(spawn::parse_segment(&lines));
        }
        if lines.len() == MOST_LINES {
            return Err(format!("a spawn segment of more than {MOST_LINES} lines"));
        }
        lines.push(line);
    }
}

enum Reply {
    Line(String),
    Nothing,
    Hangup,
}

fn warn(rank: u32, what: &str) {
    say!("[rbtl launcher] rank {rank}: {what}");
}

fn handle(rank: u32, m: &Message, shared: &Shared, events: &Sender<Event>) -> Reply {
    // Another job's key-value space, named by a request (spawned jobs and their
    // parents reach each other's).
    let other = m
        .get("kvsname")
        .filter(|k| *k != shared.kvsname)
        .map(|k| shared.universe.job_of_kvs(k));
    if let Some(job) = other {
        return Reply::Line(match (m.cmd.as_str(), job) {
            ("put", Some(job)) => {
                let (key, value) = (m.get("key").unwrap_or(""), m.get("value").unwrap_or(""));
                match job.put_as_first(key, value) {
                    Ok(()) => "cmd=put_result rc=0 msg=success".to_string(),
                    Err(msg) => format!("cmd=put_result rc=-1 msg={msg}"),
                }
            }
            ("get", Some(job)) => {
                let key = m.get("key").unwrap_or("");
                match job.lock().kvs.get(key) {
                    Ok(Some(v)) => {
                        format!("cmd=get_result rc=0 msg=success value={}", wire::escape(v))
                    }
                    _ => format!(
                        "cmd=get_result rc=-1 msg=key_{}_not_found value=unknown",
                        wire::escape(key)
                    ),
                }
            }
            ("put", None) => "cmd=put_result rc=-1 msg=unknown_kvsname".to_string(),
            (_, _) => "cmd=get_result rc=-1 msg=unknown_kvsname value=unknown".to_string(),
        });
    }
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
            "cmd=maxes kvsname_max={KVSNAME_MAX} keylen_max={KEYLEN_MAX} \
             vallen_max={VALLEN_MAX} {}=1",
            spawn::JOINS_JOBS
        ),
        "get_appnum" => format!(
            "cmd=appnum appnum={}",
            shared.appnums.get(rank as usize).copied().unwrap_or(0)
        ),
        "get_my_kvsname" => format!("cmd=my_kvsname kvsname={}", shared.kvsname),
        "get_universe_size" => format!(
            "cmd=universe_size size={}",
            shared.universe.size().unwrap_or(shared.size)
        ),
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
        "publish_name" => {
            let (service, port) = (m.get("service").unwrap_or(""), m.get("port").unwrap_or(""));
            let published = if service.is_empty() || port.is_empty() {
                Err("no_service_or_port")
            } else if service.len() > KEYLEN_MAX || port.len() > VALLEN_MAX {
                Err("service_or_port_too_long")
            } else {
                shared.universe.publish(service, port)
            };
            match published {
                Ok(()) => "cmd=publish_result rc=0 msg=success".to_string(),
                Err(why) => format!("cmd=publish_result rc=-1 msg={why}"),
            }
        }
        "unpublish_name" => match shared.universe.unpublish(m.get("service").unwrap_or("")) {
            true => "cmd=unpublish_result rc=0 msg=success".to_string(),
            false => "cmd=unpublish_result rc=-1 msg=service_not_published".to_string(),
        },
        "lookup_name" => match shared.universe.lookup(m.get("service").unwrap_or("")) {
            Some(port) => format!("cmd=lookup_result rc=0 msg=success port={port}"),
            None => "cmd=lookup_result rc=-1 msg=service_not_published".to_string(),
        },
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
                rank: shared.base + rank,
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
