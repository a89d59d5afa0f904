//! `MPI_Comm_join` (MPI 4.1, 11.8.7): two processes joined by a socket get an
//! intercommunicator of one process on each side.
//!
//! Each opens a port ([`super::ports`]) and publishes it under a name of its own,
//! then they trade port names over the socket (`MPI_MAX_PORT_NAME` bytes each way)
//! and each looks the other's name up: found, both are processes of one launcher,
//! where their jobs will meet (`rbtl::msg`'s meeting); or both
//! ports are of one job, whose processes meet by messages ([`super::job_ports`])
//! under any launcher. They trade
//! that verdict (one byte each way), so that both go on or both fail; then the
//! process of the smaller port name accepts on its port and the other connects to
//! it, both over `MPI_COMM_SELF`. The socket is left as it was found, its bytes all
//! read.

use super::ports::{accept, connect, port_key, port_parts, Meeting};
use super::spawn::{pause, START_LIMIT};
use crate::coll::Inside;
use crate::entry::call_held;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::global::Held;
use std::ffi::CString;
use std::time::Instant;

/// Bytes of the port name each side sends.
const NAME_BYTES: usize = MPI_MAX_PORT_NAME as usize;

/// The name a joining process publishes its port under: short whatever the port's
/// length, as a launcher's keys must be.
fn join_service(port: &str) -> String {
    format!("{}-join", port_key(port))
}

fn closed() -> Error {
    Error::new(
        MPI_ERR_OTHER,
        "the process at the socket's other end closed it before joining",
    )
}

/// The program's socket, written and read whole with the peer's wait bounded.
struct Socket {
    fd: c_int,
    start: Instant,
}

impl Socket {
    fn new(fd: c_int) -> Result<Socket> {
        // SAFETY: `F_GETFL` reads the descriptor's flags and changes nothing.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        if fd < 0 || flags < 0 {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("{fd} is not an open descriptor"),
            ));
        }
        Ok(Socket {
            fd,
            start: Instant::now(),
        })
    }

    /// Wait until the socket is ready for `events` (the peer has
    /// [`START_LIMIT`] from the start of the join to act), letting other threads'
    /// calls in meanwhile (`inside`).
    fn ready(&self, inside: &mut impl Inside, events: libc::c_short) -> Result<()> {
        loop {
            let left = START_LIMIT.saturating_sub(self.start.elapsed());
            if left.is_zero() {
                return Err(Error::new(
                    MPI_ERR_OTHER,
                    format!(
                        "the process at the socket's other end did not join within {} s",
                        START_LIMIT.as_secs()
                    ),
                ));
            }
            let mut p = libc::pollfd {
                fd: self.fd,
                events,
                revents: 0,
            };
            let ms = left.as_millis().min(10) as c_int;
            // SAFETY: one valid `pollfd` for the call.
            match unsafe { libc::poll(&mut p, 1, ms) } {
                n if n > 0 => return Ok(()),
                0 => pause(inside),
                _ => self.interrupted("waiting on")?,
            }
        }
    }

    /// `Ok` if the last call was interrupted by a signal (to be tried again), else
    /// the error of `doing` the socket.
    fn interrupted(&self, doing: &str) -> Result<()> {
        let e = std::io::Error::last_os_error();
        match e.kind() {
            std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => Ok(()),
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => Err(closed()),
            _ => Err(Error::new(
                MPI_ERR_OTHER,
                format!("{doing} the socket (descriptor {}): {e}", self.fd),
            )),
        }
    }

    fn send(&self, inside: &mut impl Inside, mut data: &[u8]) -> Result<()> {
        while !data.is_empty() {
            self.ready(inside, libc::POLLOUT)?;
            // SAFETY: `data` is readable for its length; MSG_NOSIGNAL: a closed peer
            // is an error, not a signal.
            let n = unsafe {
                libc::send(
                    self.fd,
                    data.as_ptr().cast(),
                    data.len(),
                    libc::MSG_NOSIGNAL,
                )
            };
            match n {
                n if n > 0 => data = &data[n as usize..],
                _ => self.interrupted("writing to")?,
            }
        }
        Ok(())
    }

    fn receive(&self, inside: &mut impl Inside, out: &mut [u8]) -> Result<()> {
        let mut at = 0;
        while at < out.len() {
            self.ready(inside, libc::POLLIN)?;
            // SAFETY: `out[at..]` is writable for its length.
            let n =
                unsafe { libc::recv(self.fd, out[at..].as_mut_ptr().cast(), out.len() - at, 0) };
            match n {
                0 => return Err(closed()),
                n if n > 0 => at += n as usize,
                _ => self.interrupted("reading from")?,
            }
        }
        Ok(())
    }
}

/// `MPI_Comm_join` over socket `fd`, run in `held`: the intercommunicator.
fn join(held: &mut Held, fd: c_int) -> Result<Handle> {
    let socket = Socket::new(fd)?;
    let port = held.open_port()?;
    let service = join_service(&port);
    let published = held.msg.publish_name(&service, &port).is_ok();
    let outcome = join_as(held, &socket, &port, published);
    if published {
        let _ = held.msg.unpublish_name(&service);
    }
    let _ = held.close_port(&port);
    outcome
}

/// Trade port names and verdicts over `socket`, then accept or connect.
fn join_as(held: &mut Held, socket: &Socket, port: &str, published: bool) -> Result<Handle> {
    let mut name = [0u8; NAME_BYTES];
    name.get_mut(..port.len())
        .filter(|_| port.len() < NAME_BYTES)
        .ok_or_else(|| Error::new(MPI_ERR_PORT, "the port's name is too long to trade"))?
        .copy_from_slice(port.as_bytes());
    socket.send(held, &name)?;
    socket.receive(held, &mut name)?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
    let theirs = String::from_utf8_lossy(&name[..end]).into_owned();
    let found = held.msg.lookup_name(&join_service(&theirs)).ok().flatten();
    let one_job = match (port_parts(port), port_parts(&theirs)) {
        (Ok((a, _)), Ok((b, _))) => a == b,
        _ => false,
    };
    let met = theirs != port && (one_job || (published && found == Some(theirs.clone())));
    socket.send(held, &[u8::from(met)])?;
    let mut verdict = [0u8];
    socket.receive(held, &mut verdict)?;
    if !met || verdict[0] != 1 {
        return Err(Error::new(
            MPI_ERR_UNSUPPORTED_OPERATION,
            "the processes at the socket's two ends are neither of jobs of one launcher with a name service (rbtlrun, a hydra mpiexec) nor of one job: this library joins those only",
        ));
    }
    let (how, at): (Meeting, _) = match port < theirs.as_str() {
        true => (accept::<Held>, port.to_string()),
        false => (connect::<Held>, theirs),
    };
    let at = CString::new(at).map_err(|_| Error::new(MPI_ERR_PORT, "a port name holds a NUL"))?;
    how(held, at.as_ptr(), MPI_INFO_NULL, 0, MPI_COMM_SELF)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_join(fd: c_int, intercomm: *mut Handle) -> c_int {
    call_held("MPI_Comm_join", Object::None, |held| {
        non_null(intercomm, MPI_ERR_ARG, "intercommunicator")?;
        let h = join(held, fd)?;
        // SAFETY: checked not null.
        unsafe { intercomm.write(h) };
        Ok(())
    })
}
