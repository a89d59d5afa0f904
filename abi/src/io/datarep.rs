//! Data representations (MPI 4.1 §14.5): `native` and `internal` (written as
//! `native`), `external32` ([`crate::datatype::external`]), and those a program
//! registers with `MPI_Register_datarep`, whose functions convert the data items
//! between memory and the file and tell the bytes each predefined type takes there.
//!
//! A registered representation is placed here where each of its predefined types
//! takes as many bytes in the file as in memory (as `external32` is, but for
//! `long` and `wchar_t`): the views' displacements then hold in both, and a file's
//! bytes map to the view as for `native`. Each access calls the conversion function
//! once, on all of its data items (position 0). The functions run inside the
//! library: like a reduction function there ([`crate::op::with_given_type`]), they
//! may ask the size and bounds of the datatype they were given, and other MPI calls
//! are refused.

use crate::comm::api::read_str;
use crate::datatype::Datatype;
use crate::entry::call;
use crate::error::{Error, Object, Result};
use crate::ffi::*;
use crate::state::Mpi;
use std::ffi::{CStr, CString};

/// A view's data representation.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Rep {
    Native,
    Internal,
    External32,
    /// The program's, by its place in [`Mpi::datareps`].
    User(usize),
}

/// A program's conversion function: the `int`-count form of
/// `MPI_Register_datarep`, or the `MPI_Count` one of `MPI_Register_datarep_c`.
#[derive(Clone, Copy)]
enum Convert {
    Int(usize),
    Large(usize),
}

/// A representation the program registered.
pub struct Datarep {
    name: CString,
    /// `None`: `MPI_CONVERSION_FN_NULL`, the data moved as `native`.
    read: Option<Convert>,
    write: Option<Convert>,
    extent: usize,
    extra: usize,
}

type IntFn =
    unsafe extern "C" fn(*mut c_void, Handle, c_int, *mut c_void, Count, *mut c_void) -> c_int;
type LargeFn =
    unsafe extern "C" fn(*mut c_void, Handle, Count, *mut c_void, Count, *mut c_void) -> c_int;
type ExtentFn = unsafe extern "C" fn(Handle, *mut Aint, *mut c_void) -> c_int;

impl Datarep {
    /// Its conversion function to write (`write`) or to read, unless that is
    /// `MPI_CONVERSION_FN_NULL` (the data moves as `native`).
    fn function(&self, write: bool) -> Option<Convert> {
        if write {
            self.write
        } else {
            self.read
        }
    }

    /// Whether it converts data to write (`write`) or to read.
    pub fn converts(&self, write: bool) -> bool {
        self.function(write).is_some()
    }

    /// Call its read (`write` false) or write conversion function on `items` data
    /// items of the program's buffer `buf` of type `ty` (`t`), from position 0, and
    /// `file` holding them in the file's form (nothing if it does not convert that
    /// way).
    ///
    /// # Safety
    ///
    /// `buf` holds the items as `t` lays them out (writable to read), and `file` their
    /// bytes in the file.
    pub unsafe fn convert(
        &self,
        write: bool,
        (buf, ty, t): (*mut c_void, Handle, &Datatype),
        items: usize,
        file: &mut [u8],
    ) -> Result<()> {
        let Some(f) = self.function(write) else {
            return Ok(());
        };
        let (fb, extra) = (file.as_mut_ptr().cast(), self.extra as *mut c_void);
        let code = crate::op::with_given_type(ty, t, || -> Result<c_int> {
            match f {
                Convert::Int(f) => {
                    let n = c_int::try_from(items).map_err(|_| too_many(items))?;
                    // SAFETY: MPI_Register_datarep's caller gave a function of this type;
                    // the buffers as the caller's contract says.
                    Ok(unsafe { std::mem::transmute::<usize, IntFn>(f)(buf, ty, n, fb, 0, extra) })
                }
                // SAFETY: as above, of MPI_Register_datarep_c.
                Convert::Large(f) => Ok(unsafe {
                    std::mem::transmute::<usize, LargeFn>(f)(buf, ty, items as Count, fb, 0, extra)
                }),
            }
        })?;
        if code != MPI_SUCCESS {
            let way = if write { "write" } else { "read" };
            return Err(Error::new(
                MPI_ERR_CONVERSION,
                format!(
                    "the {way} conversion function of data representation {:?} returned {code}",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// Check that each predefined type of `t` (handle `h`) takes as many bytes in
    /// the file as in memory, asking the representation's extent function.
    fn check_layout(&self, (h, t): (Handle, &Datatype), what: &str) -> Result<()> {
        let mut leaves = Vec::new();
        predefined_leaves((h, t), &mut leaves);
        for (h, t) in leaves {
            let mut extent: Aint = -1;
            // SAFETY: MPI_Register_datarep's caller gave a function of this type,
            // checked not null.
            let f = unsafe { std::mem::transmute::<usize, ExtentFn>(self.extent) };
            let extra = self.extra as *mut c_void;
            // SAFETY: the function's contract: `extent` is writable.
            let code = crate::op::with_given_type(h, t, || unsafe { f(h, &mut extent, extra) });
            if code != MPI_SUCCESS {
                return Err(Error::new(
                    MPI_ERR_CONVERSION,
                    format!(
                        "the extent function of data representation {:?} returned {code} for {}",
                        self.name, t.name
                    ),
                ));
            }
            if extent != t.size as Aint {
                return Err(Error::new(
                    MPI_ERR_UNSUPPORTED_DATAREP,
                    format!("the {what} holds {} ({} bytes here), of {extent} bytes in data representation {:?}: this library places a program's representations where every type keeps its size", t.name, t.size, self.name),
                ));
            }
        }
        Ok(())
    }
}

/// The error of `items` data items, more than a conversion function of the `int`
/// form takes.
fn too_many(items: usize) -> Error {
    Error::new(
        MPI_ERR_COUNT,
        format!("{items} data items are more than a conversion function of MPI_Register_datarep takes (an int): use MPI_Register_datarep_c"),
    )
}

/// The predefined types `t` (handle `h`) is made of, each once.
fn predefined_leaves<'a>((h, t): (Handle, &'a Datatype), out: &mut Vec<(Handle, &'a Datatype)>) {
    match &t.envelope {
        Some(env) if !t.predefined => {
            for (&h, t) in env.types.iter().zip(t.made_of.iter()) {
                predefined_leaves((h, t), out);
            }
        }
        _ if out.iter().any(|&(k, _)| k == h) => {}
        _ => out.push((h, t)),
    }
}

impl Mpi {
    /// The representation named `name` (`MPI_File_set_view`'s argument).
    pub fn rep_named(&self, name: &str) -> Result<Rep> {
        Ok(match name {
            "native" => Rep::Native,
            "internal" => Rep::Internal,
            "external32" => Rep::External32,
            _ => match self.datareps.iter().position(|d| d.name.to_bytes() == name.as_bytes()) {
                Some(i) => Rep::User(i),
                None => {
                    return Err(Error::new(
                        MPI_ERR_UNSUPPORTED_DATAREP,
                        format!("data representation {name:?}: this library knows \"native\", \"internal\" (written as native), \"external32\" and those registered with MPI_Register_datarep"),
                    ))
                }
            },
        })
    }

    /// The name of representation `rep`.
    pub fn rep_name(&self, rep: Rep) -> &CStr {
        match rep {
            Rep::Native => c"native",
            Rep::Internal => c"internal",
            Rep::External32 => c"external32",
            Rep::User(i) => &self.datareps[i].name,
        }
    }

    /// The program's representation `rep`, if it is one.
    pub fn datarep(&self, rep: Rep) -> Option<&Datarep> {
        match rep {
            Rep::User(i) => self.datareps.get(i),
            _ => None,
        }
    }

    /// Check that the elements of type `t` (handle `h`), a view's `what`, are placed
    /// in representation `rep`: each takes as many bytes there as here.
    pub fn check_layout(&self, rep: Rep, (h, t): (Handle, &Datatype), what: &str) -> Result<()> {
        match rep {
            Rep::Native | Rep::Internal => Ok(()),
            Rep::External32 => external_layout(t, what),
            Rep::User(i) => self.datareps[i].check_layout((h, t), what),
        }
    }
}

/// Check that the elements of a view's `what` (`t`) take as many bytes in
/// `external32` as here.
fn external_layout(t: &Datatype, what: &str) -> Result<()> {
    if t.sig.keeps_size() {
        return Ok(());
    }
    Err(Error::new(
        MPI_ERR_UNSUPPORTED_DATAREP,
        format!("the {what} holds elements of another size in external32 (long, unsigned long or wchar_t): this library does not place them in external32 files"),
    ))
}

/// `MPI_Register_datarep(_c)`: register representation `name` with its functions
/// (`large`: those of the `_c` form).
///
/// # Safety
///
/// `name` is null or a NUL-ended string; the functions are null or of the form's
/// types.
unsafe fn register(
    binding: &str,
    name: *const c_char,
    (read, write, extent): (*mut c_void, *mut c_void, *mut c_void),
    extra: *mut c_void,
    large: bool,
) -> c_int {
    call(binding, Object::File(MPI_FILE_NULL), |mpi| {
        // SAFETY: the binding's contract.
        let name = unsafe { read_str(name) }?;
        if name.is_empty() || name.len() >= MPI_MAX_DATAREP_STRING as usize {
            return Err(Error::new(
                MPI_ERR_ARG,
                format!(
                    "a data representation's name takes 1 to {} bytes, not {}",
                    MPI_MAX_DATAREP_STRING - 1,
                    name.len()
                ),
            ));
        }
        if mpi.rep_named(&name).is_ok() {
            return Err(Error::new(
                MPI_ERR_DUP_DATAREP,
                format!("data representation {name:?} is defined already"),
            ));
        }
        crate::error::non_null(extent, MPI_ERR_ARG, "extent function")?;
        let function = |f: *mut c_void| {
            (!f.is_null()).then_some(match large {
                true => Convert::Large(f as usize),
                false => Convert::Int(f as usize),
            })
        };
        let name = CString::new(name).map_err(|_| Error::new(MPI_ERR_ARG, "a NUL in the name"))?;
        mpi.datareps.push(Datarep {
            name,
            read: function(read),
            write: function(write),
            extent: extent as usize,
            extra: extra as usize,
        });
        Ok(())
    })
}

/// The binding `$name` of `MPI_Register_datarep` (`large`: its `_c` form).
macro_rules! register_binding {
    ($name:ident, $large:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            datarep: *const c_char,
            read_conversion_fn: *mut c_void,
            write_conversion_fn: *mut c_void,
            dtype_file_extent_fn: *mut c_void,
            extra_state: *mut c_void,
        ) -> c_int {
            let fns = (
                read_conversion_fn,
                write_conversion_fn,
                dtype_file_extent_fn,
            );
            // SAFETY: the binding's contract.
            unsafe { register(&stringify!($name)[1..], datarep, fns, extra_state, $large) }
        }
    };
}

register_binding!(PMPI_Register_datarep, false);
register_binding!(PMPI_Register_datarep_c, true);
