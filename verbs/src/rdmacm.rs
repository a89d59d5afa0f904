//! librdmacm: connection identifiers, address and route resolution, listen, connect
//! and accept with private data, and the event channel that reports each step (for
//! the `rdma_cm` connection method, which connects over IP addresses).

use crate::cq::{poll_readable, Cq};
use crate::device::Context;
use crate::error::{call_error, Error, Result};
use crate::pd::Pd;
use crate::qp::{Qp, QpCaps};
use crate::srq::Srq;
use rdma_sys as sys;
use std::ffi::CStr;
use std::net::SocketAddrV4;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

struct ChannelInner {
    ptr: NonNull<sys::rdma_event_channel>,
}

// An event channel is a file descriptor; librdmacm may be called from any thread.
// Created by rdma_create_event_channel; every id on it holds an Arc to this.
object_owner!(ChannelInner: Send + Sync, sys::rdma_destroy_event_channel);

/// The channel on which a set of identifiers report their events.
pub struct EventChannel {
    inner: Arc<ChannelInner>,
}

pub(crate) struct IdInner {
    pub(crate) ptr: NonNull<sys::rdma_cm_id>,
    _channel: Arc<ChannelInner>,
}

// librdmacm identifiers may be used from any thread. Created by rdma_create_id (or
// handed over by a connect request); its queue pair holds an Arc to this.
object_owner!(IdInner: Send + Sync, sys::rdma_destroy_id);

/// A connection identifier (a socket of the RDMA world).
pub struct CmId {
    inner: Arc<IdInner>,
}

/// What an event said.
pub enum CmEventKind {
    /// `resolve_addr` finished: the id is bound to a device.
    AddrResolved,
    /// `resolve_route` finished.
    RouteResolved,
    /// A peer asks to connect to a listener: the new identifier to accept on.
    ConnectRequest(CmId),
    /// The connection is up.
    Established,
    /// The peer refused.
    Rejected,
    /// The connection went down.
    Disconnected,
    /// Anything else, by its librdmacm name (errors included).
    Other(String),
}

/// An event with its status and the peer's private data.
pub struct CmEvent {
    /// The identifier it concerns, as [`CmId::key`] names it (for a connect request,
    /// the listener's).
    pub id: usize,
    /// What happened.
    pub kind: CmEventKind,
    /// Its status (0 or a negative errno).
    pub status: i32,
    /// Private data the peer sent with connect or accept.
    pub private_data: Vec<u8>,
}

fn sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*addr.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

fn check(call: &'static str, rc: i32) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(call_error(call, 0))
    }
}

/// The devices as librdmacm opened them. Queue pairs that librdmacm makes must use
/// protection domains and completion queues of these very contexts (it refuses
/// others), so a transport that connects through librdmacm opens its devices here.
/// The list is taken once per process and never released: releasing it may close the
/// contexts, which live as long as the process.
pub fn devices() -> Result<Vec<Context>> {
    struct List(usize, usize);
    static LIST: std::sync::OnceLock<std::result::Result<List, i32>> = std::sync::OnceLock::new();
    let list = LIST.get_or_init(|| {
        let mut n = 0;
        // SAFETY: `n` receives the count; NULL with errno on failure.
        let list = unsafe { sys::rdma_get_devices(&mut n) };
        if list.is_null() {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(List(list as usize, n.max(0) as usize))
        }
    });
    let &List(list, n) = list
        .as_ref()
        .map_err(|&errno| call_error("rdma_get_devices", errno))?;
    let list = list as *mut *mut sys::ibv_context;
    Ok((0..n)
        // SAFETY: the list holds `n` entries and is never freed.
        .filter_map(|i| NonNull::new(unsafe { *list.add(i) }))
        .map(Context::lent)
        .collect())
}

impl EventChannel {
    /// A new event channel.
    pub fn new() -> Result<EventChannel> {
        // SAFETY: no arguments; NULL with errno on failure.
        let ch = unsafe { sys::rdma_create_event_channel() };
        let ptr = NonNull::new(ch).ok_or_else(|| call_error("rdma_create_event_channel", 0))?;
        Ok(EventChannel {
            inner: Arc::new(ChannelInner { ptr }),
        })
    }

    /// The next event if one is pending, without waiting.
    pub fn try_next(&self) -> Result<Option<CmEvent>> {
        match self.next(Duration::ZERO) {
            Ok(e) => Ok(Some(e)),
            Err(Error::Call { source, .. }) if source.raw_os_error() == Some(libc::ETIMEDOUT) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The next event, waiting up to `timeout`.
    pub fn next(&self, timeout: Duration) -> Result<CmEvent> {
        // SAFETY: a live channel; fd never changes.
        let fd = unsafe { self.inner.ptr.as_ref() }.fd;
        if poll_readable(fd, timeout) == 0 {
            return Err(Error::Call {
                call: "rdma_get_cm_event (timed out)",
                source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
            });
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: a live channel with an event pending.
        check("rdma_get_cm_event", unsafe {
            sys::rdma_get_cm_event(self.inner.ptr.as_ptr(), &mut ev)
        })?;
        // SAFETY: a valid event until acknowledged below; we copy what we keep.
        let (kind, status, private_data, id) = unsafe {
            let e = &*ev;
            let conn = e.param.conn;
            let private_data = if conn.private_data.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            };
            use sys::rdma_cm_event_type as t;
            let kind = match e.event {
                t::RDMA_CM_EVENT_ADDR_RESOLVED => CmEventKind::AddrResolved,
                t::RDMA_CM_EVENT_ROUTE_RESOLVED => CmEventKind::RouteResolved,
                t::RDMA_CM_EVENT_CONNECT_REQUEST => CmEventKind::ConnectRequest(CmId {
                    inner: Arc::new(IdInner {
                        ptr: NonNull::new(e.id).expect("a connect request carries its id"),
                        _channel: self.inner.clone(),
                    }),
                }),
                t::RDMA_CM_EVENT_ESTABLISHED => CmEventKind::Established,
                t::RDMA_CM_EVENT_REJECTED => CmEventKind::Rejected,
                t::RDMA_CM_EVENT_DISCONNECTED => CmEventKind::Disconnected,
                other => CmEventKind::Other(
                    CStr::from_ptr(sys::rdma_event_str(other))
                        .to_string_lossy()
                        .into_owned(),
                ),
            };
            let id = match kind {
                CmEventKind::ConnectRequest(_) => e.listen_id as usize,
                _ => e.id as usize,
            };
            (kind, e.status, private_data, id)
        };
        // SAFETY: the event came from rdma_get_cm_event and is acknowledged once.
        check("rdma_ack_cm_event", unsafe { sys::rdma_ack_cm_event(ev) })?;
        Ok(CmEvent {
            id,
            kind,
            status,
            private_data,
        })
    }
}

impl CmId {
    /// A reliable-connected (TCP port space) identifier reporting on `channel`.
    pub fn new(channel: &EventChannel) -> Result<CmId> {
        let mut id = std::ptr::null_mut();
        // SAFETY: a live channel; `id` receives the new identifier.
        let rc = unsafe {
            sys::rdma_create_id(
                channel.inner.ptr.as_ptr(),
                &mut id,
                std::ptr::null_mut(),
                sys::rdma_port_space::RDMA_PS_TCP,
            )
        };
        check("rdma_create_id", rc)?;
        let ptr = NonNull::new(id).ok_or_else(|| call_error("rdma_create_id", libc::EINVAL))?;
        Ok(CmId {
            inner: Arc::new(IdInner {
                ptr,
                _channel: channel.inner.clone(),
            }),
        })
    }

    /// A number naming this identifier in events ([`CmEvent::id`]).
    pub fn key(&self) -> usize {
        self.inner.ptr.as_ptr() as usize
    }

    /// Bind to a local address (port 0 picks one).
    pub fn bind(&self, addr: SocketAddrV4) -> Result<()> {
        let mut sa = sockaddr(addr);
        // SAFETY: a live id and a sockaddr_in of the right family.
        check("rdma_bind_addr", unsafe {
            sys::rdma_bind_addr(
                self.inner.ptr.as_ptr(),
                (&mut sa as *mut libc::sockaddr_in).cast(),
            )
        })
    }

    /// Listen for connect requests.
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: a live, bound id.
        check("rdma_listen", unsafe {
            sys::rdma_listen(self.inner.ptr.as_ptr(), backlog)
        })
    }

    /// The local port it is bound to.
    pub fn local_port(&self) -> u16 {
        // SAFETY: a live id.
        u16::from_be(unsafe { sys::rdma_get_src_port(self.inner.ptr.as_ptr()) })
    }

    /// Start resolving `dst` to a device and port (an `AddrResolved` event follows).
    pub fn resolve_addr(&self, dst: SocketAddrV4, timeout: Duration) -> Result<()> {
        let mut sa = sockaddr(dst);
        // SAFETY: a live id and a sockaddr_in of the right family.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                self.inner.ptr.as_ptr(),
                std::ptr::null_mut(),
                (&mut sa as *mut libc::sockaddr_in).cast(),
                timeout.as_millis() as i32,
            )
        };
        check("rdma_resolve_addr", rc)
    }

    /// Start resolving the route (a `RouteResolved` event follows).
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: a live id with a resolved address.
        check("rdma_resolve_route", unsafe {
            sys::rdma_resolve_route(self.inner.ptr.as_ptr(), timeout.as_millis() as i32)
        })
    }

    /// The device context the id is bound to (after address resolution, or on a
    /// connect request's id).
    pub fn context(&self) -> Option<Context> {
        // SAFETY: a live id.
        NonNull::new(unsafe { self.inner.ptr.as_ref() }.verbs).map(Context::lent)
    }

    /// Make the id's queue pair (RC), on `pd`, completing into `cq`, receiving
    /// through `srq` when given.
    pub fn create_qp(&self, pd: &Pd, cq: &Cq, srq: Option<&Srq>, caps: QpCaps) -> Result<Qp> {
        Qp::from_cm(&self.inner, pd, cq, srq, caps)
    }

    fn params(private_data: &[u8]) -> sys::rdma_conn_param {
        sys::rdma_conn_param {
            private_data: private_data.as_ptr().cast(),
            private_data_len: private_data.len().min(u8::MAX as usize) as u8,
            responder_resources: 1,
            initiator_depth: 1,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }

    /// Connect, sending `private_data` (at most 56 bytes) to the listener.
    pub fn connect(&self, private_data: &[u8]) -> Result<()> {
        let mut p = Self::params(private_data);
        // SAFETY: a live id with a resolved route and a queue pair; the data outlives
        // the call (librdmacm copies it).
        check("rdma_connect", unsafe {
            sys::rdma_connect(self.inner.ptr.as_ptr(), &mut p)
        })
    }

    /// Accept a connect request, answering `private_data`.
    pub fn accept(&self, private_data: &[u8]) -> Result<()> {
        let mut p = Self::params(private_data);
        // SAFETY: a live id from a connect request with a queue pair; the data
        // outlives the call.
        check("rdma_accept", unsafe {
            sys::rdma_accept(self.inner.ptr.as_ptr(), &mut p)
        })
    }

    /// Reject a connect request, answering `private_data`.
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        let len = private_data.len().min(u8::MAX as usize) as u8;
        // SAFETY: a live id from a connect request; librdmacm copies the data.
        check("rdma_reject", unsafe {
            sys::rdma_reject(self.inner.ptr.as_ptr(), private_data.as_ptr().cast(), len)
        })
    }

    /// Disconnect.
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: a live id.
        check("rdma_disconnect", unsafe {
            sys::rdma_disconnect(self.inner.ptr.as_ptr())
        })
    }
}
