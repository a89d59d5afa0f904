//! A connection on a port between two groups whose roots are processes of one job:
//! met by messages between the roots, whatever the launcher (a job's key-value
//! space shows another process's values only after a fence under hydra and Slurm,
//! and a launcher may keep no names).
//!
//! The connecting root sends its request (its answer tag, then its side as
//! `ports::Side` writes it) to the rank the port's name holds, in the meetings'
//! context ([`PORTS_CTX`]), with the port's number as the tag. The accepting root
//! takes the requests in their order (and the claims of other jobs' groups, through
//! the name service: [`super::ports`]), answers with its own side in the next
//! context under the connector's answer tag, connects its group, then sends the
//! ready signal under the tag after it. Closing a port answers every request still
//! waiting for it with `closed`; one that comes later is never answered, and its
//! connector gives up when the name service says the port is closed, or after its
//! time limit where there is none.

use super::ports::Side;
use super::spawn::{pause, START_LIMIT};
use crate::coll::Inside;
use crate::error::{Error, Result};
use crate::ffi::*;
use crate::state::{Mpi, PORTS_CTX};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The answers' and ready signals' context.
const ANSWERS_CTX: u32 = PORTS_CTX + 1;

/// The answer to a request on a port that closed before it was taken.
const CLOSED: &str = "closed";

/// A port as its name gives it: the opening process's rank in its job, the port's
/// number there (its requests' tag), and whether the launcher lists it as open.
#[derive(Clone, Copy, Debug)]
pub(super) struct Port {
    pub rank: u32,
    pub tag: i32,
    pub listed: bool,
}

/// The ready signal of one connection: to or from `peer`, under `tag`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Signal {
    peer: u32,
    tag: i32,
}

impl Signal {
    /// At the accepting root: tell the connecting root that this side is ready.
    pub(super) fn say(self, mpi: &mut Mpi) -> Result<()> {
        Ok(mpi.msg.send_in(ANSWERS_CTX, &[], self.peer, self.tag)?)
    }

    /// At the connecting root: wait for the accepting side to be ready.
    pub(super) fn wait(self, inside: &mut impl Inside) -> Result<()> {
        let why = (MPI_ERR_PORT, "the accepting side did not say it was ready");
        let from = (ANSWERS_CTX, Some(self.peer), self.tag);
        receive_while(inside, from, (START_LIMIT, why), |_| Ok(()))?;
        Ok(())
    }
}

/// A connection request taken at an accepting root.
pub(super) struct Request {
    /// The connecting side, as [`Side::encode`] wrote it.
    pub side: String,
    peer: u32,
    tag: i32,
}

impl Request {
    /// Answer with `mine`: the signal that will say this side is ready.
    pub(super) fn answer(&self, mpi: &mut Mpi, mine: &Side) -> Result<Signal> {
        let text = mine.encode();
        mpi.msg
            .send_in(ANSWERS_CTX, text.as_bytes(), self.peer, self.tag)?;
        Ok(Signal {
            peer: self.peer,
            tag: self.tag + 1,
        })
    }
}

/// At an accepting root: the first request waiting for `port`, if any (taken).
pub(super) fn next_request(mpi: &mut Mpi, port: Port) -> Result<Option<Request>> {
    let Some((peer, bytes)) = take(mpi, (PORTS_CTX, None, port.tag))? else {
        return Ok(None);
    };
    let (tag, side) = read_request(&bytes)?;
    Ok(Some(Request {
        side: side.to_string(),
        peer,
        tag,
    }))
}

/// At a connecting root: ask for a turn of `port` (named `name`) with `mine`, and
/// wait for the answer for at most `limit`, while `still` finds no reason to give
/// up; the accepting side, and the signal that will say it is ready.
pub(super) fn claim_turn(
    inside: &mut impl Inside,
    (port, name): (Port, &str),
    mine: &Side,
    limit: Duration,
    still: impl FnMut(&mut Mpi) -> Result<()>,
) -> Result<(String, Signal)> {
    // Two tags a claim: the answer's and the ready signal's.
    static CLAIMS: AtomicU32 = AtomicU32::new(0);
    let tag = (CLAIMS.fetch_add(1, Ordering::Relaxed) % (1 << 29)) as i32 * 2;
    let request = format!("{tag}/{}", mine.encode());
    let mpi = inside.state();
    // Sent eager, so that the send ends whether or not anyone accepts.
    match mpi.msg.eager_payload_to(port.rank) {
        Some(e) if request.len() <= e => {}
        Some(_) => {
            return Err(Error::new(
                MPI_ERR_PORT,
                format!(
                    "the group's description ({} bytes) is longer than one eager message to {name:?}'s process",
                    request.len()
                ),
            ))
        }
        None => {
            return Err(Error::new(
                MPI_ERR_PORT,
                format!("{name:?} names rank {}, which this job does not have", port.rank),
            ))
        }
    }
    mpi.msg
        .send_in(PORTS_CTX, request.as_bytes(), port.rank, port.tag)?;
    let why = (MPI_ERR_PORT, "the accepting side did not answer");
    let from = (ANSWERS_CTX, Some(port.rank), tag);
    let (_, answer) = receive_while(inside, from, (limit, why), still)?;
    let side = String::from_utf8(answer)
        .map_err(|_| Error::new(MPI_ERR_PORT, "a malformed answer to a connection"))?;
    if side == CLOSED {
        return Err(Error::new(
            MPI_ERR_PORT,
            format!("{name:?} closed before it took the connection"),
        ));
    }
    let signal = Signal {
        peer: port.rank,
        tag: tag + 1,
    };
    Ok((side, signal))
}

/// At a port's closing: every request still waiting for it is told so (an answer
/// that cannot go is dropped: its connector gives up on its own).
pub(super) fn turn_away(mpi: &mut Mpi, port: Port) {
    while let Ok(Some((peer, bytes))) = take(mpi, (PORTS_CTX, None, port.tag)) {
        if let Ok((tag, _)) = read_request(&bytes) {
            let _ = mpi.msg.send_in(ANSWERS_CTX, CLOSED.as_bytes(), peer, tag);
        }
    }
}

/// A request's answer tag and side.
fn read_request(request: &[u8]) -> Result<(i32, &str)> {
    let bad = || Error::new(MPI_ERR_PORT, "a malformed connection request");
    let text = std::str::from_utf8(request).map_err(|_| bad())?;
    let (tag, side) = text.split_once('/').ok_or_else(bad)?;
    let tag = tag
        .parse::<i32>()
        .ok()
        .filter(|t| (0..i32::MAX).contains(t));
    Ok((tag.ok_or_else(bad)?, side))
}

/// The first message in `ctx` from `src` (any if `None`) with `tag` that has come,
/// if any, taken whole: its sender and bytes.
fn take(mpi: &mut Mpi, (ctx, src, tag): (u32, Option<u32>, i32)) -> Result<Option<(u32, Vec<u8>)>> {
    let Some((m, status)) = mpi.msg.improbe_in(ctx, src, Some(tag))? else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; status.len];
    // SAFETY: `bytes` has room for the message and outlives the receive, which is
    // waited for at once.
    let req = unsafe { mpi.msg.imrecv(m, bytes.as_mut_ptr(), bytes.len()) };
    let status = mpi.msg.wait(req)?;
    Ok(Some((status.source, bytes)))
}

/// [`take`], waited for in `inside` for at most `limit` and while `still` finds no
/// reason to give up (past the limit, an error of `why`'s class and words).
fn receive_while(
    inside: &mut impl Inside,
    from: (u32, Option<u32>, i32),
    (limit, (class, why)): (Duration, (c_int, &str)),
    mut still: impl FnMut(&mut Mpi) -> Result<()>,
) -> Result<(u32, Vec<u8>)> {
    let start = Instant::now();
    loop {
        let mpi = inside.state();
        if let Some(got) = take(mpi, from)? {
            return Ok(got);
        }
        still(mpi)?;
        if start.elapsed() > limit {
            let secs = limit.as_secs_f64();
            return Err(Error::new(class, format!("{why} within {secs} s")));
        }
        pause(inside);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_its_answer_tag() {
        assert_eq!(
            read_request(b"8/kvs,6,kvs,0,0-1").unwrap(),
            (8, "kvs,6,kvs,0,0-1")
        );
        for bad in [&b"8"[..], b"-2/x", b"x/y", b"\xff/y"] {
            assert!(read_request(bad).is_err());
        }
    }
}
