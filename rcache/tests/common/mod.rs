//! A counting, checking registrar shared by the integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use rbtl_rcache::{Access, Registrar, RegistrarError};

pub const PS: usize = 4096;

/// Options for caches over made-up addresses, which no memory monitor can watch: the
/// tests report freed memory themselves.
pub const UNMONITORED: rbtl_rcache::Options = rbtl_rcache::Options {
    leave_pinned: true,
    max_pinned_bytes: 0,
    max_entries: 0,
    monitor: false,
};

/// Handle of a test registration.
#[derive(Debug)]
pub struct TestHandle {
    pub seq: u64,
    pub base: usize,
    pub len: usize,
    pub access: Access,
}

#[derive(Default)]
struct Inner {
    live: HashMap<u64, (usize, usize, Access)>,
    pinned: usize,
    oor_above: Option<usize>,
    registers: u64,
    deregisters: u64,
    dereg_order: Vec<u64>,
}

/// Keeps the set of live registrations, panics on double or unknown
/// deregistration, can refuse with OutOfResources past a pinned total, and
/// numbers registrations with a strictly increasing sequence (from 1).
///
/// It stands for a device's registrar (it says it pins pages, so a cache asking for
/// the monitor would follow it) but asks for no `MADV_DONTFORK`: its ranges are made
/// up, or the test's own heap.
#[derive(Default)]
pub struct TestRegistrar {
    inner: Mutex<Inner>,
    seq: AtomicU64,
}

impl TestRegistrar {
    pub fn new() -> Self {
        Self::default()
    }
    /// Register fails with OutOfResources when pinned + len would exceed `limit`.
    pub fn with_oor_above(limit: usize) -> Self {
        let r = Self::default();
        r.inner.lock().unwrap().oor_above = Some(limit);
        r
    }
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Last sequence number handed out (0 if none).
    pub fn current_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }
    pub fn is_live(&self, seq: u64) -> bool {
        self.inner().live.contains_key(&seq)
    }
    pub fn live_count(&self) -> usize {
        self.inner().live.len()
    }
    pub fn pinned(&self) -> usize {
        self.inner().pinned
    }
    pub fn registers(&self) -> u64 {
        self.inner().registers
    }
    pub fn deregisters(&self) -> u64 {
        self.inner().deregisters
    }
    /// Sequence numbers in the order they were deregistered.
    pub fn dereg_order(&self) -> Vec<u64> {
        self.inner().dereg_order.clone()
    }
}

impl Registrar for TestRegistrar {
    type Handle = TestHandle;

    fn register(
        &self,
        base: usize,
        len: usize,
        access: Access,
    ) -> Result<TestHandle, RegistrarError> {
        assert_eq!(base % PS, 0, "cache passed an unaligned base {base:#x}");
        assert!(
            len > 0 && len % PS == 0,
            "cache passed an unaligned length {len}"
        );
        let mut g = self.inner();
        if let Some(limit) = g.oor_above {
            if g.pinned + len > limit {
                return Err(RegistrarError::OutOfResources(format!(
                    "{} + {len} > {limit}",
                    g.pinned
                )));
            }
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        g.live.insert(seq, (base, len, access));
        g.pinned += len;
        g.registers += 1;
        Ok(TestHandle {
            seq,
            base,
            len,
            access,
        })
    }

    fn deregister(&self, h: TestHandle) {
        let mut g = self.inner();
        let rec = g.live.remove(&h.seq);
        assert_eq!(
            rec,
            Some((h.base, h.len, h.access)),
            "double or unknown deregistration of seq {}",
            h.seq
        );
        g.pinned -= h.len;
        g.deregisters += 1;
        g.dereg_order.push(h.seq);
    }

    fn pins_pages(&self) -> bool {
        true
    }

    fn keep_from_children(&self) -> bool {
        false
    }
}

/// A [`TestRegistrar`] the test keeps a reference to, to look at it after the cache is
/// gone.
pub struct Shared(pub Arc<TestRegistrar>);

impl Registrar for Shared {
    type Handle = TestHandle;
    fn register(&self, b: usize, l: usize, a: Access) -> Result<TestHandle, RegistrarError> {
        self.0.register(b, l, a)
    }
    fn deregister(&self, h: TestHandle) {
        self.0.deregister(h)
    }
    fn pins_pages(&self) -> bool {
        self.0.pins_pages()
    }
    fn keep_from_children(&self) -> bool {
        self.0.keep_from_children()
    }
}
