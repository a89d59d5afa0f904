//! `osu init`: OSU's `osu_init` carried to the end of wire-up. Each rank measures
//! from the start of its `main` until it has exchanged one message with every other
//! rank: the job from the launcher, the transports opened, the modex, the routes,
//! then the first message of every pair (which is when `tcp` connects). Rank 0
//! prints the smallest, largest and mean time over the ranks, and what each process
//! holds afterwards: the TCP connections it opened (not those a launcher handed it)
//! and its file descriptors.

use crate::error::{OsuError, Result};
use crate::routes;
use rbtl::msg::Comm;
use std::collections::HashSet;
use std::time::Instant;

/// Tag of the wire-up exchange.
const INIT_TAG: i32 = 4;

/// A process's descriptors and the sockets among them, at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Its open descriptors.
    pub fds: HashSet<i32>,
    /// The inode of each socket among them.
    pub sockets: HashSet<u64>,
}

impl Snapshot {
    /// This process's, from `/proc/self/fd`.
    pub fn take() -> std::io::Result<Snapshot> {
        let mut snap = Snapshot::default();
        let dir = std::fs::read_dir("/proc/self/fd")?;
        for entry in dir {
            let entry = entry?;
            let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            snap.fds.insert(fd);
            if let Ok(target) = std::fs::read_link(entry.path()) {
                if let Some(inode) = target
                    .to_string_lossy()
                    .strip_prefix("socket:[")
                    .and_then(|t| t.strip_suffix(']'))
                    .and_then(|t| t.parse::<u64>().ok())
                {
                    snap.sockets.insert(inode);
                }
            }
        }
        // The listing's own descriptor, closed by now.
        snap.fds
            .retain(|&fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok());
        Ok(snap)
    }
}

/// What one process holds once the job is wired up, against what it held before.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Its open file descriptors.
    pub fds: usize,
    /// Of those, the ones opened since `before`.
    pub fds_opened: usize,
    /// Its established TCP connections (IPv4 and IPv6) opened since `before` (not
    /// those it inherited, such as a launcher's).
    pub tcp_opened: usize,
}

impl Usage {
    /// This process's now, against `before`.
    pub fn since(before: &Snapshot) -> std::io::Result<Usage> {
        let now = Snapshot::take()?;
        let mut tcp_opened = 0;
        for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
            let text = match std::fs::read_to_string(table) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            tcp_opened += established(&text)
                .filter(|inode| now.sockets.contains(inode) && !before.sockets.contains(inode))
                .count();
        }
        Ok(Usage {
            fds: now.fds.len(),
            fds_opened: now.fds.difference(&before.fds).count(),
            tcp_opened,
        })
    }
}

/// The inodes of the established connections of a `/proc/net/tcp` table (state 01).
fn established(table: &str) -> impl Iterator<Item = u64> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(3) == Some(&"01"))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

/// One message to and from every other rank; checks that each came from its sender.
fn exchange_with_every_rank(comm: &mut Comm) -> Result<()> {
    let (me, n) = (comm.rank(), comm.size());
    let out = me.to_le_bytes();
    let mut inbox = vec![0u8; 4 * n as usize];
    comm.scope(|s| -> rbtl::msg::Result<()> {
        for (peer, slot) in inbox.chunks_mut(4).enumerate() {
            if peer as u32 != me {
                s.irecv(slot, Some(peer as u32), Some(INIT_TAG))?;
            }
        }
        // Each rank starts with the next one up, so that no rank is everyone's first.
        for k in 1..n {
            s.isend(&out, (me + k) % n, INIT_TAG)?;
        }
        Ok(())
    })??;
    for (peer, slot) in inbox.chunks(4).enumerate() {
        let got = u32::from_le_bytes(slot.try_into().expect("4 bytes"));
        if peer as u32 != me && got != peer as u32 {
            return Err(OsuError::WrongPayload {
                from: peer as u32,
                got,
            });
        }
    }
    Ok(())
}

/// The benchmark: `start` is when `main` began.
pub fn run(start: Instant, settings: &[(&str, &str)], verbose: bool) -> Result<()> {
    // The snapshot is the measurement's, not the wire-up's: its time is left out.
    let looking = Instant::now();
    let before = Snapshot::take().map_err(OsuError::Usage)?;
    let looked = looking.elapsed();
    let mut comm = Comm::init(settings)?;
    exchange_with_every_rank(&mut comm)?;
    let ms = (start.elapsed() - looked).as_secs_f64() * 1e3;
    let usage = Usage::since(&before).map_err(OsuError::Usage)?;
    let sample = format!(
        "{ms} {} {} {} {}",
        usage.tcp_opened,
        usage.fds,
        usage.fds_opened,
        rbtl::pmi::host_name()
    );
    let samples = routes::gather(&mut comm, &sample)?;
    let route_lines = if verbose {
        routes::gather_routes(&mut comm)?
    } else {
        None
    };
    if let Some(samples) = samples {
        println!("{}", report(&samples));
        if let Some(lines) = route_lines {
            println!("{}", routes::table(&lines));
        }
    }
    Ok(comm.finalize()?)
}

/// Rank 0's report from every rank's `"ms tcp fds fds_opened host"`.
pub fn report(samples: &[String]) -> String {
    type Sample<'a> = ([f64; 4], &'a str);
    let parsed: Vec<Sample> = samples
        .iter()
        .filter_map(|s| {
            let mut f = s.split(' ');
            let mut v = [0.0; 4];
            for x in &mut v {
                *x = f.next()?.parse().ok()?;
            }
            Some((v, f.next()?))
        })
        .collect();
    let n = parsed.len();
    let stats = |i: usize| {
        let v: Vec<f64> = parsed.iter().map(|p| p.0[i]).collect();
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (min, max, v.iter().sum::<f64>() / n.max(1) as f64)
    };
    let mut hosts: Vec<&str> = parsed.iter().map(|p| p.1).collect();
    hosts.sort_unstable();
    hosts.dedup();
    let (tmin, tmax, tavg) = stats(0);
    let (cmin, cmax, cavg) = stats(1);
    let (fmin, fmax, favg) = stats(2);
    let (omin, omax, oavg) = stats(3);
    format!(
        "# OSU Init Test (rbtl {}): from the start of each process until it has exchanged \
         a message with every other rank\n\
         nprocs: {n}, nodes: {}, min: {tmin:.2} ms, max: {tmax:.2} ms, avg: {tavg:.2} ms\n\
         tcp connections opened per process: min {cmin:.0}, max {cmax:.0}, avg {cavg:.2}\n\
         file descriptors per process: min {fmin:.0}, max {fmax:.0}, avg {favg:.2} \
         (opened: min {omin:.0}, max {omax:.0}, avg {oavg:.2})",
        env!("CARGO_PKG_VERSION"),
        hosts.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_connections_are_read_from_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:0016 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:9C41 0100007F:0016 06 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1
";
        assert_eq!(established(table).collect::<Vec<_>>(), [222]);
    }

    #[test]
    fn a_connection_made_after_the_snapshot_counts_and_one_before_does_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let old = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (old_server, _) = listener.accept().unwrap();
        let before = Snapshot::take().unwrap();
        assert_eq!(Usage::since(&before).unwrap().tcp_opened, 0);
        let new = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (new_server, _) = listener.accept().unwrap();
        let after = Usage::since(&before).unwrap();
        // Both ends of the new one are ours (no other test of this binary opens
        // descriptors).
        assert_eq!(after.tcp_opened, 2, "{after:?}");
        assert_eq!(after.fds_opened, 2, "{after:?}");
        assert_eq!(after.fds, before.fds.len() + 2, "{after:?}");
        drop((listener, old, old_server, new, new_server));
    }

    #[test]
    fn the_report_sums_up_every_rank() {
        let samples = [
            "10.0 1 20 5 n1".to_string(),
            "30.0 3 22 7 n2".to_string(),
            "20.0 2 21 6 n1".to_string(),
        ];
        let r = report(&samples);
        assert!(
            r.contains("nprocs: 3, nodes: 2, min: 10.00 ms, max: 30.00 ms, avg: 20.00 ms"),
            "{r}"
        );
        assert!(
            r.contains("tcp connections opened per process: min 1, max 3, avg 2.00"),
            "{r}"
        );
        assert!(
            r.contains(
                "file descriptors per process: min 20, max 22, avg 21.00 \
                 (opened: min 5, max 7, avg 6.00)"
            ),
            "{r}"
        );
    }
}
