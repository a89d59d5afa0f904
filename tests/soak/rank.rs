//! The rank program: a seeded mix of sends and receives, window puts and gets, and
//! atomics, each written down in the report as it starts and ends, every payload
//! checked; then a wait until every other rank has finished or died, and `finalize`.

use crate::atomics::{self, Atomics};
use crate::report::{self, Failure, Writer};
use crate::schedule::{checksum, payload, Exchange, Match, Rng, Style, RANKS};
use rbtl::msg::{Comm, Error, Window, ANY_SOURCE, ANY_TAG};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Each origin's part of every window.
const SLOT: usize = 128 << 10;
/// Seeds window payloads apart from messages.
const WINDOW: u64 = 0x77;

/// What the harness tells a rank (`SOAK_RANK_*` variables).
struct Orders {
    dir: PathBuf,
    seed: u64,
    steps: u64,
    /// Its own watchdog.
    limit: Duration,
    wildcards: bool,
    /// The operation at which this rank kills itself.
    kill_at: Option<u64>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn number(name: &str) -> Option<u64> {
    var(name).and_then(|v| v.parse().ok())
}

impl Orders {
    fn from_env(rank: u32) -> Option<Orders> {
        let kill_at = var("SOAK_RANK_SELF_KILL").and_then(|v| {
            let (r, op) = v.split_once(':')?;
            (r.parse::<u32>().ok()? == rank).then(|| op.parse().ok())?
        });
        Some(Orders {
            dir: PathBuf::from(var("SOAK_RANK_DIR")?),
            seed: number("SOAK_RANK_SEED")?,
            steps: number("SOAK_RANK_STEPS")?,
            limit: Duration::from_secs(number("SOAK_RANK_LIMIT")?),
            wildcards: var("SOAK_RANK_WILDCARDS").is_some(),
            kill_at,
        })
    }
}

/// Run the rank program if this process is a soak rank: its exit code.
pub fn main() -> Option<i32> {
    let rank = number("PMI_RANK")? as u32;
    let orders = Orders::from_env(rank)?;
    let report = Writer::open(&report::path(&orders.dir, rank));
    report.line(format!("pid {}", std::process::id()));
    let on_panic = report.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        on_panic.line(format!("panic {info}"));
        default_hook(info);
    }));
    let (dog, limit) = (report.clone(), orders.limit);
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        dog.line("watchdog".into());
        std::process::exit(99);
    });
    // A silent peer is given up after 5 s, by the message layer and by the modules'
    // flush alike.
    let mut params = vec![
        ("msg_peer_timeout", "5"),
        ("btl_sm_flush_timeout", "5000"),
        ("btl_tcp_flush_timeout", "5000"),
    ];
    if std::env::var_os("SOAK_RANK_OPENIB").is_some() {
        params.push(("btl_openib_flush_timeout", "5000"));
    }
    let comm = match Comm::init(&params) {
        Ok(c) => c,
        Err(e) => {
            report.failed("init-fail", &Failure::of_msg(&e));
            report.line("done".into());
            return Some(1);
        }
    };
    Some(
        Rank {
            comm,
            report,
            me: rank,
            orders,
            ops: 0,
            failures: 0,
            win: None,
            last_put: vec![None; RANKS as usize],
            atomics: None,
        }
        .run(),
    )
}

struct Rank {
    comm: Comm,
    report: Writer,
    me: u32,
    orders: Orders,
    /// Operations started.
    ops: u64,
    failures: u64,
    win: Option<Window>,
    /// Per target: (step, offset, length) of our last completed put there.
    last_put: Vec<Option<(u64, usize, usize)>>,
    atomics: Option<Atomics>,
}

impl Rank {
    fn run(mut self) -> i32 {
        self.setup();
        // The eager limit of the transport between the ranks (sm or tcp).
        let eager = self
            .comm
            .modules()
            .find(|m| m.name() != "self")
            .map_or(16 << 10, |m| m.attributes().eager_limit);
        let seed = self.orders.seed;
        for step in 0..self.orders.steps {
            self.exchange(
                step,
                &Exchange::new(seed, step, eager, self.orders.wildcards),
            );
            let mut rng = Rng::new(seed, step, 1000 + u64::from(self.me));
            if self.win.is_some() && rng.chance(50) {
                self.put(step, &mut rng);
            }
            if self.win.is_some() && rng.chance(40) {
                self.get(&mut rng);
            }
            if self.atomics.is_some() && rng.chance(40) {
                self.atomic(&mut rng);
            }
        }
        self.report.line("done".into());
        self.linger();
        // Registrations go before the transports that hold them.
        drop(self.win.take());
        drop(self.atomics.take());
        match self.comm.finalize() {
            Ok(()) => self.report.line("finalize ok".into()),
            Err(e) => {
                self.report.failed("finalize fail", &Failure::of_msg(&e));
                return 1;
            }
        }
        i32::from(self.failures > 0)
    }

    /// A window, and the areas for atomics: the collectives before the mix.
    fn setup(&mut self) {
        match Window::allocate(&mut self.comm, SLOT * RANKS as usize) {
            Ok(w) => self.win = Some(w),
            Err(e) => self.setup_failed("window", &e),
        }
        match Atomics::exchange(&mut self.comm) {
            Ok(a) => self.atomics = Some(a),
            Err(e) => self.setup_failed("atomics", &e),
        }
    }

    fn setup_failed(&mut self, what: &str, e: &Error) {
        self.failures += 1;
        self.report
            .failed(&format!("setup-fail {what}"), &Failure::of_msg(e));
    }

    /// Number the next operation and write down its start (or die there if chosen).
    fn start(&mut self, kind: &str, peer: u32, step: u64, len: usize) -> u64 {
        self.ops += 1;
        if self.orders.kill_at == Some(self.ops) {
            self.report.line(format!("kill-self {}", self.ops));
            // SAFETY: a signal to ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        self.report.start(self.ops, kind, peer, step, len);
        self.ops
    }

    fn fail(&mut self, op: u64, f: &Failure) {
        self.failures += 1;
        self.report.fail(op, f);
    }

    fn corrupt(&mut self, op: u64, what: &str) {
        self.failures += 1;
        self.report.corrupt(op, what);
    }

    /// This step's exchange: send to `x.to[me]`, receive from whoever sends here.
    fn exchange(&mut self, step: u64, x: &Exchange) {
        let me = self.me as usize;
        let seed = self.orders.seed;
        let dst = x.to[me];
        let src = x.sender_to(self.me);
        let data = payload(seed, step, u64::from(self.me), x.len[me]);
        let want = x.len[src as usize];
        // Room to spare, so a longer message than wanted would show.
        let mut buf = vec![0u8; want + (step as usize % 64)];
        let tag = step as i32;
        let (from, tag_sel) = match x.matching[me] {
            Match::AnySource => (ANY_SOURCE, Some(tag)),
            Match::AnyTag => (Some(src), ANY_TAG),
            Match::SourceAndTag => (Some(src), Some(tag)),
        };
        let rop = self.start("recv", src, step, want);
        let sop = self.start("send", dst, step, data.len());
        let (sent, got) = match x.style[me] {
            Style::Scope => {
                let (mut sent, mut got) = (None, None);
                let scoped = self.comm.scope(|s| {
                    let r = s.irecv(&mut buf, from, tag_sel);
                    sent = Some(s.isend(&data, dst, tag).and_then(|q| s.wait(q)));
                    got = Some(r.and_then(|q| s.wait(q)));
                });
                if let Err(e) = scoped {
                    // Both were waited for inside: the scope has nothing left to end.
                    self.fail(rop, &Failure::of_msg(&e));
                }
                (sent.expect("ran").map(|_| ()), got.expect("ran"))
            }
            Style::PostedThenSend => {
                // SAFETY: `buf` outlives the request, waited for below whatever the
                // send does.
                let r = unsafe {
                    self.comm
                        .irecv_raw(buf.as_mut_ptr(), buf.len(), from, tag_sel)
                };
                let sent = self.comm.send(&data, dst, tag);
                (sent, r.and_then(|q| self.comm.wait(q)))
            }
            Style::SendThenRecv => {
                // SAFETY: `data` outlives the request, waited for below.
                let q = unsafe { self.comm.isend_raw(data.as_ptr(), data.len(), dst, tag) };
                let got = self.comm.recv(&mut buf, from, tag_sel);
                (q.and_then(|q| self.comm.wait(q)).map(|_| ()), got)
            }
        };
        match got {
            Ok(st) if (st.source, st.tag, st.len) != (src, tag, want) => self.corrupt(
                rop,
                &format!(
                    "wanted step {step} from {src} ({want} bytes), got tag {} from {} ({} bytes)",
                    st.tag, st.source, st.len
                ),
            ),
            Ok(_)
                if checksum(&buf[..want])
                    != checksum(&payload(seed, step, u64::from(src), want)) =>
            {
                self.corrupt(rop, &format!("checksum of {want} bytes from {src}"))
            }
            Ok(_) => self.report.ok(rop),
            Err(e) => self.fail(rop, &Failure::of_msg(&e)),
        }
        match sent {
            Ok(()) => self.report.ok(sop),
            Err(e) => self.fail(sop, &Failure::of_msg(&e)),
        }
    }

    /// What origin `me` puts at `t` in `step`.
    fn put_payload(&self, step: u64, t: u32, len: usize) -> Vec<u8> {
        let at = u64::from(self.me * RANKS + t);
        payload(self.orders.seed ^ WINDOW, step, at, len)
    }

    /// Put into our slot of a random target's window: small, around the window's
    /// staging size, or up to the whole slot.
    fn put(&mut self, step: u64, rng: &mut Rng) {
        let t = rng.below(u64::from(RANKS)) as u32;
        let len = match rng.below(4) {
            0 => rng.below(64) as usize + 1,
            1 => (64 << 10) - 8 + rng.below(16) as usize,
            _ => rng.below(SLOT as u64) as usize + 1,
        };
        let off = rng.below((SLOT - len + 1) as u64) as usize;
        let data = self.put_payload(step, t, len);
        let op = self.start("put", t, step, len);
        let win = self.win.as_mut().expect("window");
        match win.put(&mut self.comm, t, self.me as usize * SLOT + off, &data) {
            Ok(()) => {
                self.last_put[t as usize] = Some((step, off, len));
                self.report.ok(op);
            }
            Err(e) => {
                self.last_put[t as usize] = None;
                self.fail(op, &Failure::of_msg(&e));
            }
        }
    }

    /// Get back what we last put at a random target, and compare.
    fn get(&mut self, rng: &mut Rng) {
        let t = rng.below(u64::from(RANKS)) as u32;
        let Some((step, off, len)) = self.last_put[t as usize] else {
            return;
        };
        let op = self.start("get", t, step, len);
        let mut out = vec![0u8; len];
        let win = self.win.as_mut().expect("window");
        match win.get(&mut self.comm, t, self.me as usize * SLOT + off, &mut out) {
            Ok(()) if checksum(&out) == checksum(&self.put_payload(step, t, len)) => {
                self.report.ok(op)
            }
            Ok(()) => self.corrupt(op, &format!("get of the put of step {step} at rank {t}")),
            Err(e) => self.fail(op, &Failure::of_msg(&e)),
        }
    }

    /// An atomic on our word at a random target.
    fn atomic(&mut self, rng: &mut Rng) {
        let t = rng.below(u64::from(RANKS)) as u32;
        let kind = atomics::Kind::random(rng);
        let operand = rng.next() >> 8;
        let op = self.start(kind.name(), t, 0, 8);
        let a = self.atomics.as_mut().expect("atomics");
        match a.apply(&mut self.comm, t, kind, operand) {
            atomics::Outcome::Ok => self.report.ok(op),
            atomics::Outcome::Corrupt(what) => self.corrupt(op, &what),
            atomics::Outcome::Failed(e) => self.fail(op, &Failure::of_btl(&e)),
        }
    }

    /// Progress until every other rank has finished its schedule or is gone: a rank
    /// that left now would fail the operations others still have with it.
    fn linger(&mut self) {
        let dir = self.orders.dir.clone();
        let mut last_look = Instant::now() - Duration::from_secs(1);
        loop {
            self.comm.progress();
            if last_look.elapsed() < Duration::from_millis(10) {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            last_look = Instant::now();
            if (0..RANKS).all(|r| settled(&report::path(&dir, r))) {
                return;
            }
        }
    }
}

/// Whether the rank whose report is at `path` has finished its schedule or is gone.
fn settled(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let pid = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|p| p.parse().ok());
    text.lines().any(|l| l == "done") || pid.is_some_and(|p| !alive(p))
}

/// Whether process `pid` runs (a zombie does not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with(['Z', 'X'])
    })
}
