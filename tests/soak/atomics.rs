//! 64-bit atomics between the ranks, through the BTL module that routes each pair (the
//! message layer offers none): every rank registers one word per origin, which that
//! origin alone changes, so each origin knows what its fetches must return.

use crate::schedule::{Rng, RANKS};
use rbtl::btl::{
    self, Access, AtomicKind, AtomicOp, Endpoint, Local, MemHandle, Order, Remote, RemoteAtomic,
    RemoteHandle,
};
use rbtl::msg::{Comm, Error};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Tag of the exchange of areas (steps use their number as the tag).
const SETUP_TAG: i32 = 1 << 30;

/// What an atomic does to our word at its target.
#[derive(Clone, Copy)]
pub enum Kind {
    FetchAdd,
    /// Compare-and-swap with the value the word has.
    Swap,
    /// Compare-and-swap with a value it has not: nothing changes.
    SwapMiss,
    /// Add without fetching (checked by the next fetch).
    Add,
}

impl Kind {
    pub fn random(rng: &mut Rng) -> Kind {
        [Kind::FetchAdd, Kind::Swap, Kind::SwapMiss, Kind::Add][rng.below(4) as usize]
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::FetchAdd => "fetch-add",
            Kind::Swap => "cswap",
            Kind::SwapMiss => "cswap-miss",
            Kind::Add => "add",
        }
    }
}

/// How an atomic ended.
pub enum Outcome {
    Ok,
    /// It completed, but fetched another value than the word must have held.
    Corrupt(String),
    Failed(btl::Error),
}

/// Where our word lies at a target.
#[derive(Clone, Copy)]
struct Target {
    module: usize,
    endpoint: Endpoint,
    word: u64,
    handle: RemoteHandle,
}

/// This rank's area (one word per origin), its registrations, and what it knows of
/// its own word at every target.
pub struct Atomics {
    /// Per module index: registrations of `area` and `result` (declared first: dropped
    /// before them).
    handles: HashMap<usize, (MemHandle, MemHandle)>,
    /// Held for its registrations: peers change it through the transport.
    _area: Box<[u64]>,
    /// Where fetched values land.
    result: Box<[u64]>,
    targets: Vec<Target>,
    /// Per target: the value of our word there, if known (not after a failure).
    known: Vec<Option<u64>>,
}

impl Atomics {
    /// Register an area with each module and tell every rank where ours is in the
    /// module that reaches it from there (a collective call).
    pub fn exchange(comm: &mut Comm) -> Result<Atomics, Error> {
        let me = comm.rank();
        let mut area = vec![0u64; RANKS as usize].into_boxed_slice();
        let mut result = vec![0u64; 1].into_boxed_slice();
        let procs: Vec<btl::Proc> = (0..RANKS)
            .map(|rank| btl::Proc {
                rank,
                node: String::new(),
            })
            .collect();
        let mut handles = HashMap::new();
        let mut endpoints = Vec::new();
        for (mi, m) in comm.modules().enumerate() {
            // Every rank is known already: this hands back the endpoints made at init.
            endpoints.push(m.add_procs(&procs, &mut btl::SingletonModex::new())?);
            // SAFETY: both boxes move into the `Atomics` returned, which drops these
            // handles (field order) before them; peers reach the area only through the
            // transport, and `result` is read only after a completion.
            let registered = unsafe {
                (
                    m.register_mem(
                        None,
                        area.as_mut_ptr() as usize,
                        area.len() * 8,
                        Access::all(),
                    )?,
                    m.register_mem(None, result.as_mut_ptr() as usize, 8, Access::all())?,
                )
            };
            handles.insert(mi, registered);
        }
        let names: Vec<String> = comm.modules().map(|m| m.name().to_string()).collect();
        let route = |comm: &Comm, t: u32| {
            let name = comm.transport_to(t).expect("a route to every rank");
            names
                .iter()
                .position(|n| n == name)
                .expect("a module of that name")
        };
        // To each rank: our area's address and its handle in the module routing it here.
        let blobs: Vec<Vec<u8>> = (0..RANKS)
            .map(|t| {
                let mut b = (area.as_ptr() as u64).to_le_bytes().to_vec();
                b.extend_from_slice(handles[&route(comm, t)].0.remote().as_bytes());
                b
            })
            .collect();
        let mut inbox = vec![vec![0u8; 512]; RANKS as usize];
        let mut lens = vec![0usize; RANKS as usize];
        comm.scope(|s| -> Result<(), Error> {
            let mut recvs = Vec::new();
            for (t, buf) in inbox.iter_mut().enumerate() {
                recvs.push(s.irecv(buf, Some(t as u32), Some(SETUP_TAG))?);
            }
            for (t, b) in blobs.iter().enumerate() {
                s.isend(b, t as u32, SETUP_TAG)?;
            }
            for (t, req) in recvs.into_iter().enumerate() {
                lens[t] = s.wait(req)?.len;
            }
            Ok(())
        })??;
        let mut targets = Vec::new();
        for (t, b) in inbox.iter().enumerate() {
            let module = route(comm, t as u32);
            let endpoint = endpoints[module][t].expect("the routing module reaches the rank");
            let addr = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
            targets.push(Target {
                module,
                endpoint,
                word: addr + 8 * u64::from(me),
                handle: RemoteHandle::from_bytes(&b[8..lens[t]])?,
            });
        }
        Ok(Atomics {
            handles,
            _area: area,
            result,
            targets,
            known: vec![Some(0); RANKS as usize],
        })
    }

    /// Apply `kind` with `operand` to our word at rank `t`, progressing `comm` until it
    /// completes, and check what it fetched.
    pub fn apply(&mut self, comm: &mut Comm, t: u32, kind: Kind, operand: u64) -> Outcome {
        let target = self.targets[t as usize];
        let known = self.known[t as usize];
        let (ep, remote, rh) = (target.endpoint, target.word, &target.handle);
        let local = self.result.as_mut_ptr() as usize;
        let lh = &self.handles[&target.module].1;
        let done: Arc<Mutex<Option<btl::Result<()>>>> = Arc::default();
        let d = done.clone();
        let cb: btl::RdmaCallback = Box::new(move |_, c| {
            *d.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.status);
        });
        let compare = known.unwrap_or(0) ^ u64::from(matches!(kind, Kind::SwapMiss));
        let (add, any) = (AtomicOp::Add, Order::ANY);
        let m = comm.modules().nth(target.module).expect("module");
        let started = match kind {
            Kind::FetchAdd => m.atomic(
                &RemoteAtomic::new(ep, Remote::new(remote, rh), AtomicKind::Op(add, operand))
                    .fetching(Local::new(local, lh))
                    .ordered(any),
                cb,
            ),
            Kind::Swap | Kind::SwapMiss => m.atomic(
                &RemoteAtomic::new(
                    ep,
                    Remote::new(remote, rh),
                    AtomicKind::CompareSwap {
                        compare,
                        value: operand,
                    },
                )
                .fetching(Local::new(local, lh))
                .ordered(any),
                cb,
            ),
            Kind::Add => m.atomic(
                &RemoteAtomic::new(ep, Remote::new(remote, rh), AtomicKind::Op(add, operand))
                    .ordered(any),
                cb,
            ),
        };
        // The module's flush waits for the completion (it fails with a peer failure, or
        // with a peer timeout after the module's flush timeout when the target answers
        // nothing) and runs its callback before it returns.
        let status = started.and_then(|()| m.flush(Some(ep))).and_then(|()| {
            done.lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .unwrap_or_else(|| {
                    Err(btl::Error::NotAvailable(format!(
                        "flush of rank {t} returned before the atomic's callback ran"
                    )))
                })
        });
        let k = &mut self.known[t as usize];
        if let Err(e) = status {
            *k = None;
            return Outcome::Failed(e);
        }
        // SAFETY: the completion has run: the word holds the fetched value.
        let old = unsafe { std::ptr::read_volatile(self.result.as_ptr()) };
        let Some(v) = *k else {
            return Outcome::Ok;
        };
        let (expect_old, new) = match kind {
            Kind::FetchAdd => (Some(v), v.wrapping_add(operand)),
            Kind::Swap => (Some(v), operand),
            Kind::SwapMiss => (Some(v), v),
            Kind::Add => (None, v.wrapping_add(operand)),
        };
        *k = Some(new);
        match expect_old {
            Some(v) if v != old => Outcome::Corrupt(format!(
                "{} at rank {t} fetched {old:#x}, not {v:#x}",
                kind.name()
            )),
            _ => Outcome::Ok,
        }
    }
}
