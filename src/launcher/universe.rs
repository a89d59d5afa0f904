//! Every job a launcher runs: the first, and those its ranks spawn (PMI-1's
//! `mcmd=spawn`). Each has its own key-value space and barrier ([`Shared`]); the
//! launcher numbers all their ranks in one sequence, a spawned job's after those
//! started before it, and a rank may reach another job's key-value space by name.

use super::server::{RankPmi, Shared};
use crate::pmi::spawn::Segment;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// A spawn for the job loop to carry out, and where its answer goes: the new job's
/// key-value space and where its ranks start, or why it failed.
pub(super) struct SpawnRequest {
    pub segments: Vec<Segment>,
    pub reply: Sender<Result<(String, u32), String>>,
}

/// The launcher's jobs.
pub(super) struct Universe {
    jobs: Mutex<Vec<Weak<Shared>>>,
    /// The job loop, which starts spawned jobs; `None`: spawning is refused.
    spawner: Mutex<Option<Sender<SpawnRequest>>>,
    /// Published names (PMI-1's `publish_name`, MPI's `MPI_Publish_name`): a service's
    /// port, for every job of the launcher.
    names: Mutex<BTreeMap<String, String>>,
    /// The processes its jobs may number (PMI's `get_universe_size`; 0: unset).
    size: AtomicU32,
}

/// Most names the launcher keeps at once (a bound on what ranks can make it hold).
const NAMES_MAX: usize = 4096;

impl Universe {
    /// No jobs yet, no spawning.
    pub fn new() -> Arc<Universe> {
        Arc::new(Universe {
            jobs: Mutex::new(Vec::new()),
            spawner: Mutex::new(None),
            names: Mutex::new(BTreeMap::new()),
            size: AtomicU32::new(0),
        })
    }

    /// Set the processes its jobs may number.
    pub fn set_size(&self, n: u32) {
        self.size.store(n, Ordering::Relaxed);
    }

    /// The processes its jobs may number, if set.
    pub fn size(&self) -> Option<u32> {
        Some(self.size.load(Ordering::Relaxed)).filter(|&n| n > 0)
    }

    /// Add `job`.
    pub fn join(&self, job: &Arc<Shared>) {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::downgrade(job));
    }

    /// Let spawn requests go to `to` (the job loop).
    pub fn accept_spawns(&self, to: Sender<SpawnRequest>) {
        *self.spawner.lock().unwrap_or_else(|e| e.into_inner()) = Some(to);
    }

    /// Refuse spawns from now on (the job is ending).
    pub fn refuse_spawns(&self) {
        *self.spawner.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn jobs(&self) -> Vec<Arc<Shared>> {
        self.jobs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// Publish `port` under `service`, unless the service has a port already.
    pub fn publish(&self, service: &str, port: &str) -> Result<(), &'static str> {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if names.contains_key(service) {
            return Err("service_already_published");
        }
        if names.len() >= NAMES_MAX {
            return Err("too_many_names");
        }
        names.insert(service.to_string(), port.to_string());
        Ok(())
    }

    /// Withdraw `service`: whether it was published.
    pub fn unpublish(&self, service: &str) -> bool {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.remove(service).is_some()
    }

    /// The port published under `service`.
    pub fn lookup(&self, service: &str) -> Option<String> {
        let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        names.get(service).cloned()
    }

    /// The job whose key-value space is `kvsname`.
    pub fn job_of_kvs(&self, kvsname: &str) -> Option<Arc<Shared>> {
        self.jobs().into_iter().find(|j| j.kvsname() == kvsname)
    }

    /// The job of rank `global` (the launcher's numbering), and its rank there.
    pub fn job_of(&self, global: u32) -> Option<(Arc<Shared>, u32)> {
        self.jobs().into_iter().find_map(|j| {
            let (base, size) = j.span();
            (base..base + size)
                .contains(&global)
                .then(|| (j, global - base))
        })
    }

    /// What rank `global` has done with PMI.
    pub fn rank_pmi(&self, global: u32) -> RankPmi {
        self.job_of(global)
            .map(|(j, r)| j.rank_pmi(r))
            .unwrap_or_default()
    }

    /// The ranks (the launcher's numbering) waiting in a barrier of the job of
    /// `global`.
    pub fn barrier_waiters_with(&self, global: u32) -> Vec<u32> {
        match self.job_of(global) {
            Some((j, _)) => {
                let base = j.span().0;
                j.barrier_waiters().into_iter().map(|r| base + r).collect()
            }
            None => Vec::new(),
        }
    }

    /// Every job's barrier waiters are woken and refused, and spawns too.
    pub fn shut_down(&self) {
        self.refuse_spawns();
        for j in self.jobs() {
            j.shut_down();
        }
    }

    /// Have the job loop start `segments` for a rank of `job`: the new job's
    /// key-value space and base, or why not. Waits for the answer while the job
    /// runs.
    pub fn spawn(&self, segments: Vec<Segment>, job: &Shared) -> Result<(String, u32), String> {
        let (tx, rx) = mpsc::channel();
        let sent = match &*self.spawner.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(to) => to
                .send(SpawnRequest {
                    segments,
                    reply: tx,
                })
                .is_ok(),
            None => false,
        };
        if !sent {
            return Err("this launcher does not spawn now (the job is ending)".into());
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(answer) => return answer,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err("the launcher ended the job".into())
                }
                Err(mpsc::RecvTimeoutError::Timeout) if job.is_shut_down() => {
                    return Err("the launcher ended the job".into())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}
