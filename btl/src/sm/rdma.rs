//! The `sm` transport's own protocol: put and get copied through the rings when
//! cross-memory attach is not used, and atomics applied by the target; each request
//! checked by the target against its registrations ([`wire`](super::wire) holds the
//! format).

use super::path::RingSpeed;
use super::*;

impl SmModule {
    pub(super) fn next_req(&mut self) -> u64 {
        self.next_req += 1;
        self.next_req
    }

    /// Send an internal message to peer `i`, after anything already waiting.
    pub(super) fn send_internal(&mut self, i: usize, tag: u8, bytes: Vec<u8>) {
        let peer = &mut self.peers[i];
        if !peer.outbound.is_empty() || !peer.producer.push(tag, &[&bytes], &[]) {
            peer.outbound.push_back(Outbound::Bytes { tag, bytes });
        }
    }

    pub(super) fn complete_op(&mut self, req: u64, status: Result<()>) {
        if let Some(op) = self.ops.remove(&req) {
            let done = RdmaCompletion {
                endpoint: op.endpoint,
                local_address: op.local,
                size: op.size,
                status,
            };
            self.done.push_back(Done::Rdma(op.callback, done));
        }
    }

    /// A message of the transport's own protocol from peer `i`.
    #[inline(never)]
    pub(super) fn internal(&mut self, i: usize, tag: u8, segs: &[&[u8]]) {
        let msg = segs.first().copied().unwrap_or_default();
        let r = wire::Reader(msg);
        // A chunk's header and data: two segments when the ring split them (the data
        // page-aligned), else one.
        let body = |header: usize| -> &[u8] {
            match segs {
                [_, data, ..] => data,
                _ => &msg[header.min(msg.len())..],
            }
        };
        let check = |s: &Self, h: &[u8], addr: u64, len: usize, needs: Access| -> Result<()> {
            let handle = RemoteHandle::from_bytes(h)?;
            s.regs.view().check(s.id, &handle, addr, len, needs)
        };
        match tag {
            wire::PUT_DATA if msg.len() >= wire::PUT_HEADER => {
                let (req, addr, last) = (r.u64(0), r.u64(8), r.u64(16) != 0);
                let data = body(wire::PUT_HEADER);
                let status = match self.peers[i].put_refused.get(&req) {
                    // Refused already: apply no later chunk either.
                    Some(_) => Err(Error::BadRemoteHandle("refused earlier".into())),
                    None => check(
                        self,
                        &msg[24..wire::PUT_HEADER],
                        addr,
                        data.len(),
                        crate::PUT_REMOTE,
                    ),
                };
                if status.is_ok() {
                    // SAFETY: the range lies inside our live registration with
                    // remote-write access (checked just now).
                    unsafe {
                        crate::copy_bytes(data.as_ptr(), addr as usize as *mut u8, data.len())
                    };
                }
                // One acknowledgement, after the last chunk: the initiator keeps reading
                // its buffer until then. The first refusal is remembered for it.
                let refused = &mut self.peers[i].put_refused;
                if let Err(e) = &status {
                    refused.entry(req).or_insert(wire::status_code(e));
                }
                if last {
                    let code = refused.remove(&req).unwrap_or(0);
                    self.send_internal(
                        i,
                        wire::PUT_ACK,
                        wire::Writer::default().u64(req).u32(code).0,
                    );
                }
            }
            wire::PUT_ACK if msg.len() >= 12 => {
                self.complete_op(r.u64(0), wire::status_error(r.u32(8)))
            }
            wire::GET_REQ if msg.len() >= 24 + keytable::HANDLE_SIZE => {
                let (req, addr, len) = (r.u64(0), r.u64(8), r.u64(16) as usize);
                match check(self, &msg[24..], addr, len, crate::GET_REMOTE) {
                    Ok(()) if len > 0 => {
                        let handle = RemoteHandle::from_bytes(&msg[24..24 + keytable::HANDLE_SIZE])
                            .expect("checked above");
                        self.peers[i].outbound.push_back(Outbound::Get {
                            req,
                            addr: addr as usize,
                            len,
                            sent: 0,
                            handle,
                        });
                        self.drain_outbound(i);
                    }
                    Ok(()) => {}
                    Err(e) => {
                        let hdr = wire::Writer::default()
                            .u64(req)
                            .u64(0)
                            .u64(u64::from(wire::status_code(&e)))
                            .0;
                        self.send_internal(i, wire::GET_DATA, hdr);
                    }
                }
            }
            wire::GET_DATA if msg.len() >= wire::GET_DATA_HEADER => {
                let (req, off, code) = (r.u64(0), r.u64(8) as usize, r.u64(16) as u32);
                if let Some(speed) = RingSpeed::from_wire(r.u64(24)) {
                    self.peers[i].in_speed = speed;
                }
                let data = body(wire::GET_DATA_HEADER);
                let Some(Op {
                    what:
                        Pending::Get {
                            local,
                            size,
                            received,
                        },
                    ..
                }) = self.ops.get_mut(&req)
                else {
                    return;
                };
                let outcome = if code != 0 || off + data.len() > *size {
                    Some(wire::status_error(if code != 0 { code } else { 5 }))
                } else {
                    // SAFETY: the local range was checked against its registration with
                    // local-write access when the get started; it stays alive until
                    // the completion.
                    unsafe {
                        crate::copy_bytes(data.as_ptr(), (*local + off) as *mut u8, data.len())
                    };
                    *received += data.len();
                    (*received == *size).then_some(Ok(()))
                };
                if let Some(status) = outcome {
                    self.complete_op(req, status);
                }
            }
            wire::ATOMIC_REQ if msg.len() >= 40 + keytable::HANDLE_SIZE => {
                let (req, addr, operand, compare, code) =
                    (r.u64(0), r.u64(8), r.u64(16), r.u64(24), r.u64(32));
                let status = if addr % 8 != 0 {
                    Err(Error::Misaligned(addr))
                } else {
                    check(self, &msg[40..], addr, 8, Access::ATOMIC)
                };
                let (old, code) = match status {
                    Ok(()) => {
                        // SAFETY: checked: aligned, inside our live registration with
                        // atomic access.
                        let word = unsafe { crate::loopback::word_at(addr as usize as *mut u8) };
                        let old = match wire::op_of(code) {
                            Some(op) => op.apply(word, operand),
                            None => crate::compare_swap(word, compare, operand),
                        };
                        (old, 0)
                    }
                    Err(e) => (0, wire::status_code(&e)),
                };
                self.send_internal(
                    i,
                    wire::ATOMIC_RESP,
                    wire::Writer::default().u64(req).u64(old).u32(code).0,
                );
            }
            wire::ATOMIC_RESP if msg.len() >= 20 => {
                let (req, old, code) = (r.u64(0), r.u64(8), r.u32(16));
                if let Some(Op {
                    what: Pending::Atomic { result: Some(at) },
                    ..
                }) = self.ops.get(&req)
                {
                    if code == 0 {
                        // SAFETY: 8 bytes checked against a live local registration with
                        // local-write access when the atomic started.
                        unsafe { (*at as *mut u64).write_unaligned(old) };
                    }
                }
                self.complete_op(req, wire::status_error(code));
            }
            _ => self.report(
                Some(i),
                Error::NotAvailable(format!("malformed sm message with tag {tag}")),
            ),
        }
    }

    pub(super) fn start_op(
        &mut self,
        ep: Endpoint,
        local: usize,
        size: usize,
        what: Pending,
        callback: RdmaCallback,
    ) -> u64 {
        let req = self.next_req();
        self.ops.insert(
            req,
            Op {
                endpoint: ep,
                local,
                size,
                what,
                callback,
            },
        );
        req
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn rdma(
        &mut self,
        dir: cma::Direction,
        ep: Endpoint,
        local: usize,
        remote: u64,
        local_handle: &MemHandle,
        remote_handle: &RemoteHandle,
        size: usize,
        callback: RdmaCallback,
    ) -> Result<()> {
        let (local_needs, remote_needs) = match dir {
            cma::Direction::Write => (Access::LOCAL_READ, crate::PUT_REMOTE),
            cma::Direction::Read => (Access::LOCAL_WRITE, crate::GET_REMOTE),
        };
        local_handle.check::<Reg<NoPin>>(self.id, local, size, local_needs)?;
        let peer = self.peer(ep)?;
        peer.table
            .check(peer.module, remote_handle, remote, size, remote_needs)?;
        // `cma_ok` holds the setting (`copy` never, `cma` always, `auto` where the
        // kernel allows); `auto` then chooses by the rings' speed.
        let auto = self.settings.rdma == RdmaPath::Auto;
        let slow_below = self.settings.cma_below as f64 / 1000.0;
        let peer = &mut self.peers[ep.0 as usize];
        let (choice, speed) = match dir {
            cma::Direction::Write => (&mut peer.put_path, peer.out_speed),
            cma::Direction::Read => (&mut peer.get_path, peer.in_speed),
        };
        let cma = peer.cma_ok && (!auto || choice.via_cma(size, speed, slow_below, Instant::now()));
        let peer = &self.peers[ep.0 as usize];
        if cma {
            // SAFETY: the local range lies inside a live registration of ours with the
            // needed access (register_mem's contract keeps it mapped and lets the
            // transport read or write it); the kernel checks the remote range.
            match unsafe { cma::copy(peer.pid, dir, local, remote, size) } {
                Ok(()) => {
                    let done = RdmaCompletion {
                        endpoint: ep,
                        local_address: local,
                        size,
                        status: Ok(()),
                    };
                    self.done.push_back(Done::Rdma(callback, done));
                    return Ok(());
                }
                Err(e)
                    if e.raw_os_error() == Some(libc::EPERM)
                        && self.settings.rdma == RdmaPath::Auto =>
                {
                    tracing::debug!(
                        rank = peer.rank,
                        "cross-memory attach refused: copying through the rings"
                    );
                    self.peers[ep.0 as usize].cma_ok = false;
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.fail_peer(ep.0 as usize, "process gone (ESRCH)".into());
                    return Err(self.peer(ep).err().unwrap_or(Error::UnknownEndpoint(ep.0)));
                }
                Err(source) => {
                    return Err(Error::Os {
                        call: "process_vm_readv/writev",
                        source,
                    })
                }
            }
        }
        let i = ep.0 as usize;
        match dir {
            cma::Direction::Write => {
                let req = self.start_op(ep, local, size, Pending::Put, callback);
                let handle = *remote_handle;
                self.peers[i].outbound.push_back(Outbound::Put {
                    req,
                    local,
                    remote,
                    len: size,
                    sent: 0,
                    handle,
                });
                self.drain_outbound(i);
            }
            cma::Direction::Read => {
                let req = self.start_op(
                    ep,
                    local,
                    size,
                    Pending::Get {
                        local,
                        size,
                        received: 0,
                    },
                    callback,
                );
                if size == 0 {
                    self.complete_op(req, Ok(()));
                } else {
                    let msg = wire::Writer::default()
                        .u64(req)
                        .u64(remote)
                        .u64(size as u64)
                        .handle(remote_handle)
                        .0;
                    self.send_internal(i, wire::GET_REQ, msg);
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn atomic(
        &mut self,
        ep: Endpoint,
        result: Option<(usize, &MemHandle)>,
        remote: u64,
        remote_handle: &RemoteHandle,
        code: u64,
        operand: u64,
        compare: u64,
        callback: RdmaCallback,
    ) -> Result<()> {
        if remote % 8 != 0 {
            return Err(Error::Misaligned(remote));
        }
        if let Some((local, handle)) = result {
            handle.check::<Reg<NoPin>>(self.id, local, 8, Access::LOCAL_WRITE)?;
        }
        let peer = self.peer(ep)?;
        peer.table
            .check(peer.module, remote_handle, remote, 8, Access::ATOMIC)?;
        let local = result.map(|r| r.0);
        let req = self.start_op(
            ep,
            local.unwrap_or(0),
            8,
            Pending::Atomic { result: local },
            callback,
        );
        let msg = wire::Writer::default()
            .u64(req)
            .u64(remote)
            .u64(operand)
            .u64(compare)
            .u64(code)
            .handle(remote_handle)
            .0;
        self.send_internal(ep.0 as usize, wire::ATOMIC_REQ, msg);
        Ok(())
    }

    pub(super) fn pending_on(&self, ep: Option<Endpoint>) -> bool {
        self.ops
            .values()
            .any(|op| ep.is_none_or(|e| e == op.endpoint))
    }
}
