//! Registration under memory that keeps coming and going, across two ranks over a real
//! transport: `sm` (from `tests/node.rs`) and `openib` on the soft-RoCE device (from
//! `tests/openib.rs`, in the guest).
//!
//! Each round, rank 0 (the target) takes memory in a random way (`node/churn.rs`: C
//! `malloc`, `mmap`, a mapping placed or moved with `mremap` at an address just
//! unmapped, or a mapping whose pages were replaced), fills it with a byte that marks
//! it unwritten, registers it through the module with remote read and write access
//! (through the module's registration cache, which keeps idle registrations: over
//! `openib` where the memory monitor runs, over `sm` always, so memory that comes back
//! where an idle registration is kept is a hit), and tells rank 1 (the origin) the
//! address and handle of a random part of it. The origin puts a pattern unique to the
//! round there; in some rounds it first gets the part and checks that it reads the
//! marking byte, in others it gets it back after the put and checks the pattern. The
//! target then checks that its memory holds the pattern in that part and the marking
//! byte everywhere else, deregisters, and gives the memory back in a random way
//! (`free`, `munmap`, `madvise(MADV_DONTNEED)`, `mremap` elsewhere, `mmap(MAP_FIXED)`
//! over it, or kept for the next batch). Any wrong result fails the job; the target
//! prints the cache's hits and misses, and where the time went.
//!
//! Rounds go in batches, so that one exchange between the ranks serves many rounds
//! (under emulation a message between the ranks costs more than a round's own work):
//! the target takes, marks and registers the memory of every round of a batch and sends
//! all their parts at once (in as few messages as the send size allows); the origin
//! does the batch's gets before, then its puts, then its gets after, each kind all
//! posted before any is waited for, and answers once; the target checks every round,
//! deregisters them all and gives their memory back in a random order. Two batches are
//! in flight: while the origin works on one, the target prepares the next. Each round
//! still has its own memory, registration, put and check. A batch's memory is all given
//! back before the next batch is taken (the one after the batch in flight), so that
//! batch's memory comes back at the addresses it gave back, where registrations of the
//! memory that left are kept idle: what a stale hit needs. The churn counts the rounds
//! taken over memory that left; the stress fails if they, the cache's hits, or (over a
//! cache that follows the monitor) its invalidations come to fewer than one round in
//! twenty.
//!
//! What a wrong result would mean differs between the transports:
//! - `sm` pins and maps nothing: a handle names the target's memory by virtual address
//!   and the put reaches it with `process_vm_writev` (or through the rings) at the time
//!   of the transfer, so even a stale cached registration would not send a put to pages
//!   that left; its cache therefore follows no monitor and sees no invalidations. Over
//!   `sm` the stress proves the whole path end to end (cache, handles, messages, put
//!   and get by address) under memory that keeps changing, not the cache's freshness.
//! - `openib` registers memory regions with the device, which pins their pages: a stale
//!   cached registration would send the put to the old pinned pages, and the target's
//!   memory would not hold the pattern. Over `openib` a wrong result is a stale hit.

use crate::churn::{Rng, PS};
use rbtl::btl::{
    Access, ActiveMessage, DesFlags, Endpoint, Error, Local, MemHandle, Module, RdmaCompletion,
    Remote, RemoteHandle, SendOutcome, SendiOutcome, Tag, Transfer,
};
use rbtl_rcache::monitor;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "stress_origin.rs"]
mod origin;
#[path = "stress_target.rs"]
mod target;

use origin::origin;
use target::target;

/// The rounds' messages, both ways.
const TAG: Tag = Tag(0x90);
/// Longest wait for the peer within a batch.
const STALL: Duration = Duration::from_secs(60);
/// Rounds per batch unless the environment says otherwise.
const BATCH: usize = 64;
const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

/// How much stress.
pub struct Plan {
    /// Rounds to run.
    pub rounds: u64,
    /// Rounds per exchange between the ranks.
    pub batch: usize,
    /// The largest block of memory a round takes (whole pages).
    pub max_len: usize,
    /// Far above the time the rounds take: past it the rank exits (code 99), so that a
    /// hang fails the job in bounded time.
    pub limit: Duration,
    /// The module's cache follows the memory monitor (its registrations pin pages), so
    /// the memory leaving must show as invalidations; a cache of a transport that pins
    /// nothing (sm) keeps entries of memory that left, harmlessly, and sees none.
    pub monitored: bool,
}

/// `name` from the environment as a number, else `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} is a number, not {v:?}"))
        })
        .unwrap_or(default)
}

impl Plan {
    /// `rounds` in batches of [`BATCH`] with blocks of up to `max_len` bytes (whole
    /// pages, at most [`crate::churn::MAX_LEN`]), over a cache that follows no monitor, unless
    /// `REGISTRATION_STRESS_ROUNDS`, `REGISTRATION_STRESS_BATCH` and
    /// `REGISTRATION_STRESS_MAX_LEN` in the environment say otherwise (to measure; both
    /// ranks read the same).
    pub fn rounds(rounds: u64, max_len: usize, limit: Duration) -> Plan {
        Plan {
            rounds: env_or("REGISTRATION_STRESS_ROUNDS", rounds),
            batch: env_or("REGISTRATION_STRESS_BATCH", BATCH).max(1),
            max_len: env_or("REGISTRATION_STRESS_MAX_LEN", max_len),
            limit,
            monitored: false,
        }
    }
}

/// What the origin does around its put.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    /// The put alone.
    PutOnly,
    /// A get first, which must read the marking byte.
    GetBefore,
    /// A get after the put, which must read the pattern.
    GetAfter,
}

/// The round's pattern of `len` bytes into `out`: bytes of `table` from an offset the
/// round chooses, with the round number at the start of every page of it.
fn pattern(table: &[u8], round: u64, out: &mut [u8]) {
    let start = (round.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 52) as usize % PS;
    out.copy_from_slice(&table[start..start + out.len()]);
    let stamp = round.to_le_bytes();
    for k in (0..out.len()).step_by(PS) {
        let n = 8.min(out.len() - k);
        out[k..k + n].copy_from_slice(&stamp[..n]);
    }
}

/// The round's marking byte: never the pattern's first byte (the round's low byte).
fn mark(round: u64) -> u8 {
    round as u8 ^ 0xa5
}

/// The bytes patterns of up to `max_len` bytes are cut from, the same in both ranks.
fn table(max_len: usize) -> Vec<u8> {
    let mut rng = Rng(0x5eed);
    (0..(max_len + PS) / 8)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect()
}

/// Whether every byte of `mem` is `byte`: compared a page at a time (`memcmp`, fast
/// in a debug build too).
fn all_are(mem: &[u8], byte: u8) -> bool {
    let page = [byte; PS];
    mem.chunks(PS).all(|c| *c == page[..c.len()])
}

/// Messages received on [`TAG`], oldest first.
type Inbox = Arc<Mutex<VecDeque<Vec<u8>>>>;

/// Completions of posted transfers: how many, and the first failure.
type Tally = Arc<Mutex<(usize, Option<String>)>>;

/// One side of the stress: the module, the peer, the messages.
struct Side<'a> {
    m: &'a mut dyn Module,
    ep: Endpoint,
    inbox: Inbox,
}

impl Side<'_> {
    fn send(&mut self, bytes: &[u8]) {
        let start = Instant::now();
        let mut des = loop {
            match self.m.sendi(&ActiveMessage::new(self.ep, TAG, &[], bytes)) {
                Ok(SendiOutcome::Sent) => return,
                Ok(SendiOutcome::Descriptor(d)) => break d,
                Err(Error::OutOfResource(_)) => self.idle(start, "a send"),
                Err(e) => panic!("sendi: {e}"),
            }
        };
        des.flags |= DesFlags::OWNERSHIP;
        loop {
            match self.m.send(self.ep, des, TAG) {
                Ok(SendOutcome::Done(Some(back))) => {
                    self.m.free(back).expect("free a returned descriptor");
                    return;
                }
                Ok(_) => return,
                Err(e) if matches!(e.error, Error::OutOfResource(_)) => {
                    des = e.descriptor;
                    self.idle(start, "a send");
                }
                Err(e) => panic!("send: {}", e.error),
            }
        }
    }

    /// The peer's next message.
    fn receive(&mut self) -> Vec<u8> {
        let start = Instant::now();
        loop {
            if let Some(msg) = self.inbox.lock().unwrap().pop_front() {
                return msg;
            }
            self.idle(start, "the peer's message");
        }
    }

    /// Progress once, giving the processor away when nothing happened (the peer may
    /// need it); fail after [`STALL`] since `start`.
    fn idle(&mut self, start: Instant, what: &str) {
        if self.m.progress() == 0 {
            std::thread::yield_now();
        }
        assert!(
            start.elapsed() < STALL,
            "{}: still waiting for {what} after {STALL:?}",
            self.m.name()
        );
    }

    /// Puts (or gets) of `len` bytes between each `local` (in `lh`) and `remote`
    /// (in its handle), in pieces within the module's limit, all posted before any is
    /// waited for; returns when every piece completed, panics if one failed.
    fn transfer_all(
        &mut self,
        put: bool,
        lh: &MemHandle,
        jobs: &[(usize, u64, &RemoteHandle, usize)],
    ) {
        let what = if put { "put" } else { "get" };
        let attrs = self.m.attributes();
        let limit = if put {
            attrs.put_limit
        } else {
            attrs.get_limit
        };
        let tally: Tally = Arc::default();
        let start = Instant::now();
        let mut posted = 0;
        for &(local, remote, rh, len) in jobs {
            let mut done = 0;
            while done < len {
                let n = limit.min(len - done);
                let (l, r) = (local + done, remote + done as u64);
                loop {
                    let t = tally.clone();
                    let cb = Box::new(move |_: &mut dyn Module, c: RdmaCompletion| {
                        let mut t = t.lock().unwrap();
                        t.0 += 1;
                        if let (Err(e), None) = (c.status, &t.1) {
                            t.1 = Some(format!("{what} of {n} bytes completed with {e}"));
                        }
                    });
                    let posted_now = if put {
                        self.m.put(
                            &Transfer::new(self.ep, Local::new(l, lh), Remote::new(r, rh), n),
                            cb,
                        )
                    } else {
                        self.m.get(
                            &Transfer::new(self.ep, Local::new(l, lh), Remote::new(r, rh), n),
                            cb,
                        )
                    };
                    match posted_now {
                        Ok(()) => break,
                        Err(Error::OutOfResource(_)) => self.idle(start, "room for a transfer"),
                        Err(e) => panic!("{what} of {n} bytes: {e}"),
                    }
                }
                posted += 1;
                done += n;
            }
        }
        while tally.lock().unwrap().0 < posted {
            self.idle(start, "the transfers' completions");
        }
        let failed = tally.lock().unwrap().1.take();
        if let Some(e) = failed {
            panic!("{e}");
        }
    }
}

/// Exit with code 99 if this rank still runs after `limit`.
fn watchdog(limit: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("registration stress: still running after {limit:?}");
        std::process::exit(99);
    });
}

/// Run the stress between `m` and the peer behind `ep` (rank 0 is the target, rank 1
/// the origin); the target returns what it counted, the origin an empty string. Panics
/// on a wrong result, and on rounds that came back too seldom to memory that left or a
/// cache that kept too little idle for them to test it (see the module's text).
pub fn run(m: &mut dyn Module, ep: Endpoint, rank: u32, plan: &Plan) -> String {
    watchdog(plan.limit);
    let status = monitor::status();
    assert!(
        status.is_running(),
        "the registration cache keeps registrations idle only where the monitor runs: \
         {status}"
    );
    let inbox: Inbox = Arc::default();
    let i = inbox.clone();
    m.register_am(
        TAG,
        Box::new(move |_, r| i.lock().unwrap().push_back(r.to_vec())),
    )
    .expect("register the stress tag");
    let mut side = Side { m, ep, inbox };
    if rank == 0 {
        target(&mut side, plan, &status)
    } else {
        origin(&mut side, plan);
        String::new()
    }
}

/// Time `f`, adding it to `*sum`.
fn timed<T>(sum: &mut Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    *sum += start.elapsed();
    out
}
