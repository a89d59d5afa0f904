//! Attributes on datatypes (MPI 4.1, 7.7.4), predefined ones included: copied by
//! `MPI_Type_dup`, deleted by `MPI_Type_free` (the machinery is [`crate::attr`]'s).
//! Errors on a datatype go to the handler of errors that concern no object
//! ([`crate::error::Object::None`]).

use crate::attr::{get_attr_binding, keyval_bindings, AttrKind, Holder};
use crate::error::Object;
use crate::ffi::*;

/// The handler a datatype's errors go to: none of its own.
fn no_object(_: Handle) -> Object {
    Object::None
}

keyval_bindings!(
    PMPI_Type_create_keyval,
    PMPI_Type_free_keyval,
    PMPI_Type_set_attr,
    PMPI_Type_delete_attr,
    AttrKind::Type,
    no_object,
    Holder::datatype
);

get_attr_binding!(
    PMPI_Type_get_attr,
    no_object,
    |mpi, datatype, type_keyval| { mpi.attr(Holder::datatype(datatype), type_keyval)? }
);
