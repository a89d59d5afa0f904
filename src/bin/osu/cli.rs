//! Command line of `osu`.

use rbtl::config::{Kind, Value};
use std::path::PathBuf;

pub const HELP: &str = "\
osu: OSU-style micro-benchmarks on the rbtl message layer

usage: osu BENCHMARK [options]

benchmarks:
  latency       ping-pong, one-way latency (osu_latency)
  bw            unidirectional bandwidth, window of non-blocking sends (osu_bw)
  bibw          bidirectional bandwidth (osu_bibw)
  put-latency   one-sided put + flush latency (osu_put_latency)
  get-latency   one-sided get latency (osu_get_latency)
  put-bw        one-sided put bandwidth (osu_put_bw)
  get-bw        one-sided get bandwidth (osu_get_bw)
  mbw-mr        multi-pair bandwidth and message rate (osu_mbw_mr)
  init          wire-up (osu_init, to the end of wire-up): from process start
                until every pair of ranks has exchanged one message; with the
                TCP connections and file descriptors of each process

options:
  --btl LIST          transports (the `btl` parameter: self,sm or ^sm ...)
  --cpc LIST          openib connection methods (the `btl_openib_cpc_include`
                      parameter: oob, rdma_cm; needs the openib feature)
  --param NAME=VALUE  any other parameter (see rbtl_info)
  --min-size SIZE     smallest message (default 0 for latency, 1 otherwise)
  --max-size SIZE     largest message (default 4m), at most 1g; sizes are bytes
                      or take the suffixes k, m, g (powers of 1024), as
                      configuration sizes do
  --iterations N      timed iterations per size, 1 to 1000000000 (default OSU's:
                      10000 up to 8 KiB, 1000 above; 100/20 for bandwidth)
  --skip N            warm-up iterations per size, 0 to 1000000000 (default
                      100/10; 10/2 for bandwidth)
  --window N          messages in flight for bandwidth, 1 to 65536 (default 64)
  -n N                pairs for mbw-mr, 1 to 4096 (default 1); for init run
                      alone, the ranks to start (default 2)
  --verbose           also print, as # lines, each rank's host and the
                      transport it uses to every rank
  --json FILE         also write the results as JSON
  --plot FILE.svg     also draw value against size (log axes)
  -h, --help          this text

Run alone, `osu` starts its own ranks (2, 2n for mbw-mr, n for init) on this node
with the rbtl launcher; under rbtlrun, mpiexec or srun --mpi=pmi2 it uses the PMI
environment it is given.
";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bench {
    Latency,
    Bw,
    Bibw,
    PutLatency,
    GetLatency,
    PutBw,
    GetBw,
    MbwMr,
    Init,
}

impl Bench {
    fn parse(s: &str) -> Option<Bench> {
        Some(match s {
            "latency" => Bench::Latency,
            "bw" => Bench::Bw,
            "bibw" => Bench::Bibw,
            "put-latency" => Bench::PutLatency,
            "get-latency" => Bench::GetLatency,
            "put-bw" => Bench::PutBw,
            "get-bw" => Bench::GetBw,
            "mbw-mr" => Bench::MbwMr,
            "init" => Bench::Init,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Bench::Latency => "latency",
            Bench::Bw => "bw",
            Bench::Bibw => "bibw",
            Bench::PutLatency => "put-latency",
            Bench::GetLatency => "get-latency",
            Bench::PutBw => "put-bw",
            Bench::GetBw => "get-bw",
            Bench::MbwMr => "mbw-mr",
            Bench::Init => "init",
        }
    }

    /// The OSU title of the benchmark.
    pub fn title(self) -> &'static str {
        match self {
            Bench::Latency => "Latency Test",
            Bench::Bw => "Bandwidth Test",
            Bench::Bibw => "Bi-Directional Bandwidth Test",
            Bench::PutLatency => "One Sided Put Latency Test",
            Bench::GetLatency => "One Sided Get Latency Test",
            Bench::PutBw => "One Sided Put Bandwidth Test",
            Bench::GetBw => "One Sided Get Bandwidth Test",
            Bench::MbwMr => "Multiple Bandwidth / Message Rate Test",
            Bench::Init => "Init Test",
        }
    }

    pub fn is_latency(self) -> bool {
        matches!(self, Bench::Latency | Bench::PutLatency | Bench::GetLatency)
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub bench: Bench,
    pub params: Vec<(String, String)>,
    pub min_size: usize,
    pub max_size: usize,
    pub iterations: Option<usize>,
    pub skip: Option<usize>,
    pub window: usize,
    pub pairs: u32,
    /// Ranks `osu init` starts when run alone.
    pub ranks: u32,
    pub verbose: bool,
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

pub const LARGE: usize = 8192;

/// The largest message a sweep may use: both buffers of this size are allocated and
/// filled before the sweep.
pub const MAX_MESSAGE: usize = 1 << 30;
/// The most timed or warm-up iterations per size.
pub const MAX_ITERATIONS: usize = 1_000_000_000;
/// The largest window of messages in flight.
pub const MAX_WINDOW: usize = 1 << 16;
/// The most pairs of ranks for mbw-mr (each pair is two processes on this node).
pub const MAX_PAIRS: u32 = 4096;

impl Options {
    /// Timed iterations and warm-up for `size` (OSU's defaults unless given).
    pub fn loops(&self, size: usize) -> (usize, usize) {
        let (iters, skip) = match (self.bench.is_latency(), size > LARGE) {
            (true, false) => (10_000, 100),
            (true, true) => (1_000, 10),
            (false, false) => (100, 10),
            (false, true) => (20, 2),
        };
        (self.iterations.unwrap_or(iters), self.skip.unwrap_or(skip))
    }

    /// The sizes of the sweep: min (or 0/1), doubling to max.
    pub fn sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut s = self.min_size;
        if s == 0 {
            out.push(0);
            s = 1;
        }
        while s <= self.max_size {
            out.push(s);
            let Some(next) = s.checked_mul(2) else { break };
            s = next;
        }
        out
    }
}

/// A whole number from `min` to `max` for `flag`.
fn count(flag: &str, v: Option<String>, min: usize, max: usize) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    let range = format!("want a whole number from {min} to {max}");
    let n: usize = v
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {v}: not a whole number; {range}"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("{flag} {v}: out of range; {range}"));
    }
    Ok(n)
}

/// A message size for `flag`: bytes, or with the suffixes of configuration sizes.
fn size(flag: &str, v: Option<String>) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    let range = format!(
        "want a size from 0 to 1g ({MAX_MESSAGE} bytes), in bytes or with the suffixes \
         k, m, g (powers of 1024)"
    );
    match Value::parse(Kind::Size, &v) {
        Some(Value::Size(n)) if n <= MAX_MESSAGE => Ok(n),
        Some(_) => Err(format!("{flag} {v}: too large; {range}")),
        None => Err(format!("{flag} {v}: not a size; {range}")),
    }
}

/// The openib parameters cannot be set in a build without the transport.
fn check_openib_built(what: &str) -> Result<(), String> {
    if cfg!(feature = "openib") {
        return Ok(());
    }
    Err(format!(
        "{what}: the openib transport is not built: rebuild with --features openib"
    ))
}

pub fn parse(args: Vec<String>) -> Result<Option<Options>, String> {
    let mut it = args.into_iter();
    let first = it
        .next()
        .ok_or("which benchmark? (osu --help lists them)")?;
    if first == "-h" || first == "--help" {
        return Ok(None);
    }
    let bench = Bench::parse(&first)
        .ok_or_else(|| format!("unknown benchmark `{first}` (osu --help lists them)"))?;
    let mut o = Options {
        bench,
        params: Vec::new(),
        min_size: if bench.is_latency() { 0 } else { 1 },
        max_size: 4 << 20,
        iterations: None,
        skip: None,
        window: 64,
        pairs: 1,
        ranks: 2,
        verbose: false,
        json: None,
        plot: None,
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--btl" => o
                .params
                .push(("btl".into(), it.next().ok_or("--btl needs a list")?)),
            "--cpc" => {
                let list = it.next().ok_or("--cpc needs a list")?;
                check_openib_built(&format!("--cpc {list}"))?;
                o.params.push(("btl_openib_cpc_include".into(), list));
            }
            "--param" => {
                let kv = it.next().ok_or("--param needs NAME=VALUE")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--param wants NAME=VALUE, not `{kv}`"))?;
                if k.trim().to_ascii_lowercase().starts_with("btl_openib_") {
                    check_openib_built(&format!("--param {k}"))?;
                }
                o.params.push((k.into(), v.into()));
            }
            "--min-size" => o.min_size = size(&a, it.next())?,
            "--max-size" => o.max_size = size(&a, it.next())?,
            "--iterations" => o.iterations = Some(count(&a, it.next(), 1, MAX_ITERATIONS)?),
            "--skip" => o.skip = Some(count(&a, it.next(), 0, MAX_ITERATIONS)?),
            "--window" => o.window = count(&a, it.next(), 1, MAX_WINDOW)?,
            "-n" => {
                let pairs = count(&a, it.next(), 1, MAX_PAIRS as usize)?;
                o.pairs = u32::try_from(pairs).expect("at most MAX_PAIRS");
                o.ranks = o.pairs;
            }
            "--verbose" => o.verbose = true,
            "--json" => o.json = Some(it.next().ok_or("--json needs a file")?.into()),
            "--plot" => o.plot = Some(it.next().ok_or("--plot needs a file")?.into()),
            other => return Err(format!("unknown option `{other}` (osu --help lists them)")),
        }
    }
    if o.min_size > o.max_size {
        return Err(format!(
            "--min-size {} exceeds --max-size {}",
            o.min_size, o.max_size
        ));
    }
    Ok(Some(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Option<Options>, String> {
        parse(args.iter().map(|a| a.to_string()).collect())
    }

    #[test]
    fn out_of_range_values_are_errors_naming_the_range() {
        for (args, says) in [
            (
                &["latency", "--iterations", "0"][..],
                "from 1 to 1000000000",
            ),
            (&["bw", "--window", "0"][..], "from 1 to 65536"),
            (&["mbw-mr", "-n", "0"][..], "from 1 to 4096"),
            (&["mbw-mr", "-n", "4294967297"][..], "from 1 to 4096"),
            (&["mbw-mr", "-n", "2147483648"][..], "from 1 to 4096"),
            (&["latency", "--skip", "-1"][..], "from 0 to 1000000000"),
            (&["latency", "--max-size", "64g"][..], "from 0 to 1g"),
            (&["latency", "--max-size", "68719476736"][..], "too large"),
            (&["latency", "--min-size", "4q"][..], "not a size"),
            (
                &["latency", "--max-size", "99999999999999999999999"][..],
                "not a size",
            ),
        ] {
            let err = parse_args(args).unwrap_err();
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(err.contains(args[2]), "{args:?}: {err}");
        }
    }

    #[test]
    fn sizes_take_the_configuration_suffixes() {
        let o = parse_args(&["latency", "--min-size", "4k", "--max-size", "1M"])
            .unwrap()
            .unwrap();
        assert_eq!((o.min_size, o.max_size), (4096, 1 << 20));
        assert_eq!(o.sizes().len(), 9);
        let o = parse_args(&["bw", "--max-size", "1g"]).unwrap().unwrap();
        assert_eq!(o.max_size, MAX_MESSAGE);
        assert_eq!(o.sizes().last(), Some(&MAX_MESSAGE));
    }

    #[test]
    fn openib_options_need_the_openib_build() {
        for args in [
            &["latency", "--cpc", "oob"][..],
            &["latency", "--param", "btl_openib_cpc_include=oob"][..],
        ] {
            let parsed = parse_args(args);
            if cfg!(feature = "openib") {
                assert!(parsed.is_ok(), "{args:?}");
            } else {
                let err = parsed.unwrap_err();
                assert!(
                    err.contains(
                        "the openib transport is not built: rebuild with --features openib"
                    ),
                    "{err}"
                );
            }
        }
    }
}
