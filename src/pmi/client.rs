//! The PMI-1 client: the process's one connection to its launcher's PMI server.

use super::environment::{
    connect_port, env_number, env_timeout, inherited_fd, BARRIER_TIMEOUT_ENV, DEFAULT_TIMEOUT,
    TIMEOUT_ENV,
};
use super::reply_reader::ReplyReader;
use super::spawn;
use super::wire::{self, Message};
use super::Error;
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Set once a client has taken the process's PMI connection.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// A connection to the launcher's PMI-1 server.
#[derive(Debug)]
pub struct Client {
    reader: BufReader<ReplyReader>,
    writer: File,
    /// How long to wait for a reply to anything but a barrier.
    timeout: Option<Duration>,
    /// How long to wait in a barrier.
    barrier_timeout: Option<Duration>,
    rank: u32,
    size: u32,
    kvsname: String,
    max_key_len: usize,
    max_value_len: usize,
    /// The launcher joins the jobs it starts ([`spawn::JOINS_JOBS`]).
    joins_jobs: bool,
}

impl Client {
    /// Connects to the PMI server named by the environment: `Some(client)` when
    /// `PMI_FD` or `PMI_PORT` is set, after the `init`, `get_maxes` and
    /// `get_my_kvsname` exchanges; `None` for a process started without a launcher
    /// (a singleton). Only one client per process: a second call fails with
    /// [`Error::AlreadyClaimed`].
    ///
    /// The client waits at most `PMI_TIMEOUT` seconds (default 300) for a reply and
    /// `PMI_BARRIER_TIMEOUT` seconds (default: no limit) in a barrier, 0 meaning no
    /// limit; [`set_timeouts`](Self::set_timeouts) changes both.
    pub fn from_env() -> Result<Option<Client>, Error> {
        let fd_var = std::env::var("PMI_FD").ok();
        let port_var = std::env::var("PMI_PORT").ok();
        if fd_var.is_none() && port_var.is_none() {
            return Ok(None);
        }
        if CLAIMED.swap(true, Ordering::SeqCst) {
            return Err(Error::AlreadyClaimed);
        }
        let timeout = env_timeout(TIMEOUT_ENV, Some(DEFAULT_TIMEOUT))?;
        let barrier_timeout = env_timeout(BARRIER_TIMEOUT_ENV, None)?;
        let (file, ids) = match (fd_var, port_var) {
            (Some(fd), _) => (inherited_fd(&fd)?, None),
            (None, Some(port)) => connect_port(&port)?,
            (None, None) => unreachable!("checked above"),
        };
        let mut client = Client::over(file)?;
        client.set_timeouts(timeout, barrier_timeout);
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

    /// A client over `file`, a connection to a PMI server, before any exchange; the
    /// default time limits.
    pub(crate) fn over(file: File) -> Result<Client, Error> {
        let writer = file.try_clone().map_err(|source| Error::Io {
            request: "setting up the PMI connection".into(),
            source,
        })?;
        Ok(Client {
            reader: BufReader::new(ReplyReader::new(file)),
            writer,
            timeout: Some(DEFAULT_TIMEOUT),
            barrier_timeout: None,
            rank: 0,
            size: 1,
            kvsname: String::new(),
            max_key_len: 0,
            max_value_len: 0,
            joins_jobs: false,
        })
    }

    /// A client over `file` for rank `rank` of `size`, after the `init`, `get_maxes`
    /// and `get_my_kvsname` exchanges, as [`from_env`](Self::from_env) makes one.
    #[cfg(test)]
    pub(crate) fn connect(file: File, rank: u32, size: u32) -> Result<Client, Error> {
        let mut client = Client::over(file)?;
        client.rank = rank;
        client.size = size;
        client.init()?;
        Ok(client)
    }

    /// How long to wait for the reply to any request but a barrier, and in a
    /// barrier; `None`: no limit. A request that gets no reply in time fails with
    /// [`Error::Timeout`].
    pub fn set_timeouts(&mut self, reply: Option<Duration>, barrier: Option<Duration>) {
        self.timeout = reply;
        self.barrier_timeout = barrier;
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
                let line = self.recv(&request, self.timeout, TIMEOUT_ENV)?;
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
            let msg = match reply.get("pmi_version").filter(|&v| v != "1") {
                Some(version) => format!(
                    "the server speaks PMI {version}.{}, this client PMI 1.1 (the simple \
                     protocol); start the program with a PMI-1 launcher",
                    reply.get("pmi_subversion").unwrap_or("?")
                ),
                None => reply.get("msg").unwrap_or("no reason given").to_string(),
            };
            return Err(Error::Refused {
                request: request.into(),
                rc,
                msg,
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
        self.joins_jobs = maxes.get_int(spawn::JOINS_JOBS) == Some(1);
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
    /// the first or only one); `None` where the launcher does not number them and
    /// answers a negative number (Slurm's `pmi2` plugin answers -1).
    pub fn appnum(&mut self) -> Result<Option<u32>, Error> {
        let request = "cmd=get_appnum";
        let reply = self.request(request, "appnum")?;
        let appnum = reply
            .get_int("appnum")
            .and_then(|v| i32::try_from(v).ok())
            .ok_or_else(|| Error::Protocol {
                request: request.into(),
                reply: "no usable appnum".into(),
            })?;
        Ok(u32::try_from(appnum).ok())
    }

    /// Whether the launcher joins the jobs it starts (rbtlrun): a spawn's processes
    /// and their parents then meet in each other's key-value spaces.
    pub fn joins_jobs(&self) -> bool {
        self.joins_jobs
    }

    /// How many processes the job and those it spawns may number (the launcher's
    /// universe size: `None` when it has no bound, as hydra answers by default).
    pub fn universe_size(&mut self) -> Result<Option<u32>, Error> {
        let request = "cmd=get_universe_size";
        let reply = self.request(request, "universe_size")?;
        let size = reply.get_int("size").ok_or_else(|| Error::Protocol {
            request: request.into(),
            reply: "no usable size".into(),
        })?;
        Ok(u32::try_from(size).ok().filter(|&n| n > 0))
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
        let request = "cmd=barrier_in";
        self.send(request)?;
        let reply = self.recv(request, self.barrier_timeout, BARRIER_TIMEOUT_ENV)?;
        expect(request, reply, "barrier_out").map(|_| ())
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
        let mut request = format!("cmd=abort exitcode={code} message=");
        // Within the line MPICH's client keeps to, which servers count on: a long
        // message is cut short.
        for c in message.chars() {
            let escaped = wire::escape(c.encode_utf8(&mut [0; 4]));
            if request.len() + escaped.len() >= wire::MPICH_LINE {
                break;
            }
            request.push_str(&escaped);
        }
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

    pub(super) fn send(&mut self, request: &str) -> Result<(), Error> {
        let mut line = Vec::with_capacity(request.len() + 1);
        line.extend_from_slice(request.as_bytes());
        line.push(b'\n');
        self.writer.write_all(&line).map_err(|source| Error::Io {
            request: shorten(request),
            source,
        })
    }

    /// The next reply, waiting at most `timeout` (whose value `variable` sets).
    fn recv(
        &mut self,
        request: &str,
        timeout: Option<Duration>,
        variable: &'static str,
    ) -> Result<Message, Error> {
        self.reader.get_mut().set_timeout(timeout);
        let line = wire::read_line(&mut self.reader, wire::MAX_LINE);
        self.reader.get_mut().set_timeout(None);
        match line {
            Ok(Some(line)) => Message::parse(&line).map_err(|_| Error::Protocol {
                request: shorten(request),
                reply: shorten(&line),
            }),
            Ok(None) => Err(Error::Closed {
                request: shorten(request),
            }),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(Error::Timeout {
                request: shorten(request),
                waited: timeout.unwrap_or_default(),
                variable,
            }),
            Err(source) => Err(Error::Io {
                request: shorten(request),
                source,
            }),
        }
    }

    pub(super) fn request(&mut self, request: &str, expect_cmd: &str) -> Result<Message, Error> {
        self.send(request)?;
        let reply = self.recv(request, self.timeout, TIMEOUT_ENV)?;
        expect(request, reply, expect_cmd)
    }
}

/// `reply` if it is a `cmd=expect_cmd` line, else a protocol error.
fn expect(request: &str, reply: Message, expect_cmd: &str) -> Result<Message, Error> {
    if reply.cmd != expect_cmd {
        return Err(Error::Protocol {
            request: shorten(request),
            reply: format!("cmd={} (expected cmd={expect_cmd})", reply.cmd),
        });
    }
    Ok(reply)
}

/// The first 120 characters of `s`, for messages.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(120) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader as Lines};
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;

    /// The error of starting a client whose server answers `init` with `reply`.
    fn init_error(reply: &'static str) -> Error {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut request = String::new();
            Lines::new(&theirs).read_line(&mut request).unwrap();
            (&theirs).write_all(reply.as_bytes()).unwrap();
        });
        let err = Client::connect(File::from(OwnedFd::from(ours)), 0, 1).unwrap_err();
        server.join().unwrap();
        err
    }

    #[test]
    fn a_refused_init_says_why() {
        let err =
            init_error("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 msg=go_away\n");
        let text = err.to_string();
        assert!(matches!(err, Error::Refused { rc: -1, .. }), "{text}");
        assert!(
            text.contains("go_away") && !text.contains("not 1.1"),
            "{text}"
        );
        let err = init_error("cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=-1\n");
        let text = err.to_string();
        assert!(
            text.contains("the server speaks PMI 2.0, this client PMI 1.1"),
            "{text}"
        );
        let err = init_error("cmd=response_to_init rc=5\n");
        assert!(err.to_string().contains("no reason given"), "{err}");
    }

    #[test]
    fn an_abort_message_is_cut_to_fit_a_line() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let mut client = Client::over(File::from(OwnedFd::from(ours))).unwrap();
        client.abort(3, &"word ".repeat(1000)).unwrap();
        drop(client);
        let mut line = String::new();
        Lines::new(&theirs).read_line(&mut line).unwrap();
        assert!(line.len() <= wire::MPICH_LINE, "{}", line.len());
        let m = Message::parse(&line).unwrap();
        assert_eq!(m.get_int("exitcode"), Some(3));
        assert!(m.get("message").unwrap().starts_with("word word"));
    }

    #[test]
    fn shorten_cuts_long_text() {
        assert_eq!(shorten("abc"), "abc");
        let long = "x".repeat(500);
        assert_eq!(shorten(&long).len(), 123);
    }
}
