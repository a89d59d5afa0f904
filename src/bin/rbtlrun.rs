//! `rbtlrun`: starts the local ranks of a job and serves them PMI-1 (see
//! `rbtlrun --help` and [`rbtl::launcher`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    rbtl::launcher::cli::main("rbtlrun", "", std::env::args_os().skip(1).collect())
}
