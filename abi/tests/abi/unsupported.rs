//! The functions of the reference header that the library does not implement:
//! each exists (a program calling it links) and refuses through the error handler
//! with `MPI_ERR_UNSUPPORTED_OPERATION`, naming itself (or, in the tool interface,
//! returns `MPI_T_ERR_NOT_SUPPORTED`). Where the library implements every one, the
//! test checks that instead. The program that calls them all is written by the test
//! from the header and [`mpi_abi::IMPLEMENTED`].

use super::programs::{build_written, run_passing};
use super::reference_include;
use std::collections::BTreeSet;

/// A function of the reference header that returns `int`.
pub struct Function {
    pub name: String,
    /// Each parameter's declaration (`MPI_Comm comm`, `int *flag`, ...).
    pub params: Vec<String>,
    pub variadic: bool,
    /// The type of the object whose error handler its errors go through: the first
    /// communicator, window, file or session it takes by value.
    pub object: Option<String>,
}

/// The handle types whose objects have error handlers.
const OBJECTS: [&str; 4] = ["MPI_Comm", "MPI_Win", "MPI_File", "MPI_Session"];

impl Function {
    /// The type a parameter has when it is one of [`OBJECTS`] by value.
    fn object_of(param: &str) -> Option<&'static str> {
        OBJECTS.into_iter().find(|o| {
            param
                .strip_prefix(o)
                .is_some_and(|rest| rest.starts_with(' ') && !rest.contains(['*', '[']))
        })
    }

    /// A call of it (or of its `PMPI_` twin, `prefix` "P"): `MPI_COMM_WORLD` for
    /// each communicator, zeros for the rest (a null pointer, a null count, a
    /// handle that names nothing).
    pub fn call(&self, prefix: &str) -> String {
        let args: Vec<&str> = self
            .params
            .iter()
            .map(|p| match Self::object_of(p) {
                Some("MPI_Comm") => "MPI_COMM_WORLD",
                _ => "0",
            })
            .collect();
        format!("{prefix}{}({})", self.name, args.join(", "))
    }
}

/// The functions of the reference header that return `int`.
pub fn header_functions() -> Vec<Function> {
    let path = reference_include().join("mpi.h");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("int MPI_") else {
            continue;
        };
        let Some((name, params)) = rest.split_once('(') else {
            continue;
        };
        let Some((params, _)) = params.split_once(");") else {
            continue;
        };
        let params: Vec<String> = match params.trim() {
            "void" | "" => Vec::new(),
            p => p.split(',').map(|p| p.trim().to_string()).collect(),
        };
        let object = params
            .iter()
            .find_map(|p| Function::object_of(p))
            .map(str::to_string);
        out.push(Function {
            name: format!("MPI_{name}"),
            variadic: params.iter().any(|p| p == "..."),
            params,
            object,
        });
    }
    out
}

/// The functions of the header the library does not implement, but for those of
/// one-sided communication (windows), which this test leaves alone.
pub fn unsupported_functions() -> Vec<Function> {
    let implemented: BTreeSet<&str> = mpi_abi::IMPLEMENTED.lines().collect();
    header_functions()
        .into_iter()
        .filter(|f| !implemented.contains(f.name.as_str()) && !f.variadic)
        .filter(|f| {
            !f.name.starts_with("MPI_Win_")
                && f.object.as_deref() != Some("MPI_Win")
                && !f.params.iter().any(|p| p.starts_with("MPI_Win *"))
        })
        .collect()
}

/// The program calling every function not implemented (and its `PMPI_` twin): how
/// many functions it calls.
fn unsupported_program() -> (String, usize) {
    let functions = unsupported_functions();
    let mut calls = String::new();
    for f in &functions {
        for prefix in ["", "P"] {
            let call = f.call(prefix);
            let line = if f.name.starts_with("MPI_T_") {
                format!("  expect_tool({call}, \"{prefix}{}\");\n", f.name)
            } else {
                // A refusal on a communicator goes through its handler; the
                // standard sends the errors of MPI_File_open and the like to the
                // default file error handler instead, so which handler those use
                // is not checked (-1).
                let through_world = match f.object.as_deref() {
                    Some("MPI_Comm") if f.name.starts_with("MPI_File_") => -1,
                    Some("MPI_Comm") => 1,
                    _ => 0,
                };
                format!(
                    "  handled = 0;\n  expect_unsupported({call}, \"{prefix}{name}\", \"{name}\", {through_world});\n",
                    name = f.name
                )
            };
            calls.push_str(&line);
        }
    }
    let program = format!(
        r#"/* unsupported.c, written by the test: every function of the reference header
 * that the library does not implement (and its PMPI_ twin), called with
 * MPI_COMM_WORLD for its communicators and zeros for the rest, returns
 * MPI_ERR_UNSUPPORTED_OPERATION through the error handler with its name in the
 * error string: a refusal on a communicator goes through the user's handler set on
 * MPI_COMM_WORLD, the others through the handler of their object (MPI_COMM_SELF's,
 * a file's or a session's: MPI_ERRORS_RETURN here). The tool interface's
 * functions return MPI_T_ERR_NOT_SUPPORTED. */
#include "check.h"

static int refused = 0, handled = 0, handled_code = 0;
static MPI_Comm handled_comm = MPI_COMM_NULL;

static void on_error(MPI_Comm *comm, int *code, ...) {{
  handled++;
  handled_comm = *comm;
  handled_code = *code;
}}

static void expect_unsupported(int rc, const char *call, const char *name,
                               int through_world) {{
  int cls = -1;
  CHECK(rc != MPI_SUCCESS, "%s succeeded", call);
  OK(MPI_Error_class(rc, &cls));
  CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION, "%s returned class %d: %s", call,
        cls, error_text(rc));
  char text[MPI_MAX_ERROR_STRING], word[200];
  int len = 0;
  OK(MPI_Error_string(rc, text, &len));
  snprintf(word, sizeof word, "%s ", name);
  CHECK(strstr(text, word) != NULL, "the error of %s does not name it: \"%s\"",
        call, text);
  if (through_world == 1)
    CHECK(handled == 1 && handled_comm == MPI_COMM_WORLD && handled_code == rc,
          "%s on MPI_COMM_WORLD: its handler ran %d times", call, handled);
  else if (through_world == 0)
    CHECK(handled == 0, "%s went through MPI_COMM_WORLD's handler", call);
  refused++;
}}

static void expect_tool(int rc, const char *call) {{
  CHECK(rc == MPI_T_ERR_NOT_SUPPORTED, "%s returned %d, not MPI_T_ERR_NOT_SUPPORTED",
        call, rc);
  refused++;
}}

int main(int argc, char **argv) {{
  start("unsupported", &argc, &argv);
  MPI_Errhandler eh;
  OK(MPI_Comm_create_errhandler(on_error, &eh));
  OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
  OK(MPI_Errhandler_free(&eh));
  errors_return(MPI_COMM_SELF, 1);
{calls}  CHECK(refused == {total}, "%d refusals, expected {total}", refused);
  return finish();
}}
"#,
        total = 2 * functions.len()
    );
    (program, functions.len())
}

/// Every function of the standard's header that the library does not implement
/// exists (the program links) and refuses through the error handler, naming
/// itself.
#[test]
fn unsupported() {
    let read = header_functions().len();
    assert!(
        read > 400,
        "only {read} functions read from the reference header: it was not read"
    );
    let (program, n) = unsupported_program();
    if n == 0 {
        // Nothing to refuse: then every function of the header is written by hand.
        let implemented: BTreeSet<&str> = mpi_abi::IMPLEMENTED.lines().collect();
        let missing: Vec<String> = header_functions()
            .into_iter()
            .filter(|f| !implemented.contains(f.name.as_str()))
            .map(|f| f.name)
            .collect();
        assert!(
            missing.is_empty(),
            "neither written nor refused here: {missing:?}"
        );
        return;
    }
    let exe = build_written("unsupported", &program);
    run_passing(&exe, "unsupported", 1, &[], &[]);
}
