//! The launcher's name service (MPI 4.1, 11.8.6): `MPI_Publish_name`,
//! `MPI_Unpublish_name` and `MPI_Lookup_name`, through PMI's `publish_name`,
//! `unpublish_name` and `lookup_name` (rbtlrun's and hydra's; Slurm keeps none, and
//! every call fails there).

use super::api::{read_str, write_name};
use crate::entry::call;
use crate::error::{Error, Object};
use crate::ffi::*;

/// The binding `name` that publishes or withdraws a service (`how`, given the
/// service and the port): its errors are of class `MPI_ERR_SERVICE`.
///
/// # Safety
///
/// Both strings are null or NUL-ended.
unsafe fn service_binding(
    name: &str,
    (service, port): (*const c_char, *const c_char),
    how: fn(&mut rbtl::msg::Comm, &str, &str) -> rbtl::msg::Result<()>,
) -> c_int {
    call(name, Object::None, |mpi| {
        // SAFETY: the caller's contract.
        let (service, port) = unsafe { (read_str(service)?, read_str(port)?) };
        how(&mut mpi.msg, &service, &port)
            .map_err(|e| Error::new(MPI_ERR_SERVICE, format!("{service:?}: {e}")))
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Publish_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Publish_name", names, |m, s, p| m.publish_name(s, p)) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Unpublish_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Unpublish_name", names, |m, s, _| m.unpublish_name(s)) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Lookup_name(
    service_name: *const c_char,
    _info: Handle,
    port_name: *mut c_char,
) -> c_int {
    call("MPI_Lookup_name", Object::None, |mpi| {
        // SAFETY: the binding's contract.
        let service = unsafe { read_str(service_name) }?;
        let found = (mpi.msg.lookup_name(&service))
            .map_err(|e| Error::new(MPI_ERR_NAME, format!("{service:?}: {e}")))?;
        let port = found.ok_or_else(|| {
            Error::new(
                MPI_ERR_NAME,
                format!("no port is published under {service:?}"),
            )
        })?;
        // SAFETY: the binding's contract: room for MPI_MAX_PORT_NAME bytes.
        unsafe {
            write_name(
                &port,
                port_name,
                std::ptr::null_mut(),
                MPI_MAX_PORT_NAME as usize,
            )
        }
    })
}
