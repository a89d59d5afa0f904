//! What every rank reports to rank 0 after the run: which transport it routes each
//! peer over and on which host it runs (`--verbose`), and the figures of `osu init`.

use rbtl::msg::{Comm, Result};

/// Tag of the reports gathered at rank 0 (the benchmarks use 1 and 2).
const REPORT_TAG: i32 = 3;
/// The longest report a rank sends.
const REPORT_MAX: usize = 1 << 16;

/// Every rank's `text`, in rank order, at rank 0 (`None` elsewhere). Texts longer
/// than 64 KiB are cut.
pub fn gather(comm: &mut Comm, text: &str) -> Result<Option<Vec<String>>> {
    let bytes = &text.as_bytes()[..text.len().min(REPORT_MAX)];
    if comm.rank() != 0 {
        comm.send(bytes, 0, REPORT_TAG)?;
        return Ok(None);
    }
    let mut all = vec![text.to_string()];
    let mut buf = vec![0u8; REPORT_MAX];
    for rank in 1..comm.size() {
        let status = comm.recv(&mut buf, Some(rank), Some(REPORT_TAG))?;
        all.push(String::from_utf8_lossy(&buf[..status.len]).into_owned());
    }
    Ok(Some(all))
}

/// Every rank's routes (`HOST: T0 T1 ...`, see `line`), in rank order, at rank 0.
pub fn gather_routes(comm: &mut Comm) -> Result<Option<Vec<String>>> {
    let mine = line(comm);
    gather(comm, &mine)
}

/// This rank's routes: `HOST: T0 T1 ...`, the transport to every rank in order.
fn line(comm: &Comm) -> String {
    let transports: Vec<&str> = (0..comm.size())
        .map(|r| comm.transport_to(r).unwrap_or("-"))
        .collect();
    format!("{}: {}", rbtl::pmi::host_name(), transports.join(" "))
}

/// The routing table rank 0 prints: one comment line per rank, with its host and
/// the transport it uses to each rank, and a count of pairs per transport:
///
/// ```text
/// # routes: rank 0 on rbtl-n1: self sm tcp tcp
/// # routes: rank 1 on rbtl-n1: sm self tcp tcp
/// ...
/// # routes: pairs over sm 2, over tcp 4
/// ```
pub fn table(lines: &[String]) -> String {
    let mut out = String::new();
    let mut counts: Vec<(String, usize)> = Vec::new();
    for (rank, line) in lines.iter().enumerate() {
        let (host, transports) = line.split_once(": ").unwrap_or(("?", line));
        out.push_str(&format!("# routes: rank {rank} on {host}: {transports}\n"));
        // Each pair once, from its lower rank.
        for t in transports.split(' ').skip(rank + 1) {
            match counts.iter_mut().find(|(name, _)| name == t) {
                Some((_, n)) => *n += 1,
                None => counts.push((t.to_string(), 1)),
            }
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(t, n)| format!("over {t} {n}"))
        .collect();
    out.push_str(&format!("# routes: pairs {}", summary.join(", ")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_hosts_and_counts_each_pair_once() {
        let lines = [
            "n1: self sm tcp".to_string(),
            "n1: sm self tcp".to_string(),
            "n2: tcp tcp self".to_string(),
        ];
        let t = table(&lines);
        assert!(t.contains("# routes: rank 0 on n1: self sm tcp\n"), "{t}");
        assert!(t.contains("# routes: rank 2 on n2: tcp tcp self\n"), "{t}");
        assert!(t.ends_with("# routes: pairs over sm 1, over tcp 2"), "{t}");
    }
}
