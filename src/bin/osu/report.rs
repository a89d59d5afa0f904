//! Output: OSU's table on stdout, and optionally JSON and an SVG plot.

use crate::bench::Point;
use crate::cli::{Bench, Options};
use crate::error::OsuError;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// The files `--json` and `--plot` name, created before the sweep and written after
/// it; removed if the run fails in between.
#[derive(Default)]
pub struct Outputs {
    json: Option<(PathBuf, File)>,
    plot: Option<(PathBuf, File)>,
    written: bool,
}

impl Outputs {
    /// Creates (or truncates) the files the options name.
    pub fn create(o: &Options) -> Result<Outputs, OsuError> {
        let open = |path: &Option<PathBuf>| -> Result<Option<(PathBuf, File)>, OsuError> {
            let Some(path) = path else { return Ok(None) };
            let file = File::create(path).map_err(|source| OsuError::Write {
                path: path.clone(),
                source,
            })?;
            Ok(Some((path.clone(), file)))
        };
        let mut outputs = Outputs::default();
        outputs.json = open(&o.json)?;
        outputs.plot = open(&o.plot)?;
        Ok(outputs)
    }

    /// Writes the results as JSON and as a plot, to the files there are.
    pub fn write(
        &mut self,
        o: &Options,
        transport: &str,
        host: &str,
        points: &[Point],
    ) -> Result<(), OsuError> {
        if let Some((path, file)) = &mut self.json {
            write_file(path, file, &json(o, transport, host, points))?;
        }
        if let Some((path, file)) = &mut self.plot {
            write_file(path, file, &svg(o, transport, points))?;
        }
        self.written = true;
        Ok(())
    }
}

fn write_file(path: &Path, file: &mut File, text: &str) -> Result<(), OsuError> {
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| OsuError::Write {
            path: path.to_path_buf(),
            source,
        })
}

impl Drop for Outputs {
    fn drop(&mut self) {
        if !self.written {
            for (path, _) in self.json.iter().chain(self.plot.iter()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

pub fn unit(b: Bench) -> &'static str {
    if b.is_latency() {
        "Latency (us)"
    } else {
        "Bandwidth (MB/s)"
    }
}

/// The header, as OSU prints it.
pub fn header(o: &Options, transport: &str) -> String {
    let mut h = format!(
        "# OSU {} (rbtl {} over {transport})\n",
        o.bench.title(),
        env!("CARGO_PKG_VERSION")
    );
    if o.bench == Bench::MbwMr {
        let _ = write!(
            h,
            "# [ pairs: {} ] [ window size: {} ]\n{:<10}{:>20}{:>20}",
            o.pairs, o.window, "# Size", "MB/s", "Messages/s"
        );
    } else {
        let _ = write!(h, "{:<10}{:>20}", "# Size", unit(o.bench));
    }
    h
}

/// A row: `%-10d%20.2f` (and the message rate for mbw-mr).
pub fn row(p: &Point) -> String {
    let mut r = format!("{:<10}{:>20.2}", p.size, p.value);
    if let Some(rate) = p.rate {
        let _ = write!(r, "{rate:>20.2}");
    }
    r
}

/// Set by `osu` for the ranks it launches when its own stderr is a terminal: their
/// stderr is a pipe to the launcher, so the bar goes to the controlling terminal.
pub const PROGRESS_TTY_ENV: &str = "OSU_PROGRESS_TTY";

/// A progress bar for long sweeps, only when a person is watching: on stderr when it
/// is a terminal, or on the terminal the launching `osu` was started from.
pub struct Progress {
    total: usize,
    out: Option<Box<dyn Write>>,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        let out: Option<Box<dyn Write>> = if std::io::stderr().is_terminal() {
            Some(Box::new(std::io::stderr()))
        } else if std::env::var_os(PROGRESS_TTY_ENV).is_some() {
            std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/tty")
                .ok()
                .map(|f| Box::new(f) as Box<dyn Write>)
        } else {
            None
        };
        Progress { total, out }
    }

    pub fn step(&mut self, done: usize, size: usize) {
        let total = self.total;
        if let Some(out) = &mut self.out {
            let width = 30;
            let filled = width * done / total.max(1);
            let bar = format!("{}{}", "#".repeat(filled), " ".repeat(width - filled));
            let _ = write!(out, "\r[{bar}] {done}/{total} sizes, now {size} B ");
            let _ = out.flush();
        }
    }

    pub fn finish(&mut self) {
        if let Some(out) = &mut self.out {
            let _ = write!(out, "\r{}\r", " ".repeat(70));
            let _ = out.flush();
        }
    }
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The results as JSON: benchmark, unit, transport, host, version, options, points.
pub fn json(o: &Options, transport: &str, host: &str, points: &[Point]) -> String {
    let mut s = String::from("{\n");
    let _ = writeln!(s, "  \"benchmark\": {},", json_str(o.bench.name()));
    let _ = writeln!(s, "  \"unit\": {},", json_str(unit(o.bench)));
    let _ = writeln!(s, "  \"transport\": {},", json_str(transport));
    let _ = writeln!(s, "  \"host\": {},", json_str(host));
    let _ = writeln!(s, "  \"version\": {},", json_str(env!("CARGO_PKG_VERSION")));
    let _ = writeln!(s, "  \"window\": {},", o.window);
    let _ = writeln!(s, "  \"pairs\": {},", o.pairs);
    s.push_str("  \"results\": [\n");
    for (i, p) in points.iter().enumerate() {
        let rate = p
            .rate
            .map(|r| format!(", \"messages_per_s\": {r:.2}"))
            .unwrap_or_default();
        let comma = if i + 1 < points.len() { "," } else { "" };
        let _ = writeln!(
            s,
            "    {{\"size\": {}, \"value\": {:.4}{rate}}}{comma}",
            p.size, p.value
        );
    }
    s.push_str("  ]\n}\n");
    s
}

/// Value against size on log axes, as an SVG document.
pub fn svg(o: &Options, transport: &str, points: &[Point]) -> String {
    let (w, h, ml, mr, mt, mb) = (720.0, 440.0, 80.0, 20.0, 40.0, 60.0);
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| p.value > 0.0)
        .map(|p| ((p.size.max(1) as f64).log2(), p.value.log10()))
        .collect();
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">osu {} over {transport}</text>\n",
        w / 2.0,
        o.bench.name()
    );
    if pts.is_empty() {
        s.push_str("</svg>\n");
        return s;
    }
    let (x0, x1) = (
        pts.iter().map(|p| p.0).fold(f64::MAX, f64::min),
        pts.iter().map(|p| p.0).fold(f64::MIN, f64::max),
    );
    let (y0, y1) = (
        pts.iter().map(|p| p.1).fold(f64::MAX, f64::min).floor(),
        pts.iter()
            .map(|p| p.1)
            .fold(f64::MIN, f64::max)
            .ceil()
            .max(f64::MIN),
    );
    let (y0, y1) = if y1 > y0 {
        (y0, y1)
    } else {
        (y0 - 1.0, y0 + 1.0)
    };
    let (x0, x1) = if x1 > x0 {
        (x0, x1)
    } else {
        (x0 - 1.0, x0 + 1.0)
    };
    let px = |x: f64| ml + (x - x0) / (x1 - x0) * (w - ml - mr);
    let py = |y: f64| h - mb - (y - y0) / (y1 - y0) * (h - mt - mb);
    let _ = writeln!(
        s,
        "<line x1=\"{ml}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/><line x1=\"{ml}\" y1=\"{mt}\" x2=\"{ml}\" y2=\"{}\" stroke=\"black\"/>",
        h - mb,
        w - mr,
        h - mb,
        h - mb
    );
    let mut x = x0.ceil();
    while x <= x1 {
        let label = match 2f64.powf(x) as u64 {
            v if v >= 1 << 20 => format!("{}M", v >> 20),
            v if v >= 1 << 10 => format!("{}K", v >> 10),
            v => v.to_string(),
        };
        let _ = writeln!(
            s,
            "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#ddd\"/><text x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{label}</text>",
            px(x),
            mt,
            h - mb,
            h - mb + 16.0
        );
        x += if x1 - x0 > 12.0 { 2.0 } else { 1.0 };
    }
    let mut y = y0;
    while y <= y1 {
        let _ = writeln!(
            s,
            "<line x1=\"{ml}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#ddd\"/><text x=\"{2}\" y=\"{3}\" text-anchor=\"end\">{4}</text>",
            py(y),
            w - mr,
            ml - 6.0,
            py(y) + 4.0,
            10f64.powf(y)
        );
        y += 1.0;
    }
    let line: Vec<String> = pts
        .iter()
        .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
        .collect();
    let _ = writeln!(
        s,
        "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"{}\"/>",
        line.join(" ")
    );
    for &(x, y) in &pts {
        let _ = writeln!(
            s,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#1f77b4\"/>",
            px(x),
            py(y)
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size (bytes)</text>\n<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>\n</svg>",
        (ml + w - mr) / 2.0,
        h - 16.0,
        h / 2.0,
        h / 2.0,
        unit(o.bench)
    );
    s
}
