//! A started rank as a process: its process group, the thread that sees it end, the
//! signals that end it and its descendants, and reaping it.
//!
//! A rank leads a process group of its own, so that a signal to the group reaches
//! whatever the rank started (a shell's children, helpers), not only the rank. The
//! exception is rank 0 when the launcher's stdin is a terminal: a process outside the
//! terminal's foreground group that reads it is stopped (SIGTTIN), so rank 0 stays in
//! the launcher's group, and only it (not its descendants) is signalled.
//!
//! The launcher sees a rank end without reaping it (`waitid` with `WNOWAIT`): until it
//! is reaped, its pid (and so its group id) cannot be reused, so signalling the group
//! of a rank that has ended, to end what it left behind, can never reach another
//! process. Ranks are reaped last, by [`RankProcess::reap`].

use super::event::Event;
use super::RankExit;
use std::io;
use std::os::unix::net::UnixStream;
use std::process::Child;
use std::sync::mpsc::Sender;
use std::thread::{self, JoinHandle};

/// One started rank.
pub(super) struct RankProcess {
    child: Child,
    /// Whether it leads a process group of its own (whose id is its pid).
    leads_group: bool,
    /// How it ended, once the job loop has heard.
    pub exit: Option<RankExit>,
    /// The launcher's end of the PMI socketpair, to shut down at the end.
    pub pmi: UnixStream,
}

impl RankProcess {
    pub fn new(child: Child, leads_group: bool, pmi: UnixStream) -> Self {
        Self {
            child,
            leads_group,
            exit: None,
            pmi,
        }
    }

    fn pid(&self) -> Option<libc::pid_t> {
        libc::pid_t::try_from(self.child.id()).ok()
    }

    /// Starts the thread that sends [`Event::Ended`] for `rank` once its process has
    /// ended, leaving it unreaped.
    pub fn watch(&self, rank: u32, events: Sender<Event>) -> io::Result<JoinHandle<()>> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        thread::Builder::new()
            .name(format!("wait-{rank}"))
            .spawn(move || {
                let exit = wait_without_reaping(pid);
                let _ = events.send(Event::Ended { rank, exit });
            })
    }

    /// Sends `signal` to the rank and, through its process group, to its
    /// descendants; once it has ended (unreaped), to what is left of its group.
    pub fn signal(&self, signal: libc::c_int) {
        let Some(pid) = self.pid() else {
            return;
        };
        let target = if self.leads_group {
            -pid
        } else if self.exit.is_none() {
            pid
        } else {
            return;
        };
        // SAFETY: kill(2) takes plain integers. `pid` is a child of ours that has not
        // been reaped (only `reap` does, last), so neither it nor its group id can
        // belong to another process.
        unsafe { libc::kill(target, signal) };
    }

    /// How the rank ended, if it has, without waiting and without reaping it: for
    /// the launcher to see an end its watching thread has not yet reported.
    pub fn peek_exit(&self) -> Option<RankExit> {
        if self.exit.is_some() {
            return self.exit;
        }
        ended(self.pid()?)
    }

    /// Reaps the ended rank: only after every signal to its group has been sent.
    pub fn reap(&mut self) {
        let _ = self.child.wait();
    }
}

/// How child `pid` ended, if it has, without waiting and without reaping it.
pub(super) fn ended(pid: libc::pid_t) -> Option<RankExit> {
    wait_for_exit(pid, libc::WNOHANG)
}

/// Blocks until process `pid` (a child of ours) has ended and returns how, leaving it
/// a zombie.
fn wait_without_reaping(pid: libc::pid_t) -> RankExit {
    // Without WNOHANG, waitid returns only once the child has ended.
    wait_for_exit(pid, 0).unwrap_or(RankExit::Exited(-1))
}

/// How child `pid` ended, leaving it unreaped: `None` if it still runs (with
/// `WNOHANG` in `flags`). A child reaped by someone else counts as ended with -1.
fn wait_for_exit(pid: libc::pid_t, flags: libc::c_int) -> Option<RankExit> {
    loop {
        // SAFETY: siginfo_t is plain data; all-zero is a valid value to be written over
        // (and a zero si_pid is how waitid says that nothing has ended).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, which we own; WNOWAIT leaves the
        // child unreaped.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT | flags,
            )
        };
        if rc == -1 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Someone else reaped it (ECHILD): it has ended, how is unknown.
            return Some(RankExit::Exited(-1));
        }
        // SAFETY: waitid succeeded; si_pid is zero when (under WNOHANG) no child has
        // ended, else the kernel filled in the SIGCHLD fields si_pid and si_status read.
        let (ended, status) = unsafe { (info.si_pid() != 0, info.si_status()) };
        if !ended {
            return None;
        }
        return Some(match info.si_code {
            libc::CLD_EXITED => RankExit::Exited(status),
            _ => RankExit::Signaled(status),
        });
    }
}
