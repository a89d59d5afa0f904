//! Ports and names (MPI 4.1, 11.8.5-11.8.6): a group opens a port and accepts on it
//! (`MPI_Open_port`, `MPI_Comm_accept`), another connects to it
//! (`MPI_Comm_connect`), and both get an intercommunicator; a port may be published
//! under a service name for others to look up (`MPI_Publish_name`,
//! `MPI_Lookup_name`).
//!
//! Both groups must be processes of jobs of one launcher (`rbtlrun`, or jobs it
//! spawned): they meet through its name service and key-value spaces, as spawned
//! jobs meet their parents ([`super::spawn`]). A port is named
//! `rbtl-port:<key-value space>:<rank>:<n>`. A connecting root claims the port's
//! next turn by publishing its group (key-value space, base, proposed context,
//! ranks) under the turn's name (`turn_key`), which only one can (the turns stay
//! published until the port closes); the accepting root takes the turns in order,
//! answers in the connector's key-value space, connects its group to the other's,
//! then says so, and only then does the connecting group connect back. The context
//! is the larger of the two groups' agreed ones: free at every member of both.

use super::api::{read_str, write_name};
use super::{Communicator, Group};
use crate::entry::call;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// This process's open ports, each with the number of connections accepted on it,
/// and the number of ports opened so far.
static PORTS: Mutex<(BTreeMap<String, u32>, u64)> = Mutex::new((BTreeMap::new(), 0));

fn ports() -> MutexGuard<'static, (BTreeMap<String, u32>, u64)> {
    PORTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A rank of a job is below this (a launcher numbers at most as many processes).
const PROCESSES_MAX: u32 = 1 << 16;

/// What a connecting side that waited in vain is told (an implementation may give up
/// on a connection, MPI 4.1, 11.8.2; it waits as long as a spawn's sides do).
const NO_ANSWER: (c_int, &str) = (MPI_ERR_PORT, "the accepting side did not answer");

/// Most turns a connecting root tries on one port before it gives up.
const TURNS_MAX: u32 = 100_000;

/// What one group tells the other: its key-value space, its base in the launcher's
/// numbering, its context and its members' ranks in their job.
struct Side {
    kvs: String,
    base: u32,
    ctx: u32,
    ranks: Vec<u32>,
}

impl Side {
    /// As one PMI value: `kvs,base,ctx,ranks`, the ranks as runs `first-last`
    /// (a group of consecutive ranks takes a few bytes) joined by dots.
    fn encode(&self) -> String {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &r in &self.ranks {
            match runs.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(r) => last.1 = r,
                _ => runs.push((r, r)),
            }
        }
        let runs: Vec<String> = runs.iter().map(|(a, b)| format!("{a}-{b}")).collect();
        format!("{},{},{},{}", self.kvs, self.base, self.ctx, runs.join("."))
    }

    fn decode(text: &str) -> Result<Side> {
        let bad = || {
            Error::new(
                MPI_ERR_PORT,
                format!("a malformed connection request {text:?}"),
            )
        };
        let f: Vec<&str> = text.trim_end_matches('\0').split(',').collect();
        let [kvs, base, ctx, ranks] = f[..] else {
            return Err(bad());
        };
        let mut all = Vec::new();
        for run in ranks.split('.') {
            let (a, b) = run.split_once('-').ok_or_else(bad)?;
            let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if b < a || b >= PROCESSES_MAX {
                return Err(bad());
            }
            all.extend(a..=b);
        }
        let ranks = all;
        Ok(Side {
            kvs: kvs.to_string(),
            base: base.parse().map_err(|_| bad())?,
            ctx: ctx.parse().map_err(|_| bad())?,
            ranks,
        })
    }
}

/// The name of turn `turn` of `port` (a service, and with `a` and `r` after it the
/// keys of the answer and of the accepting side's being ready): short enough for a
/// PMI key whatever the port's length, by a 64-bit FNV-1a hash of the port (a few
/// lines; no crate needed for one hash).
fn turn_key(port: &str, turn: u32) -> String {
    let hash = port.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("rbtl-port-{hash:016x}-{turn}")
}

/// The key-value space of the job that opened `port`.
fn port_kvs(port: &str) -> Result<&str> {
    let mut f = port.split(':');
    match (f.next(), f.next(), f.next(), f.next(), f.next()) {
        (Some("rbtl-port"), Some(kvs), Some(_), Some(_), None) if !kvs.is_empty() => Ok(kvs),
        _ => Err(Error::new(
            MPI_ERR_PORT,
            format!("{port:?} is not a port of this library (MPI_Open_port makes them)"),
        )),
    }
}

impl Mpi {
    /// This side of a connection over intracommunicator `comm`: its members (of
    /// this job only), the context they agree on, their bridges opened. Collective.
    fn this_side(&mut self, comm: Handle, root: c_int) -> Result<(Side, u32, Arc<Group>, u32)> {
        let (group, rank, root) = self.intra_root(comm, root, "connecting")?;
        let world = self.world.size();
        if group.ranks().iter().any(|&r| r >= world) {
            return Err(Error::new(
                MPI_ERR_COMM,
                "the communicator holds processes of another job: connect from one of this job's",
            ));
        }
        let ctx = self.agree_context(comm, &[])?.0;
        self.msg.open_bridge()?;
        let side = Side {
            kvs: self.msg.kvsname()?,
            base: self.msg.universe_base()?,
            ctx,
            ranks: group.ranks().to_vec(),
        };
        // Every member's bridge is published before the other side can look.
        self.barrier_on(comm)?;
        Ok((side, root, group, rank))
    }

    /// The other side's description, `mine` at the root (or its error), on every
    /// member of `comm`.
    fn share(&mut self, mine: Option<Result<String>>, root: u32, comm: Handle) -> Result<Side> {
        let mut text = vec![0u8; 1 << 16];
        let mut failed = None;
        if let Some(m) = mine {
            let line = match m {
                Ok(s) => format!("ok {s}"),
                Err(e) => {
                    let line = format!("error {}", e.message);
                    failed = Some(e);
                    line
                }
            };
            let n = line.len().min(text.len());
            text[..n].copy_from_slice(&line.as_bytes()[..n]);
        }
        self.bcast_here(&mut text[..], root as c_int, comm)?;
        let text = String::from_utf8_lossy(&text)
            .trim_end_matches('\0')
            .to_string();
        match text.split_once(' ') {
            Some(("ok", s)) => Side::decode(s),
            _ => Err(failed.unwrap_or_else(|| {
                Error::new(MPI_ERR_PORT, text.trim_start_matches("error ").to_string())
            })),
        }
    }

    /// The intercommunicator of `group` (this process at `rank`) to `other`, with the
    /// larger of the two contexts: connected to the other job's processes (this
    /// job's are reached already).
    fn joined(
        &mut self,
        mine: &Side,
        other: &Side,
        group: Arc<Group>,
        rank: u32,
        comm: Handle,
    ) -> Result<Handle> {
        let ctx = mine.ctx.max(other.ctx);
        if ctx != mine.ctx {
            self.use_contexts(ctx)?;
        }
        let remote = match other.kvs == mine.kvs {
            true => other.ranks.clone(),
            false => self.msg.connect_job(&other.kvs, other.base, &other.ranks)?,
        };
        let mut c = Communicator::new(ctx, group, rank, "");
        c.remote = Some(Arc::new(Group::new(remote)));
        c.errhandler = self.comm(comm)?.errhandler;
        self.comms.insert(c)
    }

    /// `MPI_Comm_accept` of port `port_name` (read at `root` only) over `comm`.
    fn accept(&mut self, port_name: *const c_char, root: c_int, comm: Handle) -> Result<Handle> {
        let (mine, root, group, rank) = self.this_side(comm, root)?;
        let asked = match rank == root {
            // SAFETY: the binding's contract: at the root, a NUL-ended string.
            true => Some(unsafe { read_str(port_name) }.and_then(|p| self.take_turn(&p, &mine))),
            false => None,
        };
        let (port, turn) = match &asked {
            Some(Ok((_, port, turn))) => (port.clone(), *turn),
            _ => (String::new(), 0),
        };
        let other = self.share(asked.map(|a| a.map(|a| a.0)), root, comm)?;
        let h = self.joined(&mine, &other, group, rank, comm)?;
        self.barrier_on(comm)?;
        if rank == root {
            self.msg
                .kvs_put(&other.kvs, &format!("{}r", turn_key(&port, turn)), "1")?;
        }
        Ok(h)
    }

    /// At an accepting root: the next connection request on `port` (waiting for it
    /// as long as the program does, MPI 4.1, 11.8.2), answered with `mine`; the
    /// request, the port and its turn.
    fn take_turn(&mut self, port: &str, mine: &Side) -> Result<(String, String, u32)> {
        let turn = *ports().0.get(port).ok_or_else(|| {
            Error::new(
                MPI_ERR_PORT,
                format!("{port:?} is not a port this process opened"),
            )
        })?;
        let service = turn_key(port, turn);
        let request = loop {
            if let Some(r) = self.msg.lookup_name(&service)? {
                break r;
            }
            self.progress();
            std::thread::sleep(Duration::from_millis(2));
        };
        // (The turn stays claimed until the port closes: a turn is taken once.)
        let other = Side::decode(&request)?;
        self.msg
            .kvs_put(&other.kvs, &format!("{service}a"), &mine.encode())?;
        if let Some(n) = ports().0.get_mut(port) {
            *n += 1;
        }
        Ok((request, port.to_string(), turn))
    }

    /// `MPI_Comm_connect` to port `port_name` (read at `root` only) over `comm`.
    fn connect(&mut self, port_name: *const c_char, root: c_int, comm: Handle) -> Result<Handle> {
        let (mine, root, group, rank) = self.this_side(comm, root)?;
        let answer = match rank == root {
            // SAFETY: the binding's contract: at the root, a NUL-ended string.
            true => Some(unsafe { read_str(port_name) }.and_then(|p| self.claim_turn(&p, &mine))),
            false => None,
        };
        let claimed = match &answer {
            Some(Ok((_, service))) => service.clone(),
            _ => String::new(),
        };
        let other = self.share(answer.map(|a| a.map(|a| a.0)), root, comm)?;
        // The accepting side connects first, then says so.
        if rank == root {
            self.wait_for_key((&mine.kvs, &format!("{claimed}r")), NO_ANSWER)?;
        }
        self.barrier_on(comm)?;
        self.joined(&mine, &other, group, rank, comm)
    }

    /// At a connecting root: claim the next turn of `port` (a service only one root
    /// can publish) with `mine`, and wait for the accepting side's answer; the
    /// answer and the claimed turn's service.
    fn claim_turn(&mut self, port: &str, mine: &Side) -> Result<(String, String)> {
        port_kvs(port)?;
        let mut turn = 0;
        let service = loop {
            let service = turn_key(port, turn);
            match self.msg.publish_name(&service, &mine.encode()) {
                Ok(()) => break service,
                Err(_) if turn < TURNS_MAX => turn += 1,
                Err(e) => return Err(Error::new(MPI_ERR_PORT, e.to_string())),
            }
        };
        match self.wait_for_key((&mine.kvs, &format!("{service}a")), NO_ANSWER) {
            Ok(answer) => Ok((answer, service)),
            Err(e) => {
                // Given up: the claim goes, so that no acceptor takes it later.
                let _ = self.msg.unpublish_name(&service);
                Err(e)
            }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Open_port(_info: Handle, port_name: *mut c_char) -> c_int {
    call("MPI_Open_port", Object::None, |mpi| {
        non_null(port_name, MPI_ERR_ARG, "port name")?;
        let kvs = mpi.msg.kvsname()?;
        let me = mpi.world_rank();
        let port = {
            let mut p = ports();
            p.1 += 1;
            let port = format!("rbtl-port:{kvs}:{me}:{}", p.1);
            p.0.insert(port.clone(), 0);
            port
        };
        // SAFETY: the binding's contract: room for MPI_MAX_PORT_NAME bytes.
        unsafe {
            write_name(
                &port,
                port_name,
                std::ptr::null_mut(),
                MPI_MAX_PORT_NAME as usize,
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Close_port(port_name: *const c_char) -> c_int {
    call("MPI_Close_port", Object::None, |mpi| {
        // SAFETY: the binding's contract: a NUL-ended string.
        let port = unsafe { read_str(port_name) }?;
        let Some(turns) = ports().0.remove(&port) else {
            return Err(Error::new(
                MPI_ERR_PORT,
                format!("{port:?} is not a port this process opened"),
            ));
        };
        // The turns taken go with it.
        for turn in 0..turns {
            let _ = mpi.msg.unpublish_name(&turn_key(&port, turn));
        }
        Ok(())
    })
}

/// `MPI_Comm_accept` or `MPI_Comm_connect` (`how`) of port `port_name` over `comm`:
/// the intercommunicator into `newcomm`.
///
/// # Safety
///
/// `port_name` is a NUL-ended string at `root`; `newcomm` is writable.
unsafe fn connection(
    name: &str,
    how: fn(&mut Mpi, *const c_char, c_int, Handle) -> Result<Handle>,
    (port_name, root, comm): (*const c_char, c_int, Handle),
    newcomm: *mut Handle,
) -> c_int {
    call(name, Object::Comm(comm), |mpi| {
        non_null(newcomm, MPI_ERR_ARG, "communicator")?;
        let h = how(mpi, port_name, root, comm)?;
        // SAFETY: checked not null.
        unsafe { newcomm.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_accept(
    port_name: *const c_char,
    _info: Handle,
    root: c_int,
    comm: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        connection(
            "MPI_Comm_accept",
            Mpi::accept,
            (port_name, root, comm),
            newcomm,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_connect(
    port_name: *const c_char,
    _info: Handle,
    root: c_int,
    comm: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract.
    unsafe {
        connection(
            "MPI_Comm_connect",
            Mpi::connect,
            (port_name, root, comm),
            newcomm,
        )
    }
}

/// The binding `name` that publishes or withdraws a service (`how`, given the
/// service and the port): its errors are of class `MPI_ERR_SERVICE`.
///
/// # Safety
///
/// Both strings are null or NUL-ended.
unsafe fn service_binding(
    name: &str,
    (service, port): (*const c_char, *const c_char),
    how: fn(&mut rbtl::msg::Comm, &str, &str) -> rbtl::msg::Result<()>,
) -> c_int {
    call(name, Object::None, |mpi| {
        // SAFETY: the caller's contract.
        let (service, port) = unsafe { (read_str(service)?, read_str(port)?) };
        how(&mut mpi.msg, &service, &port)
            .map_err(|e| Error::new(MPI_ERR_SERVICE, format!("{service:?}: {e}")))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Publish_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Publish_name", names, |m, s, p| m.publish_name(s, p)) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Unpublish_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Unpublish_name", names, |m, s, _| m.unpublish_name(s)) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Lookup_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *mut c_char,
) -> c_int {
    call("MPI_Lookup_name", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let service = unsafe { read_str(service_name) }?;
        let found = (mpi.msg.lookup_name(&service))
            .map_err(|e| Error::new(MPI_ERR_NAME, format!("{service:?}: {e}")))?;
        let port = found.ok_or_else(|| {
            Error::new(
                MPI_ERR_NAME,
                format!("no port is published under {service:?}"),
            )
        })?;
        // SAFETY: the binding's contract: room for MPI_MAX_PORT_NAME bytes.
        unsafe {
            write_name(
                &port,
                port_name,
                std::ptr::null_mut(),
                MPI_MAX_PORT_NAME as usize,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_travels_as_runs_of_ranks() {
        let side = Side {
            kvs: "kvs_1".into(),
            base: 4,
            ctx: 340,
            ranks: vec![0, 1, 2, 3, 7, 9, 10],
        };
        let text = side.encode();
        assert_eq!(text, "kvs_1,4,340,0-3.7-7.9-10");
        let back = Side::decode(&text).unwrap();
        assert_eq!(
            (back.kvs, back.base, back.ctx, back.ranks),
            (side.kvs, 4, 340, side.ranks)
        );
        for bad in [
            "kvs,4,340",
            "kvs,x,1,0-1",
            "kvs,4,340,3-1",
            "kvs,4,340,0-70000",
            "kvs,4,1,5",
        ] {
            assert_eq!(
                Side::decode(bad).err().map(|e| e.class),
                Some(MPI_ERR_PORT),
                "{bad}"
            );
        }
        assert!(port_kvs("rbtl-port:kvs_1:0:1").is_ok());
        assert!(port_kvs("tcp://198.18.0.1:1").is_err());
    }
}
