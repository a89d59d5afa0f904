//! Command line of `osu`.

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

options:
  --btl LIST          transports (the `btl` parameter: self,sm or ^sm ...)
  --cpc LIST          openib connection methods (the `btl_openib_cpc_include`
                      parameter: oob, rdma_cm; needs the openib feature)
  --param NAME=VALUE  any other parameter (see rbtl_info)
  --min-size N        smallest message (default 0 for latency, 1 otherwise)
  --max-size N        largest message (default 4194304)
  --iterations N      timed iterations per size (default OSU's: 10000 up to 8 KiB,
                      1000 above; 100/20 for bandwidth)
  --skip N            warm-up iterations per size (default 100/10; 10/2 for bandwidth)
  --window N          messages in flight for bandwidth (default 64)
  -n N                pairs for mbw-mr (default 1)
  --json FILE         also write the results as JSON
  --plot FILE.svg     also draw value against size (log axes)
  -h, --help          this text

Run alone, `osu` starts its own ranks (2, or 2n for mbw-mr) on this node with the
rbtl launcher; under rbtlrun or mpiexec it uses the PMI environment it is given.
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
    pub json: Option<PathBuf>,
    pub plot: Option<PathBuf>,
}

pub const LARGE: usize = 8192;

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
            s *= 2;
        }
        out
    }
}

fn number(flag: &str, v: Option<String>) -> Result<usize, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{flag}: `{v}` is not a number"))
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
        json: None,
        plot: None,
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--btl" => o
                .params
                .push(("btl".into(), it.next().ok_or("--btl needs a list")?)),
            "--cpc" => o.params.push((
                "btl_openib_cpc_include".into(),
                it.next().ok_or("--cpc needs a list")?,
            )),
            "--param" => {
                let kv = it.next().ok_or("--param needs NAME=VALUE")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--param wants NAME=VALUE, not `{kv}`"))?;
                o.params.push((k.into(), v.into()));
            }
            "--min-size" => o.min_size = number(&a, it.next())?,
            "--max-size" => o.max_size = number(&a, it.next())?,
            "--iterations" => o.iterations = Some(number(&a, it.next())?.max(1)),
            "--skip" => o.skip = Some(number(&a, it.next())?),
            "--window" => o.window = number(&a, it.next())?.max(1),
            "-n" => o.pairs = number(&a, it.next())?.max(1) as u32,
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
