//! `rbtlrun`: starts the local ranks of a job and serves them PMI-1 (see
//! `rbtlrun --help` and [`rbtl::launcher`]).

use std::process::ExitCode;

fn main() -> ExitCode {
    let version = concat!("rbtlrun ", env!("CARGO_PKG_VERSION"));
    rbtl::launcher::cli::main(
        "rbtlrun",
        "",
        version,
        std::env::args_os().skip(1).collect(),
    )
}
