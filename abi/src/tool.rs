//! The tool information interface (MPI 4.1 chapter 15), as Open MPI offers its MCA
//! parameters: every rbtl configuration parameter is a control variable, with its
//! description, in one category per component (the name's first two parts,
//! `btl_sm`, `msg_peer`, ... or its only part), read-only (`MPI_T_SCOPE_READONLY`:
//! the transports read the configuration once, when they start). The values are
//! the configuration's (`RBTL_*` variables, `RBTL_CONFIG_FILE`, the defaults), as
//! the first `MPI_T_init_thread` found them. The performance variables are in
//! `pvar`; the events, sources and enumerations, of which there are none, in
//! `tool_events`.
//!
//! The interface works before `MPI_Init` and after `MPI_Finalize`, and from any
//! thread: it has a lock of its own.

use crate::ffi::*;
use rbtl::config::Value;
use std::sync::Mutex;

/// A control variable: a configuration parameter.
struct Var {
    name: String,
    description: String,
    value: Value,
}

/// What `MPI_T_init_thread` loaded, and how many times it was called.
pub(crate) struct Tool {
    inits: usize,
    vars: Vec<Var>,
    /// Each category's name and its variables.
    categories: Vec<(String, Vec<usize>)>,
}

static TOOL: Mutex<Option<Tool>> = Mutex::new(None);

/// The category of parameter `name`: its first two parts, or its only part.
fn category_of(name: &str) -> &str {
    let mut parts = name.match_indices('_');
    match (parts.next(), parts.next()) {
        (Some(_), Some((second, _))) => &name[..second],
        _ => name,
    }
}

/// Run `f` on the loaded interface (`MPI_T_ERR_NOT_INITIALIZED` before
/// `MPI_T_init_thread`).
pub(crate) fn with(f: impl FnOnce(&mut Tool) -> Result<(), c_int>) -> c_int {
    let mut t = TOOL.lock().unwrap_or_else(|e| e.into_inner());
    match t.as_mut() {
        Some(tool) if tool.inits > 0 => f(tool).err().unwrap_or(MPI_SUCCESS),
        _ => MPI_T_ERR_NOT_INITIALIZED,
    }
}

/// The interface's string convention: with `len` null or 0, the length `s` needs
/// (with its terminator) into `len`; else `s` cut to fit `*len` bytes with its
/// terminator, and the bytes stored into `len`.
///
/// # Safety
///
/// `len` is null or points to an int; `out`, when `*len` > 0, holds `*len` bytes.
pub(crate) unsafe fn put_str(s: &str, out: *mut c_char, len: *mut c_int) {
    if len.is_null() {
        return;
    }
    // SAFETY: the caller's contract.
    let room = unsafe { *len };
    if room <= 0 || out.is_null() {
        // SAFETY: as above.
        unsafe { *len = s.len() as c_int + 1 };
        return;
    }
    let n = s.len().min(room as usize - 1);
    // SAFETY: `out` holds `room` > `n` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast(), out, n);
        *out.add(n) = 0;
        *len = n as c_int + 1;
    }
}

/// Variable `i` of `items`, or `MPI_T_ERR_INVALID_INDEX`.
pub(crate) fn item<T>(items: &[T], i: c_int) -> Result<&T, c_int> {
    usize::try_from(i)
        .ok()
        .and_then(|i| items.get(i))
        .ok_or(MPI_T_ERR_INVALID_INDEX)
}

/// The type and count a variable's value is read as.
fn layout(v: &Value) -> (Handle, c_int) {
    match v {
        Value::Bool(_) => (MPI_INT, 1),
        Value::Int(_) => (MPI_COUNT, 1),
        Value::Size(_) => (MPI_UNSIGNED_LONG_LONG, 1),
        Value::Str(_) | Value::List(_) => (MPI_CHAR, v.to_string().len() as c_int + 1),
    }
}

/// The C string of `s` (null: `MPI_T_ERR_INVALID_NAME`).
///
/// # Safety
///
/// `s` is null or NUL-ended.
unsafe fn name_arg(s: *const c_char) -> Result<String, c_int> {
    if s.is_null() {
        return Err(MPI_T_ERR_INVALID_NAME);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned())
}

/// Store `value` at `out`, a pointer the call must write: `MPI_T_ERR_INVALID` when it
/// is null (only the outputs of the `_get_info` calls may be null, which the standard
/// lets a tool skip).
///
/// # Safety
///
/// `out` is null or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) -> Result<(), c_int> {
    if out.is_null() {
        return Err(MPI_T_ERR_INVALID);
    }
    // SAFETY: not null, and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_init_thread(required: c_int, provided: *mut c_int) -> c_int {
    if provided.is_null() {
        return MPI_T_ERR_INVALID;
    }
    let mut t = TOOL.lock().unwrap_or_else(|e| e.into_inner());
    if t.is_none() {
        let Ok(config) = rbtl::configure(&[]) else {
            return MPI_T_ERR_CANNOT_INIT;
        };
        let vars: Vec<Var> = config
            .dump()
            .into_iter()
            .map(|row| Var {
                name: row.name,
                description: row.description,
                value: row.value,
            })
            .collect();
        let mut categories: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, v) in vars.iter().enumerate() {
            let c = category_of(&v.name);
            match categories.last_mut() {
                Some((name, members)) if name == c => members.push(i),
                _ => categories.push((c.to_string(), vec![i])),
            }
        }
        *t = Some(Tool {
            inits: 0,
            vars,
            categories,
        });
    }
    t.as_mut().expect("loaded above").inits += 1;
    let level = [
        MPI_THREAD_MULTIPLE,
        MPI_THREAD_SERIALIZED,
        MPI_THREAD_FUNNELED,
    ]
    .into_iter()
    .find(|&l| l <= required)
    .unwrap_or(MPI_THREAD_SINGLE);
    // SAFETY: the binding's contract: writable (checked not null).
    unsafe { provided.write(level) };
    MPI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_finalize() -> c_int {
    with(|t| {
        t.inits -= 1;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_get_num(num_cvar: *mut c_int) -> c_int {
    // SAFETY: the binding's contract: null or writable (here and below).
    with(|t| unsafe { write_out(num_cvar, t.vars.len() as c_int) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_get_info(
    cvar_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verbosity: *mut c_int,
    datatype: *mut Handle,
    enumtype: *mut Handle,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    scope: *mut c_int,
) -> c_int {
    with(|t| {
        let v = item(&t.vars, cvar_index)?;
        let (ty, _) = layout(&v.value);
        // SAFETY: the binding's contract.
        unsafe {
            put_str(&v.name, name, name_len);
            put(verbosity, MPI_T_VERBOSITY_TUNER_BASIC);
            put(datatype, ty);
            put(enumtype, MPI_T_ENUM_NULL);
            put_str(&v.description, desc, desc_len);
            put(bind, MPI_T_BIND_NO_OBJECT);
            put(scope, MPI_T_SCOPE_READONLY);
        }
        Ok(())
    })
}

/// `MPI_T_*_get_index`: the index of `name` among `names` into `out`
/// (`MPI_T_ERR_INVALID_NAME` where none has it).
///
/// # Safety
///
/// `name` is null or NUL-ended; `out` is null or writable.
pub(crate) unsafe fn index_of<'a>(
    mut names: impl Iterator<Item = &'a str>,
    name: *const c_char,
    out: *mut c_int,
) -> Result<(), c_int> {
    // SAFETY: the caller's contract.
    let n = unsafe { name_arg(name) }?;
    let i = names.position(|v| v == n).ok_or(MPI_T_ERR_INVALID_NAME)?;
    // SAFETY: as above.
    unsafe { write_out(out, i as c_int) }
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_get_index(
    name: *const c_char,
    cvar_index: *mut c_int,
) -> c_int {
    // SAFETY: the binding's contract.
    with(|t| unsafe { index_of(t.vars.iter().map(|v| v.name.as_str()), name, cvar_index) })
}

/// A control variable's handle: its index plus one (never `MPI_T_CVAR_HANDLE_NULL`).
fn var_of(t: &Tool, handle: Handle) -> Result<&Var, c_int> {
    handle
        .checked_sub(1)
        .and_then(|i| t.vars.get(i))
        .ok_or(MPI_T_ERR_INVALID_HANDLE)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_handle_alloc(
    cvar_index: c_int,
    _obj_handle: *mut c_void,
    handle: *mut Handle,
    count: *mut c_int,
) -> c_int {
    with(|t| {
        let v = item(&t.vars, cvar_index)?;
        if handle.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: the binding's contract.
        unsafe {
            write_out(count, layout(&v.value).1)?;
            handle.write(cvar_index as Handle + 1);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_handle_free(handle: *mut Handle) -> c_int {
    with(|t| {
        if handle.is_null() {
            return Err(MPI_T_ERR_INVALID_HANDLE);
        }
        // SAFETY: checked not null; the binding's contract.
        var_of(t, unsafe { *handle })?;
        // SAFETY: as above.
        unsafe { handle.write(MPI_T_CVAR_HANDLE_NULL) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_read(handle: Handle, buf: *mut c_void) -> c_int {
    with(|t| {
        let v = var_of(t, handle)?;
        if buf.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        // SAFETY: the binding's contract: `buf` holds the variable's count of its type.
        unsafe {
            match &v.value {
                Value::Bool(b) => buf.cast::<c_int>().write(c_int::from(*b)),
                Value::Int(i) => buf.cast::<Count>().write(*i),
                Value::Size(s) => buf.cast::<u64>().write(*s as u64),
                other => {
                    let s = other.to_string();
                    std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), s.len());
                    buf.cast::<u8>().add(s.len()).write(0);
                }
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_cvar_write(handle: Handle, _buf: *const c_void) -> c_int {
    with(|t| {
        var_of(t, handle)?;
        Err(MPI_T_ERR_CVAR_SET_NEVER)
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_num(num_cat: *mut c_int) -> c_int {
    // SAFETY: the binding's contract: null or writable.
    with(|t| unsafe { write_out(num_cat, t.categories.len() as c_int) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_info(
    cat_index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    num_cvars: *mut c_int,
    num_pvars: *mut c_int,
    num_categories: *mut c_int,
) -> c_int {
    with(|t| {
        let (n, members) = item(&t.categories, cat_index)?;
        let about = format!("rbtl's parameters of {n}");
        // SAFETY: the binding's contract.
        unsafe {
            put_str(n, name, name_len);
            put_str(&about, desc, desc_len);
            put(num_cvars, members.len() as c_int);
            put(num_pvars, 0);
            put(num_categories, 0);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_index(
    name: *const c_char,
    cat_index: *mut c_int,
) -> c_int {
    // SAFETY: the binding's contract.
    with(|t| unsafe { index_of(t.categories.iter().map(|c| c.0.as_str()), name, cat_index) })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_cvars(
    cat_index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    with(|t| {
        let (_, members) = item(&t.categories, cat_index)?;
        if len > 0 && indices.is_null() {
            return Err(MPI_T_ERR_INVALID);
        }
        for (k, &i) in members.iter().take(len.max(0) as usize).enumerate() {
            // SAFETY: the binding's contract: `indices` holds `len` ints.
            unsafe { indices.add(k).write(i as c_int) };
        }
        Ok(())
    })
}

/// A category's members of a kind this library has none of (performance variables,
/// subcategories, events).
fn no_members(cat_index: c_int) -> c_int {
    with(|t| item(&t.categories, cat_index).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_pvars(
    cat_index: c_int,
    _len: c_int,
    _indices: *mut c_int,
) -> c_int {
    no_members(cat_index)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_categories(
    cat_index: c_int,
    _len: c_int,
    _indices: *mut c_int,
) -> c_int {
    no_members(cat_index)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_events(
    cat_index: c_int,
    _len: c_int,
    _indices: *mut c_int,
) -> c_int {
    no_members(cat_index)
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_get_num_events(
    cat_index: c_int,
    num_events: *mut c_int,
) -> c_int {
    with(|t| {
        item(&t.categories, cat_index)?;
        // SAFETY: the binding's contract: null or writable.
        unsafe { write_out(num_events, 0) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn PMPI_T_category_changed(update_number: *mut c_int) -> c_int {
    // The categories never change once loaded.
    // SAFETY: the binding's contract: null or writable.
    with(|_| unsafe { write_out(update_number, 0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_are_the_first_two_parts() {
        assert_eq!(category_of("btl_sm_eager_limit"), "btl_sm");
        assert_eq!(category_of("msg_peer_timeout"), "msg_peer");
        assert_eq!(category_of("btl"), "btl");
        assert_eq!(category_of("btl_x"), "btl_x");
    }

    #[test]
    fn strings_follow_the_length_convention() {
        let mut len = 0;
        // SAFETY: a null buffer with a length of 0 is only measured.
        unsafe { put_str("eager", std::ptr::null_mut(), &mut len) };
        assert_eq!(len, 6);
        let mut buf = [1 as c_char; 4];
        len = 4;
        // SAFETY: `buf` holds `len` bytes.
        unsafe { put_str("eager", buf.as_mut_ptr(), &mut len) };
        assert_eq!(
            (len, buf),
            (4, [b'e' as c_char, b'a' as c_char, b'g' as c_char, 0])
        );
    }
}
