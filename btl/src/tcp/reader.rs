//! Progress over the links of a `tcp` module: the connections listed for a round, one
//! after another, and on each link its frames, read as needed (a small message costs
//! one `recv`; large put and get data is read straight into place).
//!
//! Every frame but an active message goes to its owner in the [`Engine`]. An active
//! message goes up to the module as a [`Message`] that holds its link's received bytes
//! (the link counts as busy meanwhile, so that a callback that calls progress again
//! leaves it alone) and comes back with [`Reader::delivered`]; the link's next frames
//! are read on the next call.

use super::conn::Role;
use super::engine::Engine;
use super::link::RxBuf;
use super::onesided::Handled;
use super::peer::{endpoint, ConnId};
use super::sink::Sink;
use super::wire::{self, Frame};
use crate::{Endpoint, Tag, MAX_SEGMENTS};
use std::io;

/// A link's received bytes and stream, out of its connection while its frames are
/// handled.
pub struct Taken {
    id: ConnId,
    gen: u64,
    p: usize,
    k: usize,
    rx: RxBuf,
    sink: Option<Sink>,
}

/// An active message for the module to deliver.
pub struct Message {
    /// From.
    pub endpoint: Endpoint,
    /// Its tag.
    pub tag: Tag,
    lens: [u32; MAX_SEGMENTS],
    nseg: usize,
    /// Where its payload starts in the link's bytes.
    payload: usize,
    /// Bytes of the whole frame.
    used: usize,
    link: Taken,
}

impl Message {
    /// Its segments (the first `count` of the array) .
    #[inline]
    pub fn segments(&self) -> ([&[u8]; MAX_SEGMENTS], usize) {
        let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        let bytes = &self.link.rx.data()[self.payload..self.used];
        let mut at = 0;
        for (s, &l) in segs.iter_mut().zip(&self.lens[..self.nseg]) {
            *s = &bytes[at..at + l as usize];
            at += l as usize;
        }
        (segs, self.nseg)
    }
}

/// What the module did with a [`Message`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Taken by its callback.
    Taken,
    /// Taken by the expected receive: progress returns now.
    Filled,
    /// Its callback is running further up the stack: the message waits.
    Wait,
}

/// Where progress is in the links.
#[derive(Default)]
pub struct Reader {
    /// The link of the message last delivered, to go on with.
    current: Option<Taken>,
}

impl Reader {
    /// The next active message of this round (`round`: connections still to look at,
    /// from [`Engine::begin`]), handling every other frame on the way (counted in
    /// `n`); `None` once the round is over.
    pub fn next(&mut self, e: &mut Engine, round: &mut usize, n: &mut usize) -> Option<Message> {
        loop {
            if let Some(t) = self.current.take() {
                if let Some(m) = read_link(e, t, n) {
                    return Some(m);
                }
                continue;
            }
            *round += e.take_extra();
            let listed = if *round > 0 {
                *round -= 1;
                e.net.next_ready()
            } else {
                None
            };
            let Some(listed) = listed else {
                e.end_closing();
                return None;
            };
            let Some((id, gen)) = listed else {
                continue;
            };
            let Some(c) = e.net.conns.get_mut(id) else {
                continue;
            };
            if c.busy {
                c.pending = true;
                e.net.relist(id, gen);
                continue;
            }
            match c.role {
                Role::Accepting { .. } => {
                    *n += e.net.service_accepting(id);
                    e.settle();
                    e.net.relist(id, gen);
                }
                Role::Early { .. } => c.readable = false,
                Role::Attempt(_) => {
                    let (m, up) = e.net.service_attempt(id);
                    *n += m;
                    e.settle();
                    if up {
                        self.current = take(e, id);
                    } else {
                        e.net.relist(id, gen);
                    }
                }
                Role::Link { peer, link } => {
                    if c.writable && !e.net.peers[peer].links[link].queue.is_empty() {
                        e.net.drain(peer, link);
                        e.settle();
                        *n += 1;
                    }
                    self.current = take(e, id);
                }
            }
        }
    }

    /// The module is done with `msg`.
    #[inline]
    pub fn delivered(&mut self, e: &mut Engine, msg: Message, how: Delivery) {
        let mut link = msg.link;
        match how {
            Delivery::Taken => {
                link.rx.consume(msg.used);
                if let Some(other) = self.current.replace(link) {
                    park(e, other, false);
                }
            }
            Delivery::Filled => {
                link.rx.consume(msg.used);
                park(e, link, true);
            }
            Delivery::Wait => park(e, link, true),
        }
    }
}

/// Take link `id`'s bytes out to handle its frames.
#[inline]
fn take(e: &mut Engine, id: ConnId) -> Option<Taken> {
    let c = e.net.conns.get_mut(id)?;
    let Role::Link { peer, link } = c.role else {
        return None;
    };
    c.busy = true;
    c.pending = false;
    Some(Taken {
        id,
        gen: c.gen,
        p: peer,
        k: link,
        rx: std::mem::replace(&mut c.rx, RxBuf::new(0)),
        sink: c.sink.take(),
    })
}

/// Give a link its bytes back (`pending`: frames are left), and list it again if it
/// has work.
#[inline]
fn park(e: &mut Engine, t: Taken, pending: bool) {
    if let Some(c) = e.net.conns.same(t.id, t.gen) {
        c.rx = t.rx;
        c.sink = t.sink;
        c.busy = false;
        c.pending |= pending;
        e.net.relist(t.id, t.gen);
    }
}

/// Handle link `t`'s frames, reading as needed, up to its next active message.
fn read_link(e: &mut Engine, mut t: Taken, n: &mut usize) -> Option<Message> {
    let table = e.regs.view();
    // Err((violation, why)): the peer broke the protocol, or the link closed.
    let outcome: Result<(), (bool, String)> = loop {
        if e.net.conns.same(t.id, t.gen).is_none() {
            // Closed meanwhile (its peer ended): what it held goes with it.
            break Ok(());
        }
        if let Some(sink) = t.sink.take() {
            match stream(e, &mut t, sink) {
                Ok(None) => *n += 1,
                Ok(Some(sink)) => {
                    t.sink = Some(sink);
                    break Ok(());
                }
                Err(why) => break Err((false, why)),
            }
            continue;
        }
        let (frame, used) = match wire::decode(t.rx.data(), &e.limits) {
            Err(wire::Invalid(why)) => break Err((true, format!("protocol error: {why}"))),
            Ok(Some(f)) => f,
            Ok(None) => {
                let Some(c) = e.net.conns.same(t.id, t.gen) else {
                    break Ok(());
                };
                if !c.readable {
                    break Ok(());
                }
                match t.rx.fill(&c.sock, wire::needed(t.rx.data())) {
                    Ok((0, _)) => break Err((false, "the connection closed".into())),
                    Ok((_, full)) => c.read_some(full),
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => c.readable = false,
                    Err(err) => break Err((false, format!("reading: {err}"))),
                }
                continue;
            }
        };
        let handled = match frame {
            Frame::Am {
                tag,
                lens,
                nseg,
                payload,
            } => {
                let at = payload.as_ptr() as usize - t.rx.data().as_ptr() as usize;
                return Some(Message {
                    endpoint: endpoint(t.p),
                    tag,
                    lens,
                    nseg,
                    payload: at,
                    used,
                    link: t,
                });
            }
            Frame::Hello(_) | Frame::HelloAck | Frame::HelloNack => {
                Handled::Violation("a handshake frame on a link that is up")
            }
            other => {
                let done = &mut e.done;
                e.onesided
                    .on_frame(&mut e.net, &table, (t.p, t.k), other, done)
            }
        };
        match handled {
            Handled::Taken => t.rx.consume(used),
            Handled::Stream(sink) => {
                t.rx.consume(used);
                t.sink = Some(sink);
            }
            Handled::Violation(why) => break Err((true, format!("protocol error: {why}"))),
        }
        *n += 1;
        e.settle();
    };
    let p = t.p;
    park(e, t, false);
    match outcome {
        Ok(()) => {}
        Err((true, why)) => e.fail_peer(p, why),
        Err((false, why)) => e.peer_closed(p, why),
    }
    None
}

/// Stream a put's or get's data into place; the sink back while more is to come and
/// the socket has none yet.
fn stream(e: &mut Engine, t: &mut Taken, mut sink: Sink) -> Result<Option<Sink>, String> {
    let table = e.regs.view();
    let id = e.id();
    let Some(c) = e.net.conns.get_mut(t.id) else {
        return Ok(None);
    };
    if !sink.pour(c, &mut t.rx, &table, id)? {
        return Ok(Some(sink));
    }
    if let Some(ack) = sink.answer() {
        e.net.push(t.p, t.k, ack);
        e.settle();
    }
    Ok(None)
}
