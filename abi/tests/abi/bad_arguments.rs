//! Bad arguments in every function of the reference header that the library
//! implements, one at a time, the others valid (`MPI_COMM_WORLD`, `MPI_INT`,
//! `MPI_SUM`, a live group, info, window, file and session; pointers at zeroed
//! memory): each call must return an error, never crash, hang or succeed. The
//! programs are written by the test from the header and [`mpi_abi::IMPLEMENTED`].
//!
//! * [`null_pointers`]: a null pointer where the call reads or writes one value
//!   (`int *flag`, `MPI_Comm *newcomm`, `const char *key`, ...), as MPICH and Open
//!   MPI refuse it with `MPI_ERR_ARG` (the tool interface's functions with an error
//!   code of their own). Buffers (`void *`), arrays (`[]`), statuses
//!   (`MPI_STATUS_IGNORE` is null) and the program's functions are not such
//!   parameters; nor are those the standard lets a caller leave null
//!   ([`MAY_BE_NULL`]).
//! * [`handles_of_another_kind`]: in each handle parameter (a communicator,
//!   datatype, operation, info, group, error handler, request, window, file,
//!   session or message), a live handle of another kind.
//! * [`values_that_are_no_handle`]: there, a value that is no handle at all.
//! * [`negative_counts`]: a negative count or size passed by value.
//! * [`ranks_out_of_range`]: a rank beyond the communicator passed by value.
//! * [`uncommitted_datatypes`]: a datatype not committed, where data of it moves
//!   or is counted.
//! * [`bad_tags`]: a negative tag that is not `MPI_ANY_TAG`.
//! * [`operations_not_for_the_type`]: `MPI_MAXLOC` on `MPI_INT`.
//! * [`every_call_after_finalize`], [`every_call_before_init`]: every function,
//!   after `MPI_Finalize` or before `MPI_Init`, each in a process of its own: it
//!   returns or ends its process, never by a signal.

use super::programs::{build_written, run_passing};
use super::unsupported::{header_functions, Function};
use std::collections::BTreeSet;

/// Parameters a caller may leave null, by the standard, beside the outputs of the
/// tool interface's `_get_info` calls ([`null_pointer`]): a value whose length the
/// caller gives as 0 (here it is: the other pointers point at zeroed memory).
const MAY_BE_NULL: [(&str, &str); 2] = [
    ("MPI_Info_get_string", "value"),
    ("MPI_Session_get_nth_pset", "pset_name"),
];

/// Functions not called: those that start or end the library, or end the job.
const NOT_CALLED: [&str; 5] = [
    "MPI_Init",
    "MPI_Init_thread",
    "MPI_Finalize",
    "MPI_Abort",
    "MPI_Pcontrol",
];

/// The value given for a parameter passed by value, by its type: a live object of
/// the program's (made before the calls) or a constant; 0 for the rest.
fn value_of(param: &str) -> &'static str {
    match param.split_whitespace().next().unwrap_or("") {
        "MPI_Comm" => "MPI_COMM_WORLD",
        "MPI_Datatype" => "MPI_INT",
        "MPI_Op" => "MPI_SUM",
        "MPI_Info" => "info",
        "MPI_Group" => "group",
        "MPI_Errhandler" => "MPI_ERRORS_RETURN",
        "MPI_Request" => "MPI_REQUEST_NULL",
        "MPI_Win" => "win",
        "MPI_File" => "file",
        "MPI_Session" => "session",
        "MPI_Message" => "MPI_MESSAGE_NO_PROC",
        _ => "0",
    }
}

/// A live handle of another kind than `param`'s type, if it is a handle passed by
/// value.
fn other_kind(param: &str) -> Option<&'static str> {
    if param.contains(['*', '[']) {
        return None;
    }
    Some(match param.split_whitespace().next().unwrap_or("") {
        "MPI_Comm" => "(MPI_Comm)group",
        "MPI_Datatype" => "(MPI_Datatype)MPI_COMM_WORLD",
        "MPI_Op" => "(MPI_Op)MPI_INT",
        "MPI_Info" => "(MPI_Info)group",
        "MPI_Group" => "(MPI_Group)info",
        "MPI_Errhandler" => "(MPI_Errhandler)MPI_SUM",
        "MPI_Request" => "(MPI_Request)MPI_INT",
        "MPI_Win" => "(MPI_Win)file",
        "MPI_File" => "(MPI_File)win",
        "MPI_Session" => "(MPI_Session)MPI_COMM_WORLD",
        "MPI_Message" => "(MPI_Message)MPI_INT",
        _ => return None,
    })
}

/// Whether `param` is a pointer to one value the call must read or write.
fn single_value(param: &str) -> bool {
    param.matches('*').count() == 1
        && !param.contains('[')
        && !param.contains("_function")
        && !param.starts_with("void ")
        && !param.starts_with("const void ")
        && !param.starts_with("MPI_Status ")
        && !param.starts_with("const MPI_Status ")
}

/// A parameter's name (its declaration's last word, past the `*`).
fn name_of(param: &str) -> &str {
    param.rsplit(['*', ' ']).next().unwrap_or(param)
}

/// The calls: for each function called and each parameter that `bad` gives a bad
/// value (given the function's name and the parameter), a C expression calling it
/// with that value there and valid ones elsewhere: the function, the parameter and
/// the call.
fn calls<V: AsRef<str>>(bad: impl Fn(&str, &str) -> Option<V>) -> Vec<(String, String, String)> {
    let implemented: BTreeSet<&str> = mpi_abi::IMPLEMENTED.lines().collect();
    let mut out = Vec::new();
    for f in header_functions() {
        let Function { name, params, .. } = &f;
        if f.variadic || !implemented.contains(name.as_str()) || NOT_CALLED.contains(&name.as_str())
        {
            continue;
        }
        for (i, p) in params.iter().enumerate() {
            let Some(value) = bad(name, p) else {
                continue;
            };
            let value = value.as_ref();
            let args: Vec<&str> = params
                .iter()
                .enumerate()
                .map(|(j, q)| match (j == i, q.contains(['*', '['])) {
                    (true, _) => value,
                    (false, true) => "(void *)scratch",
                    (false, false) => value_of(q),
                })
                .collect();
            let call = format!("{name}({})", args.join(", "));
            out.push((name.clone(), name_of(p).to_string(), call));
        }
    }
    out
}

/// A null pointer, for a pointer to a single value that may not be null: not the
/// outputs of the tool interface's `_get_info` calls, which the standard lets an
/// implementation skip, nor those of [`MAY_BE_NULL`].
fn null_pointer(function: &str, param: &str) -> Option<&'static str> {
    let tool_info = function.starts_with("MPI_T_") && function.ends_with("_get_info");
    let may_be_null = MAY_BE_NULL.contains(&(function, name_of(param)));
    (single_value(param) && !tool_info && !may_be_null).then_some("0")
}

/// A handle of another kind.
fn handle_of_another_kind(_function: &str, param: &str) -> Option<&'static str> {
    other_kind(param)
}

/// A value that is no handle at all, in a handle parameter passed by value.
fn no_handle(_function: &str, param: &str) -> Option<String> {
    other_kind(param)?;
    let ty = param.split_whitespace().next().unwrap_or("");
    Some(format!("({ty})(intptr_t)0x7654321"))
}

/// A negative number where a count or size is passed by value (a count of
/// elements, partitions, processes or dimensions, a size in bytes), but not a rank,
/// where some negative numbers are the standard's constants (`MPI_ANY_SOURCE`,
/// `MPI_PROC_NULL`, `MPI_ROOT`).
fn negative_count(_function: &str, param: &str) -> Option<&'static str> {
    let mut words = param.split_whitespace();
    let (ty, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let number = matches!(ty, "int" | "MPI_Count" | "MPI_Aint") && !param.contains(['*', '[']);
    let counted = [
        "count",
        "size",
        "partitions",
        "maxprocs",
        "ndims",
        "degree",
        "nnodes",
    ];
    (number && counted.iter().any(|c| name.contains(c))).then_some("-5")
}

/// A rank beyond the communicator (the program runs at one rank) where one is
/// passed by value: a destination, source, root or target; but not where a status
/// is given its source (`MPI_Status_set_source` takes any).
fn rank_out_of_range(function: &str, param: &str) -> Option<&'static str> {
    let mut words = param.split_whitespace();
    let (ty, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let ranked = ["dest", "source", "root", "rank"]
        .iter()
        .any(|r| name.contains(r));
    let by_value = ty == "int" && !param.contains(['*', '[']);
    (by_value && ranked && function != "MPI_Status_set_source").then_some("1000")
}

/// Calls that take a datatype not committed, beside the `MPI_Type_` calls: those
/// MPICH takes it in (they read its size or extent only).
const UNCOMMITTED_TAKEN: [&str; 4] = [
    "MPI_Get_count",
    "MPI_Status_set_elements",
    "MPI_Pack_external_size",
    "MPI_File_get_type_extent",
];

/// A derived datatype not committed, where a call moves or counts data of it.
fn uncommitted_datatype(function: &str, param: &str) -> Option<&'static str> {
    let datatype = param.starts_with("MPI_Datatype ") && !param.contains(['*', '[']);
    let base = function.trim_end_matches("_c").trim_end_matches("_x");
    let taken = function.starts_with("MPI_Type_") || UNCOMMITTED_TAKEN.contains(&base);
    (datatype && !taken).then_some("uncommitted")
}

/// A negative tag that is not `MPI_ANY_TAG`, where one is passed by value (but not
/// where a status is given its tag).
fn bad_tag(function: &str, param: &str) -> Option<&'static str> {
    let mut words = param.split_whitespace();
    let (ty, name) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let tag = ty == "int" && name.contains("tag") && !param.contains(['*', '[']);
    (tag && function != "MPI_Status_set_tag").then_some("-5")
}

/// An operation that does not apply to the call's datatype (`MPI_INT`), in calls
/// that take both: `MPI_MAXLOC`, defined on pairs only.
fn op_not_for_type(function: &str, param: &str) -> Option<&'static str> {
    let op = param.starts_with("MPI_Op ") && !param.contains(['*', '[']);
    (op && !function.starts_with("MPI_Op_")).then_some("MPI_MAXLOC")
}

/// Program `name`: each of `calls` in turn (`bad` saying what is bad in them), the
/// scratch memory zeroed before each, must be refused.
fn program(name: &str, bad: &str, calls: &[(String, String, String)]) -> String {
    let mut body = String::new();
    for (function, param, call) in calls {
        body.push_str(&format!(
            "  expect_refused(\"{function}\", \"{param}\", (current = \"{function} with {bad} as {param}\", zero(), {call}));\n"
        ));
    }
    format!(
        r#"/* {name}.c, written by the test: every function the library implements, called
 * with {bad} as each parameter in turn that can take one, every other argument
 * valid, returns an error. */
#include "check.h"
#include <signal.h>
#include <unistd.h>

static MPI_Info info;
static MPI_Group group;
static MPI_Win win;
static MPI_File file;
static MPI_Session session;
static MPI_Datatype uncommitted;
static int window[4];
static long scratch[8192];
static const char *volatile current = "no call yet";
static int refused = 0;

/* The memory the other pointers point at, zeroed: counts and lengths read there
 * are 0, handles are no handle, strings are empty. */
static int zero(void) {{
  memset(scratch, 0, sizeof scratch);
  return 0;
}}

/* A crash or a hang names the call under way. */
static void on_signal(int sig) {{
  char line[512];
  int n = snprintf(line, sizeof line, "FAIL rank 0: signal %d in %s\n", sig, current);
  if (n > 0) {{
    ssize_t w = write(1, line, (size_t)n);
    (void)w;
  }}
  _exit(1);
}}

/* The call returned an error: one of the standard's classes, or the tool
 * interface's codes. */
static void expect_refused(const char *name, const char *param, int rc) {{
  CHECK(rc != MPI_SUCCESS, "%s accepted {bad} as %s", name, param);
  if (strncmp(name, "MPI_T_", 6) != 0) {{
    int cls = -1;
    OK(MPI_Error_class(rc, &cls));
  }}
  refused++;
}}

int main(int argc, char **argv) {{
  start("{name}", &argc, &argv);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGALRM, on_signal);
  errors_return(MPI_COMM_WORLD, 1);
  errors_return(MPI_COMM_SELF, 1);
  int provided;
  CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
  OK(MPI_Info_create(&info));
  OK(MPI_Comm_group(MPI_COMM_WORLD, &group));
  OK(MPI_Type_contiguous(2, MPI_INT, &uncommitted));
  OK(MPI_Win_create(window, sizeof window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  CHECK(argc == 2, "the folder for the file, as the argument");
  char path[4096];
  snprintf(path, sizeof path, "%s/{name}.%d", argv[1], (int)getpid());
  OK(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                   MPI_INFO_NULL, &file));
  OK(MPI_File_set_errhandler(file, MPI_ERRORS_RETURN));
  OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
  alarm(120);
{body}  alarm(0);
  current = "the end";
  CHECK(refused == {total}, "%d calls refused, expected {total}", refused);
  printf("refused %d calls\n", refused);
  OK(MPI_Session_finalize(&session));
  OK(MPI_File_close(&file));
  OK(MPI_Win_free(&win));
  OK(MPI_Group_free(&group));
  OK(MPI_Type_free(&uncommitted));
  OK(MPI_Info_free(&info));
  CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize");
  return finish();
}}
"#,
        total = calls.len()
    )
}

/// Build and run program `name` of `calls` (each giving `bad`, at least `least`
/// of them, else the header was not read): every call refused.
fn refused(name: &str, bad: &str, calls: &[(String, String, String)], least: usize) {
    assert!(
        calls.len() >= least,
        "only {} calls written from the reference header: it was not read",
        calls.len()
    );
    let exe = build_written(name, &program(name, bad, calls));
    let dir = exe.parent().expect("the program's folder").to_path_buf();
    let o = run_passing(&exe, name, 1, &[dir.to_str().expect("a UTF-8 path")], &[]);
    let out = String::from_utf8_lossy(&o.stdout);
    let all = format!("refused {} calls", calls.len());
    assert!(out.contains(&all), "{out}");
}

/// Every implemented function refuses a null pointer to a value it must read or
/// write.
#[test]
fn null_pointers() {
    refused("null_pointers", "a null pointer", &calls(null_pointer), 400);
}

/// Every implemented function refuses a handle of another kind in each of its
/// handle parameters.
#[test]
fn handles_of_another_kind() {
    let calls = calls(handle_of_another_kind);
    let bad = "a handle of another kind";
    refused("handles_of_another_kind", bad, &calls, 400);
}

/// Every implemented function refuses a value that is no handle in each of its
/// handle parameters.
#[test]
fn values_that_are_no_handle() {
    let calls = calls(no_handle);
    refused(
        "values_that_are_no_handle",
        "a value that is no handle",
        &calls,
        400,
    );
}

/// Every implemented function refuses a negative count or size.
#[test]
fn negative_counts() {
    refused(
        "negative_counts",
        "a negative count",
        &calls(negative_count),
        200,
    );
}

/// Every implemented function refuses a rank beyond the communicator.
#[test]
fn ranks_out_of_range() {
    let calls = calls(rank_out_of_range);
    refused("ranks_out_of_range", "a rank out of range", &calls, 100);
}

/// Every implemented function that moves or counts data refuses a datatype not
/// committed.
#[test]
fn uncommitted_datatypes() {
    let calls = calls(uncommitted_datatype);
    refused(
        "uncommitted_datatypes",
        "an uncommitted datatype",
        &calls,
        100,
    );
}

/// Every implemented function refuses a negative tag other than `MPI_ANY_TAG`.
#[test]
fn bad_tags() {
    refused("bad_tags", "a negative tag", &calls(bad_tag), 20);
}

/// Every implemented function refuses an operation its datatype does not take.
#[test]
fn operations_not_for_the_type() {
    let calls = calls(op_not_for_type);
    let bad = "an operation not for the type";
    refused("operations_not_for_the_type", bad, &calls, 40);
}

/// Every function called with the null objects (`MPI_COMM_WORLD`, `MPI_INT`,
/// `MPI_INFO_NULL`, ...; pointers at zeroed memory): its name and the call.
fn plain_calls() -> Vec<(String, String)> {
    let null = |param: &str| match param.split_whitespace().next().unwrap_or("") {
        _ if param.contains(['*', '[']) => "(void *)scratch",
        "MPI_Comm" => "MPI_COMM_WORLD",
        "MPI_Datatype" => "MPI_INT",
        "MPI_Op" => "MPI_SUM",
        "MPI_Info" => "MPI_INFO_NULL",
        "MPI_Group" => "MPI_GROUP_EMPTY",
        "MPI_Errhandler" => "MPI_ERRORS_RETURN",
        "MPI_Request" => "MPI_REQUEST_NULL",
        "MPI_Win" => "MPI_WIN_NULL",
        "MPI_File" => "MPI_FILE_NULL",
        "MPI_Session" => "MPI_SESSION_NULL",
        "MPI_Message" => "MPI_MESSAGE_NO_PROC",
        _ => "0",
    };
    header_functions()
        .into_iter()
        .filter(|f| !f.variadic && !NOT_CALLED.contains(&f.name.as_str()))
        .map(|f| {
            let args: Vec<&str> = f.params.iter().map(|p| null(p)).collect();
            let call = format!("{}({})", f.name, args.join(", "));
            (f.name, call)
        })
        .collect()
}

/// Every function of the header called after `MPI_Finalize`, each in a child
/// process: it returns, or its error handler (fatal then) ends the child with a
/// message; no signal ends it, and none hangs (20 s each).
#[test]
fn every_call_after_finalize() {
    every_call_in_a_child("every_call_after_finalize", false);
}

/// Every function of the header called before `MPI_Init` (but `MPI_Session_init`,
/// which starts the library too), each in a child process, as after
/// `MPI_Finalize`. The children share the process's launcher connection, unused
/// until the process's own `MPI_Init`, after them.
#[test]
fn every_call_before_init() {
    every_call_in_a_child("every_call_before_init", true);
}

/// Program `name`: every function of the header called before `MPI_Init` (if
/// `before`) or after `MPI_Finalize`, each in a child process, which it may end
/// through the error handler, never by a signal nor a hang.
fn every_call_in_a_child(name: &str, before: bool) {
    let when = match before {
        true => "before MPI_Init",
        false => "after MPI_Finalize",
    };
    let calls = plain_calls();
    assert!(calls.len() > 400, "the reference header was not read");
    let (mut body, mut runs) = (String::new(), String::new());
    for (i, (function, call)) in calls.iter().enumerate() {
        if before && function == "MPI_Session_init" {
            continue;
        }
        body.push_str(&format!("static int call{i}(void) {{ return {call}; }}\n"));
        runs.push_str(&format!("  in_child(\"{function}\", call{i});\n"));
    }
    // What comes before the calls and after them, and how the program reports: the
    // library's own end (`finish`) when it starts after them.
    let start = format!("  start(\"{name}\", &argc, &argv);\n");
    let (first, then, pass, end) = match before {
        true => (String::new(), start, String::new(), "finish()"),
        false => (
            format!("{start}  OK(MPI_Finalize());\n"),
            String::new(),
            format!("printf(\"PASS {name} rank %d/%d\\n\", rank, size);\n  "),
            "0",
        ),
    };
    let program = format!(
        r#"/* {name}.c, written by the test: every function of the reference header
 * called {when}, each in a child process, which it may end through the error
 * handler, never by a signal. */
#include "check.h"
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static long scratch[8192];
static int ended_by_signal = 0;

{body}
static void in_child(const char *name, int (*call)(void)) {{
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  CHECK(child >= 0, "fork for %s", name);
  if (child == 0) {{
    alarm(20);
    memset(scratch, 0, sizeof scratch);
    (void)call();
    _exit(0);
  }}
  int st = 0;
  CHECK(waitpid(child, &st, 0) == child, "waiting for %s", name);
  if (WIFSIGNALED(st)) {{
    printf("%s {when}: ended by signal %d\n", name, WTERMSIG(st));
    ended_by_signal++;
  }}
}}

int main(int argc, char **argv) {{
{first}{runs}{then}  if (ended_by_signal != 0) {{
    printf("FAIL rank %d: %d calls ended by a signal\n", rank, ended_by_signal);
    return 1;
  }}
  {pass}return {end};
}}
"#
    );
    let exe = build_written(name, &program);
    run_passing(&exe, name, 1, &[], &[]);
}
