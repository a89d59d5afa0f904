//! What a launcher puts in a process's environment for its PMI client: the
//! connection (`PMI_FD` or `PMI_PORT`, with `PMI_ID`), the rank and size, and the
//! client's time limits.

use super::Error;
use std::fs::File;
use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Seconds the client waits for the reply to any request but a barrier (0: no
/// limit); default [`DEFAULT_TIMEOUT`].
pub const TIMEOUT_ENV: &str = "PMI_TIMEOUT";
/// Seconds the client waits in a barrier (0: no limit, the default: a barrier waits
/// for the slowest rank, and a launcher that ends the job closes the connection).
pub const BARRIER_TIMEOUT_ENV: &str = "PMI_BARRIER_TIMEOUT";
/// How long the client waits for a reply that the server gives at once.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The time limit in variable `name` (seconds, fractions allowed; 0 for none), or
/// `default` when it is unset.
pub(super) fn env_timeout(
    name: &'static str,
    default: Option<Duration>,
) -> Result<Option<Duration>, Error> {
    let Ok(value) = std::env::var(name) else {
        return Ok(default);
    };
    let seconds = value
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| Error::BadEnv {
            name,
            value: value.clone(),
            why: "not a number of seconds, 0 (no limit) or more".into(),
        })?;
    Ok((!seconds.is_zero()).then_some(seconds))
}

/// The number in variable `name`, or `default` when it is unset.
pub(super) fn env_number(name: &'static str, default: u32) -> Result<u32, Error> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(value) => value.trim().parse().map_err(|_| Error::BadEnv {
            name,
            value,
            why: "not a non-negative integer".into(),
        }),
    }
}

/// Takes ownership of the descriptor named by `PMI_FD`.
pub(super) fn inherited_fd(value: &str) -> Result<File, Error> {
    let bad = |why: &str| Error::BadEnv {
        name: "PMI_FD",
        value: value.to_string(),
        why: why.to_string(),
    };
    let fd: RawFd = value
        .trim()
        .parse()
        .ok()
        .filter(|&fd| fd >= 0)
        .ok_or_else(|| bad("not a descriptor number"))?;
    // SAFETY: F_GETFD only reads the flags of `fd` (failing with EBADF when it is not
    // open); no memory is involved.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags == -1 {
        return Err(bad("no such open descriptor in this process"));
    }
    // Keep the connection out of programs this process may start itself.
    // SAFETY: sets the close-on-exec flag of the descriptor just checked to be open.
    unsafe { libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) };
    // SAFETY: the launcher opened `fd` for this process's PMI client and nothing else
    // in it uses the descriptor; the CLAIMED flag (set by our caller) makes this the
    // only owner, so it is closed exactly once.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Connects to `PMI_PORT` (`host:port`); returns `PMI_ID` when set, for the
/// `initack` handshake.
pub(super) fn connect_port(value: &str) -> Result<(File, Option<String>), Error> {
    let (host, port) = value
        .trim()
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::BadEnv {
            name: "PMI_PORT",
            value: value.to_string(),
            why: "not host:port".into(),
        })?;
    let connect_error = |source| Error::Connect {
        addr: value.to_string(),
        source,
    };
    let addrs = (host, port).to_socket_addrs().map_err(connect_error)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name has no address");
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect(addr) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let stream = stream.ok_or_else(|| connect_error(last))?;
    // Requests are small and each waits for its reply: do not let Nagle delay them.
    let _ = stream.set_nodelay(true);
    let pmiid = match std::env::var("PMI_ID") {
        Ok(id) if id.trim().parse::<i64>().is_ok() => Some(id.trim().to_string()),
        Ok(id) => {
            return Err(Error::BadEnv {
                name: "PMI_ID",
                value: id,
                why: "not an integer".into(),
            })
        }
        Err(_) => None,
    };
    Ok((File::from(OwnedFd::from(stream)), pmiid))
}
