//! Progress over the links of a `tcp` module: the connections listed for a round, one
//! after another, and on each link its frames, read as needed (a small message costs
//! one `recv`; large put and get data is read straight into place).
//!
//! Every frame but an active message goes to its owner in the [`Engine`]. An active
//! message goes up to the module as a [`Message`] that holds its link's received bytes
//! (the link counts as busy meanwhile, so that a callback that calls progress again
//! leaves it alone) and comes back with [`Reader::delivered`]; the link's next frames
//! are read on the next call.

use crate::conn::{Conn, Role};
use crate::engine::Engine;
use crate::link::RxBuf;
use crate::onesided::Handled;
use crate::peer::{endpoint, ConnId};
use crate::sink::Sink;
use crate::sockets;
use crate::wire::{self, Frame};
use rbtl_btl::{Endpoint, PeerFailure, Tag, MAX_SEGMENTS};
use socket2::Socket;
use std::io;

/// A link's received bytes, out of its connection while its frames are handled
/// (small, as it moves with every message).
pub struct Taken {
    id: ConnId,
    gen: u64,
    p: usize,
    k: usize,
    rx: RxBuf,
}

/// An active message for the module to deliver: a frame the decoder took whole, at
/// the start of its link's bytes.
pub struct Message {
    /// From.
    pub endpoint: Endpoint,
    /// Its tag.
    pub tag: Tag,
    nseg: usize,
    /// Bytes of the whole frame.
    used: usize,
    link: Taken,
}

impl Message {
    /// Its segments (the first `count` of the array).
    #[inline]
    pub fn segments(&self) -> ([&[u8]; MAX_SEGMENTS], usize) {
        let mut segs: [&[u8]; MAX_SEGMENTS] = [&[]; MAX_SEGMENTS];
        let body = &self.link.rx.data()[wire::HEADER..self.used];
        if self.nseg == 1 {
            segs[0] = body;
            return (segs, 1);
        }
        // The segment table (checked by the decoder), then the payload.
        let (table, mut payload) = body.split_at(4 * self.nseg);
        for (s, l) in segs.iter_mut().zip(table.chunks_exact(4)) {
            let l = u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize;
            (*s, payload) = payload.split_at(l);
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
                    let queued = e.net.peers[peer].links[link].queue.bytes();
                    if c.writable && queued > 0 {
                        e.net.drain(peer, link);
                        if e.net.peers[peer].links[link].queue.bytes() < queued {
                            // Room made by the peer (its kernel while its buffer
                            // has some, then its reading): a long put's data going
                            // out is news of it.
                            e.onesided.heard(peer);
                        }
                        e.settle();
                        *n += 1;
                    }
                    if !has_news(e, peer, id, gen) {
                        continue;
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

/// Whether link `id` (of peer `p`) has frames to handle: for a link that holds no
/// bytes and streams nothing, one read tells (the common idle case, which then costs
/// that one `recv`).
#[inline]
fn has_news(e: &mut Engine, p: usize, id: ConnId, gen: u64) -> bool {
    let Some(c) = e.net.conns.get_mut(id) else {
        return false;
    };
    if !c.rx.data().is_empty() || c.sink.is_some() {
        return true;
    }
    if !c.readable {
        return false;
    }
    let Conn {
        sock,
        rx,
        readable,
        hup,
        ..
    } = c;
    match read_more(sock, rx, readable, *hup) {
        Ok(true) => true,
        Ok(false) => {
            e.net.relist(id, gen);
            false
        }
        Err(why) => {
            e.peer_closed(p, why);
            false
        }
    }
}

/// Read more of a link into `rx` (`readable`: its readiness, cleared once the kernel
/// has no more; `hup`: its peer's end closed, so read on until the end shows): whether
/// bytes came; `Err` when the link closed or failed.
#[inline]
fn read_more(
    sock: &Socket,
    rx: &mut RxBuf,
    readable: &mut bool,
    hup: bool,
) -> Result<bool, PeerFailure> {
    match rx.fill(sock, wire::needed(rx.data())) {
        Ok((0, _)) => Err(sockets::read_failure(None)),
        Ok((_, full)) => {
            // A read that did not fill its room found the kernel's buffer empty, and
            // new data raises a new readiness.
            *readable = full || hup;
            Ok(true)
        }
        Err(err) if err.kind() == io::ErrorKind::Interrupted => Ok(false),
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
            *readable = false;
            Ok(false)
        }
        Err(err) => Err(sockets::read_failure(Some(&err))),
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
    })
}

/// Give a link its bytes back (`pending`: frames are left), and list it again if it
/// has work.
#[inline]
fn park(e: &mut Engine, t: Taken, pending: bool) {
    if let Some(c) = e.net.conns.same(t.id, t.gen) {
        c.rx = t.rx;
        c.busy = false;
        c.pending |= pending;
        e.net.relist(t.id, t.gen);
    }
}

/// Handle link `t`'s frames, reading as needed, up to its next active message.
fn read_link(e: &mut Engine, mut t: Taken, n: &mut usize) -> Option<Message> {
    let table = e.regs.view();
    // Err((violation, why)): the peer broke the protocol in a frame, or the link
    // closed (or broke while streaming).
    let outcome: Result<(), (bool, PeerFailure)> = loop {
        let Some(c) = e.net.conns.same(t.id, t.gen) else {
            // Closed meanwhile (its peer ended): what it held goes with it.
            break Ok(());
        };
        if c.sink.is_some() {
            match stream(e, &mut t) {
                Ok(true) => *n += 1,
                Ok(false) => break Ok(()),
                Err(why) => break Err((false, why)),
            }
            continue;
        }
        let (frame, used) = match wire::decode(t.rx.data(), &e.limits) {
            Err(wire::Invalid(why)) => break Err((true, PeerFailure::Protocol(why.to_string()))),
            Ok(Some(f)) => f,
            Ok(None) => {
                if !c.readable {
                    break Ok(());
                }
                if let Err(why) = read_more(&c.sock, &mut t.rx, &mut c.readable, c.hup) {
                    break Err((false, why));
                }
                continue;
            }
        };
        let handled = match frame {
            Frame::Am { tag, nseg, .. } => {
                return Some(Message {
                    endpoint: endpoint(t.p),
                    tag,
                    nseg,
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
                if let Some(c) = e.net.conns.same(t.id, t.gen) {
                    c.sink = Some(sink);
                }
            }
            Handled::Violation(why) => break Err((true, PeerFailure::Protocol(why.to_string()))),
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

/// Stream the data of the put or get under way on link `t` into place: `true` once
/// all of it came (the put acknowledged), `false` while more is to come and the
/// socket has none yet.
fn stream(e: &mut Engine, t: &mut Taken) -> Result<bool, PeerFailure> {
    let (table, me) = (e.regs.view(), e.id());
    let Some(c) = e.net.conns.get_mut(t.id) else {
        return Ok(false);
    };
    let Some(mut sink) = c.sink.take() else {
        return Ok(true);
    };
    let left = sink.left();
    let all = sink.pour(c, &mut t.rx, &table, me)?;
    // A get's data streaming in is the peer answering, however long the chunk.
    if matches!(sink, Sink::Get { .. }) && sink.left() < left {
        e.onesided.heard(t.p);
    }
    if !all {
        if let Some(c) = e.net.conns.get_mut(t.id) {
            c.sink = Some(sink);
        }
        return Ok(false);
    }
    if let Some(ack) = sink.answer() {
        e.net.push(t.p, t.k, ack);
        e.settle();
    }
    Ok(true)
}
