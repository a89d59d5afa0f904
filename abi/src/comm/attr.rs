//! Attributes: values a program hangs on communicators under keys it creates
//! (`MPI_Comm_create_keyval`), copied on `MPI_Comm_dup` and deleted on
//! `MPI_Comm_free` by its callbacks; and the predefined attributes of the world
//! (`MPI_TAG_UB`, `MPI_UNIVERSE_SIZE`, ...).

use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::collections::BTreeMap;

/// A key and its callbacks.
#[derive(Clone, Copy, Debug)]
pub struct Keyval {
    pub copy: usize,
    pub delete: usize,
    pub extra: usize,
    /// Freed by `MPI_Comm_free_keyval`: the program can no longer name it, but the
    /// attributes still set under it keep their callbacks until they are deleted
    /// (MPI 7.7.2); it goes once none is left.
    pub freed: bool,
}

/// The keys created so far, and the storage of the predefined attributes' values.
pub struct Keyvals {
    keys: BTreeMap<c_int, Keyval>,
    next: c_int,
    /// Values of the predefined attributes (their addresses are handed out).
    values: Box<[c_int; 8]>,
}

impl Default for Keyvals {
    fn default() -> Self {
        Keyvals {
            keys: BTreeMap::new(),
            next: FIRST_KEY,
            values: Box::new([0; 8]),
        }
    }
}

/// The first key a program gets (above every predefined one).
const FIRST_KEY: c_int = 1000;

type CopyFn =
    unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
type DeleteFn = unsafe extern "C" fn(Handle, c_int, *mut c_void, *mut c_void) -> c_int;

impl Mpi {
    /// The key `k`, as the program names it (not freed).
    fn keyval(&self, k: c_int) -> Result<Keyval> {
        self.attrs
            .keys
            .get(&k)
            .filter(|key| !key.freed)
            .copied()
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_KEYVAL,
                    format!("{k} is not a key created by MPI_Comm_create_keyval (or it was freed)"),
                )
            })
    }

    /// Whether some communicator still holds an attribute under key `k`.
    fn key_in_use(&self, k: c_int) -> bool {
        self.world.attrs.contains_key(&k)
            || self.self_comm.attrs.contains_key(&k)
            || self.comms.iter().any(|(_, c)| c.attrs.contains_key(&k))
    }

    /// Forget key `k` if it was freed and no attribute is left under it.
    fn drop_freed_key(&mut self, k: c_int) {
        let freed = self.attrs.keys.get(&k).is_some_and(|key| key.freed);
        if freed && !self.key_in_use(k) {
            self.attrs.keys.remove(&k);
        }
    }

    /// The value of predefined attribute `k` on `comm`, as the address the standard
    /// hands out: `None` if `k` is not a predefined key.
    fn predefined_attr(&mut self, comm: Handle, k: c_int) -> Option<usize> {
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
        let (world, appnum) = (self.world.size() as c_int, self.appnum);
        let v = &mut self.attrs.values;
        v[0] = crate::p2p::TAG_UB;
        v[1] = MPI_PROC_NULL;
        v[2] = MPI_ANY_SOURCE;
        v[3] = 0;
        v[4] = world;
        v[5] = appnum;
        v[6] = crate::error::last_used();
        Some(&v[i] as *const c_int as usize)
    }

    /// The attributes of `old` copied for its duplicate `new` as their keys' copy
    /// functions say (`MPI_COMM_NULL_COPY_FN`: not copied; `MPI_COMM_DUP_FN`: the
    /// same value).
    pub fn copy_attrs(&mut self, old: Handle, new: Handle) -> Result<BTreeMap<c_int, usize>> {
        let attrs = self.comm(old)?.attrs.clone();
        let mut out = BTreeMap::new();
        for (k, v) in attrs {
            let Some(&key) = self.attrs.keys.get(&k) else {
                continue;
            };
            match key.copy {
                0 => {}
                1 => {
                    out.insert(k, v);
                }
                f => {
                    // SAFETY: MPI_Comm_create_keyval's caller gave a copy function.
                    let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(f) };
                    let (mut value, mut flag): (usize, c_int) = (0, 0);
                    // SAFETY: the function gets the standard's arguments.
                    let rc = unsafe {
                        f(
                            old,
                            k,
                            key.extra as *mut c_void,
                            v as *mut c_void,
                            (&mut value as *mut usize).cast(),
                            &mut flag,
                        )
                    };
                    if rc != MPI_SUCCESS {
                        return Err(Error::new(
                            MPI_ERR_OTHER,
                            format!("the copy function of attribute key {k} returned {rc}"),
                        ));
                    }
                    if flag != 0 {
                        out.insert(k, value);
                    }
                }
            }
        }
        let _ = new;
        Ok(out)
    }

    /// Run the delete function of key `k` on value `v` of `comm` (taken off it
    /// already).
    fn delete_attr(&mut self, comm: Handle, k: c_int, v: usize) -> Result<()> {
        let Some(&key) = self.attrs.keys.get(&k) else {
            return Ok(());
        };
        self.drop_freed_key(k);
        if key.delete == 0 {
            return Ok(());
        }
        // SAFETY: MPI_Comm_create_keyval's caller gave a delete function.
        let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(key.delete) };
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe { f(comm, k, v as *mut c_void, key.extra as *mut c_void) };
        if rc != MPI_SUCCESS {
            return Err(Error::new(
                MPI_ERR_OTHER,
                format!("the delete function of attribute key {k} returned {rc}"),
            ));
        }
        Ok(())
    }

    /// Delete every attribute of `comm` (it is being freed), in the reverse order
    /// of their keys.
    pub fn delete_all_attrs(&mut self, comm: Handle) -> Result<()> {
        let attrs = std::mem::take(&mut self.comm_mut(comm)?.attrs);
        for (k, v) in attrs.into_iter().rev() {
            self.delete_attr(comm, k, v)?;
        }
        Ok(())
    }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_keyval(
    comm_copy_attr_fn: *mut c_void,
    comm_delete_attr_fn: *mut c_void,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Comm_create_keyval", Object::None, |mpi| {
        if comm_keyval.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the keyval pointer is null"));
        }
        let k = mpi.attrs.next;
        mpi.attrs.next += 1;
        mpi.attrs.keys.insert(
            k,
            Keyval {
                copy: comm_copy_attr_fn as usize,
                delete: comm_delete_attr_fn as usize,
                extra: extra_state as usize,
                freed: false,
            },
        );
        // SAFETY: checked not null.
        unsafe { comm_keyval.write(k) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_free_keyval(comm_keyval: *mut c_int) -> c_int {
    call("MPI_Comm_free_keyval", Object::None, |mpi| {
        if comm_keyval.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the keyval pointer is null"));
        }
        // SAFETY: checked not null.
        let k = unsafe { *comm_keyval };
        mpi.keyval(k)?;
        if let Some(key) = mpi.attrs.keys.get_mut(&k) {
            key.freed = true;
        }
        mpi.drop_freed_key(k);
        // SAFETY: checked not null.
        unsafe { comm_keyval.write(MPI_KEYVAL_INVALID) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_set_attr(
    comm: Handle,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
) -> c_int {
    call("MPI_Comm_set_attr", Object::Comm(comm), |mpi| {
        mpi.keyval(comm_keyval)?;
        let old = mpi
            .comm_mut(comm)?
            .attrs
            .insert(comm_keyval, attribute_val as usize);
        if let Some(v) = old {
            mpi.delete_attr(comm, comm_keyval, v)?;
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_get_attr(
    comm: Handle,
    comm_keyval: c_int,
    attribute_val: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Comm_get_attr", Object::Comm(comm), |mpi| {
        if flag.is_null() || attribute_val.is_null() {
            return Err(Error::new(MPI_ERR_ARG, "the value or flag pointer is null"));
        }
        mpi.comm(comm)?;
        let value = match mpi.predefined_attr(comm, comm_keyval) {
            Some(v) => Some(v),
            None => {
                mpi.keyval(comm_keyval)?;
                mpi.comm(comm)?.attrs.get(&comm_keyval).copied()
            }
        };
        // SAFETY: checked not null: `attribute_val` points to a pointer.
        unsafe {
            flag.write(c_int::from(value.is_some()));
            if let Some(v) = value {
                attribute_val.cast::<usize>().write(v);
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_delete_attr(comm: Handle, comm_keyval: c_int) -> c_int {
    call("MPI_Comm_delete_attr", Object::Comm(comm), |mpi| {
        mpi.keyval(comm_keyval)?;
        match mpi.comm_mut(comm)?.attrs.remove(&comm_keyval) {
            Some(v) => mpi.delete_attr(comm, comm_keyval, v),
            None => Err(Error::new(
                MPI_ERR_KEYVAL,
                format!("the communicator has no attribute under key {comm_keyval}"),
            )),
        }
    })
}
