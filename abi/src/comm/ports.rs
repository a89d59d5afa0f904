//! Ports (MPI 4.1, 11.8.5): a group opens a port and accepts on it
//! (`MPI_Open_port`, `MPI_Comm_accept`), another connects to it
//! (`MPI_Comm_connect`), and both get an intercommunicator. A port may be published
//! under a service name for others to look up ([`super::names`]).
//!
//! Where the two roots are processes of one job, they meet by messages
//! ([`super::job_ports`]), under any launcher. Otherwise both groups must be
//! processes of jobs of one launcher (`rbtlrun` or a hydra `mpiexec`, and the jobs it
//! spawned): they meet through its name service and where it lets jobs meet, as
//! spawned jobs meet their parents ([`super::spawn`]). A port is named
//! `rbtl-port:<key-value space>:<rank>:<n>`: its job, and the opening process's rank
//! and count of ports there. A connecting root of another job claims the port's
//! next turn by publishing its group (its key-value space, proposed context and
//! members, named by job: [`super::members`]) under the turn's name (`turn_key`),
//! which only one can (the turns stay published until the port closes); the
//! accepting root takes the turns in order, answers with a word for the connector's
//! job, connects its group to the other's, then says so, and only then does the
//! connecting group connect back. The context is the larger of the two groups'
//! agreed ones: free at every member of both.
//!
//! An open port is published as such (`open_key`): a connection to a port that is
//! not open, or stops being while the connector waits, fails with `MPI_ERR_PORT` at
//! once. Where the launcher keeps no names, the port's name ends in
//! `:unlisted` and only its own job can connect to it. The answer and the ready
//! signal are keyed by the claim (`claim_nonce`), so that an answer to an earlier
//! connection is never taken for one. A connector waits as long as the info key
//! `timeout` (seconds, MPICH's) says, else as long as a spawn's sides.

use super::api::{read_str, write_str};
use super::job_ports::{self, Signal};
use super::members::Members;
use super::spawn::{
    barrier_in, pause, set_out, share_outcome, wait_for_key, wait_for_key_while, START_LIMIT,
};
use super::{Communicator, Group};
use crate::coll::Inside;
use crate::entry::{call, call_held};
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use crate::state::Mpi;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// This process's open ports, each with the number of connections accepted on it,
/// and the number of ports opened so far.
static PORTS: Mutex<(BTreeMap<String, u32>, u64)> = Mutex::new((BTreeMap::new(), 0));

fn ports() -> MutexGuard<'static, (BTreeMap<String, u32>, u64)> {
    PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a connecting side that waited in vain is told (an implementation may give up
/// on a connection, MPI 4.1, 11.8.2; it waits as long as a spawn's sides do, unless
/// the info key `timeout`, MPICH's, says how many seconds).
const NO_ANSWER: (c_int, &str) = (MPI_ERR_PORT, "the accepting side did not answer");

/// Most turns a connecting root tries on one port before it gives up.
const TURNS_MAX: u32 = 100_000;

/// How often a waiting connector looks whether the port is still open.
const PORT_LOOK_EVERY: Duration = Duration::from_millis(100);

/// What one group tells the other: its root's key-value space (where answers go),
/// its context and its members, named by job.
pub(super) struct Side {
    kvs: String,
    ctx: u32,
    members: Members,
}

impl Side {
    /// As one PMI value: `kvs,ctx,members` ([`Members::encode`]).
    pub(super) fn encode(&self) -> String {
        format!("{},{},{}", self.kvs, self.ctx, self.members.encode())
    }

    fn decode(text: &str) -> Result<Side> {
        let bad = || {
            Error::new(
                MPI_ERR_PORT,
                format!("a malformed connection request {text:?}"),
            )
        };
        let f: Vec<&str> = text.trim_end_matches('\0').splitn(3, ',').collect();
        let [kvs, ctx, members] = f[..] else {
            return Err(bad());
        };
        Ok(Side {
            kvs: kvs.to_string(),
            ctx: ctx.parse().map_err(|_| bad())?,
            members: Members::decode(members, MPI_ERR_PORT)?,
        })
    }
}

/// The name of turn `turn` of `port` (a service, and with `a` and `r` after it the
/// keys of the answer and of the accepting side's being ready): short enough for a
/// PMI key whatever the port's length, by a 64-bit FNV-1a hash of the port (a few
/// lines; no crate needed for one hash).
fn turn_key(port: &str, turn: u32) -> String {
    format!("{}-{turn}", port_key(port))
}

/// The name a port is published under while it is open: connecting to a port that
/// is not (or stops being while the connector waits) fails at once.
fn open_key(port: &str) -> String {
    format!("{}-open", port_key(port))
}

/// The start of a port's names.
pub(super) fn port_key(port: &str) -> String {
    let hash = port.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("rbtl-port-{hash:016x}")
}

/// What a connecting root's claim is known by in the keys of its answer: this
/// process and its count of claims (a turn of a port closed and a later connection's
/// cannot be taken for each other).
fn claim_nonce(me: u32) -> String {
    static CLAIMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = CLAIMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{me}.{n}")
}

/// The key-value space of the job that opened `port`, and the port there.
pub(super) fn port_parts(port: &str) -> Result<(&str, job_ports::Port)> {
    let mut f = port.split(':');
    let (rbtl, kvs, rank, n) = (f.next(), f.next(), f.next(), f.next());
    let read = |rank: &str, n: &str, listed: bool| {
        let p = job_ports::Port {
            rank: rank.parse().ok()?,
            tag: n.parse().ok()?,
            listed,
        };
        Some(p)
    };
    let listed = match (f.next(), f.next()) {
        (None, _) => Some(true),
        (Some(UNLISTED), None) => Some(false),
        _ => None,
    };
    let parts = rank.zip(n).zip(listed);
    match (rbtl, kvs, parts.and_then(|((r, n), l)| read(r, n, l))) {
        (Some("rbtl-port"), Some(kvs), Some(p)) if !kvs.is_empty() => Ok((kvs, p)),
        _ => Err(Error::new(
            MPI_ERR_PORT,
            format!("{port:?} is not a port of this library (MPI_Open_port makes them)"),
        )),
    }
}

/// The last part of the name of a port the launcher could not list as open (it
/// keeps no names).
const UNLISTED: &str = "unlisted";

/// How the accepting root tells the connecting one that its side is ready: a key
/// in the connector's key-value space, or a message ([`job_ports`]).
#[derive(Clone, Debug)]
enum Ready {
    Key(String),
    Message(Signal),
}

/// Both sides of a connection, as a member of one sees them.
struct Sides {
    mine: Side,
    other: Side,
    /// At the root, how the accepting side says it is ready.
    ready: Option<Ready>,
    group: Arc<Group>,
    /// This process's rank in its group.
    rank: u32,
}

/// What `MPI_Comm_accept` and `MPI_Comm_connect` share, over intracommunicator
/// `comm`, run in `inside`: this side set out, the root's step `at_root` on the
/// port `port_name` (read there only; it gives the other side's description and
/// the key that will say the accepting side is ready, and its error fails the call
/// at every member), and the other side, told to every member.
fn meet<I: Inside>(
    inside: &mut I,
    (port_name, root, comm): (*const c_char, c_int, Handle),
    at_root: impl FnOnce(&mut I, &str, &Side) -> Result<(String, Ready)>,
) -> Result<Sides> {
    let out = set_out(inside, comm, root, "connecting")?;
    let mine = Side {
        kvs: inside.state().msg.kvsname()?,
        ctx: out.ctx,
        members: out.members,
    };
    let step = (out.rank == out.root).then(|| {
        // SAFETY: the binding's contract: at the root, a NUL-ended string.
        unsafe { read_str(port_name) }.and_then(|p| at_root(inside, &p, &mine))
    });
    let ready = match &step {
        Some(Ok((_, ready))) => Some(ready.clone()),
        _ => None,
    };
    let text = share_outcome(
        inside,
        step.map(|s| s.map(|s| s.0)),
        (out.root, comm),
        1 << 16,
        MPI_ERR_PORT,
    )?;
    Ok(Sides {
        mine,
        other: Side::decode(&text)?,
        ready,
        group: out.group,
        rank: out.rank,
    })
}

/// `MPI_Comm_accept` of port `port_name` (read at `root` only) over `comm`, run in
/// `inside`: other threads' calls come in while it waits for a connector.
pub(super) fn accept<I: Inside>(
    inside: &mut I,
    port_name: *const c_char,
    info: Handle,
    root: c_int,
    comm: Handle,
) -> Result<Handle> {
    crate::info::check(info)?;
    let s = meet(inside, (port_name, root, comm), |inside, port, mine| {
        take_turn(inside, port, mine)
    })?;
    let h = inside
        .state()
        .joined(&s.mine, &s.other, (s.group, s.rank), comm)?;
    barrier_in(inside, comm)?;
    match s.ready {
        Some(Ready::Key(key)) => inside.state().msg.kvs_put(&s.other.kvs, &key, "1")?,
        Some(Ready::Message(signal)) => signal.say(inside.state())?,
        None => {}
    }
    Ok(h)
}

/// At an accepting root: the next connection request on `port` (waiting for it as
/// long as the program does, MPI 4.1, 11.8.2, or until the port closes), answered
/// with `mine`: a message of this job's, or a claim of another job's through the
/// name service; the request's side, and how to tell the connector the accepting
/// side is ready.
fn take_turn(inside: &mut impl Inside, port: &str, mine: &Side) -> Result<(String, Ready)> {
    let not_open = || {
        Error::new(
            MPI_ERR_PORT,
            format!("{port:?} is not a port this process has open"),
        )
    };
    let turn = *ports().0.get(port).ok_or_else(not_open)?;
    let (_, here) = port_parts(port)?;
    let service = turn_key(port, turn);
    let request = loop {
        let mpi = inside.state();
        if let Some(r) = job_ports::next_request(mpi, here)? {
            let signal = r.answer(mpi, mine)?;
            return Ok((r.side, Ready::Message(signal)));
        }
        // (Where the launcher keeps no names, only this job's requests come.)
        if let Some(r) = mpi.msg.lookup_name(&service).ok().flatten() {
            break r;
        }
        pause(inside);
        // (Another thread may close it meanwhile.)
        if !ports().0.contains_key(port) {
            return Err(not_open());
        }
    };
    // (The turn stays claimed until the port closes: a turn is taken once.)
    let (nonce, side) = request.split_once('/').unwrap_or_default();
    let other = Side::decode(side)?;
    inside
        .state()
        .msg
        .kvs_put(&other.kvs, &format!("{service}a{nonce}"), &mine.encode())?;
    if let Some(n) = ports().0.get_mut(port) {
        *n += 1;
    }
    Ok((side.to_string(), Ready::Key(format!("{service}r{nonce}"))))
}

/// `MPI_Comm_connect` to port `port_name` over `comm` (both, and `info`, read at
/// `root` only), run in `inside`.
pub(super) fn connect<I: Inside>(
    inside: &mut I,
    port_name: *const c_char,
    info: Handle,
    root: c_int,
    comm: Handle,
) -> Result<Handle> {
    crate::info::check(info)?;
    let s = meet(inside, (port_name, root, comm), |inside, port, mine| {
        let limit = inside.state().connect_limit(info)?;
        claim_turn(inside, port, mine, limit)
    })?;
    // The accepting side connects first, then says so.
    match &s.ready {
        Some(Ready::Key(key)) => {
            wait_for_key(inside, (&s.mine.kvs, key), NO_ANSWER)?;
        }
        Some(Ready::Message(signal)) => signal.wait(inside)?,
        None => {}
    }
    barrier_in(inside, comm)?;
    inside
        .state()
        .joined(&s.mine, &s.other, (s.group, s.rank), comm)
}

/// At a connecting root: ask for a turn of `port` with `mine` (a message to a port
/// of this job's; else a claim of the port's next turn, a service only one root can
/// publish), and wait for the accepting side's answer, for at most `limit` and while
/// the port is open; the answer and how the accepting side will say it is ready.
fn claim_turn(
    inside: &mut impl Inside,
    port: &str,
    mine: &Side,
    limit: Duration,
) -> Result<(String, Ready)> {
    let (kvs, there) = port_parts(port)?;
    let one_job = kvs == mine.kvs;
    let open = open_key(port);
    let closed = || Error::new(MPI_ERR_PORT, format!("no port {port:?} is open"));
    let mpi = inside.state();
    if !there.listed && !one_job {
        return Err(Error::new(
            MPI_ERR_PORT,
            format!("{port:?} is a port of another job, opened where the launcher keeps no names: only the processes of its own job can connect to it"),
        ));
    }
    // (A port the launcher does not list answers itself whether it is open.)
    if there.listed && mpi.msg.lookup_name(&open).ok().flatten().is_none() {
        return Err(closed());
    }
    // Whether the port is still open, looked at now and then while waiting.
    let mut looked = Instant::now();
    let mut still_open = move |mpi: &mut Mpi| {
        if !there.listed || looked.elapsed() < PORT_LOOK_EVERY {
            return Ok(());
        }
        looked = Instant::now();
        match mpi.msg.lookup_name(&open).ok().flatten() {
            Some(_) => Ok(()),
            None => Err(closed()),
        }
    };
    if one_job {
        let (side, signal) =
            job_ports::claim_turn(inside, (there, port), mine, limit, &mut still_open)?;
        return Ok((side, Ready::Message(signal)));
    }
    let nonce = claim_nonce(mpi.world_rank());
    let request = format!("{nonce}/{}", mine.encode());
    let mut turn = 0;
    let service = loop {
        let service = turn_key(port, turn);
        match mpi.msg.publish_name(&service, &request) {
            Ok(()) => break service,
            Err(_) if turn < TURNS_MAX => turn += 1,
            Err(e) => return Err(Error::new(MPI_ERR_PORT, e.to_string())),
        }
    };
    let key = format!("{service}a{nonce}");
    let answer = wait_for_key_while(inside, (&mine.kvs, &key), NO_ANSWER, limit, still_open);
    match answer {
        Ok(answer) => Ok((answer, Ready::Key(format!("{service}r{nonce}")))),
        Err(e) => {
            // Given up: the claim goes, so that no acceptor takes it later.
            let _ = inside.state().msg.unpublish_name(&service);
            Err(e)
        }
    }
}

impl Mpi {
    /// The intercommunicator of `group` (this process at `rank`) to `other`, with
    /// the larger of the two contexts: connected to the processes of other jobs it
    /// has not met.
    fn joined(
        &mut self,
        mine: &Side,
        other: &Side,
        (group, rank): (Arc<Group>, u32),
        comm: Handle,
    ) -> Result<Handle> {
        let ctx = mine.ctx.max(other.ctx);
        if ctx != mine.ctx {
            self.use_contexts(ctx)?;
        }
        let remote = self.resolve(&other.members)?;
        let errhandler = self.comm(comm)?.errhandler;
        let remote = Arc::new(Group::new(remote));
        self.comms
            .insert(Communicator::inter(ctx, (group, rank), remote, errhandler))
    }

    /// How long a connecting root waits for the accepting side: the info key
    /// `timeout` (seconds, as MPICH reads it), else as long as a spawn's sides.
    fn connect_limit(&self, info: Handle) -> Result<Duration> {
        let Some(v) = self.value_of(info, "timeout")? else {
            return Ok(START_LIMIT);
        };
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0)
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_INFO_VALUE,
                    format!("timeout {v:?}: want a number of seconds, more than 0"),
                )
            })
    }

    /// A new port of this process.
    pub(super) fn open_port(&mut self) -> Result<String> {
        let kvs = self.msg.kvsname()?;
        let me = self.world_rank();
        let n = {
            let mut p = ports();
            p.1 += 1;
            p.1
        };
        if i32::try_from(n).is_err() {
            return Err(Error::new(MPI_ERR_PORT, "this process opened 2^31 ports"));
        }
        let mut port = format!("rbtl-port:{kvs}:{me}:{n}");
        if self.msg.publish_name(&open_key(&port), "1").is_err() {
            port = format!("{port}:{UNLISTED}");
        }
        ports().0.insert(port.clone(), 0);
        Ok(port)
    }

    /// Close `port`, which this process opened; the turns taken on it go with it.
    pub(super) fn close_port(&mut self, port: &str) -> Result<()> {
        let Some(turns) = ports().0.remove(port) else {
            return Err(Error::new(
                MPI_ERR_PORT,
                format!("{port:?} is not a port this process opened"),
            ));
        };
        let _ = self.msg.unpublish_name(&open_key(port));
        for turn in 0..turns {
            let _ = self.msg.unpublish_name(&turn_key(port, turn));
        }
        let (_, here) = port_parts(port)?;
        job_ports::turn_away(self, here);
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Open_port(info: Handle, port_name: *mut c_char) -> c_int {
    call("MPI_Open_port", Object::None, |mpi| {
        crate::info::check(info)?;
        non_null(port_name, MPI_ERR_ARG, "port name")?;
        let port = mpi.open_port()?;
        // SAFETY: the binding's contract: room for MPI_MAX_PORT_NAME bytes.
        unsafe { write_port(&port, port_name) }
    })
}

/// Write port name `port` at `out`, cut to fit.
///
/// # Safety
///
/// `out` has room for `MPI_MAX_PORT_NAME` bytes.
pub(super) unsafe fn write_port(port: &str, out: *mut c_char) -> Result<()> {
    let max = MPI_MAX_PORT_NAME as usize;
    // SAFETY: the caller's contract.
    unsafe { write_str(port, out, max) }.map(|_| ())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Close_port(port_name: *const c_char) -> c_int {
    call("MPI_Close_port", Object::None, |mpi| {
        // SAFETY: the binding's contract: a NUL-ended string.
        let port = unsafe { read_str(port_name) }?;
        mpi.close_port(&port)
    })
}

/// [`accept`] or [`connect`]: of a port's name and an info (read at the
/// root only), at a root over a communicator, the intercommunicator.
pub(super) type Meeting = fn(&mut Held, *const c_char, Handle, c_int, Handle) -> Result<Handle>;

/// `MPI_Comm_accept` or `MPI_Comm_connect` (`how`) of port `port_name` over `comm`:
/// the intercommunicator into `newcomm`.
///
/// # Safety
///
/// `port_name` is a NUL-ended string at `root`; `newcomm` is writable.
unsafe fn connection(
    name: &str,
    how: Meeting,
    (port_name, info, root, comm): (*const c_char, Handle, c_int, Handle),
    newcomm: *mut Handle,
) -> c_int {
    call_held(name, Object::Comm(comm), |held| {
        non_null(newcomm, MPI_ERR_ARG, "communicator")?;
        let h = how(held, port_name, info, root, comm)?;
        // SAFETY: checked not null.
        unsafe { newcomm.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_accept(
    port_name: *const c_char,
    info: Handle,
    root: c_int,
    comm: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        connection(
            "MPI_Comm_accept",
            accept::<Held>,
            (port_name, info, root, comm),
            newcomm,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_connect(
    port_name: *const c_char,
    info: Handle,
    root: c_int,
    comm: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        connection(
            "MPI_Comm_connect",
            connect::<Held>,
            (port_name, info, root, comm),
            newcomm,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_travels_with_its_members() {
        let text = "kvs_1,340,kvs_1,0,0-3;kvs_2,4,1";
        let side = Side::decode(text).unwrap();
        assert_eq!((side.kvs.as_str(), side.ctx), ("kvs_1", 340));
        assert_eq!(side.members.jobs().len(), 2);
        assert_eq!(side.encode(), text);
        for bad in ["kvs,340", "kvs,x,kvs,0,0-1", "kvs,1,kvs,0,3-1"] {
            assert_eq!(
                Side::decode(bad).err().map(|e| e.class),
                Some(MPI_ERR_PORT),
                "{bad}"
            );
        }
        let (kvs, p) = port_parts("rbtl-port:kvs_1:3:17").unwrap();
        assert_eq!((kvs, p.rank, p.tag, p.listed), ("kvs_1", 3, 17, true));
        let (_, p) = port_parts("rbtl-port:kvs_1:3:17:unlisted").unwrap();
        assert!(!p.listed);
        for bad in [
            "tcp://198.18.0.1:1",
            "rbtl-port::3:17",
            "rbtl-port:kvs:x:17",
            "rbtl-port:kvs:3:17:more",
            "rbtl-port:kvs:3:17:unlisted:more",
        ] {
            assert!(port_parts(bad).is_err(), "{bad}");
        }
    }
}
