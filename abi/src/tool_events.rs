//! The tool interface's events, event sources and enumerations (MPI 4.1 chapter
//! 15), of which this library has none: no event type, no source, and no variable
//! whose values are named by an enumeration. Their counts are 0, no index is valid
//! (`MPI_T_ERR_INVALID_INDEX`), no name is one's (`MPI_T_ERR_INVALID_NAME`), and no
//! handle is one (`MPI_T_ERR_INVALID_HANDLE`): registrations come only from an
//! event's index, instances only to a registration's callback, and enumerations
//! only from a variable's description. As everywhere in the interface, each call
//! before `MPI_T_init_thread` or after the last `MPI_T_finalize` is
//! `MPI_T_ERR_NOT_INITIALIZED`.

use crate::ffi::*;
use crate::tool::{index_of, with};

/// The answer to every call that names one of the kinds this library has none of.
fn none(code: c_int) -> c_int {
    with(|_| Err(code))
}

/// Counts of the kinds this library has none of.
macro_rules! none_of {
    ($($name:ident),+) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(num: *mut c_int) -> c_int {
            // SAFETY: the binding's contract: null or writable.
            with(|_| unsafe { $crate::tool::write_out(num, 0) })
        }
    )+};
}

none_of!(PMPI_T_event_get_num, PMPI_T_source_get_num);

/// With no events, no name is one (`MPI_T_ERR_INVALID_NAME`, as for the other kinds).
#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_get_index(
    name: *const c_char,
    event_index: *mut c_int,
) -> c_int {
    // SAFETY: the binding's contract.
    with(|_| unsafe { index_of(std::iter::empty(), name, event_index) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_get_info(
    _event_index: c_int,
    _name: *mut c_char,
    _name_len: *mut c_int,
    _verbosity: *mut c_int,
    _array_of_datatypes: *mut Handle,
    _array_of_displacements: *mut Aint,
    _num_elements: *mut c_int,
    _enumtype: *mut Handle,
    _info: *mut Handle,
    _desc: *mut c_char,
    _desc_len: *mut c_int,
    _bind: *mut c_int,
) -> c_int {
    none(MPI_T_ERR_INVALID_INDEX)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_handle_alloc(
    _event_index: c_int,
    _obj_handle: *mut c_void,
    _info: Handle,
    _event_registration: *mut Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_INDEX)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_source_get_info(
    _source_index: c_int,
    _name: *mut c_char,
    _name_len: *mut c_int,
    _desc: *mut c_char,
    _desc_len: *mut c_int,
    _ordering: *mut c_int,
    _ticks_per_second: *mut Count,
    _max_ticks: *mut Count,
    _info: *mut Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_INDEX)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_source_get_timestamp(
    _source_index: c_int,
    _timestamp: *mut Count,
) -> c_int {
    none(MPI_T_ERR_INVALID_INDEX)
}

// Registrations: only `MPI_T_event_handle_alloc` makes one.

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_handle_free(
    _event_registration: Handle,
    _user_data: *mut c_void,
    _free_cb_function: Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_handle_get_info(
    _event_registration: Handle,
    _info_used: *mut Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_handle_set_info(
    _event_registration: Handle,
    _info: Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_register_callback(
    _event_registration: Handle,
    _cb_safety: c_int,
    _info: Handle,
    _user_data: *mut c_void,
    _event_cb_function: Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_callback_get_info(
    _event_registration: Handle,
    _cb_safety: c_int,
    _info_used: *mut Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_callback_set_info(
    _event_registration: Handle,
    _cb_safety: c_int,
    _info: Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_set_dropped_handler(
    _event_registration: Handle,
    _dropped_cb_function: Handle,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

// Instances: only a registration's callback is given one.

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_copy(_event_instance: Handle, _buffer: *mut c_void) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_read(
    _event_instance: Handle,
    _element_index: c_int,
    _buffer: *mut c_void,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_get_source(
    _event_instance: Handle,
    _source_index: *mut c_int,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_event_get_timestamp(
    _event_instance: Handle,
    _event_timestamp: *mut Count,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

// Enumerations: only a variable's description gives one, and none does
// (`MPI_T_ENUM_NULL`).

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_enum_get_info(
    _enumtype: Handle,
    _num: *mut c_int,
    _name: *mut c_char,
    _name_len: *mut c_int,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_enum_get_item(
    _enumtype: Handle,
    _indx: c_int,
    _value: *mut c_int,
    _name: *mut c_char,
    _name_len: *mut c_int,
) -> c_int {
    none(MPI_T_ERR_INVALID_HANDLE)
}
