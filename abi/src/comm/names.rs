//! The launcher's name service (MPI 4.1, 11.8.6): `MPI_Publish_name`,
//! `MPI_Unpublish_name` and `MPI_Lookup_name`, through PMI's `publish_name`,
//! `unpublish_name` and `lookup_name` (rbtlrun's, hydra's, and Slurm's `pmi2`
//! plugin's, where srun keeps the names of its job step). A service is looked up
//! before it is published or withdrawn, and refused if it is published already or
//! not at all: Slurm would replace it, or answer yes.

use super::api::read_str;
use crate::entry::call;
use crate::error::{Error, Object};
use crate::ffi::*;

/// The binding `name` that publishes or withdraws a service (`how`, given the
/// service and the port), once a lookup found it published if `published`, or not
/// published if not: its errors are of class `MPI_ERR_SERVICE` (but for a bad
/// `info`).
///
/// # Safety
///
/// Both strings are null or NUL-ended.
unsafe fn service_binding(
    name: &str,
    (service, port): (*const c_char, *const c_char),
    info: Handle,
    published: bool,
    how: fn(&mut rbtl::msg::Comm, &str, &str) -> rbtl::msg::Result<()>,
) -> c_int {
    call(name, Object::None, |mpi| {
        crate::info::check(info)?;
        // SAFETY: the caller's contract.
        let (service, port) = unsafe { (read_str(service)?, read_str(port)?) };
        let refused = |e| Error::new(MPI_ERR_SERVICE, format!("{service:?}: {e}"));
        if mpi.msg.lookup_name(&service).map_err(refused)?.is_some() != published {
            let why = match published {
                true => "is not published",
                false => "is published already",
            };
            return Err(Error::new(MPI_ERR_SERVICE, format!("{service:?} {why}")));
        }
        how(&mut mpi.msg, &service, &port).map_err(refused)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Publish_name(
    service_name: *const c_char,
    info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    let publish = |m: &mut rbtl::msg::Comm, s: &str, p: &str| m.publish_name(s, p);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Publish_name", names, info, false, publish) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Unpublish_name(
    service_name: *const c_char,
    info: Handle,
    port_name: *const c_char,
) -> c_int {
    let names = (service_name, port_name);
    let withdraw = |m: &mut rbtl::msg::Comm, s: &str, _: &str| m.unpublish_name(s);
    // SAFETY: the binding's contract.
    unsafe { service_binding("MPI_Unpublish_name", names, info, true, withdraw) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Lookup_name(
    service_name: *const c_char,
    info: Handle,
    port_name: *mut c_char,
) -> c_int {
    call("MPI_Lookup_name", Object::None, |mpi| {
        crate::info::check(info)?;
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
        unsafe { super::ports::write_port(&port, port_name) }
    })
}
