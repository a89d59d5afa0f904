//! Dynamic processes: `MPI_Comm_spawn(_multiple)` starts new processes through the
//! launcher (PMI's spawn, as hydra does); they get an intercommunicator to their
//! parents (`MPI_Comm_get_parent`), the parents one to them (`MPI_Intercomm_merge`,
//! in `intercomm`, makes one intracommunicator of both groups).
//!
//! The two jobs meet where their launcher lets them (`rbtl::msg`'s meeting: each
//! other's key-value spaces under `rbtlrun`, hydra's name service) and through the
//! message layer's bridge (`rbtl::msg::Comm::connect_job`, a `tcp` module numbered
//! across jobs). The parents agree on the intercommunicator's context, open their
//! bridges and publish them, then the root spawns with one pre-put value for the
//! children, `rbtl_parent`: the context and the parents, named by job
//! ([`super::members`]: a communicator of several jobs spawns too). Each child, in
//! `MPI_Init`, opens its bridge and publishes it; once all have (a barrier of their
//! job), rank 0 says so (`rbtl_children_ready`, a word for their job; where the
//! launcher did not tell the parents the children's key-value space, rank 0 names
//! it first). The parents then connect to the children, and their root says so
//! (`rbtl_parents_ready`), and only then do the children connect back: neither side
//! sends before the other knows it. Spawning works under `rbtlrun` and hydra, not
//! under Slurm.

use super::context::{agree_context, Among};
use super::members::Members;
use super::{Communicator, Group};
use crate::coll::{bcast_in, run_here, Inside, KeepOut};
use crate::entry::call_held;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use rbtl::pmi::SpawnCommand;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The children's pre-put value, in their key-value space.
const PARENT_KEY: &str = "rbtl_parent";
const CHILDREN_READY: &str = "rbtl_children_ready";
const PARENTS_READY: &str = "rbtl_parents_ready";
/// What a parent that waited in vain for its children is told.
const SPAWNED: (c_int, &str) = (MPI_ERR_SPAWN, "the spawned processes did not come up");
/// What the parents are told where the launcher does not say where the new processes
/// are.
const UNSAID: &str =
    "spawning failed: the process manager does not say where the new processes are";
/// The spawn's outcome where the new job says its key-value space and numbers
/// itself, once up, under a token that stands in their place (no key-value space
/// is named so).
const UNNAMED: &str = "-";
/// How long one side waits for the other to come up.
pub(super) const START_LIMIT: Duration = Duration::from_secs(120);

/// Wait until `key` appears in the key-value space `kvs` (the other side's signal),
/// within [`START_LIMIT`]; past it, an error of `class` saying what did not happen
/// (`missing`). Run in `inside`: other threads' calls come in between the looks.
pub(super) fn wait_for_key(
    inside: &mut impl Inside,
    at: (&str, &str),
    why: (c_int, &str),
) -> Result<String> {
    wait_for_key_while(inside, at, why, START_LIMIT, |_| Ok(()))
}

/// As [`wait_for_key`], for at most `limit`, and while `still` (asked between the
/// looks) finds no reason to give up.
pub(super) fn wait_for_key_while(
    inside: &mut impl Inside,
    (kvs, key): (&str, &str),
    why: (c_int, &str),
    limit: Duration,
    still: impl FnMut(&mut Mpi) -> Result<()>,
) -> Result<String> {
    wait_for(inside, why, limit, still, |mpi| {
        Ok(mpi.msg.kvs_get(kvs, key)?)
    })
}

/// Wait until `look` finds a word, as [`wait_for_key_while`].
fn wait_for<T>(
    inside: &mut impl Inside,
    (class, missing): (c_int, &str),
    limit: Duration,
    mut still: impl FnMut(&mut Mpi) -> Result<()>,
    mut look: impl FnMut(&mut Mpi) -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    // (Short naps first: the word often comes within a few milliseconds.)
    let mut nap = NAP_MAX / 16;
    loop {
        if let Some(v) = look(inside.state())? {
            return Ok(v);
        }
        still(inside.state())?;
        if start.elapsed() > limit {
            return Err(Error::new(
                class,
                format!("{missing} within {} s", limit.as_secs_f64()),
            ));
        }
        pause_for(inside, nap);
        nap = (nap * 2).min(NAP_MAX);
    }
}

/// The longest nap between two looks for another process's word.
const NAP_MAX: Duration = Duration::from_millis(2);

/// Between two looks for another process's word: progress, others' calls, a nap.
pub(super) fn pause(inside: &mut impl Inside) {
    pause_for(inside, NAP_MAX);
}

/// As [`pause`], with a nap of `nap`.
fn pause_for(inside: &mut impl Inside, nap: Duration) {
    inside.state().progress();
    inside.turn();
    std::thread::sleep(nap);
}

/// The outcome of a step taken at `root` alone (`mine`, `Some` there), in `room`
/// bytes, for every member of `comm`: its text, or its error (the root's own there;
/// elsewhere of `class`, with the root's words).
pub(super) fn share_outcome(
    inside: &mut impl Inside,
    mine: Option<Result<String>>,
    (root, comm): (u32, Handle),
    room: usize,
    class: c_int,
) -> Result<String> {
    let mut text = vec![0u8; room];
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
        let n = line.len().min(room);
        text[..n].copy_from_slice(&line.as_bytes()[..n]);
    }
    bcast_in(inside, &mut text[..], root as c_int, comm)?;
    let text = String::from_utf8_lossy(&text)
        .trim_end_matches('\0')
        .to_string();
    match text.strip_prefix("ok ") {
        Some(s) => Ok(s.to_string()),
        None => Err(failed.unwrap_or_else(|| {
            let words = text.trim_start_matches("error ");
            Error::new(class, format!("at the root: {words}"))
        })),
    }
}

/// A group over intracommunicator `comm` about to meet another (the processes it
/// spawns, or the group at a port's other end), as each member sets out.
pub(super) struct Outset {
    /// The context its members agree on.
    pub ctx: u32,
    /// Its members, named by job.
    pub members: Members,
    pub group: Arc<Group>,
    /// This process's rank in it, and the root's.
    pub rank: u32,
    pub root: u32,
}

/// Set out to meet another group over intracommunicator `comm` (collective, run in
/// `inside`): the context agreed, every member's bridge to other jobs open and
/// published before any returns (the other group may look at once); `what` names
/// the meeting, refused from an intercommunicator.
pub(super) fn set_out(
    inside: &mut impl Inside,
    comm: Handle,
    root: c_int,
    what: &str,
) -> Result<Outset> {
    let (group, rank, root) = inside.state().intra_root(comm, root, what)?;
    let ctx = agree_context(inside, &Among::Comm(comm), &[])?.0;
    let mpi = inside.state();
    mpi.msg.open_bridge()?;
    let members = mpi.named_by_job(group.ranks())?;
    barrier_in(inside, comm)?;
    Ok(Outset {
        ctx,
        members,
        group,
        rank,
        root,
    })
}

/// A barrier over `comm`, run in `inside`.
pub(super) fn barrier_in(inside: &mut impl Inside, comm: Handle) -> Result<()> {
    let s = inside.state().build_barrier(comm)?;
    run_here(inside, s)
}

/// `MPI_Comm_spawn_multiple` (collective over `comm`; `commands` matter at `root`
/// only, where an error in them fails the spawn at every rank), run in `inside`:
/// the intercommunicator to the new processes.
fn spawn(
    inside: &mut impl Inside,
    commands: Result<Vec<SpawnCommand>>,
    root: c_int,
    comm: Handle,
) -> Result<Handle> {
    let Outset {
        ctx,
        members,
        group,
        rank,
        root,
    } = set_out(inside, comm, root, "spawning")?;
    // The root's outcome, then the children's job, for every parent.
    let mine = (rank == root).then(|| {
        let mpi = inside.state();
        let parent = format!("{ctx},{}", members.encode());
        let commands = commands?;
        let n = commands.iter().map(|c| c.nprocs).sum::<u32>();
        let s = mpi
            .msg
            .spawn(&commands, &[(PARENT_KEY.to_string(), parent)])
            .map_err(|e| Error::new(MPI_ERR_SPAWN, format!("spawning failed: {e}")))?;
        let (kvs, base) = match (s.kvsname, s.universe_base, s.announced_as) {
            (Some(k), Some(b), _) => (k, b.to_string()),
            // (The new job says both once up: every parent waits for that.)
            (_, _, Some(token)) => (UNNAMED.to_string(), token),
            _ => return Err(Error::new(MPI_ERR_SPAWN, UNSAID)),
        };
        Ok(format!("{kvs} {base} {n}"))
    });
    let text = share_outcome(inside, mine, (root, comm), 512, MPI_ERR_SPAWN)?;
    let malformed = || {
        Error::new(
            MPI_ERR_SPAWN,
            format!("the spawn's outcome {text:?} is malformed"),
        )
    };
    let fields: Vec<&str> = text.split(' ').collect();
    let [child_kvs, child_base, n] = fields[..] else {
        return Err(malformed());
    };
    let n = n.parse::<u32>().map_err(|_| malformed())?;
    let (child_kvs, child_base) = match child_kvs {
        UNNAMED => {
            let look = |mpi: &mut Mpi| Ok(mpi.msg.job_at(child_base)?);
            wait_for(inside, SPAWNED, START_LIMIT, |_| Ok(()), look)?
        }
        named => (
            named.to_string(),
            child_base.parse::<u32>().map_err(|_| malformed())?,
        ),
    };
    wait_for_key(inside, (&child_kvs, CHILDREN_READY), SPAWNED)?;
    let children =
        inside
            .state()
            .msg
            .connect_job(&child_kvs, child_base, &(0..n).collect::<Vec<_>>())?;
    barrier_in(inside, comm)?;
    let mpi = inside.state();
    if rank == root {
        mpi.msg.kvs_put(&child_kvs, PARENTS_READY, "1")?;
    }
    let errhandler = mpi.comm(comm)?.errhandler;
    let children = Arc::new(Group::new(children));
    mpi.comms.insert(Communicator::inter(
        ctx,
        (group, rank),
        children,
        errhandler,
    ))
}

impl Mpi {
    /// The group of intracommunicator `comm`, this process's rank in it, and `root`
    /// checked to be one of its ranks; `what` names what an intercommunicator is
    /// refused for.
    pub(super) fn intra_root(
        &self,
        comm: Handle,
        root: c_int,
        what: &str,
    ) -> Result<(Arc<Group>, u32, u32)> {
        let c = self.comm(comm)?;
        if c.remote.is_some() {
            return Err(Error::new(
                MPI_ERR_COMM,
                format!("{what} takes an intracommunicator, not an intercommunicator"),
            ));
        }
        let root = u32::try_from(root)
            .ok()
            .filter(|r| *r < c.group.size())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_ROOT,
                    format!("root {root} is not a rank of the communicator"),
                )
            })?;
        Ok((c.group.clone(), c.rank, root))
    }

    /// In `MPI_Init`: if this job was spawned, its intercommunicator to the parents
    /// (kept as the parent communicator).
    pub fn attach_parent(&mut self) -> Result<()> {
        let Ok(kvs) = self.msg.kvsname() else {
            return Ok(());
        };
        let Some(parent) = self.msg.preput(PARENT_KEY)? else {
            return Ok(());
        };
        let malformed = || {
            Error::new(
                MPI_ERR_SPAWN,
                format!("the parents' description {parent:?} is malformed"),
            )
        };
        let (ctx, members) = parent.split_once(',').ok_or_else(malformed)?;
        let ctx: u32 = ctx.parse().map_err(|_| malformed())?;
        let members = Members::decode(members, MPI_ERR_SPAWN)?;
        self.msg.open_bridge()?;
        // Every child's bridge is published before the parents look.
        self.msg
            .job()
            .modex
            .fence()
            .map_err(rbtl::msg::Error::from)?;
        if self.world.rank == 0 {
            self.msg.announce_job()?;
            self.msg.kvs_put(&kvs, CHILDREN_READY, "1")?;
        }
        let parents = (MPI_ERR_SPAWN, "the parents did not come up");
        wait_for_key(&mut KeepOut(self), (&kvs, PARENTS_READY), parents)?;
        let parents = self.resolve(&members)?;
        self.use_contexts(ctx)?;
        // Named as the standard names it (MPI 4.1, 7.8).
        let (group, rank) = (self.world.group.clone(), self.world.rank);
        let parents = Arc::new(Group::new(parents));
        let mut c = Communicator::inter(ctx, (group, rank), parents, MPI_ERRORS_ARE_FATAL);
        c.name = "MPI_COMM_PARENT".into();
        self.parent = self.comms.insert(c)?;
        Ok(())
    }
}

/// The strings of a null-ended C array (`argv`).
///
/// # Safety
///
/// `argv` is null or a null-ended array of NUL-ended strings.
unsafe fn strings(argv: *const *mut c_char) -> Result<Vec<String>> {
    let mut out = Vec::new();
    if argv.is_null() {
        return Ok(out);
    }
    for i in 0.. {
        // SAFETY: the caller's contract: entries up to the null one.
        let p = unsafe { *argv.add(i) };
        if p.is_null() {
            break;
        }
        // SAFETY: as above.
        out.push(unsafe { super::api::read_str(p) }?);
    }
    Ok(out)
}

/// A command's `maxprocs`, which must be positive.
fn nprocs(maxprocs: c_int) -> Result<u32> {
    u32::try_from(maxprocs)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| Error::new(MPI_ERR_ARG, format!("maxprocs {maxprocs} is not positive")))
}

/// Spawn `commands` (read at the root only) over `comm` from `root`: the new
/// intercommunicator into `intercomm`, and `MPI_SUCCESS` for each new process into
/// `errcodes` when given.
///
/// # Safety
///
/// `intercomm` is writable; `errcodes` is null or holds an int per new process.
unsafe fn spawn_into(
    inside: &mut impl Inside,
    commands: Result<Vec<SpawnCommand>>,
    root: c_int,
    comm: Handle,
    intercomm: *mut Handle,
    errcodes: *mut c_int,
) -> Result<()> {
    // Refused before the spawn, as MPICH refuses it.
    non_null(intercomm, MPI_ERR_ARG, "intercommunicator")?;
    let h = spawn(inside, commands, root, comm)?;
    let n = inside.state().comm(h)?.peers().size() as usize;
    // SAFETY: the caller's contract (`intercomm` checked not null).
    unsafe {
        intercomm.write(h);
        if !errcodes.is_null() {
            for i in 0..n {
                errcodes.add(i).write(MPI_SUCCESS);
            }
        }
    }
    Ok(())
}

/// The keys of spawn info `info` that the launcher takes (MPI 4.1, 11.8.4): `wdir`,
/// `path` and `host` (the node the processes run on: hydra places them there,
/// `rbtlrun` refuses another than its own); the others are hints it does without.
fn launcher_info(mpi: &Mpi, info: Handle) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for key in ["wdir", "path", "host"] {
        if let Some(v) = mpi.value_of(info, key)? {
            out.push((key.to_string(), v));
        }
    }
    Ok(out)
}

/// A binding `$name` that spawns processes: its parameters `$arg`, then `root`,
/// `comm`, `intercomm` and `array_of_errcodes` (as [`spawn_into`] takes them); the
/// commands are what `$commands` gives (given `$mpi`), asked at the root only.
macro_rules! spawn_binding {
    ($name:ident($($arg:ident: $ty:ty),*), |$mpi:ident| $commands:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $($arg: $ty,)*
            root: c_int,
            comm: Handle,
            intercomm: *mut Handle,
            array_of_errcodes: *mut c_int,
        ) -> c_int {
            call_held(&stringify!($name)[1..], Object::Comm(comm), |mpi| {
                let at_root = mpi.comm(comm)?.rank as c_int == root;
                let commands = if at_root {
                    (|$mpi: &mut Mpi| -> Result<Vec<SpawnCommand>> { $commands })(mpi.state())
                } else {
                    Ok(Vec::new())
                };
                // SAFETY: the binding's contract: `intercomm` writable; `errcodes`
                // one per process.
                unsafe { spawn_into(mpi, commands, root, comm, intercomm, array_of_errcodes) }
            })
        }
    };
}

spawn_binding!(PMPI_Comm_spawn(
    command: *const c_char,
    argv: *mut *mut c_char,
    maxprocs: c_int,
    info: Handle
), |mpi| {
    let n = nprocs(maxprocs)?;
    // SAFETY: the binding's contract: a string and a null-ended argv.
    let (program, args) = unsafe { (super::api::read_str(command)?, strings(argv)?) };
    Ok(vec![SpawnCommand {
        program,
        args,
        nprocs: n,
        info: launcher_info(mpi, info)?,
    }])
});

spawn_binding!(PMPI_Comm_spawn_multiple(
    count: c_int,
    array_of_commands: *mut *mut c_char,
    array_of_argv: *mut *mut *mut c_char,
    array_of_maxprocs: *const c_int,
    array_of_info: *const Handle
), |mpi| {
    let k = crate::p2p::check_count(count)?;
    if k == 0 || array_of_commands.is_null() || array_of_maxprocs.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "no commands to spawn"));
    }
    let mut commands = Vec::new();
    for i in 0..k {
        // SAFETY: the binding's contract: `count` commands, argvs and counts.
        unsafe {
            let program = super::api::read_str(*array_of_commands.add(i))?;
            let args = if array_of_argv.is_null() {
                Vec::new()
            } else {
                strings(*array_of_argv.add(i))?
            };
            let nprocs = nprocs(*array_of_maxprocs.add(i))?;
            let info = match array_of_info.is_null() {
                true => Vec::new(),
                false => launcher_info(mpi, *array_of_info.add(i))?,
            };
            commands.push(SpawnCommand {
                program,
                args,
                nprocs,
                info,
            });
        }
    }
    Ok(commands)
});
