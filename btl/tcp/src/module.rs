//! The `tcp` module: the contract's operations, handed to the [`Engine`] below, and
//! the user's side of progress: active messages (from the [`Reader`]) to their tag's
//! callback or the expected receive, completions to theirs, failures to the error
//! callback. Every callback gets the module itself, so they all run from here.

use crate::engine::Engine;
use crate::interfaces::Interface;
use crate::reader::{Delivery, Message, Reader};
use crate::sockets::LinkBytes;
use crate::{Refused, Settings, NAME};
use rbtl_btl::transport_kit::FlushWatch;
use rbtl_btl::transport_kit::{run_done, Done};
use rbtl_btl::transport_kit::{AmTable, ExpectedSlot};
use rbtl_btl::{
    ActiveMessage, AmCallback, Attributes, Descriptor, DescriptorRequest, Endpoint, Error,
    ErrorCallback, MemHandle, Modex, Module, ModuleId, Proc, RdmaCallback, Received, RegRequest,
    RemoteAtomic, Result, SendResult, SendiOutcome, Tag, Transfer,
};
use std::time::{Duration, Instant};

/// Largest put or get chunk a receiver takes (a protocol bound, above any setting).
pub const MAX_CHUNK: usize = 16 << 20;

/// The `tcp` module.
pub struct TcpModule {
    attrs: Attributes,
    engine: Engine,
    reader: Reader,
    am: AmTable,
    expected: ExpectedSlot,
    error_cb: Option<ErrorCallback>,
    /// How long `flush` waits for peers that answer nothing.
    flush_timeout: Duration,
}

impl TcpModule {
    /// Listen on every address of `interfaces` and publish them in the modex.
    pub fn new(
        attrs: Attributes,
        settings: Settings,
        interfaces: &[Interface],
        modex: &mut dyn Modex,
    ) -> Result<TcpModule> {
        Ok(TcpModule {
            flush_timeout: settings.flush_timeout,
            engine: Engine::new(&attrs, settings, interfaces, modex)?,
            attrs,
            reader: Reader::default(),
            am: AmTable::default(),
            expected: ExpectedSlot::default(),
            error_cb: None,
        })
    }

    /// Connections closed before they were trusted, by reason.
    pub fn refused(&self) -> Refused {
        self.engine.refused()
    }

    /// The addresses this module listens on.
    pub fn listening(&self) -> Vec<std::net::SocketAddr> {
        self.engine.net.listening()
    }

    /// How many links reach `endpoint`, and how many of them are up.
    pub fn links(&self, endpoint: Endpoint) -> Option<(usize, usize)> {
        self.engine.links(endpoint)
    }

    /// What the kernel counts (`TCP_INFO`) of each link to `endpoint` that is up:
    /// addresses, bytes sent and acknowledged, bytes received; `None` for an unknown
    /// endpoint.
    pub fn link_bytes(&self, endpoint: Endpoint) -> Option<Vec<std::io::Result<LinkBytes>>> {
        self.engine.link_bytes(endpoint)
    }

    /// An active message: to the expected receive, or its tag's callback.
    #[inline]
    fn deliver(&mut self, msg: &Message) -> Delivery {
        let (segs, nseg) = msg.segments();
        let segs = &segs[..nseg];
        // SAFETY: the posted buffer is valid as `Module::expect` requires.
        if self.expected.is_posted() && unsafe { self.expected.fill(msg.endpoint, msg.tag, segs) } {
            return Delivery::Filled;
        }
        let Some(mut cb) = self.am.take(msg.tag) else {
            if self.am.is_registered(msg.tag) {
                return Delivery::Wait;
            }
            let why = "a message arrived for it, but no receive callback is registered; dropped";
            let error = Error::BadTag { tag: msg.tag, why };
            self.engine.report(Some(msg.endpoint.0 as usize), error);
            return Delivery::Taken;
        };
        cb(
            self,
            &Received {
                endpoint: msg.endpoint,
                tag: msg.tag,
                segments: segs,
            },
        );
        self.am.restore(msg.tag, cb);
        Delivery::Taken
    }

    /// Run the callbacks of what is done; how many.
    fn run_done(&mut self) -> usize {
        run_done(
            self,
            |m| &mut m.engine.done,
            |m, d| m.engine.recycle(d),
            |m, event| match &mut m.error_cb {
                Some(cb) => cb(event),
                None => tracing::error!(?event, "tcp"),
            },
        )
    }

    /// Read the links and deliver what they bring; the events handled, and whether
    /// the expected receive was filled (progress returns at once then).
    #[inline]
    fn read(&mut self) -> (usize, bool) {
        let (mut round, mut n) = self.engine.begin();
        while let Some(msg) = self.reader.next(&mut self.engine, &mut round, &mut n) {
            let how = self.deliver(&msg);
            self.reader.delivered(&mut self.engine, msg, how);
            match how {
                Delivery::Taken => n += 1,
                // The caller learns of it before any later message is delivered.
                Delivery::Filled => return (n + 1, true),
                Delivery::Wait => {}
            }
        }
        (n, false)
    }
}

impl Module for TcpModule {
    fn name(&self) -> &str {
        NAME
    }

    fn id(&self) -> ModuleId {
        self.engine.id()
    }

    fn attributes(&self) -> &Attributes {
        &self.attrs
    }

    fn add_procs(
        &mut self,
        procs: &[Proc],
        modex: &mut dyn Modex,
    ) -> Result<Vec<Option<Endpoint>>> {
        self.engine.add_procs(procs, modex)
    }

    fn del_procs(&mut self, endpoints: &[Endpoint]) -> Result<()> {
        self.engine.del_procs(endpoints)
    }

    fn register_am(&mut self, tag: Tag, callback: AmCallback) -> Result<()> {
        self.am.register(tag, callback)
    }

    fn register_error(&mut self, callback: ErrorCallback) {
        self.error_cb = Some(callback);
    }

    unsafe fn register(&mut self, request: &RegRequest) -> Result<MemHandle> {
        // SAFETY: forwarded contract.
        unsafe { self.engine.register(&self.attrs, request) }
    }

    fn alloc(&mut self, request: &DescriptorRequest) -> Result<Descriptor> {
        self.engine.alloc(request)
    }

    fn free(&mut self, descriptor: Descriptor) -> Result<()> {
        self.engine.free(descriptor)
    }

    fn send(&mut self, endpoint: Endpoint, descriptor: Descriptor, tag: Tag) -> SendResult {
        self.engine.send(endpoint, descriptor, tag)
    }

    #[inline]
    fn sendi(&mut self, m: &ActiveMessage<'_>) -> Result<SendiOutcome> {
        m.check(self.attrs.max_send_size)?;
        self.engine.sendi(m)?;
        Ok(SendiOutcome::Sent)
    }

    fn put(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        op.check_limits(&self.attrs, true)?;
        self.engine.transfer(op, true, callback)
    }

    fn get(&mut self, op: &Transfer<'_>, callback: RdmaCallback) -> Result<()> {
        op.check_limits(&self.attrs, false)?;
        self.engine.transfer(op, false, callback)
    }

    fn atomic(&mut self, op: &RemoteAtomic<'_>, callback: RdmaCallback) -> Result<()> {
        self.engine.atomic(op, callback)
    }

    /// Waits for the answers to every operation towards `endpoint` (or all), for as
    /// long as the peers it waits for answer; once every one of them has sent none for
    /// `btl_tcp_flush_timeout` (a stopped or hung process, whose kernel still
    /// acknowledges our bytes), [`Error::PeerTimeout`] names them and their operations
    /// stay pending.
    fn flush(&mut self, endpoint: Option<Endpoint>) -> Result<()> {
        let mut watch = FlushWatch::new(self.flush_timeout);
        let mut outcome = Ok(());
        while self.engine.rdma_pending(endpoint)? {
            let busy = self.progress() > 0;
            if !busy {
                // The peer serving the operation may need this processor.
                std::thread::yield_now();
            }
            if watch.due(busy) {
                if let Some(e) = self
                    .engine
                    .silent_peers(endpoint, &mut watch, Instant::now())
                {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // Completed operations' callbacks run before flush returns.
        while self.engine.done.iter().any(|d| matches!(d, Done::Rdma(..))) {
            self.run_done();
        }
        outcome
    }

    fn expected_slot(&mut self) -> Option<&mut ExpectedSlot> {
        Some(&mut self.expected)
    }

    fn expects_from(&self, endpoint: Endpoint) -> bool {
        self.engine.known(endpoint)
    }

    #[inline]
    fn progress(&mut self) -> usize {
        let (mut n, filled) = self.read();
        if filled {
            return n;
        }
        if !self.engine.done.is_empty() {
            n += self.run_done();
        }
        if self.engine.report_closed(n > 0) > 0 {
            n += self.run_done();
        }
        n
    }
}

impl Drop for TcpModule {
    /// Frames still queued (a last message sent just before the end) go out first, for
    /// as long as their peers take them, at most a few seconds.
    fn drop(&mut self) {
        // No callback of the user's runs from here on: messages that still arrive are
        // dropped.
        self.am = AmTable::default();
        self.expected.cancel();
        self.error_cb = None;
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.engine.net.frames_waiting() {
            if Instant::now() >= deadline {
                tracing::warn!("tcp: frames still queued at the end are dropped");
                break;
            }
            if self.read().0 == 0 {
                std::thread::yield_now();
            }
        }
    }
}
