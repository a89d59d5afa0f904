//! Starting more processes through the launcher (PMI-1's `mcmd=spawn`, MPICH's
//! `PMI_Spawn_multiple`), and reaching the key-value spaces of other jobs of the
//! same launcher.
//!
//! A spawn is one multi-line command per executable, each ended by `endcmd`:
//!
//! ```text
//! mcmd=spawn
//! nprocs=2
//! execname=/path/to/program
//! totspawns=2
//! spawnssofar=1
//! argcnt=1
//! arg1=first-argument
//! preput_num=1
//! preput_key_0=key
//! preput_val_0=value
//! info_num=1
//! info_key_0=wdir
//! info_val_0=/some/folder
//! endcmd
//! ```
//!
//! and one reply after the last: `cmd=spawn_result rc=0`. The new processes form a
//! job of their own, with its own key-value space holding the pre-put pairs, and
//! rank `i` of executable `k` gets appnum `k`. rbtl's launcher also answers with
//! the new job's key-value space (`remote_kvsname`, as MPICH's gforker did) and
//! where its ranks start in the launcher's numbering of every process it started
//! (`universe_base`).
//!
//! Only rbtl's launcher joins the jobs it starts, and says so with
//! `rbtl_joins_jobs=1` ([`JOINS_JOBS`]) in its `get_maxes` reply (which other
//! clients ignore). Others (hydra) start the processes, then let neither job read the
//! other's key-value space: the jobs meet elsewhere (`rbtl::msg`'s meeting).

use super::wire;
use super::{Client, Error};

/// One executable of a spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnCommand {
    /// What to run.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// How many processes run it.
    pub nprocs: u32,
    /// The standard's keys of its info (MPI 4.1, 11.8.4) as the launcher takes them:
    /// `wdir` (the folder it runs in), `path` (folders, `:` between them, where its
    /// program is looked for first) and `host` (the node it runs on).
    pub info: Vec<(String, String)>,
}

/// What the launcher said of the processes it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawned {
    /// Their job's key-value space, where the launcher names it.
    pub kvsname: Option<String>,
    /// Where their ranks start in the launcher's numbering of every process.
    pub universe_base: Option<u32>,
    /// Where neither is said by the launcher: the token the new job says them under
    /// once up (set by [`crate::msg::Comm::spawn`]).
    pub announced_as: Option<String>,
}

/// The lines of a spawn of `commands`, each started with pre-put pairs `preput`.
pub(crate) fn spawn_lines(commands: &[SpawnCommand], preput: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        out.push("mcmd=spawn".to_string());
        out.push(format!("nprocs={}", c.nprocs));
        out.push(format!("execname={}", c.program));
        out.push(format!("totspawns={}", commands.len()));
        out.push(format!("spawnssofar={}", i + 1));
        out.push(format!("argcnt={}", c.args.len()));
        for (j, a) in c.args.iter().enumerate() {
            out.push(format!("arg{}={a}", j + 1));
        }
        out.push(format!("preput_num={}", preput.len()));
        for (j, (k, v)) in preput.iter().enumerate() {
            out.push(format!("preput_key_{j}={k}"));
            out.push(format!("preput_val_{j}={v}"));
        }
        out.push(format!("info_num={}", c.info.len()));
        for (j, (k, v)) in c.info.iter().enumerate() {
            out.push(format!("info_key_{j}={k}"));
            out.push(format!("info_val_{j}={v}"));
        }
        out.push("endcmd".to_string());
    }
    out
}

/// One `mcmd=spawn` segment, as the server reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segment {
    pub command: SpawnCommand,
    pub totspawns: u32,
    pub spawnssofar: u32,
    pub preput: Vec<(String, String)>,
}

/// Read the segment of `lines` (the `key=value` lines after `mcmd=spawn`, without
/// `endcmd`): what is missing or malformed is named.
pub(crate) fn parse_segment(lines: &[String]) -> Result<Segment, String> {
    let fields: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            l.split_once('=')
                .ok_or_else(|| format!("a spawn line without '=': {l:?}"))
        })
        .collect::<Result<_, _>>()?;
    let get = |k: &str| fields.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let number = |k: &str| -> Result<u32, String> {
        get(k)
            .ok_or_else(|| format!("no {k} in the spawn"))?
            .parse()
            .map_err(|_| format!("{k} is not a count"))
    };
    let argcnt = number("argcnt")?;
    let args = (1..=argcnt)
        .map(|j| {
            get(&format!("arg{j}"))
                .map(str::to_string)
                .ok_or_else(|| format!("no arg{j} of {argcnt}"))
        })
        .collect::<Result<_, _>>()?;
    let pairs = |kind: &str, key: &str, val: &str| {
        let n = match get(kind) {
            // (Older clients leave the info count out.)
            None if kind == "info_num" => 0,
            _ => number(kind)?,
        };
        (0..n)
            .map(
                |j| match (get(&format!("{key}_{j}")), get(&format!("{val}_{j}"))) {
                    (Some(k), Some(v)) => Ok((k.to_string(), v.to_string())),
                    _ => Err(format!("{kind}: pair {j} is incomplete")),
                },
            )
            .collect::<Result<Vec<_>, String>>()
    };
    let preput = pairs("preput_num", "preput_key", "preput_val")?;
    let info = pairs("info_num", "info_key", "info_val")?;
    let nprocs = number("nprocs")?;
    if nprocs == 0 {
        return Err("nprocs is 0".into());
    }
    Ok(Segment {
        command: SpawnCommand {
            program: get("execname")
                .ok_or("no execname in the spawn")?
                .to_string(),
            args,
            nprocs,
            info,
        },
        totspawns: number("totspawns")?,
        spawnssofar: number("spawnssofar")?,
        preput,
    })
}

/// The `get_maxes` reply's key by which a launcher says that its jobs read each
/// other's key-value spaces and its spawn replies say where the new job is.
pub(crate) const JOINS_JOBS: &str = "rbtl_joins_jobs";

impl Client {
    /// Ask the launcher to start `commands` as one new job whose key-value space
    /// holds `preput`; returns once it has started them.
    pub fn spawn(
        &mut self,
        commands: &[SpawnCommand],
        preput: &[(String, String)],
    ) -> Result<Spawned, Error> {
        // Each goes on a line of its own: anything but a line break or NUL.
        for c in commands {
            for token in std::iter::once(&c.program).chain(&c.args) {
                check_line("a spawn argument", token)?;
            }
            for (k, v) in &c.info {
                self.check_value("an info key", k)?;
                check_line("an info value", v)?;
            }
        }
        for (k, v) in preput {
            self.check_value("a pre-put key", k)?;
            check_line("a pre-put value", v)?;
        }
        let mut lines = spawn_lines(commands, preput);
        // The reply comes after the last line.
        let last = lines.pop().expect("a spawn has lines");
        for line in &lines {
            self.send(line)?;
        }
        let reply = self.request(&last, "spawn_result")?;
        match reply.get_int("rc") {
            Some(0) => Ok(Spawned {
                kvsname: reply.get("remote_kvsname").map(str::to_string),
                universe_base: reply.get("universe_base").and_then(|b| b.parse().ok()),
                announced_as: None,
            }),
            rc => Err(Error::Refused {
                request: "mcmd=spawn".into(),
                rc: rc.unwrap_or(-1),
                msg: reply.get("msg").unwrap_or("no reason given").to_string(),
            }),
        }
    }

    /// The value under `key` in the key-value space `kvsname` (another job's, of
    /// the same launcher), or `None`.
    pub fn get_in(&mut self, kvsname: &str, key: &str) -> Result<Option<String>, Error> {
        self.check_value("a key-value space name", kvsname)?;
        let request = format!("cmd=get kvsname={kvsname} key={key}");
        let reply = self.request(&request, "get_result")?;
        Ok((reply.get_int("rc") == Some(0)).then(|| reply.get("value").unwrap_or("").to_string()))
    }

    /// Store `value` under `key` in the key-value space `kvsname`.
    pub fn put_in(&mut self, kvsname: &str, key: &str, value: &str) -> Result<(), Error> {
        self.check_value("a key-value space name", kvsname)?;
        self.check_value("a value", value)?;
        let request = format!("cmd=put kvsname={kvsname} key={key} value={value}");
        let reply = self.request(&request, "put_result")?;
        match reply.get_int("rc") {
            Some(0) | None => Ok(()),
            Some(rc) => Err(Error::Refused {
                request,
                rc,
                msg: reply.get("msg").unwrap_or("no reason given").to_string(),
            }),
        }
    }

    /// A token this client may send (no spaces, `=`, backslashes or control
    /// characters).
    fn check_value(&self, what: &'static str, token: &str) -> Result<(), Error> {
        wire::check_token(token).map_err(|why| Error::InvalidToken {
            what,
            value: token.chars().take(120).collect(),
            why,
        })
    }
}

/// A value that goes on a spawn line of its own.
fn check_line(what: &'static str, value: &str) -> Result<(), Error> {
    match value.find(['\n', '\r', '\0']) {
        None => Ok(()),
        Some(_) => Err(Error::InvalidToken {
            what,
            value: value.chars().take(120).collect(),
            why: "a spawn line cannot hold a line break or NUL".into(),
        }),
    }
}

/// The reply to a spawn, as the server writes it.
pub(crate) fn spawn_result(kvsname: &str, base: u32) -> String {
    format!("cmd=spawn_result rc=0 remote_kvsname={kvsname} universe_base={base}")
}

/// A refused spawn's reply.
pub(crate) fn spawn_refusal(why: &str) -> String {
    format!("cmd=spawn_result rc=-1 msg={}", wire::escape(why))
}

/// Whether a request line starts a spawn.
pub(crate) fn starts_spawn(line: &str) -> bool {
    line.trim_end() == "mcmd=spawn"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_round_trip() {
        let commands = [
            SpawnCommand {
                program: "/bin/a".into(),
                args: vec!["x".into(), "y=z".into()],
                nprocs: 2,
                info: vec![("wdir".into(), "/tmp/a b".into())],
            },
            SpawnCommand {
                program: "/bin/b".into(),
                args: vec![],
                nprocs: 1,
                info: vec![],
            },
        ];
        let preput = [("k".to_string(), "v".to_string())];
        let lines = spawn_lines(&commands, &preput);
        let mut segments = Vec::new();
        for block in lines.split(|l| l == "endcmd").filter(|b| !b.is_empty()) {
            assert_eq!(block[0], "mcmd=spawn");
            segments.push(parse_segment(&block[1..]).unwrap());
        }
        assert_eq!(segments.len(), 2);
        assert_eq!(segments[0].command, commands[0]);
        assert_eq!(segments[1].command, commands[1]);
        assert_eq!((segments[1].totspawns, segments[1].spawnssofar), (2, 2));
        assert_eq!(segments[0].preput, preput);
    }

    #[test]
    fn malformed_segments_are_named() {
        let lines = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(parse_segment(&lines(&["nprocs=1"]))
            .unwrap_err()
            .contains("argcnt"));
        assert!(parse_segment(&lines(&[
            "nprocs=0",
            "argcnt=0",
            "preput_num=0",
            "execname=a",
            "totspawns=1",
            "spawnssofar=1"
        ]))
        .unwrap_err()
        .contains("nprocs is 0"));
        assert!(parse_segment(&lines(&["argcnt=2", "arg1=a"]))
            .unwrap_err()
            .contains("arg2"));
        assert!(parse_segment(&lines(&["garbage"]))
            .unwrap_err()
            .contains("without '='"));
    }
}
