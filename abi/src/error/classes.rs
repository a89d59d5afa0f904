//! What each of the standard's error classes is called (`MPI_ERR_RANK`) and what
//! it means, the text `MPI_Error_string` gives a class; the same of the tool
//! interface's return codes (`MPI_T_ERR_INVALID`), which `MPI_Error_string` and
//! `MPI_Error_class` take as MPICH and Open MPI do (each its own class).

use crate::ffi::*;

/// The name of a class (`MPI_ERR_RANK`).
pub fn class_name(class: c_int) -> String {
    let name = match class {
        MPI_SUCCESS => "MPI_SUCCESS",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER",
        MPI_ERR_COUNT => "MPI_ERR_COUNT",
        MPI_ERR_TYPE => "MPI_ERR_TYPE",
        MPI_ERR_TAG => "MPI_ERR_TAG",
        MPI_ERR_COMM => "MPI_ERR_COMM",
        MPI_ERR_RANK => "MPI_ERR_RANK",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST",
        MPI_ERR_ROOT => "MPI_ERR_ROOT",
        MPI_ERR_GROUP => "MPI_ERR_GROUP",
        MPI_ERR_OP => "MPI_ERR_OP",
        MPI_ERR_TOPOLOGY => "MPI_ERR_TOPOLOGY",
        MPI_ERR_DIMS => "MPI_ERR_DIMS",
        MPI_ERR_ARG => "MPI_ERR_ARG",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE",
        MPI_ERR_OTHER => "MPI_ERR_OTHER",
        MPI_ERR_INTERN => "MPI_ERR_INTERN",
        MPI_ERR_PENDING => "MPI_ERR_PENDING",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS",
        MPI_ERR_ACCESS => "MPI_ERR_ACCESS",
        MPI_ERR_ASSERT => "MPI_ERR_ASSERT",
        MPI_ERR_BASE => "MPI_ERR_BASE",
        MPI_ERR_DISP => "MPI_ERR_DISP",
        MPI_ERR_INFO_KEY => "MPI_ERR_INFO_KEY",
        MPI_ERR_INFO_NOKEY => "MPI_ERR_INFO_NOKEY",
        MPI_ERR_INFO_VALUE => "MPI_ERR_INFO_VALUE",
        MPI_ERR_INFO => "MPI_ERR_INFO",
        MPI_ERR_KEYVAL => "MPI_ERR_KEYVAL",
        MPI_ERR_LOCKTYPE => "MPI_ERR_LOCKTYPE",
        MPI_ERR_NAME => "MPI_ERR_NAME",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM",
        MPI_ERR_NOT_SAME => "MPI_ERR_NOT_SAME",
        MPI_ERR_PORT => "MPI_ERR_PORT",
        MPI_ERR_RMA_CONFLICT => "MPI_ERR_RMA_CONFLICT",
        MPI_ERR_RMA_RANGE => "MPI_ERR_RMA_RANGE",
        MPI_ERR_RMA_SYNC => "MPI_ERR_RMA_SYNC",
        MPI_ERR_RMA_ATTACH => "MPI_ERR_RMA_ATTACH",
        MPI_ERR_RMA_SHARED => "MPI_ERR_RMA_SHARED",
        MPI_ERR_RMA_FLAVOR => "MPI_ERR_RMA_FLAVOR",
        MPI_ERR_SIZE => "MPI_ERR_SIZE",
        MPI_ERR_SPAWN => "MPI_ERR_SPAWN",
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION",
        MPI_ERR_WIN => "MPI_ERR_WIN",
        MPI_ERR_PROC_ABORTED => "MPI_ERR_PROC_ABORTED",
        MPI_ERR_VALUE_TOO_LARGE => "MPI_ERR_VALUE_TOO_LARGE",
        MPI_ERR_SESSION => "MPI_ERR_SESSION",
        MPI_ERR_ERRHANDLER => "MPI_ERR_ERRHANDLER",
        MPI_ERR_AMODE => "MPI_ERR_AMODE",
        MPI_ERR_BAD_FILE => "MPI_ERR_BAD_FILE",
        MPI_ERR_CONVERSION => "MPI_ERR_CONVERSION",
        MPI_ERR_DUP_DATAREP => "MPI_ERR_DUP_DATAREP",
        MPI_ERR_FILE_EXISTS => "MPI_ERR_FILE_EXISTS",
        MPI_ERR_FILE_IN_USE => "MPI_ERR_FILE_IN_USE",
        MPI_ERR_FILE => "MPI_ERR_FILE",
        MPI_ERR_IO => "MPI_ERR_IO",
        MPI_ERR_NO_SPACE => "MPI_ERR_NO_SPACE",
        MPI_ERR_NO_SUCH_FILE => "MPI_ERR_NO_SUCH_FILE",
        MPI_ERR_QUOTA => "MPI_ERR_QUOTA",
        MPI_ERR_READ_ONLY => "MPI_ERR_READ_ONLY",
        MPI_ERR_UNSUPPORTED_DATAREP => "MPI_ERR_UNSUPPORTED_DATAREP",
        MPI_ERR_SERVICE => "MPI_ERR_SERVICE",
        c if c <= MPI_ERR_ERRHANDLER => "a predefined error class",
        _ => return format!("user error class {class}"),
    };
    name.to_string()
}

/// What a class means: its name and a description.
pub(super) fn class_text(class: c_int) -> String {
    let text = match class {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_GROUP => "invalid group",
        MPI_ERR_OP => "invalid operation",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimension argument",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_UNKNOWN => "unknown error",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_IN_STATUS => "error code is in status",
        MPI_ERR_PENDING => "pending request",
        MPI_ERR_ACCESS => "permission denied",
        MPI_ERR_ASSERT => "invalid assertion",
        MPI_ERR_BASE => "invalid base address",
        MPI_ERR_DISP => "invalid displacement",
        MPI_ERR_INFO_KEY => "invalid info key",
        MPI_ERR_INFO_NOKEY => "no such info key",
        MPI_ERR_INFO_VALUE => "invalid info value",
        MPI_ERR_INFO => "invalid info object",
        MPI_ERR_KEYVAL => "invalid attribute key",
        MPI_ERR_LOCKTYPE => "invalid lock type",
        MPI_ERR_NAME => "no such service name",
        MPI_ERR_NO_MEM => "out of memory",
        MPI_ERR_NOT_SAME => "arguments differ between the processes of a collective call",
        MPI_ERR_PORT => "invalid port name",
        MPI_ERR_RMA_CONFLICT => "conflicting accesses to a window",
        MPI_ERR_RMA_RANGE => "target memory is not part of the window",
        MPI_ERR_RMA_SYNC => "wrong synchronization of RMA calls",
        MPI_ERR_RMA_ATTACH => "memory cannot be attached to the window",
        MPI_ERR_RMA_SHARED => "memory cannot be shared",
        MPI_ERR_RMA_FLAVOR => "wrong kind of window",
        MPI_ERR_SIZE => "invalid size",
        MPI_ERR_SPAWN => "processes could not be spawned",
        MPI_ERR_UNSUPPORTED_OPERATION => "unsupported operation",
        MPI_ERR_WIN => "invalid window",
        MPI_ERR_PROC_ABORTED => "a peer process failed",
        MPI_ERR_VALUE_TOO_LARGE => "value too large for its output argument",
        MPI_ERR_SESSION => "invalid session",
        MPI_ERR_ERRHANDLER => "invalid error handler",
        MPI_ERR_AMODE => "invalid file access mode",
        MPI_ERR_BAD_FILE => "invalid file name",
        MPI_ERR_CONVERSION => "data conversion failed",
        MPI_ERR_DUP_DATAREP => "data representation already defined",
        MPI_ERR_FILE_EXISTS => "the file exists",
        MPI_ERR_FILE_IN_USE => "the file is in use",
        MPI_ERR_FILE => "invalid file",
        MPI_ERR_IO => "input or output error",
        MPI_ERR_NO_SPACE => "no space left",
        MPI_ERR_NO_SUCH_FILE => "no such file",
        MPI_ERR_QUOTA => "quota exceeded",
        MPI_ERR_READ_ONLY => "the file is read-only",
        MPI_ERR_UNSUPPORTED_DATAREP => "unsupported data representation",
        MPI_ERR_SERVICE => "invalid service name",
        _ => return class_name(class),
    };
    format!("{}: {text}", class_name(class))
}

/// The name and meaning of a return code of the tool interface; `None` for any
/// other number.
pub(super) fn tool_code_text(code: c_int) -> Option<String> {
    let (name, text) = match code {
        MPI_T_ERR_CANNOT_INIT => (
            "MPI_T_ERR_CANNOT_INIT",
            "the tool interface cannot be initialized",
        ),
        MPI_T_ERR_NOT_ACCESSIBLE => ("MPI_T_ERR_NOT_ACCESSIBLE", "not accessible now"),
        MPI_T_ERR_NOT_INITIALIZED => (
            "MPI_T_ERR_NOT_INITIALIZED",
            "the tool interface is not initialized",
        ),
        MPI_T_ERR_NOT_SUPPORTED => ("MPI_T_ERR_NOT_SUPPORTED", "not supported"),
        MPI_T_ERR_MEMORY => ("MPI_T_ERR_MEMORY", "out of memory"),
        MPI_T_ERR_INVALID => ("MPI_T_ERR_INVALID", "invalid argument"),
        MPI_T_ERR_INVALID_INDEX => ("MPI_T_ERR_INVALID_INDEX", "invalid index"),
        MPI_T_ERR_INVALID_ITEM => ("MPI_T_ERR_INVALID_ITEM", "invalid item"),
        MPI_T_ERR_INVALID_SESSION => ("MPI_T_ERR_INVALID_SESSION", "invalid session"),
        MPI_T_ERR_INVALID_HANDLE => ("MPI_T_ERR_INVALID_HANDLE", "invalid handle"),
        MPI_T_ERR_INVALID_NAME => (
            "MPI_T_ERR_INVALID_NAME",
            "no variable or category of that name",
        ),
        MPI_T_ERR_OUT_OF_HANDLES => ("MPI_T_ERR_OUT_OF_HANDLES", "no handle left"),
        MPI_T_ERR_OUT_OF_SESSIONS => ("MPI_T_ERR_OUT_OF_SESSIONS", "no session left"),
        MPI_T_ERR_CVAR_SET_NOT_NOW => (
            "MPI_T_ERR_CVAR_SET_NOT_NOW",
            "the control variable cannot be set now",
        ),
        MPI_T_ERR_CVAR_SET_NEVER => (
            "MPI_T_ERR_CVAR_SET_NEVER",
            "the control variable cannot be set",
        ),
        MPI_T_ERR_PVAR_NO_WRITE => (
            "MPI_T_ERR_PVAR_NO_WRITE",
            "the performance variable cannot be written",
        ),
        MPI_T_ERR_PVAR_NO_STARTSTOP => (
            "MPI_T_ERR_PVAR_NO_STARTSTOP",
            "the performance variable cannot be started or stopped",
        ),
        MPI_T_ERR_PVAR_NO_ATOMIC => (
            "MPI_T_ERR_PVAR_NO_ATOMIC",
            "the performance variable cannot be read and reset at once",
        ),
        _ => return None,
    };
    Some(format!("{name}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_predefined_class_has_a_name_and_a_description() {
        for class in MPI_SUCCESS..=MPI_ERR_ERRHANDLER {
            let name = class_name(class);
            assert!(name.starts_with("MPI_"), "class {class}: {name}");
            let text = class_text(class);
            let described = text.strip_prefix(&format!("{name}: "));
            assert!(
                described.is_some_and(|d| !d.is_empty()),
                "class {class}: {text}"
            );
        }
    }
}
