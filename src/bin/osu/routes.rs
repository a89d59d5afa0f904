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

/// The transports of the pairs a benchmark measures, as rank 0's header names them:
/// rank 0 to rank 1, or for `mbw-mr` (`pairs` given) every sender `i` to its
/// receiver `i + pairs`, each transport once in the order of the senders (`sm, tcp`
/// when some pairs share a node and others do not). With `pairs`, every rank must
/// call it; the answer is rank 0's (empty elsewhere).
pub fn measured(comm: &mut Comm, pairs: Option<u32>) -> Result<String> {
    let me = comm.rank();
    let Some(pairs) = pairs else {
        let t = if me == 0 {
            comm.transport_to(1)
        } else {
            Some("")
        };
        return Ok(t.unwrap_or("?").to_string());
    };
    let mine = if me < pairs {
        comm.transport_to(me + pairs).unwrap_or("?")
    } else {
        ""
    }
    .to_string();
    Ok(gather(comm, &mine)?
        .map(|all| distinct(&all))
        .unwrap_or_default())
}

/// The non-empty names of `all`, each once, in order, joined by ", ".
fn distinct(all: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for t in all.iter().map(String::as_str).filter(|t| !t.is_empty()) {
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    seen.join(", ")
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

/// Whether this rank's node takes turns on its processors, the line rank 0 prints
/// after its routing table: `# placement: the ranks of rank 0's node outnumber the
/// processors they may run on` (or `do not outnumber`).
pub fn placement(comm: &Comm) -> String {
    let seen = if comm.node_oversubscribed() {
        "outnumber"
    } else {
        "do not outnumber"
    };
    format!("# placement: the ranks of rank 0's node {seen} the processors they may run on")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_transports_are_named_once_each_in_order() {
        let all = ["sm", "tcp", "sm", "", ""].map(String::from);
        assert_eq!(distinct(&all), "sm, tcp");
        assert_eq!(distinct(&["tcp".to_string(), String::new()]), "tcp");
    }

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
