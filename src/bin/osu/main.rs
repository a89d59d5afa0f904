//! `osu`: the OSU-style latency and bandwidth suite on the rbtl message layer.

mod bench;
mod cli;
mod report;

use rbtl::launcher::{self, Bind, LaunchOptions};
use rbtl::msg::Comm;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = match cli::parse(args.clone()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("osu: {e}");
            return ExitCode::from(2);
        }
    };
    let under_pmi = std::env::var_os("PMI_FD").is_some() || std::env::var_os("PMI_PORT").is_some();
    if !under_pmi {
        return launch_self(&args, &opts);
    }
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Start the ranks on this node with the launcher and this same command line.
fn launch_self(args: &[String], opts: &cli::Options) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("osu: cannot find my own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let ranks = if opts.bench == cli::Bench::MbwMr {
        2 * opts.pairs
    } else {
        2
    };
    let mut launch = LaunchOptions {
        ranks,
        bind: Bind::Core,
        ..LaunchOptions::default()
    };
    if std::io::stderr().is_terminal() {
        launch
            .env
            .push((report::PROGRESS_TTY_ENV.into(), "1".into()));
    }
    let args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    match launcher::launch(&exe, &args, &launch) {
        Ok(summary) => ExitCode::from(summary.code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("osu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(opts: &cli::Options) -> rbtl::msg::Result<()> {
    let settings: Vec<(&str, &str)> = opts
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut comm = Comm::init(&settings)?;
    if comm.size() < 2 {
        eprintln!("osu: needs at least 2 ranks");
        return Ok(());
    }
    let transport = comm
        .transport_to(1 - comm.rank().min(1))
        .unwrap_or("?")
        .to_string();
    let me = comm.rank();
    let sizes = opts.sizes();
    let mut runner = bench::Runner {
        comm: &mut comm,
        opts,
        buf: bench::Buffers::new(opts.max_size),
        window: None,
    };
    if me == 0 {
        println!("{}", report::header(opts, &transport));
    }
    let mut progress = report::Progress::new(sizes.len());
    let mut points = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        if me == 0 {
            progress.step(i, size);
        }
        if let Some(p) = runner.run(size)? {
            progress.finish();
            println!("{}", report::row(&p));
            points.push(p);
        }
    }
    progress.finish();
    drop(runner);
    if me == 0 {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .unwrap_or_default()
            .trim()
            .to_string();
        let write = |path: &std::path::Path, text: String| {
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("osu: cannot write {}: {e}", path.display());
            }
        };
        if let Some(path) = &opts.json {
            write(path, report::json(opts, &transport, &host, &points));
        }
        if let Some(path) = &opts.plot {
            write(path, report::svg(opts, &transport, &points));
        }
    }
    comm.finalize()
}
