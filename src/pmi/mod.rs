//! The client side of PMI-1, the "simple" wire protocol that MPICH's hydra
//! (`mpiexec.mpich`), slurm's PMI-1 plugin and this crate's own launcher
//! ([`crate::launcher`], the `rbtlrun` binary) serve to the processes they start.
//!
//! A launcher hands each process a connection to its PMI server, either as an
//! inherited socket whose descriptor number is in `PMI_FD` (with the rank and job
//! size in `PMI_RANK` and `PMI_SIZE`), or as `PMI_PORT=host:port` to connect to (then,
//! when `PMI_ID` is set, rank and size come from an `initack` handshake). Requests and
//! replies are single lines of `key=value` tokens:
//!
//! | request | reply |
//! | --- | --- |
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | `cmd=get_maxes` | `cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024` |
//! | `cmd=get_appnum` | `cmd=appnum appnum=0` |
//! | `cmd=get_my_kvsname` | `cmd=my_kvsname kvsname=...` |
//! | `cmd=put kvsname=K key=X value=V` | `cmd=put_result rc=0` |
//! | `cmd=get kvsname=K key=X` | `cmd=get_result rc=0 value=V` (rc non-zero when missing) |
//! | `cmd=barrier_in` | `cmd=barrier_out` |
//! | `cmd=finalize` | `cmd=finalize_ack` |
//! | `cmd=abort exitcode=N message=...` | none: the launcher ends the job |
//!
//! [`Client`] speaks this protocol; [`PmiModex`] runs the BTL modex over it, and
//! [`job`] picks PMI when a launcher is present and a one-process job otherwise.

mod modex;
pub(crate) mod wire;

pub use modex::{job, Job, PmiModex};

use std::fs::File;
use std::io::{self, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use wire::Message;

/// What went wrong talking PMI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PMI environment variable does not hold what it should.
    #[error(
        "environment variable {name}={value:?} is not usable: {why}; \
         start the program with a PMI-1 launcher (rbtlrun, mpiexec.mpich) or unset it"
    )]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// `PMI_PORT` names a server that cannot be reached.
    #[error(
        "cannot connect to the PMI server at {addr}: {source}; \
         check that the launcher that set PMI_PORT is still running"
    )]
    Connect {
        /// The `host:port` from `PMI_PORT`.
        addr: String,
        /// Why the connection failed.
        #[source]
        source: io::Error,
    },
    /// Reading from or writing to the PMI connection failed.
    #[error("PMI I/O failed during {request}: {source}; the launcher has probably ended the job")]
    Io {
        /// The request under way.
        request: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// The server closed the connection instead of replying.
    #[error(
        "the PMI server closed the connection during {request}; \
         the launcher has probably ended the job (look at its messages)"
    )]
    Closed {
        /// The request under way.
        request: String,
    },
    /// The server replied with something other than the expected command.
    #[error(
        "unexpected reply to {request} from the PMI server: {reply:?}; \
         the launcher does not speak PMI-1 as this client does"
    )]
    Protocol {
        /// The request under way.
        request: String,
        /// What came back.
        reply: String,
    },
    /// The server answered with a non-zero `rc`.
    #[error("the PMI server refused {request}: rc={rc} ({msg})")]
    Refused {
        /// The request.
        request: String,
        /// Its return code.
        rc: i64,
        /// The server's `msg`, if any.
        msg: String,
    },
    /// A key or value cannot be carried by PMI-1 as it is.
    #[error("the {what} {value:?} cannot be sent over PMI-1: {why}")]
    InvalidToken {
        /// "key" or "value".
        what: &'static str,
        /// The offending text (cut short when long).
        value: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// The process already made its PMI client.
    #[error(
        "this process already created its PMI client (the PMI connection can have only \
         one owner); pass the existing Client or PmiModex around instead"
    )]
    AlreadyClaimed,
}

/// Set once a client has taken the process's PMI connection.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// A connection to the launcher's PMI-1 server.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<File>,
    writer: File,
    rank: u32,
    size: u32,
    kvsname: String,
    max_key_len: usize,
    max_value_len: usize,
}

impl Client {
    /// Connects to the PMI server named by the environment: `Some(client)` when
    /// `PMI_FD` or `PMI_PORT` is set, after the `init`, `get_maxes` and
    /// `get_my_kvsname` exchanges; `None` for a process started without a launcher
    /// (a singleton). Only one client per process: a second call fails with
    /// [`Error::AlreadyClaimed`].
    pub fn from_env() -> Result<Option<Client>, Error> {
        let fd_var = std::env::var("PMI_FD").ok();
        let port_var = std::env::var("PMI_PORT").ok();
        if fd_var.is_none() && port_var.is_none() {
            return Ok(None);
        }
        if CLAIMED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyClaimed);
        }
        let (file, ids) = match (fd_var, port_var) {
            (Some(fd), _) => (inherited_fd(&fd)?, None),
            (None, Some(port)) => connect_port(&port)?,
            (None, None) => unreachable!("checked above"),
        };
        let writer = file.try_clone().map_err(|source| Error::Io {
            request: "setting up the PMI connection".into(),
            source,
        })?;
        let mut client = Client {
            reader: BufReader::new(file),
            writer,
            rank: 0,
            size: 1,
            kvsname: String::new(),
            max_key_len: 0,
            max_value_len: 0,
        };
        let ids = match ids {
            Some(pmiid) => Some(client.initack(&pmiid)?),
            None => None,
        };
        let (rank, size) = match ids {
            Some(ids) => ids,
            None => (env_number("PMI_RANK", 0)?, env_number("PMI_SIZE", 1)?),
        };
        if size == 0 || rank >= size {
            return Err(Error::BadEnv {
                name: "PMI_RANK",
                value: rank.to_string(),
                why: format!("rank {rank} is not below the job size {size}"),
            });
        }
        client.rank = rank;
        client.size = size;
        client.init()?;
        Ok(Some(client))
    }

    /// The `initack` handshake of a `PMI_PORT` connection with `PMI_ID` set: hydra
    /// answers `cmd=initack` then `cmd=set size=`, `cmd=set rank=`, `cmd=set debug=`;
    /// newer servers may put rank and size on the `initack` line itself.
    fn initack(&mut self, pmiid: &str) -> Result<(u32, u32), Error> {
        let request = format!("cmd=initack pmiid={pmiid}");
        let reply = self.request(&request, "initack")?;
        let mut rank = reply.get_int("rank");
        let mut size = reply.get_int("size");
        if rank.is_none() || size.is_none() {
            for _ in 0..3 {
                let line = self.recv(&request)?;
                if line.cmd != "set" {
                    return Err(Error::Protocol {
                        request,
                        reply: format!("cmd={} ...", line.cmd),
                    });
                }
                rank = rank.or(line.get_int("rank"));
                size = size.or(line.get_int("size"));
            }
        }
        let as_u32 = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        match (as_u32(rank), as_u32(size)) {
            (Some(rank), Some(size)) => Ok((rank, size)),
            _ => Err(Error::Protocol {
                request,
                reply: "no usable rank and size in the initack handshake".into(),
            }),
        }
    }

    /// `init`, `get_maxes`, `get_my_kvsname`.
    fn init(&mut self) -> Result<(), Error> {
        let request = "cmd=init pmi_version=1 pmi_subversion=1";
        let reply = self.request(request, "response_to_init")?;
        if let Some(rc) = reply.get_int("rc").filter(|&rc| rc != 0) {
            return Err(Error::Refused {
                request: request.into(),
                rc,
                msg: format!(
                    "the server speaks PMI {}.{}, not 1.1",
                    reply.get("pmi_version").unwrap_or("?"),
                    reply.get("pmi_subversion").unwrap_or("?")
                ),
            });
        }
        let maxes = self.request("cmd=get_maxes", "maxes")?;
        let max = |key: &str| -> Result<usize, Error> {
            maxes
                .get_int(key)
                .and_then(|v| usize::try_from(v).ok())
                .filter(|&v| v > 0)
                .ok_or_else(|| Error::Protocol {
                    request: "cmd=get_maxes".into(),
                    reply: format!("no usable {key}"),
                })
        };
        let (kvsname_max, keylen_max, vallen_max) =
            (max("kvsname_max")?, max("keylen_max")?, max("vallen_max")?);
        // Like MPICH's client: keep a whole put request within a 1024-byte line. The
        // limits count the C string's terminating NUL, hence the `- 1`.
        let key_max = keylen_max.min(256);
        let value_max = vallen_max
            .min(wire::MPICH_LINE.saturating_sub(kvsname_max + key_max + 30))
            .max(64);
        self.max_key_len = key_max - 1;
        self.max_value_len = value_max - 1;
        let reply = self.request("cmd=get_my_kvsname", "my_kvsname")?;
        self.kvsname = reply
            .get("kvsname")
            .filter(|k| !k.is_empty() && wire::check_token(k).is_ok())
            .ok_or_else(|| Error::Protocol {
                request: "cmd=get_my_kvsname".into(),
                reply: "no usable kvsname".into(),
            })?
            .to_string();
        Ok(())
    }

    /// This process's rank in the job.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of processes in the job.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The name of the job's key-value space.
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The longest key [`put`](Self::put) accepts, in bytes.
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// The longest value [`put`](Self::put) accepts, in bytes: the server's
    /// `vallen_max`, less what keeps a whole request within the 1024-byte line of
    /// MPICH's PMI library (674 bytes with hydra's maxes).
    pub fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    /// Which executable of a multi-executable launch this process belongs to (0 for
    /// the first or only one).
    pub fn appnum(&mut self) -> Result<i32, Error> {
        let request = "cmd=get_appnum";
        let reply = self.request(request, "appnum")?;
        reply
            .get_int("appnum")
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| Error::Protocol {
                request: request.into(),
                reply: "no usable appnum".into(),
            })
    }

    /// Stores `value` under `key` in the job's key-value space, visible to every rank
    /// after the next [`barrier`](Self::barrier). Neither may contain spaces, `=`,
    /// backslashes or control characters, and both must fit the lengths above.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.check("key", key, self.max_key_len)?;
        self.check("value", value, self.max_value_len)?;
        if key.is_empty() {
            return Err(Error::InvalidToken {
                what: "key",
                value: String::new(),
                why: "keys cannot be empty".into(),
            });
        }
        let request = format!("cmd=put kvsname={} key={key} value={value}", self.kvsname);
        let reply = self.request(&request, "put_result")?;
        match reply.get_int("rc") {
            Some(0) | None => Ok(()),
            Some(rc) => Err(Error::Refused {
                request: shorten(&request),
                rc,
                msg: reply.get("msg").unwrap_or("no reason given").to_string(),
            }),
        }
    }

    /// The value stored under `key` by any rank, or `None` when the server says it has
    /// no such key (any non-zero `rc` to a `get` means that in PMI-1).
    pub fn get(&mut self, key: &str) -> Result<Option<String>, Error> {
        self.check("key", key, self.max_key_len)?;
        let request = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let reply = self.request(&request, "get_result")?;
        match reply.get_int("rc") {
            Some(0) => Ok(Some(reply.get("value").unwrap_or("").to_string())),
            Some(_) => Ok(None),
            None => Err(Error::Protocol {
                request,
                reply: "a get_result without rc".into(),
            }),
        }
    }

    /// Waits until every rank of the job has entered the barrier; puts made before it
    /// are visible to every rank after it.
    pub fn barrier(&mut self) -> Result<(), Error> {
        self.request("cmd=barrier_in", "barrier_out").map(|_| ())
    }

    /// Tells the server this process is done with PMI and closes the connection.
    pub fn finalize(mut self) -> Result<(), Error> {
        self.request("cmd=finalize", "finalize_ack").map(|_| ())
    }

    /// Asks the launcher to end the whole job with exit code `code`, printing
    /// `message`. No reply comes: the launcher kills the job's processes, this one
    /// included, so a caller should not count on running for long after this returns
    /// (and may simply exit with `code` itself).
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), Error> {
        let request = format!(
            "cmd=abort exitcode={code} message={}",
            wire::escape(message)
        );
        self.send(&request)
    }

    fn check(&self, what: &'static str, token: &str, max: usize) -> Result<(), Error> {
        let invalid = |why: String| Error::InvalidToken {
            what,
            value: shorten(token),
            why,
        };
        wire::check_token(token).map_err(invalid)?;
        if token.len() > max {
            return Err(invalid(format!(
                "it is {} bytes long and this PMI server takes at most {max}; \
                 split it over several keys",
                token.len()
            )));
        }
        Ok(())
    }

    fn send(&mut self, request: &str) -> Result<(), Error> {
        let mut line = Vec::with_capacity(request.len() + 1);
        line.extend_from_slice(request.as_bytes());
        line.push(b'\n');
        self.writer.write_all(&line).map_err(|source| Error::Io {
            request: shorten(request),
            source,
        })
    }

    fn recv(&mut self, request: &str) -> Result<Message, Error> {
        match wire::read_line(&mut self.reader) {
            Ok(Some(line)) => Message::parse(&line).map_err(|_| Error::Protocol {
                request: shorten(request),
                reply: shorten(&line),
            }),
            Ok(None) => Err(Error::Closed {
                request: shorten(request),
            }),
            Err(source) => Err(Error::Io {
                request: shorten(request),
                source,
            }),
        }
    }

    fn request(&mut self, request: &str, expect: &str) -> Result<Message, Error> {
        self.send(request)?;
        let reply = self.recv(request)?;
        if reply.cmd != expect {
            return Err(Error::Protocol {
                request: shorten(request),
                reply: format!("cmd={} (expected cmd={expect})", reply.cmd),
            });
        }
        Ok(reply)
    }
}

/// The first 120 characters of `s`, for messages.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

fn env_number(name: &'static str, default: u32) -> Result<u32, Error> {
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
fn inherited_fd(value: &str) -> Result<File, Error> {
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
fn connect_port(value: &str) -> Result<(File, Option<String>), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_cuts_long_text() {
        assert_eq!(shorten("abc"), "abc");
        let long = "x".repeat(500);
        assert_eq!(shorten(&long).len(), 123);
    }
}
