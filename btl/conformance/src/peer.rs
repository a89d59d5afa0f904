//! The side of a pair under test that a check acts through, and the exchange over
//! the transport itself through which the two sides meet.

use crate::retry::{idle_progress, retry, send_all};
use rbtl_btl::{DesFlags, DescriptorRequest, Endpoint, Module, Received, Tag};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The tag the suite's own exchange uses; [`all_tags`](crate::all_tags) covers every
/// other one but [`NOBODY_TAG`].
pub const EXCHANGE_TAG: Tag = Tag(0xff);
/// The tag that no check registers ([`unregistered_tag`](crate::unregistered_tag) sends
/// on it).
pub const NOBODY_TAG: Tag = Tag(0xfe);

/// Exchange messages received, with the endpoint they came from.
type Inbox = Arc<Mutex<Vec<(Endpoint, Vec<u8>)>>>;

/// Registers on `tag` a callback that keeps `kept(message)` of each message received
/// on it, in the order they arrive: what it has kept so far.
pub(crate) fn collect<T: Send + 'static>(
    module: &mut dyn Module,
    tag: Tag,
    kept: impl Fn(&Received<'_>) -> T + Send + 'static,
) -> Arc<Mutex<Vec<T>>> {
    let list: Arc<Mutex<Vec<T>>> = Arc::default();
    let l = list.clone();
    module
        .register_am(tag, Box::new(move |_, r| l.lock().unwrap().push(kept(r))))
        .unwrap_or_else(|e| panic!("registering tag {tag}: {e:?}"));
    list
}

/// One side of a pair under test, with the exchange the checks meet through: bytes
/// sent to the peer on [`EXCHANGE_TAG`], progressing until the peer's arrive (for
/// `self`, the peer is this process and gets its own bytes back).
pub struct Peer<'a> {
    /// The module under test.
    pub module: &'a mut dyn Module,
    /// The endpoint of the peer.
    pub endpoint: Endpoint,
    inbox: Inbox,
}

impl<'a> Peer<'a> {
    /// Set up the exchange on `module` towards `endpoint`.
    pub fn new(module: &'a mut dyn Module, endpoint: Endpoint) -> Peer<'a> {
        let inbox = collect(module, EXCHANGE_TAG, |r| (r.endpoint, r.to_vec()));
        Peer {
            module,
            endpoint,
            inbox,
        }
    }

    pub(crate) fn swap(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.send_exchange(bytes);
        let inbox = self.inbox.clone();
        let ep = self.endpoint;
        self.wait("the peer's exchange", || {
            inbox.lock().unwrap().iter().any(|(e, _)| *e == ep)
        });
        self.take_exchange().expect("a message from the peer")
    }

    /// Send `bytes` to the peer's exchange (progressing only until they are out).
    pub(crate) fn send_exchange(&mut self, bytes: &[u8]) {
        let ep = self.endpoint;
        let request = DescriptorRequest::new(ep, 0).flagged(DesFlags::OWNERSHIP);
        let des = retry(self, "exchange", |m| m.prepare_src(&request, &[bytes]));
        assert_eq!(des.len(), bytes.len(), "exchange fits one fragment");
        send_all(self, des, EXCHANGE_TAG);
    }

    /// The peer's oldest exchange message that has arrived, if any.
    pub(crate) fn take_exchange(&mut self) -> Option<Vec<u8>> {
        let mut v = self.inbox.lock().unwrap();
        let i = v.iter().position(|(e, _)| *e == self.endpoint)?;
        Some(v.remove(i).1)
    }

    pub(crate) fn barrier(&mut self) {
        self.swap(&[]);
    }

    /// Progress until `done` holds, yielding the processor while nothing happens (the
    /// peer may share it); a hang guard fails the check after 60 s of it.
    pub(crate) fn wait(&mut self, what: &str, mut done: impl FnMut() -> bool) {
        let start = Instant::now();
        while !done() {
            idle_progress(self.module);
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{}: still waiting for {what} after 60 s",
                self.module.name()
            );
        }
    }
}
