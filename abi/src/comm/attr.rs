//! The communicators' attributes (the machinery is [`crate::attr`]'s), and the
//! predefined attributes of the world (`MPI_TAG_UB`, `MPI_UNIVERSE_SIZE`, ...).

use crate::attr::{get_attr_binding, keyval_bindings, AttrKind, Holder};
use crate::error::Object;
use crate::ffi::*;
use crate::state::Mpi;

impl Mpi {
    /// The value of predefined attribute `k` on `comm`, as the address the standard
    /// hands out: `None` if `k` is not a predefined key, `Some(None)` if it is one
    /// that is absent (`MPI_UNIVERSE_SIZE` when the launcher sets no bound, as hydra
    /// by default; `MPI_APPNUM` when it numbers no executables, as Slurm).
    fn predefined_attr(&mut self, comm: Handle, k: c_int) -> Option<Option<usize>> {
        let i = match k {
            MPI_TAG_UB => 0,
            MPI_HOST => 1,
            MPI_IO => 2,
            MPI_WTIME_IS_GLOBAL => 3,
            MPI_UNIVERSE_SIZE => 4,
            MPI_APPNUM => 5,
            MPI_LASTUSEDCODE => 6,
            _ => return None,
        };
        let _ = comm;
        if k == MPI_UNIVERSE_SIZE {
            if self.universe_size.is_none() {
                let u = self
                    .msg
                    .universe_size()
                    .and_then(|n| c_int::try_from(n).ok());
                self.universe_size = Some(u);
            }
            match self.universe_size.flatten() {
                Some(u) => self.attrs.values[4] = u,
                None => return Some(None),
            }
        }
        if k == MPI_APPNUM && self.appnum.is_none() {
            return Some(None);
        }
        let appnum = self.appnum.unwrap_or_default();
        let v = &mut self.attrs.values;
        v[0] = crate::p2p::TAG_UB;
        v[1] = MPI_PROC_NULL;
        v[2] = MPI_ANY_SOURCE;
        v[3] = 0;
        v[5] = appnum;
        v[6] = crate::error::last_used();
        Some(Some(&v[i] as *const c_int as usize))
    }
}

keyval_bindings!(
    PMPI_Comm_create_keyval,
    PMPI_Comm_free_keyval,
    PMPI_Comm_set_attr,
    PMPI_Comm_delete_attr,
    AttrKind::Comm,
    Object::Comm,
    Holder::comm
);

get_attr_binding!(
    PMPI_Comm_get_attr,
    Object::Comm,
    |mpi, comm, comm_keyval| {
        mpi.comm(comm)?;
        match mpi.predefined_attr(comm, comm_keyval) {
            Some(v) => v,
            None => mpi.attr(Holder::comm(comm), comm_keyval)?,
        }
    }
);

/// The MPI-1 names of the communicators' attribute calls (deprecated since MPI-2,
/// still in the ABI), the same calls: older programs read `MPI_TAG_UB` with
/// `MPI_Attr_get`.
macro_rules! mpi1_alias {
    ($old:ident => $new:ident ($($arg:ident: $ty:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $old($($arg: $ty),*) -> c_int {
            // SAFETY: the binding's contract, which is the new name's.
            unsafe { $new($($arg),*) }
        }
    };
}

mpi1_alias!(PMPI_Attr_get => PMPI_Comm_get_attr(
    comm: Handle, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int));
mpi1_alias!(PMPI_Attr_put => PMPI_Comm_set_attr(
    comm: Handle, keyval: c_int, attribute_val: *mut c_void));
mpi1_alias!(PMPI_Attr_delete => PMPI_Comm_delete_attr(comm: Handle, keyval: c_int));
mpi1_alias!(PMPI_Keyval_create => PMPI_Comm_create_keyval(
    copy_fn: *mut c_void, delete_fn: *mut c_void, keyval: *mut c_int, extra_state: *mut c_void));
mpi1_alias!(PMPI_Keyval_free => PMPI_Comm_free_keyval(keyval: *mut c_int));
