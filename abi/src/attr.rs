//! Attributes (MPI 4.1, 7.7): values a program hangs on communicators, datatypes
//! and windows under keys it creates (`MPI_Comm_create_keyval`,
//! `MPI_Type_create_keyval`, `MPI_Win_create_keyval`), copied when a communicator
//! or a datatype is duplicated and deleted when the object is freed, by the key's
//! callbacks, which run outside the library's state (they may call MPI). The
//! bindings of each kind are beside its objects ([`crate::comm::attr`],
//! [`crate::datatype::attr`], [`crate::rma::api`]).

use crate::error::{Error, Result};
use crate::ffi::*;
use crate::global;
use crate::state::Mpi;
use std::collections::{BTreeMap, HashMap};

/// The attributes of one object: by key, the value and when it was set (a number
/// that grows with each setting in the process).
pub type Attrs = BTreeMap<c_int, (usize, u64)>;

/// The objects a key's attributes hang on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    Comm,
    Type,
    Win,
}

impl AttrKind {
    /// The key's creator, as errors name it.
    fn creator(self) -> &'static str {
        match self {
            AttrKind::Comm => "MPI_Comm_create_keyval",
            AttrKind::Type => "MPI_Type_create_keyval",
            AttrKind::Win => "MPI_Win_create_keyval",
        }
    }
}

/// An object attributes hang on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub kind: AttrKind,
    pub handle: Handle,
}

impl Holder {
    pub fn comm(h: Handle) -> Holder {
        Holder {
            kind: AttrKind::Comm,
            handle: h,
        }
    }

    pub fn datatype(h: Handle) -> Holder {
        Holder {
            kind: AttrKind::Type,
            handle: h,
        }
    }

    pub fn win(h: Handle) -> Holder {
        Holder {
            kind: AttrKind::Win,
            handle: h,
        }
    }
}

/// A key and its callbacks.
#[derive(Clone, Copy, Debug)]
pub struct Keyval {
    pub kind: AttrKind,
    pub copy: usize,
    pub delete: usize,
    pub extra: usize,
    /// Freed by its kind's `free_keyval`: the program can no longer name it, but
    /// the attributes still set under it keep their callbacks until they are
    /// deleted (MPI 7.7.2); it goes once none is left.
    pub freed: bool,
}

/// The keys created so far, the attributes of datatypes and windows (those of a
/// communicator are in it), and the storage of the predefined attributes' values.
pub struct Keyvals {
    keys: BTreeMap<c_int, Keyval>,
    next: c_int,
    /// Attributes set so far.
    settings: u64,
    on_types: HashMap<Handle, Attrs>,
    on_wins: HashMap<Handle, Attrs>,
    /// Values of the predefined attributes (their addresses are handed out).
    pub values: Box<[c_int; 8]>,
}

impl Default for Keyvals {
    fn default() -> Self {
        Keyvals {
            keys: BTreeMap::new(),
            next: FIRST_KEY,
            settings: 0,
            on_types: HashMap::new(),
            on_wins: HashMap::new(),
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
    /// A new key of `kind` with these callbacks.
    pub fn create_keyval(
        &mut self,
        kind: AttrKind,
        copy: usize,
        delete: usize,
        extra: usize,
    ) -> c_int {
        let k = self.attrs.next;
        self.attrs.next += 1;
        let key = Keyval {
            kind,
            copy,
            delete,
            extra,
            freed: false,
        };
        self.attrs.keys.insert(k, key);
        k
    }

    /// Free key `k` of `kind`: it goes once no attribute is left under it. (Freed
    /// again meanwhile, as MPICH allows, it stays freed.)
    pub fn free_keyval(&mut self, kind: AttrKind, k: c_int) -> Result<()> {
        self.key(kind, k, true)?;
        if let Some(key) = self.attrs.keys.get_mut(&k) {
            key.freed = true;
        }
        self.drop_freed_key(k);
        Ok(())
    }

    /// The key `k` of `kind`, as the program names it (not freed).
    pub fn keyval(&self, kind: AttrKind, k: c_int) -> Result<Keyval> {
        self.key(kind, k, false)
    }

    /// The key `k` of `kind`: not freed, or (`held`) freed while attributes are
    /// still under it, which the program reads and deletes under it (MPI 4.1,
    /// 7.7.2). A freed key goes once none is left.
    fn key(&self, kind: AttrKind, k: c_int, held: bool) -> Result<Keyval> {
        self.attrs
            .keys
            .get(&k)
            .filter(|key| (held || !key.freed) && key.kind == kind)
            .copied()
            .ok_or_else(|| {
                Error::new(
                    MPI_ERR_KEYVAL,
                    format!(
                        "{k} is not a key created by {} (or it was freed)",
                        kind.creator()
                    ),
                )
            })
    }

    /// The attributes of `o` (`None`: none set yet), the object checked.
    pub fn attrs_of(&self, o: Holder) -> Result<Option<&Attrs>> {
        Ok(match o.kind {
            AttrKind::Comm => Some(&self.comm(o.handle)?.attrs),
            AttrKind::Type => {
                self.dtype_any(o.handle)?;
                self.attrs.on_types.get(&o.handle)
            }
            AttrKind::Win => {
                self.win(o.handle)?;
                self.attrs.on_wins.get(&o.handle)
            }
        })
    }

    /// The attributes of `o`, to change, the object checked.
    pub fn attrs_of_mut(&mut self, o: Holder) -> Result<&mut Attrs> {
        Ok(match o.kind {
            AttrKind::Comm => &mut self.comm_mut(o.handle)?.attrs,
            AttrKind::Type => {
                self.dtype_any(o.handle)?;
                self.attrs.on_types.entry(o.handle).or_default()
            }
            AttrKind::Win => {
                self.win(o.handle)?;
                self.attrs.on_wins.entry(o.handle).or_default()
            }
        })
    }

    /// The value of attribute `k` of `o`, if set (the key checked).
    pub fn attr(&self, o: Holder, k: c_int) -> Result<Option<usize>> {
        self.key(o.kind, k, true)?;
        Ok(self.attrs_of(o)?.and_then(|a| a.get(&k)).map(|a| a.0))
    }

    /// Whether some object still holds an attribute under key `k`.
    fn key_in_use(&self, k: c_int) -> bool {
        let held = |m: &HashMap<Handle, Attrs>| m.values().any(|a| a.contains_key(&k));
        self.world.attrs.contains_key(&k)
            || self.self_comm.attrs.contains_key(&k)
            || self.comms.iter().any(|(_, c)| c.attrs.contains_key(&k))
            || held(&self.attrs.on_types)
            || held(&self.attrs.on_wins)
    }

    /// Forget key `k` if it was freed and no attribute is left under it.
    fn drop_freed_key(&mut self, k: c_int) {
        let freed = self.attrs.keys.get(&k).is_some_and(|key| key.freed);
        if freed && !self.key_in_use(k) {
            self.attrs.keys.remove(&k);
        }
    }

    /// How each attribute of `o` goes to a duplicate, as its key's copy function
    /// says (`MPI_*_NULL_COPY_FN`: not copied; `MPI_*_DUP_FN`: the same value; a
    /// program's function: run by [`Copying::run`], outside the library's state).
    fn copyings(&self, o: Holder) -> Result<Vec<Copying>> {
        let all = self.callbacks(o, None, |key| key.copy)?;
        Ok(all.into_iter().map(Copying).collect())
    }

    /// The deletions of the attributes `keys` of `o` (those set), in the reverse
    /// order of their setting (as MPI 4.1, 11.2.4 asks of `MPI_COMM_SELF`'s at
    /// `MPI_Finalize`): run by [`Deletion::run`], outside the library's state,
    /// before [`Mpi::forget_attrs`] takes the values off.
    fn deletions(&self, o: Holder, keys: Option<c_int>) -> Result<Vec<Deletion>> {
        let mut all = self.callbacks(o, keys, |key| key.delete)?;
        all.sort_by_key(|c| std::cmp::Reverse(c.set));
        Ok(all.into_iter().map(Deletion).collect())
    }

    /// The attributes `keys` (all: `None`) of `o` whose key has the callback
    /// `pick` takes of it (not 0), in the order of their keys.
    fn callbacks(
        &self,
        o: Holder,
        keys: Option<c_int>,
        pick: impl Fn(&Keyval) -> usize,
    ) -> Result<Vec<Callback>> {
        let Some(attrs) = self.attrs_of(o)? else {
            return Ok(Vec::new());
        };
        Ok(attrs
            .iter()
            .filter(|&(&k, _)| keys.is_none_or(|only| only == k))
            .filter_map(|(&k, &(v, set))| {
                let key = self.attrs.keys.get(&k)?;
                let f = pick(key);
                (f != 0).then_some(Callback {
                    object: o.handle,
                    k,
                    v,
                    set,
                    f,
                    extra: key.extra,
                })
            })
            .collect())
    }

    /// Take the attributes `keys` (all of them: `None`) off `o`, their deletions
    /// run; keys freed meanwhile go once nothing is left under them.
    pub fn forget_attrs(&mut self, o: Holder, keys: Option<c_int>) -> Result<()> {
        let attrs = self.attrs_of_mut(o)?;
        let gone: Vec<c_int> = match keys {
            Some(k) => attrs.remove(&k).map(|_| k).into_iter().collect(),
            None => std::mem::take(attrs).into_keys().collect(),
        };
        // A freed datatype's or window's handle may be handed out again.
        let empty = attrs.is_empty();
        match o.kind {
            AttrKind::Type if empty => _ = self.attrs.on_types.remove(&o.handle),
            AttrKind::Win if empty => _ = self.attrs.on_wins.remove(&o.handle),
            _ => {}
        }
        for k in gone {
            self.drop_freed_key(k);
        }
        Ok(())
    }
}

/// An attribute of an object and one of its key's callbacks.
struct Callback {
    object: Handle,
    k: c_int,
    v: usize,
    /// When the attribute was set.
    set: u64,
    /// The copy function (1: `MPI_*_DUP_FN`) or the delete function.
    f: usize,
    extra: usize,
}

impl Callback {
    /// The error of the `what` function ("copy", "delete") of the attribute's key,
    /// unless its return code `rc` is `MPI_SUCCESS` ([`Error::returned`]: a class or
    /// code of the program's is returned as it is, as MPICH returns it).
    fn returned(&self, what: &str, rc: c_int) -> Result<()> {
        if rc == MPI_SUCCESS {
            return Ok(());
        }
        Err(Error::returned(
            rc,
            format!(
                "the {what} function of attribute key {} returned {rc}",
                self.k
            ),
        ))
    }
}

/// An attribute to copy to a duplicate of its object.
struct Copying(Callback);

impl Copying {
    /// Its key, and the value the duplicate gets (`None`: none).
    ///
    /// # Safety
    ///
    /// Runs the program's copy function (MPI calls are allowed in it): called
    /// outside the library's state.
    unsafe fn run(&self) -> Result<(c_int, Option<(usize, u64)>)> {
        let c = &self.0;
        if c.f == 1 {
            return Ok((c.k, Some((c.v, c.set))));
        }
        // SAFETY: the key's creator was given a copy function.
        let f: CopyFn = unsafe { std::mem::transmute::<usize, CopyFn>(c.f) };
        let (mut value, mut flag): (usize, c_int) = (0, 0);
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe {
            f(
                c.object,
                c.k,
                c.extra as *mut c_void,
                c.v as *mut c_void,
                (&mut value as *mut usize).cast(),
                &mut flag,
            )
        };
        c.returned("copy", rc)?;
        Ok((c.k, (flag != 0).then_some((value, c.set))))
    }
}

/// An attribute's deletion: its key's delete function on its value.
struct Deletion(Callback);

impl Deletion {
    /// Run it.
    ///
    /// # Safety
    ///
    /// Runs the program's delete function (MPI calls are allowed in it): called
    /// outside the library's state.
    unsafe fn run(&self) -> Result<()> {
        let c = &self.0;
        // SAFETY: the key's creator was given a delete function.
        let f: DeleteFn = unsafe { std::mem::transmute::<usize, DeleteFn>(c.f) };
        // SAFETY: the function gets the standard's arguments.
        let rc = unsafe { f(c.object, c.k, c.v as *mut c_void, c.extra as *mut c_void) };
        c.returned("delete", rc)
    }
}

/// Delete the attributes `keys` (all: `None`) of `o`: their delete functions run
/// outside the library's state (they may call MPI, and still read the attributes),
/// then the values are taken off. A failed deletion stops there: the attributes
/// deleted before it are gone, it and those after it stay.
pub fn delete_attrs(o: Holder, keys: Option<c_int>) -> Result<()> {
    let deletions = global::with(|mpi| mpi.deletions(o, keys))?;
    for (i, d) in deletions.iter().enumerate() {
        // SAFETY: outside the state.
        if let Err(e) = unsafe { d.run() } {
            global::with(|mpi| {
                for done in &deletions[..i] {
                    mpi.forget_attrs(o, Some(done.0.k))?;
                }
                Ok(())
            })?;
            return Err(e);
        }
    }
    global::with(|mpi| mpi.forget_attrs(o, keys))
}

/// Copy the attributes of `old` to its new duplicate `new`, their copy functions
/// run outside the library's state. A failed copy stops there: the attributes
/// copied before it are deleted from `new`, their delete functions run (as when a
/// duplicate is freed), for the caller to free it bare.
pub fn copy_attrs(old: Holder, new: Holder) -> Result<()> {
    let copyings = global::with(|mpi| mpi.copyings(old))?;
    let mut copied = Attrs::new();
    let mut failed = None;
    for c in &copyings {
        // SAFETY: outside the state.
        match unsafe { c.run() } {
            Ok((k, Some(v))) => _ = copied.insert(k, v),
            Ok((_, None)) => {}
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    if !copied.is_empty() {
        global::with(|mpi| {
            *mpi.attrs_of_mut(new)? = copied;
            Ok(())
        })?;
    }
    let Some(e) = failed else {
        return Ok(());
    };
    // The copy's error is the one reported; a deletion that fails leaves the
    // attributes after it, taken off unrun.
    if delete_attrs(new, None).is_err() {
        global::with(|mpi| mpi.forget_attrs(new, None))?;
    }
    Err(e)
}

/// Set attribute `k` of `o` to `value`, the old value's deletion first (it may
/// fail, keeping it).
pub fn set_attr(o: Holder, k: c_int, value: usize) -> Result<()> {
    global::with(|mpi| mpi.keyval(o.kind, k).map(|_| ()))?;
    delete_attrs(o, Some(k))?;
    global::with(|mpi| {
        let set = mpi.attrs.settings;
        mpi.attrs_of_mut(o)?.insert(k, (value, set));
        mpi.attrs.settings += 1;
        Ok(())
    })
}

/// Delete attribute `k` of `o` (`MPI_ERR_KEYVAL` if it has none).
pub fn delete_attr(o: Holder, k: c_int) -> Result<()> {
    global::with(|mpi| match mpi.attr(o, k)? {
        Some(_) => Ok(()),
        None => Err(Error::new(
            MPI_ERR_KEYVAL,
            format!("the object has no attribute under key {k}"),
        )),
    })?;
    delete_attrs(o, Some(k))
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

/// The bindings of one kind of object's keys and attributes but the getter:
/// `$create` (`create_keyval`), `$free` (`free_keyval`), `$set` (`set_attr`) and
/// `$delete` (`delete_attr`), for objects of `$kind`, whose errors go to the handler
/// of `$object(handle)`, and which `$holder(handle)` names as attribute holders.
macro_rules! keyval_bindings {
    ($create:ident, $free:ident, $set:ident, $delete:ident,
     $kind:expr, $object:expr, $holder:path) => {
        #[no_mangle]
        pub unsafe extern "C" fn $create(
            copy_attr_fn: *mut c_void,
            delete_attr_fn: *mut c_void,
            keyval: *mut c_int,
            extra_state: *mut c_void,
        ) -> c_int {
            $crate::entry::call(
                &stringify!($create)[1..],
                $crate::error::Object::None,
                |mpi| {
                    $crate::error::non_null(keyval, MPI_ERR_ARG, "keyval")?;
                    let k = mpi.create_keyval(
                        $kind,
                        copy_attr_fn as usize,
                        delete_attr_fn as usize,
                        extra_state as usize,
                    );
                    // SAFETY: checked not null.
                    unsafe { keyval.write(k) };
                    Ok(())
                },
            )
        }

        #[no_mangle]
        pub unsafe extern "C" fn $free(keyval: *mut c_int) -> c_int {
            $crate::entry::call(
                &stringify!($free)[1..],
                $crate::error::Object::None,
                |mpi| {
                    // SAFETY: null or readable, the binding's contract.
                    let k = unsafe { $crate::error::read_arg(keyval, MPI_ERR_ARG, "keyval") }?;
                    mpi.free_keyval($kind, k)?;
                    // SAFETY: checked not null.
                    unsafe { keyval.write(MPI_KEYVAL_INVALID) };
                    Ok(())
                },
            )
        }

        #[no_mangle]
        pub unsafe extern "C" fn $set(h: Handle, keyval: c_int, value: *mut c_void) -> c_int {
            $crate::entry::call_in_steps(&stringify!($set)[1..], ($object)(h), || {
                $crate::attr::set_attr($holder(h), keyval, value as usize)
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $delete(h: Handle, keyval: c_int) -> c_int {
            $crate::entry::call_in_steps(&stringify!($delete)[1..], ($object)(h), || {
                $crate::attr::delete_attr($holder(h), keyval)
            })
        }
    };
}
pub(crate) use keyval_bindings;
