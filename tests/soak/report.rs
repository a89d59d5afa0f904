//! The report each rank keeps, one line per event, appended as it happens so that a
//! killed rank's record survives: how it is written, and how it is read back.
//!
//! ```text
//! pid <pid>
//! start <op> <kind> <peer> <step> <len>
//! ok <op>
//! fail <op> <error variant> <blamed rank or -> <message>
//! corrupt <op> <what>
//! init-fail | setup-fail <what> <variant> <blamed> <message>
//! kill-self <op> | done | finalize ok | finalize fail <variant> <blamed> <message>
//! panic <message> | watchdog
//! ```

use rbtl::btl;
use rbtl::msg::Error;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Rank `rank`'s report in `dir`.
pub fn path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("report.{rank}"))
}

/// A failure as the report names it: the error's variant and the rank it blames.
pub struct Failure {
    pub class: String,
    pub blamed: Option<u32>,
    pub text: String,
}

impl Failure {
    pub fn of_msg(e: &Error) -> Failure {
        let (class, blamed) = match e {
            Error::PeerFailed { rank, .. } => ("PeerFailed".into(), Some(*rank)),
            Error::AllFailed { failed } => ("AllFailed".into(), failed.first().map(|f| f.0)),
            Error::PeerTimeout { rank, .. } => ("PeerTimeout".into(), Some(*rank)),
            Error::Btl(b) => return Failure::of_btl(b),
            other => (variant(other), None),
        };
        Failure {
            class,
            blamed,
            text: e.to_string(),
        }
    }

    pub fn of_btl(e: &btl::Error) -> Failure {
        let (class, blamed) = match e {
            btl::Error::PeerFailed { rank, .. } => ("BtlPeerFailed".into(), Some(*rank)),
            // (A flush of one endpoint names its one peer.)
            btl::Error::PeerTimeout { peers, .. } => {
                ("BtlPeerTimeout".into(), peers.first().map(|p| p.rank))
            }
            other => (format!("Btl{}", variant(other)), None),
        };
        Failure {
            class,
            blamed,
            text: e.to_string(),
        }
    }

    fn words(&self) -> String {
        let blamed = self.blamed.map_or("-".into(), |r| r.to_string());
        format!("{} {blamed} {}", self.class, self.text)
    }
}

fn variant(e: &impl std::fmt::Debug) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or("")
        .to_string()
}

/// Appends lines to a rank's report, one `write` each: what was written survives a
/// SIGKILL of the process.
#[derive(Clone)]
pub struct Writer(Arc<Mutex<std::fs::File>>);

impl Writer {
    pub fn open(path: &Path) -> Writer {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("report file");
        Writer(Arc::new(Mutex::new(f)))
    }

    pub fn line(&self, text: String) {
        let mut f = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut l = text.replace('\n', " ");
        l.push('\n');
        f.write_all(l.as_bytes()).expect("report write");
        f.flush().expect("report flush");
    }

    pub fn start(&self, op: u64, kind: &str, peer: u32, step: u64, len: usize) {
        self.line(format!("start {op} {kind} {peer} {step} {len}"));
    }

    pub fn ok(&self, op: u64) {
        self.line(format!("ok {op}"));
    }

    pub fn fail(&self, op: u64, f: &Failure) {
        self.line(format!("fail {op} {}", f.words()));
    }

    pub fn corrupt(&self, op: u64, what: &str) {
        self.line(format!("corrupt {op} {what}"));
    }

    /// `init-fail`, `setup-fail <what>`, `finalize fail`.
    pub fn failed(&self, what: &str, f: &Failure) {
        self.line(format!("{what} {}", f.words()));
    }
}

/// How an operation ended, as its rank wrote it down.
#[derive(Debug, PartialEq)]
pub enum End {
    Open,
    Ok,
    Fail {
        class: String,
        blamed: Option<u32>,
        text: String,
    },
    Corrupt(String),
}

#[derive(Debug)]
pub struct Op {
    pub kind: String,
    pub peer: Option<u32>,
    pub step: u64,
    pub end: End,
}

/// One rank's report, read back.
#[derive(Debug, Default)]
pub struct RankLog {
    pub pid: Option<i32>,
    pub done: bool,
    pub killed_self: bool,
    pub watchdog: bool,
    pub panics: Vec<String>,
    /// `init-fail` and `setup-fail` lines: (variant, blamed, line).
    pub early_failures: Vec<(String, Option<u32>, String)>,
    /// `ok`, or the failure's (variant, blamed).
    pub finalize: Option<Result<(), (String, Option<u32>)>>,
    pub ops: BTreeMap<u64, Op>,
}

impl RankLog {
    /// The report at `path` (empty if there is none).
    pub fn read(path: &Path) -> RankLog {
        let mut log = RankLog::default();
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            log.take(line);
        }
        log
    }

    fn take(&mut self, line: &str) {
        let mut w = line.split(' ');
        let first = w.next().unwrap_or("");
        let mut word = || w.next().unwrap_or("").to_string();
        let rank = |s: String| s.parse::<u32>().ok();
        let number = |s: String| s.parse::<u64>().unwrap_or(0);
        match first {
            "pid" => self.pid = word().parse().ok(),
            "done" => self.done = true,
            "kill-self" => self.killed_self = true,
            "watchdog" => self.watchdog = true,
            "panic" => self.panics.push(line.to_string()),
            "init-fail" | "setup-fail" => {
                if first == "setup-fail" {
                    word();
                }
                let class = word();
                let blamed = rank(word());
                self.early_failures.push((class, blamed, line.to_string()));
            }
            "finalize" => {
                self.finalize = Some(match word().as_str() {
                    "ok" => Ok(()),
                    _ => Err((word(), rank(word()))),
                })
            }
            "start" => {
                let op = number(word());
                let kind = word();
                let peer = rank(word());
                let step = number(word());
                let end = End::Open;
                self.ops.insert(
                    op,
                    Op {
                        kind,
                        peer,
                        step,
                        end,
                    },
                );
            }
            "ok" | "fail" | "corrupt" => {
                let op = number(word());
                let end = match first {
                    "ok" => End::Ok,
                    "fail" => End::Fail {
                        class: word(),
                        blamed: rank(word()),
                        text: w.collect::<Vec<_>>().join(" "),
                    },
                    _ => End::Corrupt(w.collect::<Vec<_>>().join(" ")),
                };
                match self.ops.get_mut(&op) {
                    Some(o) => o.end = end,
                    None => self
                        .panics
                        .push(format!("a report line for no started operation: {line}")),
                }
            }
            _ => {}
        }
    }
}
