//! `rbtlrun`: starts the local ranks of a job and serves them PMI-1 (see
//! `rbtlrun --help` and [`rbtl::launcher`]).

use rbtl::launcher::{self, cli, Invocation};
use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::parse_args(std::env::args_os().skip(1)) {
        Ok(Invocation::Help) => {
            print!("{}", cli::HELP);
            ExitCode::SUCCESS
        }
        Ok(Invocation::Version) => {
            println!("rbtlrun {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(Invocation::Run {
            program,
            args,
            options,
        }) => match launcher::launch(Path::new(&program), &args, &options) {
            Ok(summary) => ExitCode::from(summary.exit_byte()),
            Err(e) => {
                eprintln!("rbtlrun: {e}");
                ExitCode::from(1)
            }
        },
        Err(e) => {
            eprintln!("rbtlrun: {e}");
            ExitCode::from(2)
        }
    }
}
