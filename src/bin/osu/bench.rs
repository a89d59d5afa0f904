//! The measurements, done the way the OSU micro-benchmarks do them on MPI.

use crate::cli::{Bench, Options};
use crate::error::OsuError;
use rbtl::msg::{Comm, ReqId, Result, Window};
use std::time::Instant;

/// Message tag of the benchmarks (OSU uses 1; acknowledgements 2).
const TAG: i32 = 1;
const ACK: i32 = 2;

/// Buffers of the largest size, page-aligned as OSU allocates them.
pub struct Buffers {
    pub send: rbtl::mpool::Region,
    pub recv: rbtl::mpool::Region,
}

impl Buffers {
    /// Both buffers, `max` bytes each (at least one), filled.
    pub fn new(max: usize) -> std::result::Result<Buffers, OsuError> {
        let size = max.max(1);
        let region = |fill: u8| -> std::result::Result<rbtl::mpool::Region, OsuError> {
            let mut r = rbtl::mpool::Region::anonymous(size)
                .map_err(|source| OsuError::Buffers { size, source })?;
            r.as_mut_slice().fill(fill);
            Ok(r)
        };
        Ok(Buffers {
            send: region(b'a')?,
            recv: region(b'b')?,
        })
    }
}

/// One measurement at one size: the value (us or MB/s) and, for mbw-mr, the message
/// rate.
pub struct Point {
    pub size: usize,
    pub value: f64,
    pub rate: Option<f64>,
}

pub struct Runner<'a> {
    pub comm: &'a mut Comm,
    pub opts: &'a Options,
    pub buf: Buffers,
    pub window: Option<Window>,
}

impl Runner<'_> {
    /// Measure at `size`; `Some` on rank 0 (the one that reports).
    pub fn run(&mut self, size: usize) -> Result<Option<Point>> {
        let (iters, skip) = self.opts.loops(size);
        self.comm.barrier()?;
        let me = self.comm.rank();
        let point = match self.opts.bench {
            Bench::Latency => self.latency(size, iters, skip)?.map(|us| (us, None)),
            Bench::Bw => self.bw(size, iters, skip, false)?.map(|bw| (bw, None)),
            Bench::Bibw => self.bw(size, iters, skip, true)?.map(|bw| (bw, None)),
            Bench::PutLatency | Bench::GetLatency => {
                self.rma_latency(size, iters, skip)?.map(|us| (us, None))
            }
            Bench::PutBw | Bench::GetBw => self.rma_bw(size, iters, skip)?.map(|bw| (bw, None)),
            Bench::MbwMr => self.mbw_mr(size, iters, skip)?,
            Bench::Init => unreachable!("osu init runs in init.rs, without a sweep"),
        };
        self.comm.barrier()?;
        Ok(point
            .filter(|_| me == 0)
            .map(|(value, rate)| Point { size, value, rate }))
    }

    fn latency(&mut self, size: usize, iters: usize, skip: usize) -> Result<Option<f64>> {
        let me = self.comm.rank();
        if me > 1 {
            return Ok(None);
        }
        let peer = 1 - me;
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            let rbuf = &mut self.buf.recv.as_mut_slice()[..size];
            if me == 0 {
                self.comm
                    .send(&self.buf.send.as_slice()[..size], peer, TAG)?;
                self.comm.recv(rbuf, Some(peer), Some(TAG))?;
            } else {
                self.comm.recv(rbuf, Some(peer), Some(TAG))?;
                self.comm
                    .send(&self.buf.send.as_slice()[..size], peer, TAG)?;
            }
        }
        let us = start.elapsed().as_secs_f64() * 1e6 / (2.0 * iters as f64);
        Ok(Some(us))
    }

    /// A window of non-blocking receives into one buffer (as OSU does).
    // (Requests go into vectors sized up front, as OSU's arrays are: collecting a
    // `Result` cannot, and its growth showed in the small-message rate.)
    fn post_recvs(&mut self, size: usize, from: u32, n: usize, tag: i32) -> Result<Vec<ReqId>> {
        let ptr = self.buf.recv.as_ptr();
        let mut reqs = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: the receive buffer lives as long as the runner and every request is
            // waited for before the next use; like OSU's windows, all receives of a
            // window land in the same buffer, one after another.
            reqs.push(unsafe { self.comm.irecv_raw(ptr, size, Some(from), Some(tag)) }?);
        }
        Ok(reqs)
    }

    fn post_sends(&mut self, size: usize, to: u32, n: usize) -> Result<Vec<ReqId>> {
        let ptr = self.buf.send.as_ptr();
        let mut reqs = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: the send buffer outlives every request, waited for below.
            reqs.push(unsafe { self.comm.isend_raw(ptr, size, to, TAG) }?);
        }
        Ok(reqs)
    }

    fn wait_all(&mut self, reqs: Vec<ReqId>) -> Result<()> {
        for r in reqs {
            self.comm.wait(r)?;
        }
        Ok(())
    }

    /// Sender and receiver of a pair: one window per iteration, then an ack.
    fn window_loop(
        &mut self,
        size: usize,
        iters: usize,
        skip: usize,
        peer: u32,
        sender: bool,
        both: bool,
    ) -> Result<f64> {
        let w = self.opts.window;
        let mut start = Instant::now();
        let mut ack = [0u8; 4];
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            if both {
                let r = self.post_recvs(size, peer, w, TAG)?;
                let s = self.post_sends(size, peer, w)?;
                self.wait_all(s)?;
                self.wait_all(r)?;
            } else if sender {
                let s = self.post_sends(size, peer, w)?;
                self.wait_all(s)?;
                self.comm.recv(&mut ack, Some(peer), Some(ACK))?;
            } else {
                let r = self.post_recvs(size, peer, w, TAG)?;
                self.wait_all(r)?;
                self.comm.send(&ack, peer, ACK)?;
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Megabytes per second for `messages` messages of `size` bytes (counted in
    /// floating point: the product can exceed a machine word).
    fn mb_per_s(size: usize, messages: f64, secs: f64) -> f64 {
        size as f64 * messages / secs / 1e6
    }

    fn bw(&mut self, size: usize, iters: usize, skip: usize, both: bool) -> Result<Option<f64>> {
        let me = self.comm.rank();
        if me > 1 {
            return Ok(None);
        }
        let secs = self.window_loop(size, iters, skip, 1 - me, me == 0, both)?;
        let factor = if both { 2.0 } else { 1.0 };
        let messages = self.opts.window as f64 * iters as f64 * factor;
        Ok(Some(Self::mb_per_s(size, messages, secs)))
    }

    fn mbw_mr(
        &mut self,
        size: usize,
        iters: usize,
        skip: usize,
    ) -> Result<Option<(f64, Option<f64>)>> {
        let (me, n) = (self.comm.rank(), self.comm.size());
        let pairs = n / 2;
        if me >= 2 * pairs {
            return Ok(None);
        }
        let sender = me < pairs;
        let peer = if sender { me + pairs } else { me - pairs };
        let secs = self.window_loop(size, iters, skip, peer, sender, false)?;
        // Every sender's rate goes to rank 0, which adds them up (as osu_mbw_mr).
        let msgs = self.opts.window as f64 * iters as f64;
        let bytes = size as f64 * msgs;
        if sender && me != 0 {
            let mine = [bytes / secs / 1e6, msgs / secs];
            let raw: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.comm.send(&raw, 0, ACK + 1)?;
            return Ok(None);
        }
        if me != 0 {
            return Ok(None);
        }
        let (mut mb, mut rate) = (bytes / secs / 1e6, msgs / secs);
        for src in 1..pairs {
            let mut raw = [0u8; 16];
            self.comm.recv(&mut raw, Some(src), Some(ACK + 1))?;
            mb += f64::from_le_bytes(raw[..8].try_into().expect("8 bytes"));
            rate += f64::from_le_bytes(raw[8..].try_into().expect("8 bytes"));
        }
        Ok(Some((mb, Some(rate))))
    }

    /// The window (allocated collectively on first use).
    fn ensure_window(&mut self) -> Result<()> {
        if self.window.is_none() {
            self.window = Some(Window::allocate(self.comm, self.opts.max_size.max(8))?);
        }
        Ok(())
    }

    /// One blocking put or get of `size` bytes to rank 1's window.
    fn rma(&mut self, size: usize) -> Result<()> {
        let put = matches!(self.opts.bench, Bench::PutLatency | Bench::PutBw);
        let Runner {
            comm, buf, window, ..
        } = self;
        let win = window.as_mut().expect("ensure_window ran first");
        if put {
            win.put(comm, 1, 0, &buf.send.as_slice()[..size])
        } else {
            win.get(comm, 1, 0, &mut buf.recv.as_mut_slice()[..size])
        }
    }

    fn rma_latency(&mut self, size: usize, iters: usize, skip: usize) -> Result<Option<f64>> {
        self.ensure_window()?;
        if self.comm.rank() != 0 {
            return Ok(None);
        }
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            self.rma(size)?;
        }
        Ok(Some(start.elapsed().as_secs_f64() * 1e6 / iters as f64))
    }

    fn rma_bw(&mut self, size: usize, iters: usize, skip: usize) -> Result<Option<f64>> {
        self.ensure_window()?;
        if self.comm.rank() != 0 {
            return Ok(None);
        }
        let w = self.opts.window;
        let mut start = Instant::now();
        for i in 0..iters + skip {
            if i == skip {
                start = Instant::now();
            }
            for _ in 0..w {
                self.rma(size)?;
            }
        }
        let messages = w as f64 * iters as f64;
        Ok(Some(Self::mb_per_s(
            size,
            messages,
            start.elapsed().as_secs_f64(),
        )))
    }
}
