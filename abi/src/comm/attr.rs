//! Attributes: values a program hangs on communicators under keys it creates
//! (`MPI_Comm_create_keyval`), copied on `MPI_Comm_dup` and deleted on
//! `MPI_Comm_free` by its callbacks; and the predefined attributes of the world
//! (`MPI_TAG_UB`, `MPI_UNIVERSE_SIZE`, ...).

use crate::entry::{call, call_in_steps};
use crate::error::{non_null, read_arg, Error, Object, Result};
use crate::ffi::*;
use crate::global;
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

    /// How each attribute of `comm` goes to a duplicate, as its key's copy function
    /// says (`MPI_COMM_NULL_COPY_FN`: not copied; `MPI_COMM_DUP_FN`: the same value;
    /// a program's function: run by [`Copying::run`], outside the library's state).
    pub fn copyings(&self, comm: Handle) -> Result<Vec<Copying>> {
        let all = self.callbacks(comm, None, |key| key.copy)?;
        Ok(all.into_iter().map(Copying).collect())
    }

    /// The deletions of the attributes `keys` of `comm` (those set), in the reverse
    /// order of their keys: run by [`Deletion::run`], outside the library's state,
    /// before [`Mpi::forget_attrs`] takes the values off.
    pub fn deletions(&self, comm: Handle, keys: Option<c_int>) -> Result<Vec<Deletion>> {
        let all = self.callbacks(comm, keys, |key| key.delete)?;
        Ok(all.into_iter().rev().map(Deletion).collect())
    }

    /// The attributes `keys` (all: `None`) of `comm` whose key has the callback
    /// `pick` takes of it (not 0), in the order of their keys.
    fn callbacks(
        &self,
        comm: Handle,
        keys: Option<c_int>,
        pick: impl Fn(&Keyval) -> usize,
    ) -> Result<Vec<Callback>> {
        let attrs = &self.comm(comm)?.attrs;
        Ok(attrs
            .iter()
            .filter(|&(&k, _)| keys.is_none_or(|only| only == k))
            .filter_map(|(&k, &v)| {
                let key = self.attrs.keys.get(&k)?;
                let f = pick(key);
                (f != 0).then_some(Callback {
                    comm,
                    k,
                    v,
                    f,
                    extra: key.extra,
                })
            })
            .collect())
    }

    /// Take the attributes `keys` (all of them: `None`) off `comm`, their deletions
    /// run; keys freed meanwhile go once nothing is left under them.
    pub fn forget_attrs(&mut self, comm: Handle, keys: Option<c_int>) -> Result<()> {
        let attrs = &mut self.comm_mut(comm)?.attrs;
        let gone: Vec<c_int> = match keys {
            Some(k) => attrs.remove(&k).map(|_| k).into_iter().collect(),
            None => std::mem::take(attrs).into_keys().collect(),
        };
        for k in gone {
            self.drop_freed_key(k);
        }
        Ok(())
    }
}

/// An attribute of a communicator and one of its key's callbacks.
struct Callback {
    comm: Handle,
    k: c_int,
    v: usize,
    /// The copy function (1: `MPI_COMM_DUP_FN`) or the delete function.
    f: usize,
    extra: usize,
}

impl Callback {
    /// The error of the `what` function ("copy", "delete") of the attribute's key,
    /// unless its return code `rc` is `MPI_SUCCESS`.
    fn returned(&self, what: &str, rc: c_int) -> Result<()> {
        if rc == MPI_SUCCESS {
            return Ok(());
        }
        Err(Error::new(
            MPI_ERR_OTHER,
            format!(
                "the {what} function of attribute key {} returned {rc}",
                self.k
            ),
        ))
    }
}

/// An attribute to copy to a duplicate of its communicator.
pub struct Copying(Callback);

impl Copying {
    /// Its key, and the value the duplicate gets (`None`: none).
    ///
    /// # Safety
    ///
    /// Runs the program's copy function (MPI calls are allowed in it): called
    /// outside the library's state.
    pub unsafe fn run(&self) -> Result<(c_int, Option<usize>)> {
        let c = &self.0;
        if c.f == 1 {
            return Ok((c.k, Some(c.v)));
        }
        // SAFETY: MPI_Comm_create_keyval's caller gave a copy function.
        let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(c.f) };
        let (mut value, mut flag): (usize, c_int) = (0, 0);
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe {
            f(
                c.comm,
                c.k,
                c.extra as *mut c_void,
                c.v as *mut c_void,
                (&mut value as *mut usize).cast(),
                &mut flag,
            )
        };
        c.returned("copy", rc)?;
        Ok((c.k, (flag != 0).then_some(value)))
    }
}

/// An attribute's deletion: its key's delete function on its value.
pub struct Deletion(Callback);

impl Deletion {
    /// Run it.
    ///
    /// # Safety
    ///
    /// Runs the program's delete function (MPI calls are allowed in it): called
    /// outside the library's state.
    pub unsafe fn run(&self) -> Result<()> {
        let c = &self.0;
        // SAFETY: MPI_Comm_create_keyval's caller gave a delete function.
        let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(c.f) };
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe { f(c.comm, c.k, c.v as *mut c_void, c.extra as *mut c_void) };
        c.returned("delete", rc)
    }
}

/// Delete the attributes `keys` (all: `None`) of `comm`: their delete functions run
/// outside the library's state (they may call MPI, and still read the attributes),
/// then the values are taken off. A failed deletion stops there: the attributes
/// deleted before it are gone, it and those after it stay.
pub fn delete_attrs(comm: Handle, keys: Option<c_int>) -> Result<()> {
    let deletions = global::with(|mpi| mpi.deletions(comm, keys))?;
    for (i, d) in deletions.iter().enumerate() {
        // SAFETY: outside the state.
        if let Err(e) = unsafe { d.run() } {
            global::with(|mpi| {
                for done in &deletions[..i] {
                    mpi.forget_attrs(comm, Some(done.0.k))?;
                }
                Ok(())
            })?;
            return Err(e);
        }
    }
    global::with(|mpi| mpi.forget_attrs(comm, keys))
}

/// Copy the attributes of `old` to its new duplicate `new`, their copy functions
/// run outside the library's state.
pub fn copy_attrs(old: Handle, new: Handle) -> Result<()> {
    let copyings = global::with(|mpi| mpi.copyings(old))?;
    let mut copied = BTreeMap::new();
    for c in &copyings {
        // SAFETY: outside the state.
        if let (k, Some(v)) = unsafe { c.run() }? {
            copied.insert(k, v);
        }
    }
    global::with(|mpi| {
        mpi.comm_mut(new)?.attrs = copied;
        Ok(())
    })
}

/// The binding `$name` of an attribute's value on an object that `$object` names
/// (as `MPI_Comm_get_attr`): `flag` and `attribute_val` checked not null, then the
/// value `$find` gives (`None`: not set, given `$mpi`, the object `$h` and the key
/// `$keyval`); whether it was found stored at `flag` and, when it was, the value at
/// `attribute_val`.
macro_rules! get_attr_binding {
    ($name:ident, $object:path, |$mpi:ident, $h:ident, $keyval:ident| $find:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            $h: Handle,
            $keyval: c_int,
            attribute_val: *mut c_void,
            flag: *mut c_int,
        ) -> c_int {
            $crate::entry::call(&stringify!($name)[1..], $object($h), |$mpi| {
                $crate::error::non_null(flag, MPI_ERR_ARG, "flag")?;
                $crate::error::non_null(attribute_val, MPI_ERR_ARG, "value")?;
                let value: Option<usize> = $find;
                // SAFETY: checked not null; the binding's contract: `attribute_val`
                // points to a pointer.
                unsafe {
                    flag.write(c_int::from(value.is_some()));
                    if let Some(v) = value {
                        attribute_val.cast::<usize>().write(v);
                    }
                }
                Ok(())
            })
        }
    };
}
pub(crate) use get_attr_binding;

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_create_keyval(
    comm_copy_attr_fn: *mut c_void,
    comm_delete_attr_fn: *mut c_void,
    comm_keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Comm_create_keyval", Object::None, |mpi| {
        non_null(comm_keyval, MPI_ERR_ARG, "keyval")?;
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
        // SAFETY: null or readable, the binding's contract.
        let k = unsafe { read_arg(comm_keyval, MPI_ERR_ARG, "keyval") }?;
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
    call_in_steps("MPI_Comm_set_attr", Object::Comm(comm), || {
        // The old value's deletion first (it may fail, keeping it).
        global::with(|mpi| mpi.keyval(comm_keyval).map(|_| ()))?;
        delete_attrs(comm, Some(comm_keyval))?;
        global::with(|mpi| {
            mpi.comm_mut(comm)?
                .attrs
                .insert(comm_keyval, attribute_val as usize);
            Ok(())
        })
    })
}

get_attr_binding!(
    PMPI_Comm_get_attr,
    Object::Comm,
    |mpi, comm, comm_keyval| {
        mpi.comm(comm)?;
        match mpi.predefined_attr(comm, comm_keyval) {
            Some(v) => Some(v),
            None => {
                mpi.keyval(comm_keyval)?;
                mpi.comm(comm)?.attrs.get(&comm_keyval).copied()
            }
        }
    }
);

#[no_mangle]
pub unsafe extern "C" fn PMPI_Comm_delete_attr(comm: Handle, comm_keyval: c_int) -> c_int {
    call_in_steps("MPI_Comm_delete_attr", Object::Comm(comm), || {
        global::with(|mpi| {
            mpi.keyval(comm_keyval)?;
            match mpi.comm(comm)?.attrs.contains_key(&comm_keyval) {
                true => Ok(()),
                false => Err(Error::new(
                    MPI_ERR_KEYVAL,
                    format!("the communicator has no attribute under key {comm_keyval}"),
                )),
            }
        })?;
        delete_attrs(comm, Some(comm_keyval))
    })
}

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
