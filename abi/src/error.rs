//! Errors: the standard's classes, the codes that carry a message, and raising an
//! error through the error handler of the object it concerns (fatal by default,
//! returned with `MPI_ERRORS_RETURN`, or the user's function).

use crate::ffi::*;
use crate::global;
use std::sync::Mutex;

mod classes;
pub use classes::class_name;
use classes::{class_text, tool_code_text};

/// An error of a call: its class and what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// The standard's error class (`MPI_ERR_RANK`, ...), or a user's class.
    pub class: c_int,
    /// What happened, for `MPI_Error_string` and the fatal handler's report.
    pub message: String,
    /// The code the call returns where the program chose it ([`Error::returned`]);
    /// else [`code_of`] gives a new one, which carries `message`.
    pub code: Option<c_int>,
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `class`.
    pub fn new(class: c_int, message: impl Into<String>) -> Error {
        Error {
            class,
            message: message.into(),
            code: None,
        }
    }

    /// The error of a program's function (a callback) that returned `rc`, not
    /// `MPI_SUCCESS`: the call returns `rc` itself where it is a class or code the
    /// program added (whose string the program chose); a code of the standard's
    /// class, a new one saying what returned it; `MPI_ERR_OTHER` for any other.
    pub fn returned(rc: c_int, message: String) -> Error {
        match class_of(rc) {
            Some(class) if class >= FIRST_USER_CLASS => Error {
                code: Some(rc),
                ..Error::new(class, message)
            },
            class => Error::new(class.unwrap_or(MPI_ERR_OTHER), message),
        }
    }
}

/// The check of a pointer a call must read or write: an error of `class`
/// (`MPI_ERR_ARG`, or `MPI_ERR_REQUEST` for a request) naming the argument `what` when
/// `p` is null.
pub fn non_null<T>(p: *const T, class: c_int, what: &str) -> Result<()> {
    match p.is_null() {
        true => Err(Error::new(class, format!("the {what} pointer is null"))),
        false => Ok(()),
    }
}

/// Store `value` at `out`, a pointer the call must write: the error of [`non_null`]
/// (`MPI_ERR_ARG`, naming `what`) when it is null, as MPICH and Open MPI refuse a
/// null output argument.
///
/// # Safety
///
/// `out` is null or valid for a write of `T`.
pub unsafe fn write_arg<T>(out: *mut T, value: T, what: &str) -> Result<()> {
    non_null(out, MPI_ERR_ARG, what)?;
    // SAFETY: not null, and writable by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// The error of handle `h`, which names no live object of a kind (`what`, with its
/// article): its null handle (`null`, named `null_name`), or any other.
#[cold]
pub fn bad_handle(h: Handle, (null, null_name): (Handle, &str), class: c_int, what: &str) -> Error {
    match h == null {
        true => Error::new(class, format!("{null_name} is not {what}")),
        false => Error::new(
            class,
            format!("{h:#x} is not {what} (freed, or a handle of another kind)"),
        ),
    }
}

/// The value behind a pointer a call must read, checked as [`non_null`] does.
///
/// # Safety
///
/// `p` is null or points to a readable `T`.
pub unsafe fn read_arg<T: Copy>(p: *const T, class: c_int, what: &str) -> Result<T> {
    non_null(p, class, what)?;
    // SAFETY: not null, and readable by the caller's contract.
    Ok(unsafe { *p })
}

/// An array argument of `n` items (`MPI_ERR_ARG` when it is null and `n` is not 0).
///
/// # Safety
///
/// `p` holds `n` items.
pub unsafe fn array<'a, T>(p: *const T, n: usize) -> Result<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(MPI_ERR_ARG, "an array argument is null"));
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { rbtl::btl::slice_at(p, n) })
}

/// `Err(Error::new(class, format!(...)))`.
#[macro_export]
macro_rules! fail {
    ($class:expr, $($arg:tt)*) => {
        return Err($crate::error::Error::new($class, format!($($arg)*)))
    };
}

impl From<rbtl::msg::Error> for Error {
    fn from(e: rbtl::msg::Error) -> Error {
        use rbtl::msg::Error as E;
        let class = match &e {
            E::Truncated { .. } => MPI_ERR_TRUNCATE,
            E::PeerFailed { .. }
            | E::AllFailed { .. }
            | E::PeerTimeout { .. }
            | E::Stalled { .. } => MPI_ERR_PROC_ABORTED,
            E::BadRank(..) => MPI_ERR_RANK,
            E::BadTag(_) => MPI_ERR_TAG,
            E::UnknownRequest(_) => MPI_ERR_REQUEST,
            E::OutOfWindow { .. } => MPI_ERR_RMA_RANGE,
            E::WrongComm => MPI_ERR_WIN,
            E::Btl(rbtl::btl::Error::OutOfResource(_)) => MPI_ERR_NO_MEM,
            E::Config(_) | E::BadParameter(_) => MPI_ERR_ARG,
            _ => MPI_ERR_OTHER,
        };
        Error::new(class, e.to_string())
    }
}

/// The object an error concerns, whose error handler it goes through.
#[derive(Clone, Copy, Debug)]
pub enum Object {
    /// None: `MPI_COMM_SELF`'s handler (MPI 4.0, 9.3), or `MPI_COMM_WORLD`'s while
    /// the program has set none on `MPI_COMM_SELF` ([`Mpi::no_object_comm`]).
    ///
    /// [`Mpi::no_object_comm`]: crate::state::Mpi::no_object_comm
    None,
    Comm(Handle),
    Win(Handle),
    File(Handle),
    Session(Handle),
    /// The error handler given to a call that makes an object
    /// (`MPI_Comm_create_from_group`, `MPI_Session_init`), whose function gets the
    /// object's null handle (the second).
    Given(Handle, Handle),
}

/// Whose handler the errors of freeing `*p` go to: the object's (made by `object`),
/// `MPI_COMM_SELF`'s when `p` is null.
///
/// # Safety
///
/// `p` is null or readable.
pub unsafe fn freed_object(p: *const Handle, object: fn(Handle) -> Object) -> Object {
    match p.is_null() {
        true => Object::None,
        // SAFETY: the caller's contract.
        false => object(unsafe { p.read() }),
    }
}

/// What an error handler does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handler {
    /// Report and end the job (`MPI_ERRORS_ARE_FATAL`, `MPI_ERRORS_ABORT`).
    Fatal,
    /// Return the code (`MPI_ERRORS_RETURN`).
    Return,
    /// Call the user's function (`MPI_Comm_create_errhandler`, ...) with the object's
    /// handle and the code, then return the code.
    User(usize),
}

/// Error codes beyond the classes: each carries its message. The classes the
/// program adds are numbered from `MPI_ERR_LASTCODE + 1` (MPI 4.1, 9.5: the
/// attribute `MPI_LASTUSEDCODE` names the largest in use, never below
/// `MPI_ERR_LASTCODE`). A code is `slot | serial << 8`, at 2^20 or above: its
/// class's slot (the class itself for a predefined one, after them for the
/// program's) and a serial; the last [`KEPT`] messages are kept.
struct Codes {
    next: u32,
    messages: std::collections::VecDeque<(c_int, String)>,
    /// Classes added by `MPI_Add_error_class`.
    last_class: c_int,
    /// Strings given by `MPI_Add_error_string`.
    strings: std::collections::BTreeMap<c_int, String>,
    /// Codes given by `MPI_Add_error_code`, not removed.
    user_codes: std::collections::BTreeSet<c_int>,
    /// Classes removed by `MPI_Remove_error_class`: their numbers are given again
    /// first.
    removed: std::collections::BTreeSet<c_int>,
}

/// Messages kept for `MPI_Error_string`.
const KEPT: usize = 1024;
/// The first and one past the largest serial (a code is above every class and
/// stays a positive `int`).
const FIRST_SERIAL: u32 = 1 << 12;
const SERIALS: u32 = 1 << 22;
/// The first class `MPI_Add_error_class` gives.
const FIRST_USER_CLASS: c_int = MPI_ERR_LASTCODE + 1;
/// The slot of the first class the program adds; slots fit below this (the low byte
/// of a code).
const FIRST_USER_SLOT: c_int = MPI_ERR_ERRHANDLER + 1;
const SLOT_LIMIT: c_int = 256;

static CODES: Mutex<Codes> = Mutex::new(Codes {
    next: FIRST_SERIAL,
    messages: std::collections::VecDeque::new(),
    last_class: FIRST_USER_CLASS - 1,
    strings: std::collections::BTreeMap::new(),
    user_codes: std::collections::BTreeSet::new(),
    removed: std::collections::BTreeSet::new(),
});

fn codes() -> std::sync::MutexGuard<'static, Codes> {
    CODES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The slot of class `class` in a code.
fn slot_of(class: c_int) -> c_int {
    match class >= FIRST_USER_CLASS {
        true => class - FIRST_USER_CLASS + FIRST_USER_SLOT,
        false => class,
    }
}

/// A code for `e`, carrying its message.
pub fn code_of(e: &Error) -> c_int {
    if let Some(code) = e.code {
        return code;
    }
    let mut c = codes();
    let serial = c.next;
    c.next = if serial + 1 >= SERIALS {
        FIRST_SERIAL
    } else {
        serial + 1
    };
    let code = slot_of(e.class) | (serial << 8) as c_int;
    if c.messages.len() == KEPT {
        c.messages.pop_front();
    }
    c.messages.push_back((code, e.message.clone()));
    code
}

/// The class `MPI_Error_class` gives `code`: a return code of the tool interface
/// is its own class, as MPICH and Open MPI have it.
pub fn error_class_of(code: c_int) -> Option<c_int> {
    tool_code_text(code)
        .map(|_| code)
        .or_else(|| class_of(code))
}

/// The class of `code`; `None` for a code this library never gave.
pub fn class_of(code: c_int) -> Option<c_int> {
    let first_code = (FIRST_SERIAL << 8) as c_int;
    let class = match code {
        0..=MPI_ERR_ERRHANDLER => return Some(code),
        _ if code >= first_code => match code & 0xff {
            MPI_SUCCESS => return None,
            slot if slot >= FIRST_USER_SLOT => slot - FIRST_USER_SLOT + FIRST_USER_CLASS,
            slot => return Some(slot),
        },
        _ => code,
    };
    let c = codes();
    (FIRST_USER_CLASS..=c.last_class)
        .contains(&class)
        .then_some(class)
        .filter(|class| !c.removed.contains(class))
}

/// The text of `code`: its message where one is kept, else its class's; empty for
/// a class or code the program added without a string (MPI 4.1, 9.5). A return
/// code of the tool interface has its own.
pub fn string_of(code: c_int) -> Option<String> {
    if let Some(text) = tool_code_text(code) {
        return Some(text);
    }
    let class = class_of(code)?;
    let c = codes();
    if let Some(s) = c.strings.get(&code) {
        return Some(s.clone());
    }
    if (code == class && class >= FIRST_USER_CLASS) || c.user_codes.contains(&code) {
        return Some(String::new());
    }
    if let Some((_, m)) = c.messages.iter().rev().find(|(k, _)| *k == code) {
        return Some(format!("{}: {m}", class_name(class)));
    }
    Some(
        c.strings
            .get(&class)
            .cloned()
            .unwrap_or_else(|| class_text(class)),
    )
}

/// `MPI_Add_error_class`.
pub fn add_class() -> Result<c_int> {
    let mut c = codes();
    if let Some(class) = c.removed.pop_first() {
        return Ok(class);
    }
    if slot_of(c.last_class + 1) >= SLOT_LIMIT {
        return Err(Error::new(
            MPI_ERR_OTHER,
            format!(
                "no more error classes: at most {} can be in use",
                SLOT_LIMIT - FIRST_USER_SLOT
            ),
        ));
    }
    c.last_class += 1;
    Ok(c.last_class)
}

/// `MPI_Add_error_code`.
pub fn add_code(class: c_int) -> Result<c_int> {
    if class_of(class) != Some(class) {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("{class} is not an error class"),
        ));
    }
    let code = code_of(&Error::new(class, String::new()));
    codes().user_codes.insert(code);
    Ok(code)
}

/// `MPI_Remove_error_class`: a class `MPI_Add_error_class` gave, with no code nor
/// string left (MPI 4.1, 9.5).
pub fn remove_class(class: c_int) -> Result<()> {
    let mut c = codes();
    if !(FIRST_USER_CLASS..=c.last_class).contains(&class) || c.removed.contains(&class) {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("{class} is not an error class that MPI_Add_error_class gave"),
        ));
    }
    if let Some(code) = c
        .user_codes
        .iter()
        .find(|&&code| code & 0xff == slot_of(class))
    {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("error class {class} still has code {code}: remove its codes first"),
        ));
    }
    has_no_string(&c, class)?;
    c.removed.insert(class);
    Ok(())
}

/// `MPI_Remove_error_code`: a code `MPI_Add_error_code` gave, with no string left.
pub fn remove_code(code: c_int) -> Result<()> {
    let mut c = codes();
    if !c.user_codes.contains(&code) {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("{code} is not an error code that MPI_Add_error_code gave"),
        ));
    }
    has_no_string(&c, code)?;
    c.user_codes.remove(&code);
    Ok(())
}

/// Refuse to remove class or code `code` while `MPI_Add_error_string` gave it a
/// string.
fn has_no_string(c: &Codes, code: c_int) -> Result<()> {
    match c.strings.contains_key(&code) {
        true => Err(Error::new(
            MPI_ERR_ARG,
            format!("{code} still has a string: remove it first (MPI_Remove_error_string)"),
        )),
        false => Ok(()),
    }
}

/// `MPI_Remove_error_string`: the string `MPI_Add_error_string` gave `code`.
pub fn remove_string(code: c_int) -> Result<()> {
    match codes().strings.remove(&code) {
        Some(_) => Ok(()),
        None => Err(Error::new(
            MPI_ERR_ARG,
            format!("{code} has no string that MPI_Add_error_string gave"),
        )),
    }
}

/// `MPI_Add_error_string`.
pub fn add_string(code: c_int, s: String) -> Result<()> {
    if code <= MPI_ERR_ERRHANDLER {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("{code} is a predefined class: its string cannot change"),
        ));
    }
    if class_of(code).is_none() {
        return Err(Error::new(
            MPI_ERR_ARG,
            format!("{code} is not an error code"),
        ));
    }
    codes().strings.insert(code, s);
    Ok(())
}

/// The largest class or code the program added (`MPI_LASTUSEDCODE`), never below
/// `MPI_ERR_LASTCODE` (MPI 4.1, 9.5).
pub fn last_used() -> c_int {
    let c = codes();
    let code = c.user_codes.last().copied().unwrap_or(0);
    c.last_class.max(code).max(MPI_ERR_LASTCODE)
}

/// Raise `e`, from the call `name`, through the error handler of `object`: the code
/// to return (as the program's handler left it; a fatal handler does not return).
#[cold]
#[inline(never)]
pub fn raise(name: &str, object: Object, e: Error) -> c_int {
    let code = code_of(&e);
    match global::handler_of(object) {
        Handler::Return => code,
        Handler::Fatal => fatal(name, &e),
        Handler::User(f) => global::call_user_handler(f, object, code),
    }
}

/// Report `e` from `name` and end the job.
pub fn fatal(name: &str, e: &Error) -> ! {
    let message = format!("{name}: {}: {}", class_name(e.class), e.message);
    global::abort_job(1, &message)
}

/// The body of every MPI function the library does not implement.
#[cold]
pub fn unsupported(name: &str, object: Object) -> c_int {
    let e = Error::new(
        MPI_ERR_UNSUPPORTED_OPERATION,
        format!("{name} is not implemented by this library (rbtl's libmpi_abi; docs/mpi-abi.md lists what is)"),
    );
    raise(name, object, e)
}

/// The body of every tool-interface (`MPI_T_`) function not implemented (events,
/// sources, enumerations): the tool interface has no error handlers.
#[cold]
pub fn unsupported_tool(_name: &str) -> c_int {
    MPI_T_ERR_NOT_SUPPORTED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_carry_their_class_and_message() {
        let e = Error::new(MPI_ERR_RANK, "rank 9 of 2");
        let code = code_of(&e);
        assert_ne!(code, MPI_ERR_RANK);
        assert!(code > 0);
        assert_eq!(class_of(code), Some(MPI_ERR_RANK));
        assert_eq!(string_of(code).unwrap(), "MPI_ERR_RANK: rank 9 of 2");
        assert_eq!(class_of(MPI_ERR_TAG), Some(MPI_ERR_TAG));
        assert_eq!(string_of(MPI_ERR_TAG).unwrap(), "MPI_ERR_TAG: invalid tag");
        assert_eq!(class_of(-1), None);
        assert_eq!(class_of(200), None, "not a class anybody added");
    }

    #[test]
    fn added_classes_and_codes() {
        let class = add_class().unwrap();
        assert!(class > MPI_ERR_LASTCODE);
        assert_eq!(last_used(), class);
        assert_eq!(class_of(class), Some(class));
        assert_eq!(class_of(class + 1), None, "not added yet");
        let code = add_code(class).unwrap();
        assert_eq!(class_of(code), Some(class));
        assert_eq!(last_used(), code);
        add_string(code, "my error".into()).unwrap();
        assert_eq!(string_of(code).unwrap(), "my error");
        assert!(add_string(MPI_ERR_RANK, "no".into()).is_err());
        assert!(add_code(250).is_err());
    }
}
