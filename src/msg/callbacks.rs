//! The receive callbacks the message layer installs in every module: eager messages
//! (and served requests), rendezvous requests, finishes, registrations and parts asked
//! for, cancels and their answers, and peer failures.

use super::protocol::{self, Fin};
use super::served::{Request, SERVED};
use super::state::{lock, Shared, Unexpected};
use super::Result;
use rbtl_btl::{Endpoint, Module, PeerFailure, Received, Tag};
use std::sync::Arc;

/// Install the message layer's receive callbacks on module `mi`, whose endpoints
/// belong to `ranks`.
pub(super) fn register_callbacks(
    m: &mut dyn Module,
    mi: usize,
    ranks: &Arc<[Option<u32>]>,
    state: &Shared,
) -> Result<()> {
    let (st, senders) = (state.clone(), ranks.clone());
    m.register_am(
        protocol::EAGER,
        Box::new(move |m, r: &Received<'_>| {
            let Some(src) = senders.get(r.endpoint.0 as usize).copied().flatten() else {
                return;
            };
            // The header and the payload: one segment, or two when the transport kept
            // the header apart (sm does, to align large payloads).
            let (head, data) = match r.segments {
                [one] => one.split_at(protocol::EAGER_HEADER.min(one.len())),
                [head, data] if head.len() == protocol::EAGER_HEADER => (*head, *data),
                _ => return receive_gathered(&st, m, mi, src, r),
            };
            receive_eager(&st, m, (mi, r.endpoint), src, head, data);
        }),
    )?;
    let from_peer = |m: &mut dyn Module, tag, handle: ControlHandler| {
        on_control(m, mi, tag, ranks, state, handle)
    };
    from_peer(
        m,
        protocol::RTS,
        Box::new(|st, m, route, src, body| {
            let Some(rts) = protocol::Rts::decode(body) else {
                return;
            };
            let mut s = lock(st);
            match s.take_match(m, src, rts.tag, rts.ctx) {
                Some(p) => s.start_get(st, m, route, &p, src, rts),
                None => s.unexpected.push_back(Unexpected::Rts {
                    src,
                    rts: Box::new(rts),
                }),
            }
        }),
    )?;
    from_peer(
        m,
        protocol::EAGER_SYNC,
        Box::new(|st, m, (mi, ep), src, body| {
            let Some((tag, ctx, sreq)) = protocol::decode_sync_header(body) else {
                return;
            };
            let data = &body[protocol::SYNC_HEADER..];
            let mut s = lock(st);
            match s.take_match(m, src, tag, ctx) {
                Some(p) => {
                    s.deliver_eager(&p, src, tag, data);
                    s.ack_sync(m, mi, ep, sreq);
                }
                None => s.keep_unexpected(src, tag, ctx, data, Some(sreq)),
            }
        }),
    )?;
    from_peer(
        m,
        protocol::FIN,
        Box::new(|st, m, route, src, body| {
            let mut s = lock(st);
            match protocol::decode_fin(body) {
                Some((sreq, Fin::Register)) => s.send_handle(m, route, src, sreq),
                Some((sreq, Fin::Taken | Fin::Failed)) => {
                    if let Some(status) = s.reqs.get(sreq).map(|q| q.status) {
                        s.complete(sreq, Ok(status));
                    }
                }
                None => {}
            }
        }),
    )?;
    from_peer(
        m,
        protocol::HANDLE,
        Box::new(|st, m, route, src, body| {
            if let Some(answer) = protocol::decode_handle_message(body) {
                lock(st).handle_arrived(st, m, route, src, answer);
            }
        }),
    )?;
    from_peer(
        m,
        protocol::PART,
        Box::new(|st, m, route, src, body| {
            if let Some(part) = protocol::Part::decode(body) {
                lock(st).write_part(st, m, route, src, part);
            }
        }),
    )?;
    from_peer(
        m,
        protocol::PART_DONE,
        Box::new(|st, m, _, src, body| {
            if let Some(done) = protocol::decode_part_done(body) {
                lock(st).sender_part_done(st, m, src, done);
            }
        }),
    )?;
    from_peer(
        m,
        protocol::CANCEL,
        Box::new(|st, m, route, src, body| {
            if let Some(sreq) = protocol::decode_cancel(body) {
                lock(st).answer_cancel(m, route, src, sreq);
            }
        }),
    )?;
    from_peer(
        m,
        protocol::CANCELLED,
        Box::new(|st, _, _, src, body| {
            if let Some((sreq, dropped)) = protocol::decode_cancelled(body) {
                lock(st).cancel_answered(src, sreq, dropped);
            }
        }),
    )?;
    let (st, peers) = (state.clone(), ranks.clone());
    m.register_error(Box::new(move |event| {
        // The endpoint names the rank here: a bridge's own rank numbers are the
        // launcher's, not this layer's.
        let rank = event
            .endpoint
            .and_then(|ep| peers.get(ep.0 as usize).copied().flatten());
        if let Some(rank) = rank {
            let why = match &event.error {
                rbtl_btl::Error::PeerFailed { why, .. } => why.clone(),
                // A message this layer cannot take (on a tag with no callback, or
                // malformed): the peer does not speak its protocol.
                other => PeerFailure::Protocol(other.to_string()),
            };
            lock(&st).peer_failed(rank, why);
        }
    }));
    Ok(())
}

/// Match an eager message from `src` (its header `head`, then `data`) with a posted
/// receive, or keep it as unexpected. A message in a served context goes to the
/// server instead (answered through `from`, the module and endpoint it came by).
#[inline(always)]
fn receive_eager(
    st: &Shared,
    m: &mut dyn Module,
    from: (usize, Endpoint),
    src: u32,
    head: &[u8],
    data: &[u8],
) {
    let Ok(head) = <&[u8; protocol::EAGER_HEADER]>::try_from(head) else {
        return;
    };
    let (tag, ctx) = protocol::decode_eager_header(head);
    let mut s = lock(st);
    if ctx & SERVED != 0 {
        let request = Request {
            source: src,
            tag,
            ctx,
            body: data,
        };
        return s.serve_eager(m, from.0, from.1, request);
    }
    match s.take_match(m, src, tag, ctx) {
        Some(p) => s.deliver_eager(&p, src, tag, data),
        None => s.keep_unexpected(src, tag, ctx, data, None),
    }
}

/// An eager message that arrived in pieces other than (header, payload): joined first.
#[cold]
#[inline(never)]
fn receive_gathered(st: &Shared, m: &mut dyn Module, mi: usize, src: u32, r: &Received<'_>) {
    let joined = r.joined();
    let (head, data) = joined.split_at(protocol::EAGER_HEADER.min(joined.len()));
    receive_eager(st, m, (mi, r.endpoint), src, head, data);
}

/// What handles a control message of the layer: the state, the module, the route back
/// (module index, endpoint), the sending rank and the message's bytes.
type ControlHandler = Box<dyn Fn(&Shared, &mut dyn Module, (usize, Endpoint), u32, &[u8]) + Send>;

/// Install `handle` for `tag` on module `mi`, whose endpoints belong to `ranks`; a
/// message from an endpoint that names no rank is dropped.
fn on_control(
    m: &mut dyn Module,
    mi: usize,
    tag: Tag,
    ranks: &Arc<[Option<u32>]>,
    state: &Shared,
    handle: ControlHandler,
) -> Result<()> {
    let (st, senders) = (state.clone(), ranks.clone());
    m.register_am(
        tag,
        Box::new(move |m, r: &Received<'_>| {
            if let Some(src) = senders.get(r.endpoint.0 as usize).copied().flatten() {
                handle(&st, m, (mi, r.endpoint), src, &r.joined());
            }
        }),
    )?;
    Ok(())
}
