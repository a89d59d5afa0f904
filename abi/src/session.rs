//! Sessions (MPI 4.1, 11.3): the library started without `MPI_Init`, by
//! `MPI_Session_init`, and communicators made from groups of the process sets
//! (`mpi://WORLD`, `mpi://SELF`) without a parent communicator
//! (`MPI_Comm_create_from_group`, `MPI_Intercomm_create_from_groups`).
//!
//! Sessions and the world model share the library's one state: the first of
//! `MPI_Init` and `MPI_Session_init` starts it. `MPI_Finalize` ends it when no
//! session is open; else it stays after the last session ends, so that sessions
//! may start again (MPI 4.1, 11.3.1), and ends when the process exits (the
//! transports' last barrier with it). Once ended it does not start again: a session
//! begun after `MPI_Finalize` ended it is refused. The thread level is the highest asked for so far
//! (`mpi_thread_support_level` in the session's info, or MPICH's `thread_level`;
//! `MPI_THREAD_SINGLE` without), the library's for every caller: what
//! `MPI_Session_get_info` reports.

use crate::coll::Inside;
use crate::comm::api::{call_errhandler, check_errhandler, create_errhandler, read_str};
use crate::comm::context::{agree_context, Among};
use crate::comm::intercomm::intercomm_create;
use crate::comm::Group;
use crate::entry::{call, call_held};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
use crate::handles::Kind;
use crate::state::Mpi;
use std::sync::Arc;

/// A session.
pub struct Session {
    pub errhandler: Handle,
}

/// The process sets, by name.
const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// The context of the agreements of `MPI_Comm_create_from_group`, which have no
/// parent communicator (0 is the message layer's own, 2 and up the communicators').
const FROM_GROUP_CTX: u32 = 1;

/// The names of the thread levels, as a session's info and `MPI_INFO_ENV` give them.
const LEVELS: [(&str, c_int); 4] = [
    ("MPI_THREAD_SINGLE", MPI_THREAD_SINGLE),
    ("MPI_THREAD_FUNNELED", MPI_THREAD_FUNNELED),
    ("MPI_THREAD_SERIALIZED", MPI_THREAD_SERIALIZED),
    ("MPI_THREAD_MULTIPLE", MPI_THREAD_MULTIPLE),
];

/// The name of thread level `level` (`None`: not one of the four).
pub(crate) fn level_name(level: c_int) -> Option<&'static str> {
    LEVELS.iter().find(|l| l.1 == level).map(|l| l.0)
}

/// A string tag as a message tag: the same on every process (FNV-1a), never
/// negative.
fn tag_of(stringtag: &str) -> i32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in stringtag.bytes() {
        h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
    }
    (h & 0x7fff_ffff) as i32
}

impl Mpi {
    /// Session `h`.
    pub(crate) fn session(&self, h: Handle) -> Result<&Session> {
        self.sessions.get(h).ok_or_else(|| {
            Error::new(
                MPI_ERR_SESSION,
                format!("{h:#x} is not a session (finalized, or a handle of another kind)"),
            )
        })
    }

    /// The group of process set `name`.
    fn pset_group(&self, name: &str) -> Result<Group> {
        match PSETS.iter().position(|p| p.eq_ignore_ascii_case(name)) {
            Some(0) => Ok((*self.world.group).clone()),
            Some(_) => Ok((*self.self_comm.group).clone()),
            None => Err(Error::new(
                MPI_ERR_ARG,
                format!("{name:?} is not a process set (there are {PSETS:?})"),
            )),
        }
    }

    /// Raise the thread level to `level`, if higher.
    pub fn raise_thread_level(&mut self, level: c_int) {
        if level > self.thread_level {
            self.thread_level = level;
            if level == MPI_THREAD_MULTIPLE {
                global::allow_threads();
            }
        }
    }
}

/// `MPI_Comm_create_from_group`: a communicator over `group` (which holds this
/// process), its context agreed among the members alone (in `inside`), their
/// messages told apart from other such calls by `stringtag`.
fn comm_from_group(
    inside: &mut impl Inside,
    group: Arc<Group>,
    stringtag: &str,
    errhandler: Handle,
) -> Result<Handle> {
    let rank = group
        .rank_of(inside.state().world_rank())
        .ok_or_else(|| Error::new(MPI_ERR_GROUP, "the calling process is not in the group"))?;
    let among = Among::Group {
        ctx: FROM_GROUP_CTX,
        group: &group,
        me: rank,
        tag: tag_of(stringtag),
    };
    let ctx = agree_context(inside, &among, &[])?.0;
    let mpi = inside.state();
    let h = mpi.keep(ctx, group, MPI_COMM_WORLD)?;
    mpi.comm_mut(h)?.errhandler = errhandler;
    Ok(h)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_init(
    info: Handle,
    errhandler: Handle,
    session: *mut Handle,
) -> c_int {
    let made = crate::env::start_for_session().and_then(|()| {
        global::with(|mpi| {
            non_null(session, MPI_ERR_ARG, "session")?;
            check_errhandler(errhandler, Kind::Session)?;
            // (MPICH names the key `thread_level`: taken too.)
            let asked = match mpi.value_of(info, "mpi_thread_support_level")? {
                None => mpi.value_of(info, "thread_level")?,
                v => v,
            };
            let thread_level = match asked {
                None => MPI_THREAD_SINGLE,
                Some(v) => LEVELS
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(v.trim()))
                    .map(|l| l.1)
                    .ok_or_else(|| {
                        Error::new(
                            MPI_ERR_ARG,
                            format!("mpi_thread_support_level {v:?} is not a thread level"),
                        )
                    })?,
            };
            mpi.raise_thread_level(thread_level);
            mpi.sessions.insert(Session { errhandler })
        })
    });
    match made {
        Ok(h) => {
            // SAFETY: checked not null; the binding's contract: writable.
            unsafe { session.write(h) };
            MPI_SUCCESS
        }
        // The handler given to the call reports its errors (MPI 4.1, 11.3.1), on no
        // session yet.
        Err(e) => {
            let given = Object::Given(errhandler, MPI_SESSION_NULL);
            crate::error::raise("MPI_Session_init", given, e)
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_finalize(session: *mut Handle) -> c_int {
    // SAFETY: null or readable, the binding's contract.
    let h = match unsafe { read_arg(session, MPI_ERR_ARG, "session") } {
        Ok(h) => h,
        Err(e) => return crate::error::raise("MPI_Session_finalize", Object::None, e),
    };
    let removed = global::with(|mpi| {
        mpi.session(h)?;
        mpi.sessions.remove(h);
        mpi.drop_session_buffer(h);
        Ok(())
    });
    if let Err(e) = removed {
        return crate::error::raise("MPI_Session_finalize", Object::Session(h), e);
    }
    // SAFETY: checked readable; the binding's contract: writable.
    unsafe { session.write(MPI_SESSION_NULL) };
    // (The library stays, for sessions to come: see the module's words.)
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_get_num_psets(
    session: Handle,
    info: Handle,
    npset_names: *mut c_int,
) -> c_int {
    call(
        "MPI_Session_get_num_psets",
        Object::Session(session),
        |mpi| {
            crate::info::check(info)?;
            mpi.session(session)?;
            // SAFETY: null or writable.
            unsafe { crate::error::write_arg(npset_names, PSETS.len() as c_int, "npset names") }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_get_nth_pset(
    session: Handle,
    info: Handle,
    n: c_int,
    pset_len: *mut c_int,
    pset_name: *mut c_char,
) -> c_int {
    call(
        "MPI_Session_get_nth_pset",
        Object::Session(session),
        |mpi| {
            crate::info::check(info)?;
            mpi.session(session)?;
            let name = usize::try_from(n)
                .ok()
                .and_then(|i| PSETS.get(i))
                .ok_or_else(|| {
                    Error::new(
                        MPI_ERR_ARG,
                        format!("process set {n} is not one of the {}", PSETS.len()),
                    )
                })?;
            // SAFETY: null or readable, the binding's contract.
            let room = unsafe { read_arg(pset_len, MPI_ERR_ARG, "pset_len") }?;
            let need = name.len() as c_int + 1;
            if room == 0 {
                // The length asked for, with the NUL.
                // SAFETY: checked not null.
                unsafe { pset_len.write(need) };
                return Ok(());
            }
            // SAFETY: the binding's contract: `pset_name` has room for `*pset_len` bytes.
            unsafe {
                crate::comm::api::write_str(name, pset_name, room.max(1) as usize)?;
                pset_len.write(need);
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_get_pset_info(
    session: Handle,
    pset_name: *const c_char,
    info: *mut Handle,
) -> c_int {
    call(
        "MPI_Session_get_pset_info",
        Object::Session(session),
        |mpi| {
            mpi.session(session)?;
            // SAFETY: the binding's contract: a NUL-ended string.
            let name = unsafe { read_str(pset_name) }?;
            let size = mpi.pset_group(&name)?.size();
            let entries = vec![("mpi_size".to_string(), size.to_string())];
            // SAFETY: the binding's contract: `info` null or writable.
            unsafe { crate::info::hand_out(entries, info) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_get_info(session: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_Session_get_info", Object::Session(session), |mpi| {
        // The level the library gives every caller now: the highest asked for by
        // any session or `MPI_Init_thread` so far (as MPICH and Open MPI answer).
        mpi.session(session)?;
        let name = level_name(mpi.thread_level).unwrap_or("");
        let entries = ["mpi_thread_support_level", "thread_level"]
            .map(|key| (key.to_string(), name.to_string()))
            .to_vec();
        // SAFETY: the binding's contract: `info_used` null or writable.
        unsafe { crate::info::hand_out(entries, info_used) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Group_from_session_pset(
    session: Handle,
    pset_name: *const c_char,
    newgroup: *mut Handle,
) -> c_int {
    call(
        "MPI_Group_from_session_pset",
        Object::Session(session),
        |mpi| {
            mpi.session(session)?;
            // SAFETY: the binding's contract: a NUL-ended string.
            let name = unsafe { read_str(pset_name) }?;
            let g = mpi.pset_group(&name)?.in_session(Some(session));
            // SAFETY: the binding's contract: `newgroup` null or writable.
            unsafe { mpi.hand_out_group(g, newgroup) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_from_group(
    group: Handle,
    stringtag: *const c_char,
    info: Handle,
    errhandler: Handle,
    newcomm: *mut Handle,
) -> c_int {
    // Its errors go to the handler it is given (MPI 4.1, 7.4.2).
    let given = Object::Given(errhandler, MPI_COMM_NULL);
    call_held("MPI_Comm_create_from_group", given, |mpi| {
        crate::info::check(info)?;
        non_null(newcomm, MPI_ERR_ARG, "communicator")?;
        // SAFETY: the binding's contract: a NUL-ended string.
        let tag = unsafe { read_str(stringtag) }?;
        check_errhandler(errhandler, Kind::Comm)?;
        let h = match group {
            MPI_GROUP_EMPTY => MPI_COMM_NULL,
            _ => {
                let g = mpi.group(group)?;
                comm_from_group(mpi, g, &tag, errhandler)?
            }
        };
        // SAFETY: checked not null.
        unsafe { newcomm.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Intercomm_create_from_groups(
    local_group: Handle,
    local_leader: c_int,
    remote_group: Handle,
    remote_leader: c_int,
    stringtag: *const c_char,
    info: Handle,
    errhandler: Handle,
    newintercomm: *mut Handle,
) -> c_int {
    let given = Object::Given(errhandler, MPI_COMM_NULL);
    call_held("MPI_Intercomm_create_from_groups", given, |mpi| {
        crate::info::check(info)?;
        non_null(newintercomm, MPI_ERR_ARG, "communicator")?;
        // SAFETY: the binding's contract: a NUL-ended string.
        let tag = unsafe { read_str(stringtag) }?;
        check_errhandler(errhandler, Kind::Comm)?;
        let (local, remote) = (mpi.group(local_group)?, mpi.group(remote_group)?);
        let leader_of = |g: &Group, r: c_int, which: &str| {
            u32::try_from(r)
                .ok()
                .and_then(|r| g.job_rank(r))
                .ok_or_else(|| {
                    Error::new(
                        MPI_ERR_RANK,
                        format!("{which} leader {r} is not in its group of {}", g.size()),
                    )
                })
        };
        let leaders = [
            leader_of(&local, local_leader, "the local")?,
            leader_of(&remote, remote_leader, "the remote")?,
        ];
        // As MPICH does: a communicator of each group, one of the two leaders, then
        // MPI_Intercomm_create over them; all told apart by the string tag.
        let intra = comm_from_group(mpi, local.clone(), &format!("{tag}\0local"), errhandler)?;
        let me = mpi.world_rank();
        let mut peer = MPI_COMM_NULL;
        let mut remote_in_peer = 0;
        if me == leaders[0] {
            let mut pair = leaders.to_vec();
            pair.sort_unstable();
            remote_in_peer = pair.iter().position(|&j| j == leaders[1]).unwrap_or(0) as c_int;
            let g = Arc::new(Group::new(pair));
            peer = comm_from_group(mpi, g, &format!("{tag}\0leaders"), errhandler)?;
        }
        let made = intercomm_create(mpi, intra, local_leader, peer, remote_in_peer, tag_of(&tag));
        mpi.comm_free(intra)?;
        if peer != MPI_COMM_NULL {
            mpi.comm_free(peer)?;
        }
        let h = made?;
        mpi.comm_mut(h)?.errhandler = errhandler;
        // SAFETY: checked not null.
        unsafe { newintercomm.write(h) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_create_errhandler(
    session_errhandler_fn: *mut c_void,
    errhandler: *mut Handle,
) -> c_int {
    // SAFETY: the binding's contract: `errhandler` is writable.
    unsafe {
        create_errhandler(
            "MPI_Session_create_errhandler",
            session_errhandler_fn,
            errhandler,
            Kind::Session,
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_set_errhandler(session: Handle, errhandler: Handle) -> c_int {
    call(
        "MPI_Session_set_errhandler",
        Object::Session(session),
        |mpi| {
            check_errhandler(errhandler, Kind::Session)?;
            mpi.session(session)?;
            if let Some(s) = mpi.sessions.get_mut(session) {
                s.errhandler = errhandler;
            }
            Ok(())
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_get_errhandler(
    session: Handle,
    errhandler: *mut Handle,
) -> c_int {
    call(
        "MPI_Session_get_errhandler",
        Object::Session(session),
        |mpi| {
            let h = mpi.session(session)?.errhandler;
            // SAFETY: null or writable.
            unsafe { crate::error::write_arg(errhandler, h, "errhandler") }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Session_call_errhandler(session: Handle, errorcode: c_int) -> c_int {
    call_errhandler(
        "MPI_Session_call_errhandler",
        Object::Session(session),
        errorcode,
    )
}

#[cfg(test)]
mod tests {
    use super::tag_of;

    #[test]
    fn string_tags_are_stable_and_never_negative() {
        assert_eq!(tag_of(""), 0x011c_9dc5);
        assert_ne!(tag_of("a"), tag_of("b"));
        assert!(["x", "mpi://WORLD", "a much longer tag"]
            .iter()
            .all(|t| tag_of(t) >= 0));
    }
}
