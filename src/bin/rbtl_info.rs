//! `rbtl_info`: the transports compiled in, the memory monitor that keeps the
//! registration cache right (or why none runs), the interfaces `tcp` would use, and every
//! parameter with its value and where the value came from (in the spirit of
//! `ompi_info --all` and `ucx_info -c`).
//!
//! Usage: `rbtl_info [--param NAME=VALUE]...`; `RBTL_*` variables and
//! `RBTL_CONFIG_FILE` apply as everywhere.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut settings = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--param", Some(kv)) => match kv.split_once('=') {
                Some((k, _))
                    if !cfg!(feature = "openib")
                        && k.trim().to_ascii_lowercase().starts_with("btl_openib_") =>
                {
                    eprintln!(
                        "rbtl_info: --param {k}: the openib transport is not built: \
                         rebuild with --features openib"
                    );
                    return ExitCode::from(2);
                }
                Some((k, v)) => settings.push((k.to_string(), v.to_string())),
                None => return usage(&format!("--param wants NAME=VALUE, not `{kv}`")),
            },
            _ => return usage(&format!("unknown argument `{arg}`")),
        }
    }
    let pairs: Vec<(&str, &str)> = settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let config = match rbtl::configure(&pairs) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rbtl_info: {e}");
            return ExitCode::from(2);
        }
    };
    let framework = rbtl::framework();
    let selected = framework.selected(&config);
    println!("rbtl {}", env!("CARGO_PKG_VERSION"));
    println!("\ntransports:");
    for c in framework.components() {
        let on = match &selected {
            Ok(s) if s.contains(&c.name()) => "selected",
            Ok(_) => "excluded",
            Err(_) => "?",
        };
        println!("  {:<8} {:<9} {}", c.name(), on, c.description());
    }
    if let Err(e) = selected {
        eprintln!("rbtl_info: {e}");
        return ExitCode::from(2);
    }
    match rbtl::btl::transport_kit::rcache_params::monitor_status(&config) {
        Ok(status) => println!("\nmemory monitor: {status}"),
        Err(e) => {
            eprintln!("rbtl_info: {e}");
            return ExitCode::from(2);
        }
    }
    if selected.as_ref().is_ok_and(|s| s.contains(&"tcp")) {
        println!(
            "\ntcp interfaces (btl_tcp_if_include / btl_tcp_if_exclude / btl_tcp_disable_family):"
        );
        match rbtl::tcp::interfaces::chosen(&config) {
            Ok(ifs) if ifs.is_empty() => println!("  none: tcp stays closed"),
            Ok(ifs) => {
                for i in ifs {
                    println!("  {:<8} {}/{}", i.name, i.addr, i.prefix);
                }
            }
            Err(e) => {
                eprintln!("rbtl_info: {e}");
                return ExitCode::from(2);
            }
        }
    }
    println!("\nparameters:");
    print!("{config}");
    ExitCode::SUCCESS
}

fn usage(why: &str) -> ExitCode {
    eprintln!("rbtl_info: {why}\nusage: rbtl_info [--param NAME=VALUE]...");
    ExitCode::from(2)
}
