//! `osu`: the OSU-style latency and bandwidth suite on the rbtl message layer.

mod bench;
mod cli;
mod error;
mod init;
mod report;
mod routes;

use rbtl::launcher::{self, Bind, LaunchOptions};
use rbtl::msg::Comm;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

fn main() -> ExitCode {
    // Where `osu init` starts its clock.
    let start = Instant::now();
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
    match run(start, &opts) {
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
    let ranks = match opts.bench {
        cli::Bench::MbwMr => 2 * opts.pairs,
        cli::Bench::Init => opts.ranks,
        _ => 2,
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
        Ok(summary) => ExitCode::from(summary.exit_byte()),
        Err(e) => {
            eprintln!("osu: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(start: Instant, opts: &cli::Options) -> error::Result<()> {
    let settings: Vec<(&str, &str)> = opts
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    if opts.bench == cli::Bench::Init {
        return init::run(start, &settings, opts.verbose);
    }
    let mut comm = Comm::init(&settings)?;
    if comm.size() < 2 {
        return Err(error::OsuError::TooFewRanks(comm.size()));
    }
    let mut opts = opts.clone();
    if opts.bench == cli::Bench::MbwMr {
        // Under a launcher the job's size, not -n, decides the pairs.
        opts.pairs = comm.size() / 2;
    }
    let opts = &opts;
    let pairs = (opts.bench == cli::Bench::MbwMr).then_some(opts.pairs);
    let transport = routes::measured(&mut comm, pairs)?;
    let me = comm.rank();
    let routes = if opts.verbose {
        routes::gather_routes(&mut comm)?.map(|lines| (lines, routes::placement(&comm)))
    } else {
        None
    };
    // Rank 0 creates its results files before the sweep, so that a path it cannot
    // write fails at once rather than after the whole run.
    let mut outputs = if me == 0 {
        report::Outputs::create(opts)?
    } else {
        report::Outputs::default()
    };
    let sizes = opts.sizes();
    let mut runner = bench::Runner {
        comm: &mut comm,
        opts,
        buf: bench::Buffers::new(opts.max_size)?,
        window: None,
    };
    if me == 0 {
        println!("{}", report::header(opts, &transport));
        if let Some((lines, placement)) = routes {
            println!("{}", routes::table(&lines));
            println!("{placement}");
        }
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
        outputs.write(opts, &transport, &host, &points)?;
    }
    Ok(comm.finalize()?)
}
