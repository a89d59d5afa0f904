//! Partitioned communication (MPI 4.1, 4.2): a persistent send whose buffer the
//! program fills in partitions, marking each ready (`MPI_Pready`), and a persistent
//! receive whose partitions it may ask about (`MPI_Parrived`).
//!
//! Here the whole buffer travels as one message, sent when the last partition is
//! ready; a partition has arrived when the whole message has (and is in the
//! program's buffer: the receive completes then). The messages go in a
//! context of their own beside the communicator's (its context with
//! [`PARTITIONED`] set), so that they match only partitioned receives. Sends and
//! receives pair in the order of their init calls (MPI 4.1, 4.2.2): each end
//! numbers its inits per communicator, peer and tag, and the n-th carries n in the
//! high bits of its message's tag ([`wire_tag`]), for tags below 2^20 (above, the
//! pairs of one tag match in the order their messages leave and their receives
//! start).

use super::persistent::{Op, Persistent, Transfer};
use super::{check_count, Peer};
use crate::entry::call;
use crate::error::{non_null, Error, Object, Result};
use crate::ffi::*;
use crate::request::{P2p, Request, Staging};
use crate::state::Mpi;
use rbtl::msg::SendMode;

/// The bit that makes a communicator's context its partitioned messages' (contexts
/// are numbered from a counter far below it; the message layer keeps the bit above
/// for its served contexts).
pub const PARTITIONED: u32 = 1 << 30;

/// The tags below this carry the pair's number above them.
const NUMBERED_TAGS: c_int = 1 << 20;

/// The tag of the message of the `n`-th partitioned pair with `tag` between two
/// processes on one communicator.
pub fn wire_tag(tag: c_int, n: u32) -> c_int {
    match tag < NUMBERED_TAGS {
        true => ((n % 2048) as c_int) << 20 | tag,
        false => tag,
    }
}

/// What a partitioned request has besides a persistent one's.
pub struct Partitioned {
    /// Its partitions.
    pub partitions: usize,
    /// The tag its message carries ([`wire_tag`]).
    pub wire_tag: c_int,
    /// A send's partitions ready in the round under way (a receive's: none).
    ready: Option<Vec<bool>>,
    /// How many are not ready yet (0 between rounds, and once the message is sent).
    left: usize,
}

impl Partitioned {
    /// A send started whose message waits for partitions.
    pub fn unposted(&self) -> bool {
        self.left > 0
    }

    /// Start a round of a send (no partition ready): whether its message waits for
    /// partitions (a send of none leaves at once, as a receive is posted at once).
    pub fn start_send(&mut self) -> bool {
        let Some(ready) = self.ready.as_mut() else {
            return false;
        };
        ready.iter_mut().for_each(|r| *r = false);
        self.left = ready.len();
        self.left > 0
    }
}

impl Mpi {
    /// Describe a partitioned send or receive of `partitions` partitions of `count`
    /// elements of `ty` each.
    fn partitioned(
        &mut self,
        op: Op,
        (partitions, count, ty): (c_int, Count, Handle),
        tag: c_int,
        comm: Handle,
    ) -> Result<Request> {
        let n = usize::try_from(partitions).map_err(|_| {
            Error::new(
                MPI_ERR_ARG,
                format!("{partitions} partitions: a count of partitions is not negative"),
            )
        })?;
        if count < 0 {
            return Err(Error::new(
                MPI_ERR_COUNT,
                format!("{count} elements a partition: negative"),
            ));
        }
        let total = count
            .checked_mul(Count::from(partitions))
            .and_then(|t| c_int::try_from(t).ok())
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_COUNT,
                    format!("{partitions} partitions of {count} elements: negative, or more than 2^31 - 1"),
                )
            })?;
        check_count(total)?;
        super::check_send_tag(tag)?;
        let c = self.comm(comm)?;
        let rank = match op {
            Op::Send { dest, .. } => dest,
            Op::Recv { source, .. } => source,
        };
        super::peer(c, rank, false)?;
        // Numbered by the communicator's context, which its members share (a
        // handle is each process's own, and may be given again once freed).
        let ctx = c.ctx;
        let ty = self.keep_type(ty)?;
        let send = matches!(op, Op::Send { .. });
        let number = self.pairs.entry((ctx, send, rank, tag)).or_insert(0);
        let wire = wire_tag(tag, *number);
        *number = number.wrapping_add(1);
        let partitioned = Partitioned {
            partitions: n,
            wire_tag: wire,
            ready: send.then(|| vec![false; n]),
            left: 0,
        };
        let transfer = Transfer {
            op,
            count: total,
            ty,
            tag,
            comm,
        };
        Ok(Request::Persistent(Box::new(Persistent::new(
            transfer,
            Some(Box::new(partitioned)),
        ))))
    }

    /// Post partitioned `transfer`'s message, with tag `wire` ([`wire_tag`]): its
    /// request (`MPI_PROC_NULL`'s done).
    ///
    /// # Safety
    ///
    /// The buffer holds the elements (has room for them) until the request completes.
    pub unsafe fn post_partitioned(&mut self, t: Transfer, wire: c_int) -> Result<Request> {
        let count = check_count(t.count)?;
        let (buf, rank, send) = match t.op {
            Op::Send { buf, dest, .. } => (buf, dest, true),
            Op::Recv { buf, source } => (buf.cast_const(), source, false),
        };
        let (ctx, peer, peers, shape) = self.reach((buf, count, t.ty), rank, false, t.comm)?;
        let Peer::Job(job) = peer else {
            return Ok(Request::Done(Status::proc_null()));
        };
        let ctx = ctx | PARTITIONED;
        let unit = if send { 1 } else { shape.unit() };
        let (id, staging) = if send {
            // SAFETY: the caller's contract.
            let s = unsafe {
                self.start_send((buf, count), &shape, job, wire, ctx, SendMode::Standard)
            }?;
            (s.id, s.staged.map(|v| Box::new(Staging::Send(v))))
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.start_recv(buf.cast_mut(), count, shape, Some(job), Some(wire), ctx) }?
        };
        Ok(Request::P2p(P2p {
            id,
            comm: t.comm,
            peers,
            staging,
            unit,
        }))
    }

    /// Mark `partitions` of partitioned send `h` ready; the message leaves with the
    /// last.
    fn pready(&mut self, h: Handle, partitions: impl Iterator<Item = c_int>) -> Result<()> {
        let p = self.partitioned_request(h)?;
        let transfer = p.transfer();
        let x = p.partitioned.as_mut().expect("partitioned");
        let wire = x.wire_tag;
        let Some(ready) = x.ready.as_mut() else {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "MPI_Pready is for a partitioned send, not a receive",
            ));
        };
        if x.left == 0 {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "the partitioned send is not started, or all its partitions are ready",
            ));
        }
        for i in partitions {
            let n = ready.len();
            let r = usize::try_from(i)
                .ok()
                .and_then(|i| ready.get_mut(i))
                .ok_or_else(|| {
                    Error::new(MPI_ERR_ARG, format!("partition {i} is not one of the {n}"))
                })?;
            if *r {
                return Err(Error::new(
                    MPI_ERR_ARG,
                    format!("partition {i} is ready already"),
                ));
            }
            *r = true;
            x.left -= 1;
        }
        if x.left > 0 {
            return Ok(());
        }
        // SAFETY: the buffer was promised at MPI_Psend_init for every round, until
        // each completes.
        let r = unsafe { self.post_partitioned(transfer, wire) };
        let Some(Request::Persistent(p)) = self.requests.get_mut(h) else {
            return r.map(|_| ());
        };
        match r {
            Ok(r) => {
                p.started(r);
                Ok(())
            }
            // The round ends with the error, for the call that completes it too.
            Err(e) => {
                p.done = Some((Status::empty(), Some(e.clone())));
                Err(e)
            }
        }
    }

    /// The partitioned request `h`.
    fn partitioned_request(&mut self, h: Handle) -> Result<&mut Persistent> {
        match self.requests.get_mut(h) {
            Some(Request::Persistent(p)) if p.partitioned.is_some() => Ok(p),
            _ => Err(Error::new(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a partitioned request"),
            )),
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Psend_init", Object::Comm(comm), |mpi| {
        crate::info::check(info)?;
        non_null(request, MPI_ERR_ARG, "request")?;
        let op = Op::Send {
            buf,
            mode: super::Mode::Standard,
            dest,
        };
        let r = mpi.partitioned(op, (partitions, count, datatype), tag, comm)?;
        // SAFETY: the binding's contract: `request` null or writable.
        unsafe { mpi.hand_out(r, request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Precv_init", Object::Comm(comm), |mpi| {
        crate::info::check(info)?;
        non_null(request, MPI_ERR_ARG, "request")?;
        let op = Op::Recv { buf, source: dest };
        let r = mpi.partitioned(op, (partitions, count, datatype), tag, comm)?;
        // SAFETY: the binding's contract: `request` null or writable.
        unsafe { mpi.hand_out(r, request) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pready(partition: c_int, request: Handle) -> c_int {
    call("MPI_Pready", Object::None, |mpi| {
        mpi.pready(request, std::iter::once(partition))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pready_range(
    partition_low: c_int,
    partition_high: c_int,
    request: Handle,
) -> c_int {
    call("MPI_Pready_range", Object::None, |mpi| {
        if partition_low > partition_high {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("the range {partition_low}..={partition_high} is empty"),
            ));
        }
        mpi.pready(request, partition_low..=partition_high)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Pready_list(
    length: c_int,
    array_of_partitions: *const c_int,
    request: Handle,
) -> c_int {
    call("MPI_Pready_list", Object::None, |mpi| {
        // SAFETY: the binding's contract: `length` ints.
        let list = unsafe { crate::error::array(array_of_partitions, check_count(length)?) }?;
        mpi.pready(request, list.iter().copied())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Parrived(
    request: Handle,
    partition: c_int,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Parrived", Object::None, |mpi| {
        non_null(flag, MPI_ERR_ARG, "flag")?;
        mpi.progress();
        let p = mpi.partitioned_request(request)?;
        let x = p.partitioned.as_ref().expect("partitioned");
        let partitions = x.partitions;
        if x.ready.is_some() {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "MPI_Parrived is for a partitioned receive, not a send",
            ));
        }
        if partition < 0 || partition as usize >= partitions {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("partition {partition} is not one of the {partitions}"),
            ));
        }
        let arrived = match (&p.done, &p.active) {
            (Some(_), _) => true,
            (None, Some(a)) => {
                // Arrived, the receive completes now: data received through a
                // staging buffer (a type with gaps) is in the program's buffer when
                // MPI_Parrived says so.
                let id = a.id;
                match mpi.msg.test(id) {
                    None => false,
                    Some(out) => {
                        let p = mpi.partitioned_request(request)?;
                        let done = p.finish_active(out);
                        p.done = Some(done);
                        true
                    }
                }
            }
            (None, None) => {
                return Err(Error::new(
                    MPI_ERR_REQUEST,
                    "the partitioned receive is not started",
                ))
            }
        };
        // SAFETY: checked not null.
        unsafe { flag.write(c_int::from(arrived)) };
        Ok(())
    })
}
