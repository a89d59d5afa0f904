//! Served contexts: eager messages that a layer above handles where they arrive
//! instead of matching them with receives, answering each with a message of its
//! own (how a one-sided layer ships an operation to its target to be applied there,
//! as Open MPI's `osc/pt2pt` does its accumulates).
//!
//! A message whose context has [`SERVED`] set goes to the [`Server`] installed with
//! [`Comm::serve`], inside the progress that received it (so at the target's next
//! call into this layer, as any message). The server answers with the bytes of a
//! reply, sent back at once as an eager message with the tag and context it names
//! (its caller receives it as any other message), or asks to be offered the same
//! request again at a later progress ([`Served::Later`]: what it needs is held for
//! now). Requests go in one eager message each: a caller splits larger work.

use super::state::{bump, lock, State};
use super::{protocol, Comm};
use rbtl_btl::{Endpoint, Module};

/// The context bit of served messages.
pub const SERVED: u32 = 1 << 31;

/// A served request as it arrived.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The sender's rank.
    pub source: u32,
    /// The message's tag.
    pub tag: i32,
    /// Its context (with [`SERVED`]).
    pub ctx: u32,
    /// Its payload.
    pub body: &'a [u8],
}

/// What a server did with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Served {
    /// Send the reply it wrote to the request's source with this tag and context.
    Reply {
        /// The reply's tag.
        tag: i32,
        /// Its context (a receive's: without [`SERVED`]).
        ctx: u32,
    },
    /// Offer the same request again at a later progress.
    Later,
    /// Nothing to answer: the request was malformed (logged with the reason).
    Dropped(String),
}

/// The handler of served requests: it writes the reply into the vector (empty when
/// called) and says what to do with it.
pub type Server = Box<dyn FnMut(Request<'_>, &mut Vec<u8>) -> Served>;

/// A request that asked to be offered again.
pub struct Later {
    module: usize,
    endpoint: Endpoint,
    source: u32,
    tag: i32,
    ctx: u32,
    body: Vec<u8>,
}

impl Comm {
    /// Install the handler of messages whose context has [`SERVED`] set (replacing
    /// any). Until one is installed such messages are dropped.
    pub fn serve(&mut self, server: Server) {
        lock(&self.state).server = Some(server);
    }

    /// Offer every request that asked to wait to the server again, in order of
    /// arrival: the number answered.
    #[cold]
    #[inline(never)]
    pub(super) fn retry_later(&mut self) -> usize {
        let mut s = lock(&self.state);
        let mut answered = 0;
        for _ in 0..s.later.len() {
            let Some(l) = s.later.pop_front() else {
                break;
            };
            bump(&self.signals.deferred, -1);
            if s.failed.contains_key(&l.source) {
                continue;
            }
            let m = self.modules[l.module].as_mut();
            let request = Request {
                source: l.source,
                tag: l.tag,
                ctx: l.ctx,
                body: &l.body,
            };
            match s.answer(m, l.module, l.endpoint, request) {
                Served::Later => {
                    bump(&self.signals.deferred, 1);
                    s.later.push_back(l);
                }
                _ => answered += 1,
            }
        }
        answered
    }
}

impl State {
    /// A served request from `source` that arrived on `module` from `endpoint`:
    /// answered now, or kept to be offered again.
    #[cold]
    #[inline(never)]
    pub fn serve_eager(
        &mut self,
        m: &mut dyn Module,
        module: usize,
        endpoint: Endpoint,
        request: Request<'_>,
    ) {
        if self.answer(m, module, endpoint, request) == Served::Later {
            bump(&self.signals.deferred, 1);
            self.later.push_back(Later {
                module,
                endpoint,
                source: request.source,
                tag: request.tag,
                ctx: request.ctx,
                body: request.body.to_vec(),
            });
        }
    }

    /// Hand `request` to the server and send its reply.
    fn answer(
        &mut self,
        m: &mut dyn Module,
        module: usize,
        endpoint: Endpoint,
        request: Request<'_>,
    ) -> Served {
        let Some(mut server) = self.server.take() else {
            tracing::warn!(
                source = request.source,
                ctx = request.ctx,
                "a served message arrived where nothing serves: dropped"
            );
            return Served::Dropped("nothing serves here".into());
        };
        let mut reply = std::mem::take(&mut self.reply);
        reply.clear();
        let served = server(request, &mut reply);
        self.server = Some(server);
        match &served {
            Served::Reply { tag, ctx } => {
                let header = protocol::eager_header(*tag, *ctx);
                if let Err(e) =
                    self.send_or_defer(m, module, endpoint, protocol::EAGER, &header, &reply)
                {
                    tracing::warn!(%e, source = request.source, "could not send a served reply");
                }
            }
            Served::Dropped(why) => {
                tracing::warn!(source = request.source, why, "a served request dropped");
            }
            Served::Later => {}
        }
        self.reply = reply;
        served
    }
}
