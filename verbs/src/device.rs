//! Devices, opened contexts and their ports.

use crate::error::{call_error, Error, Result};
use rdma_sys as sys;
use std::ffi::CStr;
use std::ptr::NonNull;
use std::sync::Arc;

/// `IBV_LINK_LAYER_ETHERNET` (a #define that rdma-sys does not carry).
const LINK_LAYER_ETHERNET: u8 = 2;

/// Names of the RDMA devices on this host.
pub fn device_names() -> Result<Vec<String>> {
    let mut n = 0;
    // SAFETY: returns a NULL-terminated array (or NULL with errno), freed below.
    let list = unsafe { sys::ibv_get_device_list(&mut n) };
    if list.is_null() {
        // No provider loaded or no device: an empty list, not an error.
        return Ok(Vec::new());
    }
    let names = (0..n.max(0) as usize)
        .map(|i| {
            // SAFETY: `i` < n entries; each device has a NUL-terminated name.
            unsafe { CStr::from_ptr(sys::ibv_get_device_name(*list.add(i))) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    // SAFETY: the list came from ibv_get_device_list.
    unsafe { sys::ibv_free_device_list(list) };
    Ok(names)
}

/// An open device context; shared by everything made from it.
pub(crate) struct ContextInner {
    pub(crate) ptr: NonNull<sys::ibv_context>,
    name: String,
    /// Opened by us (closed on drop), or lent by librdmacm (which closes it).
    owned: bool,
}

// SAFETY: libibverbs contexts may be used from any thread (the library locks what it
// shares); we never hand out aliasing mutable access to the struct itself.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: opened by ibv_open_device; every child object holds an Arc to
            // this, so none is alive any more.
            unsafe { sys::ibv_close_device(self.ptr.as_ptr()) };
        }
    }
}

/// An open device.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

/// What a port says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// Its LID (0 on RoCE).
    pub lid: u16,
    /// The active MTU in bytes.
    pub mtu: u32,
    /// The raw `ibv_mtu` value, to put into a queue pair's path.
    pub mtu_enum: u32,
    /// Whether the link layer is Ethernet (RoCE).
    pub ethernet: bool,
    /// Entries in the GID table.
    pub gid_table_len: i32,
    /// Largest message the port carries, in bytes (`max_msg_sz`): the bound of one
    /// RDMA write or read.
    pub max_msg_sz: u32,
}

/// Device capabilities that matter to a transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Ports.
    pub ports: u8,
    /// Most outstanding work requests per queue.
    pub max_qp_wr: i32,
    /// Whether 64-bit atomics are supported.
    pub atomics: bool,
    /// Whether they are atomic with respect to the host processor's atomic
    /// instructions too (`IBV_ATOMIC_GLOB`; `IBV_ATOMIC_HCA` promises it only among
    /// the adapter's own).
    pub atomics_global: bool,
    /// Most entries of a completion queue.
    pub max_cqe: i32,
}

impl Context {
    /// Open the first device there is ([`device_names`]); `None` where there is none.
    pub fn open_first() -> Result<Option<Context>> {
        device_names()?
            .first()
            .map(|name| Context::open(name))
            .transpose()
    }

    /// Open the device called `name`.
    pub fn open(name: &str) -> Result<Context> {
        let mut n = 0;
        // SAFETY: as in device_names.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        let mut found = Vec::new();
        let mut ctx = std::ptr::null_mut();
        if !list.is_null() {
            for i in 0..n.max(0) as usize {
                // SAFETY: `i` < n entries of the live list.
                let dev = unsafe { *list.add(i) };
                // SAFETY: a device of the live list; its name is NUL-terminated.
                let dev_name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
                    .to_string_lossy()
                    .into_owned();
                if dev_name == name {
                    // SAFETY: a device of the live list.
                    ctx = unsafe { sys::ibv_open_device(dev) };
                    if ctx.is_null() {
                        let e = call_error("ibv_open_device", 0);
                        // SAFETY: the list came from ibv_get_device_list.
                        unsafe { sys::ibv_free_device_list(list) };
                        return Err(e);
                    }
                }
                found.push(dev_name);
            }
            // SAFETY: the list came from ibv_get_device_list; an opened context keeps
            // its device alive on its own.
            unsafe { sys::ibv_free_device_list(list) };
        }
        let ptr = NonNull::new(ctx).ok_or_else(|| Error::NoDevice {
            name: name.into(),
            found,
        })?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                ptr,
                name: name.into(),
                owned: true,
            }),
        })
    }

    /// The context librdmacm opened for a connection identifier (it stays librdmacm's).
    pub(crate) fn lent(ptr: NonNull<sys::ibv_context>) -> Context {
        // SAFETY: a live context of librdmacm, which keeps it open while ids use it.
        let dev = unsafe { ptr.as_ref() }.device;
        // SAFETY: a live device; its name is NUL-terminated.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        Context {
            inner: Arc::new(ContextInner {
                ptr,
                name,
                owned: false,
            }),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Device capabilities.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a writable attr.
        let rc = unsafe { sys::ibv_query_device(self.inner.ptr.as_ptr(), &mut attr) };
        if rc != 0 {
            return Err(call_error("ibv_query_device", rc));
        }
        Ok(DeviceAttr {
            ports: attr.phys_port_cnt,
            max_qp_wr: attr.max_qp_wr,
            atomics: attr.atomic_cap != sys::ibv_atomic_cap::IBV_ATOMIC_NONE,
            atomics_global: attr.atomic_cap == sys::ibv_atomic_cap::IBV_ATOMIC_GLOB,
            max_cqe: attr.max_cqe,
        })
    }

    /// Port `port` (from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        // SAFETY: plain C struct, zero is a valid value.
        let mut attr: sys::ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a writable attr.
        let rc = unsafe { sys::___ibv_query_port(self.inner.ptr.as_ptr(), port, &mut attr) };
        if rc != 0 {
            return Err(call_error("ibv_query_port", rc));
        }
        Ok(PortAttr {
            active: attr.state == sys::ibv_port_state::IBV_PORT_ACTIVE,
            lid: attr.lid,
            mtu: 128 << attr.active_mtu,
            mtu_enum: attr.active_mtu,
            ethernet: attr.link_layer == LINK_LAYER_ETHERNET,
            gid_table_len: attr.gid_tbl_len,
            max_msg_sz: attr.max_msg_sz,
        })
    }

    /// GID `index` of `port`.
    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16]> {
        // SAFETY: plain C union, zero is a valid value.
        let mut gid: sys::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and a writable gid.
        let rc = unsafe { sys::ibv_query_gid(self.inner.ptr.as_ptr(), port, index, &mut gid) };
        if rc != 0 {
            return Err(call_error("ibv_query_gid", rc));
        }
        // SAFETY: every bit pattern is a valid [u8; 16].
        Ok(unsafe { gid.raw })
    }
}
