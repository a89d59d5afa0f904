//! A null pointer where a call must read or write one value is refused, never
//! followed and never skipped: every function of the reference header the library
//! implements, once for each such parameter (`int *flag`, `MPI_Comm *newcomm`,
//! `const char *key`, ...), is called with that parameter null and the others valid
//! (`MPI_COMM_WORLD`, `MPI_INT`, `MPI_SUM`, a live group, info, window, file and
//! session; other pointers at zeroed memory), and must return an error, as MPICH and
//! Open MPI refuse a null output with `MPI_ERR_ARG` (the tool interface's functions
//! with an error code of their own). Buffers (`void *`), arrays (`[]`), statuses
//! (`MPI_STATUS_IGNORE` is null) and the program's functions are not such
//! parameters; nor are those the standard lets a caller leave null, listed in
//! [`MAY_BE_NULL`]. The program calling them all is written by the test from the
//! header and [`mpi_abi::IMPLEMENTED`].

use super::programs::{build_written, run_passing};
use super::unsupported::{header_functions, Function};
use std::collections::BTreeSet;

/// Parameters a caller may leave null, by the standard: the outputs of the tool
/// interface's `_get_info` calls (which it lets an implementation skip), and a value
/// whose length the caller gives as 0 (here it is: the other pointers point at
/// zeroed memory).
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

/// The calls: for each function and parameter tested, a C expression calling it
/// with that parameter null.
fn calls() -> Vec<(String, String, String)> {
    let implemented: BTreeSet<&str> = mpi_abi::IMPLEMENTED.lines().collect();
    let mut out = Vec::new();
    for f in header_functions() {
        let Function { name, params, .. } = &f;
        if f.variadic
            || !implemented.contains(name.as_str())
            || NOT_CALLED.contains(&name.as_str())
            || (name.starts_with("MPI_T_") && name.ends_with("_get_info"))
        {
            continue;
        }
        for (i, p) in params.iter().enumerate() {
            let param = name_of(p);
            if !single_value(p) || MAY_BE_NULL.contains(&(name.as_str(), param)) {
                continue;
            }
            let args: Vec<&str> = params
                .iter()
                .enumerate()
                .map(|(j, q)| match (j == i, q.contains(['*', '['])) {
                    (true, _) => "0",
                    (false, true) => "(void *)scratch",
                    (false, false) => value_of(q),
                })
                .collect();
            let call = format!("{name}({})", args.join(", "));
            out.push((name.clone(), param.to_string(), call));
        }
    }
    out
}

/// The program: each call in turn, the scratch memory zeroed before each.
fn program() -> (String, usize) {
    let calls = calls();
    let mut body = String::new();
    for (name, param, call) in &calls {
        body.push_str(&format!(
            "  expect_refused(\"{name}\", \"{param}\", (current = \"{name} with {param} null\", zero(), {call}));\n"
        ));
    }
    let program = format!(
        r#"/* null_arguments.c, written by the test: every function the library implements,
 * called once for each pointer to a single value it reads or writes, with that
 * pointer null and every other argument valid, returns an error. */
#include "check.h"
#include <signal.h>
#include <unistd.h>

static MPI_Info info;
static MPI_Group group;
static MPI_Win win;
static MPI_File file;
static MPI_Session session;
static int window[4];
static long scratch[8192];
static const char *volatile current = "no call yet";
static int refused = 0, refused_arg = 0;

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

static void expect_refused(const char *name, const char *param, int rc) {{
  CHECK(rc != MPI_SUCCESS, "%s accepted a null %s", name, param);
  if (strncmp(name, "MPI_T_", 6) != 0) {{
    int cls = -1;
    OK(MPI_Error_class(rc, &cls));
    refused_arg += cls == MPI_ERR_ARG;
  }} else {{
    refused_arg += rc == MPI_T_ERR_INVALID;
  }}
  refused++;
}}

int main(int argc, char **argv) {{
  start("null_arguments", &argc, &argv);
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
  OK(MPI_Win_create(window, sizeof window, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
  OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
  CHECK(argc == 2, "the folder for the file, as the argument");
  char path[4096];
  snprintf(path, sizeof path, "%s/null_arguments.%d", argv[1], (int)getpid());
  OK(MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                   MPI_INFO_NULL, &file));
  OK(MPI_File_set_errhandler(file, MPI_ERRORS_RETURN));
  OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session));
  alarm(120);
{body}  alarm(0);
  current = "the end";
  CHECK(refused == {total}, "%d calls refused, expected {total}", refused);
  printf("refused %d calls with a null pointer, %d of them with MPI_ERR_ARG (MPI_T_ERR_INVALID)\n",
         refused, refused_arg);
  OK(MPI_Session_finalize(&session));
  OK(MPI_File_close(&file));
  OK(MPI_Win_free(&win));
  OK(MPI_Group_free(&group));
  OK(MPI_Info_free(&info));
  CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize");
  return finish();
}}
"#,
        total = calls.len()
    );
    (program, calls.len())
}

/// Every implemented function refuses a null pointer to a value it must read or
/// write.
#[test]
fn null_arguments() {
    let (program, n) = program();
    assert!(
        n > 400,
        "only {n} calls written from the reference header: it was not read"
    );
    let exe = build_written("null_arguments", &program);
    let dir = exe.parent().expect("the program's folder").to_path_buf();
    let o = run_passing(
        &exe,
        "null_arguments",
        1,
        &[dir.to_str().expect("a UTF-8 path")],
        &[],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&format!("refused {n} calls with a null pointer")),
        "{out}"
    );
}
