//! Partitioned communication (MPI 4.1, 4.2): a persistent send whose buffer the
//! program fills in partitions, marking each ready (`MPI_Pready`), and a persistent
//! receive whose partitions it may ask about (`MPI_Parrived`).
//!
//! Here the whole buffer travels as one message, sent when the last partition is
//! ready; a partition has arrived when the whole message has. The messages go in a
//! context of their own beside the communicator's (its context with
//! [`PARTITIONED`] set), so that they match only partitioned receives, by source
//! and tag, in the order the pairs were started.

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

/// The partitions of a partitioned send.
pub struct Parts {
    /// Which partitions of the round under way are ready.
    ready: Vec<bool>,
    /// How many are not ready yet (0 between rounds, and once the message is sent).
    left: usize,
}

impl Parts {
    /// A send started whose message waits for partitions.
    pub fn unposted(&self) -> bool {
        self.left > 0
    }

    /// Start a round: no partition ready.
    pub fn start(&mut self) {
        self.ready.iter_mut().for_each(|r| *r = false);
        self.left = self.ready.len();
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
        let n = usize::try_from(partitions)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_ARG,
                    format!("{partitions} partitions: at least one is needed"),
                )
            })?;
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
        let ty = self.keep_type(ty)?;
        let parts = matches!(op, Op::Send { .. }).then(|| Parts {
            ready: vec![false; n],
            left: 0,
        });
        let transfer = Transfer {
            op,
            count: total,
            ty,
            tag,
            comm,
        };
        Ok(Request::Persistent(Box::new(Persistent::new(
            transfer, parts, n,
        ))))
    }

    /// Post partitioned `transfer`'s message: its request (`MPI_PROC_NULL`'s done).
    ///
    /// # Safety
    ///
    /// The buffer holds the elements (has room for them) until the request completes.
    pub unsafe fn post_partitioned(&mut self, t: Transfer) -> Result<Request> {
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
        let (id, staging) = if send {
            // SAFETY: the caller's contract.
            let s = unsafe {
                self.start_send((buf, count), &shape, job, t.tag, ctx, SendMode::Standard)
            }?;
            (s.id, s.staged.map(|v| Box::new(Staging::Send(v))))
        } else {
            // SAFETY: the caller's contract.
            unsafe { self.start_recv(buf.cast_mut(), count, shape, Some(job), Some(t.tag), ctx) }?
        };
        Ok(Request::P2p(P2p {
            id,
            comm: t.comm,
            peers,
            staging,
        }))
    }

    /// Mark `partitions` of partitioned send `h` ready; the message leaves with the
    /// last.
    fn pready(&mut self, h: Handle, partitions: impl Iterator<Item = c_int>) -> Result<()> {
        let p = self.partitioned_request(h)?;
        let Some(parts) = p.parts.as_mut() else {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "MPI_Pready is for a partitioned send, not a receive",
            ));
        };
        if !parts.unposted() {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "the partitioned send is not started, or all its partitions are ready",
            ));
        }
        for i in partitions {
            let n = parts.ready.len();
            let r = usize::try_from(i)
                .ok()
                .and_then(|i| parts.ready.get_mut(i))
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
            parts.left -= 1;
        }
        if parts.left > 0 {
            return Ok(());
        }
        let transfer = p.transfer();
        // SAFETY: the buffer was promised at MPI_Psend_init for every round, until
        // each completes.
        let r = unsafe { self.post_partitioned(transfer) }?;
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            p.started(r);
        }
        Ok(())
    }

    /// The partitioned request `h`.
    fn partitioned_request(&mut self, h: Handle) -> Result<&mut Persistent> {
        match self.requests.get_mut(h) {
            Some(Request::Persistent(p)) if p.partitions > 0 => Ok(p),
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
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Psend_init", Object::Comm(comm), |mpi| {
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
    _info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Precv_init", Object::Comm(comm), |mpi| {
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
        if p.parts.is_some() {
            return Err(Error::new(
                MPI_ERR_REQUEST,
                "MPI_Parrived is for a partitioned receive, not a send",
            ));
        }
        if partition < 0 || partition as usize >= p.partitions {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!("partition {partition} is not one of the {}", p.partitions),
            ));
        }
        let arrived = match (&p.done, &p.active) {
            (Some(_), _) => true,
            (None, Some(a)) => {
                let id = a.id;
                mpi.msg.is_complete(id)
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
