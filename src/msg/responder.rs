//! Whether a silent peer's process is there, and whether it is waiting too.
//!
//! Every process that makes a communicator answers probes on a UDP port from a thread
//! of its own, which sleeps in `recv_from` until one comes. The answer says whether
//! the process is inside a blocking wait of this layer that has idled, and since
//! when. A wait that has seen no progress for the peer timeout probes the other ranks
//! (see [`super::liveness`]): a process that answers is running (a stopped process's
//! threads stop with it, a dead one's port is gone), and one that is not waiting is
//! computing, or working with others, and may still send.
//!
//! Probes and answers are datagrams of the same length (nothing is amplified):
//! [`MAGIC`], a kind, the prober's nonce (echoed), then, in answers, the start of the
//! idle run and how long it has lasted, in milliseconds (0: not waiting). Anything
//! else is dropped unanswered.
//!
//! The port listens on every IPv4 address; a rank publishes it with its node's IPv4
//! addresses that `tcp` would choose (`btl_tcp_if_include`, ...). Ranks of one node
//! probe each other over loopback. A process without a responder, or out of reach
//! (an IPv6-only network, a firewall in between), looks silent: its peers give up on
//! it after the timeout, as they do on a stopped one.

use rbtl_config::Config;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first bytes of every probe and answer.
const MAGIC: [u8; 8] = *b"rbtl-liv";
const PROBE: u8 = 1;
const ANSWER: u8 = 2;
/// Magic, kind, nonce, run start, waiting time.
const LEN: usize = 8 + 1 + 8 + 8 + 8;
/// How long a probe waits for answers, and how often it asks again meanwhile.
const ANSWER_WAIT: Duration = Duration::from_millis(300);
const ASK_AGAIN: Duration = Duration::from_millis(100);

/// The modex key of a rank's [`Card`].
pub(super) const CARD_KEY: &str = "msg.alive";

/// Where a process answers probes: its port, and its node's addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Card {
    pub port: u16,
    pub addrs: Vec<Ipv4Addr>,
}

impl Card {
    /// As published: the port, then the addresses, separated by spaces.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = self.port.to_string();
        for a in &self.addrs {
            s.push(' ');
            s.push_str(&a.to_string());
        }
        s.into_bytes()
    }

    /// A published card; `None` if malformed.
    pub fn decode(bytes: &[u8]) -> Option<Card> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        let port = words.next()?.parse().ok().filter(|&p: &u16| p != 0)?;
        let addrs = words.map(|w| w.parse().ok()).collect::<Option<_>>()?;
        Some(Card { port, addrs })
    }

    /// The addresses to probe it at: loopback on this node, else its node's.
    pub fn targets(&self, same_node: bool) -> Vec<SocketAddr> {
        if same_node {
            return vec![SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))];
        }
        self.addrs
            .iter()
            .map(|&a| SocketAddr::from((a, self.port)))
            .collect()
    }
}

/// What a process answered about its waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Answer {
    /// When its present idle run started, on its own clock (ms; 0 with no run).
    pub run: u64,
    /// How long that run has lasted (zero: it is not waiting).
    pub waiting: Duration,
}

/// This process's card, starting its responder on first use (in this process: a
/// child forked after it has no thread of its parent's); `None` if it could not
/// start (then peers see it as silent once their waits time out).
pub(super) fn card(config: &Config) -> Option<Card> {
    // The process that started it, and its port.
    static STARTED: Mutex<Option<(u32, Option<u16>)>> = Mutex::new(None);
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    let port = match *started {
        Some((pid, port)) if pid == me => port,
        _ => {
            let port = match start() {
                Ok(port) => Some(port),
                Err(e) => {
                    tracing::warn!(%e, "no liveness responder: peers will give up on this process once it is silent for their timeout");
                    None
                }
            };
            *started = Some((me, port));
            port
        }
    }?;
    drop(started);
    let addrs = match rbtl_tcp::interfaces::chosen(config) {
        Ok(ifs) => ifs
            .iter()
            .filter(|i| !i.is_loopback())
            .filter_map(|i| match i.addr {
                IpAddr::V4(a) => Some(a),
                IpAddr::V6(_) => None,
            })
            .collect(),
        Err(e) => {
            tracing::debug!(%e, "liveness responder: no addresses for other nodes");
            Vec::new()
        }
    };
    Some(Card { port, addrs })
}

/// Bind the port and start the thread that answers on it.
fn start() -> std::io::Result<u16> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    let port = socket.local_addr()?.port();
    std::thread::Builder::new()
        .name("rbtl-liveness".into())
        .spawn(move || serve(&socket))?;
    Ok(port)
}

/// Answer every well-formed probe, for the life of the process.
fn serve(socket: &UdpSocket) {
    let mut buf = [0u8; LEN + 1];
    let mut failures = 0u32;
    loop {
        let (len, from) = match socket.recv_from(&mut buf) {
            Ok(got) => {
                failures = 0;
                got
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Errors a datagram socket reports (one for an earlier answer's ICMP
                // reply, say) pass; a socket that fails on and on is given up.
                failures += 1;
                if failures > 1000 {
                    tracing::warn!(%e, "liveness responder stops");
                    return;
                }
                continue;
            }
        };
        let Some(nonce) = parse(&buf[..len], PROBE) else {
            continue;
        };
        let (run, waiting) = super::liveness::waiting_now();
        let answer = encode(ANSWER, nonce, run, waiting.as_millis() as u64);
        // An answer that cannot leave is the prober's silence.
        let _ = socket.send_to(&answer, from);
    }
}

fn encode(kind: u8, nonce: u64, run: u64, waiting_ms: u64) -> [u8; LEN] {
    let mut out = [0u8; LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8] = kind;
    out[9..17].copy_from_slice(&nonce.to_le_bytes());
    out[17..25].copy_from_slice(&run.to_le_bytes());
    out[25..33].copy_from_slice(&waiting_ms.to_le_bytes());
    out
}

/// The nonce of a datagram of kind `kind`, if it is one.
fn parse(d: &[u8], kind: u8) -> Option<u64> {
    if d.len() != LEN || d[..8] != MAGIC || d[8] != kind {
        return None;
    }
    Some(u64::from_le_bytes(d[9..17].try_into().ok()?))
}

/// Probe each target (a rank and the addresses to reach it at): the answers that came
/// within [`ANSWER_WAIT`], by rank. A target that does not answer is absent.
pub(super) fn probe(targets: &[(u32, Vec<SocketAddr>)]) -> HashMap<u32, Answer> {
    let mut answers = HashMap::new();
    let socket = match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(%e, "cannot probe silent peers");
            return answers;
        }
    };
    // A nonce per target, from a random base: answers to another probe, or from a
    // stranger, match none.
    let base = {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    };
    let start = Instant::now();
    let mut next_ask = start;
    let mut buf = [0u8; LEN + 1];
    while answers.len() < targets.len() {
        let now = Instant::now();
        if now >= start + ANSWER_WAIT {
            break;
        }
        if now >= next_ask {
            for (i, (rank, addrs)) in targets.iter().enumerate() {
                if answers.contains_key(rank) {
                    continue;
                }
                let probe = encode(PROBE, base.wrapping_add(i as u64), 0, 0);
                for a in addrs {
                    // A send that fails is an address out of reach: others may do.
                    let _ = socket.send_to(&probe, a);
                }
            }
            next_ask = now + ASK_AGAIN;
        }
        let until = next_ask.min(start + ANSWER_WAIT);
        let left = until.saturating_duration_since(Instant::now());
        if socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .is_err()
        {
            break;
        }
        let Ok(len) = socket.recv(&mut buf) else {
            continue;
        };
        let Some(nonce) = parse(&buf[..len], ANSWER) else {
            continue;
        };
        let i = nonce.wrapping_sub(base);
        if let Some((rank, _)) = targets.get(i as usize) {
            let run = u64::from_le_bytes(buf[17..25].try_into().expect("8 bytes"));
            let ms = u64::from_le_bytes(buf[25..33].try_into().expect("8 bytes"));
            answers.insert(
                *rank,
                Answer {
                    run,
                    waiting: Duration::from_millis(ms),
                },
            );
        }
    }
    answers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_card_reads_back_and_malformed_ones_are_refused() {
        let c = Card {
            port: 4000,
            addrs: vec![Ipv4Addr::new(198, 18, 1, 2), Ipv4Addr::new(198, 18, 2, 2)],
        };
        assert_eq!(Card::decode(&c.encode()), Some(c.clone()));
        for bad in [
            &b""[..],
            b"0",
            b"70000",
            b"4000 198.18.1",
            b"4000  198.18.1.2",
            b"\xff",
        ] {
            assert_eq!(Card::decode(bad), None, "{bad:?}");
        }
        assert_eq!(
            c.targets(true),
            [SocketAddr::from((Ipv4Addr::LOCALHOST, 4000))]
        );
        assert_eq!(c.targets(false).len(), 2);
    }

    #[test]
    fn this_process_answers_and_strangers_are_not_answered() {
        let config = crate::configure(&[]).unwrap();
        let card = card(&config).expect("a responder");
        let me = card.targets(true);
        let answers = probe(&[(7, me.clone())]);
        assert_eq!(answers.len(), 1, "{answers:?}");
        // A datagram that is not a probe gets nothing back.
        let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut bad = encode(PROBE, 1, 0, 0);
        bad[0] ^= 1;
        for d in [
            &bad[..],
            &encode(ANSWER, 1, 0, 0)[..],
            &[0u8; 3][..],
            &[0u8; 100][..],
        ] {
            s.send_to(d, me[0]).unwrap();
        }
        let mut buf = [0u8; 64];
        assert!(
            s.recv(&mut buf).is_err(),
            "a stranger's datagram was answered"
        );
        // The responder still answers after them.
        assert_eq!(probe(&[(7, me)]).len(), 1);
    }

    #[test]
    fn a_rank_with_no_process_behind_its_port_does_not_answer() {
        // A port bound and then closed: nothing answers there.
        let port = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let card = Card {
            port,
            addrs: vec![],
        };
        assert!(probe(&[(1, card.targets(true))]).is_empty());
        assert!(probe(&[(1, card.targets(false))]).is_empty());
    }
}
