//! The BTL modex over PMI-1, and the choice between it and a one-process job.

use super::node::{parse_process_mapping, NodeId, PROCESS_MAPPING_KEY};
use super::{Client, Error};
use rbtl_btl::{Modex, SingletonModex};

/// Prefix of every PMI key this modex writes.
const PREFIX: &str = "rbtl";

/// The modex over a PMI-1 key-value space.
///
/// PMI-1 values are short text, so [`publish`](Modex::publish) encodes the bytes as
/// base64 (URL alphabet, no padding: no `=`, no spaces). A value whose text fits in
/// one PMI value goes whole into `rbtl-<name>-<rank>-n` as `1_<bytes>_<text>`, so
/// that a lookup is one round trip to the PMI server (a job's wire-up makes one per
/// peer and key); a longer one is split over several PMI keys:
/// `rbtl-<name>-<rank>-n` holds `<parts>_<bytes>`, and `rbtl-<name>-<rank>-<i>`
/// holds part `i`. `<name>` is the modex key itself when it
/// is short and made of letters, digits and `_`; otherwise a readable prefix of it
/// followed by a 64-bit hash, so that every PMI key stays within the server's
/// `keylen_max`. [`fence`](Modex::fence) is a PMI barrier;
/// [`lookup`](Modex::lookup) reassembles and checks the length.
///
/// Publishing a key twice before a fence overwrites it with our launcher and with
/// hydra 4.x; older PMI servers refuse duplicate keys, which shows up as an error.
///
/// Dropping it sends PMI `finalize` (ignoring errors); [`finalize`](Self::finalize)
/// does the same and reports them.
#[derive(Debug)]
pub struct PmiModex {
    client: Option<Client>,
    /// The ranks the launcher placed on this node, if it said.
    local: Option<Vec<u32>>,
}

impl PmiModex {
    /// The modex over `client`'s key-value space.
    pub fn new(client: Client) -> Self {
        Self {
            client: Some(client),
            local: None,
        }
    }

    /// The modex over `client`'s key-value space, with the launcher's placement:
    /// the node index of every rank (`PMI_process_mapping`).
    pub fn with_placement(client: Client, nodes: &[u32]) -> Self {
        let me = nodes.get(client.rank() as usize).copied();
        let local = me.map(|n| {
            (0u32..)
                .zip(nodes)
                .filter(|&(_, &m)| m == n)
                .map(|(r, _)| r)
                .collect()
        });
        Self {
            client: Some(client),
            local,
        }
    }

    /// The PMI client underneath, for direct use (e.g. [`Client::abort`]).
    pub fn client(&mut self) -> &mut Client {
        self.client
            .as_mut()
            .expect("the client is only taken by finalize")
    }

    /// Sends PMI `finalize` and closes the connection.
    pub fn finalize(mut self) -> Result<(), Error> {
        match self.client.take() {
            Some(client) => client.finalize(),
            None => Ok(()),
        }
    }

    /// The PMI client, to look at.
    pub(crate) fn client_ref(&self) -> &Client {
        self.client
            .as_ref()
            .expect("the client is only taken by finalize")
    }

    /// The PMI key of part `part` (`None`: the count) of `key` published by `rank`.
    fn pmi_key(&self, key: &str, rank: u32, part: Option<usize>) -> rbtl_btl::Result<String> {
        let part = match part {
            Some(i) => i.to_string(),
            None => "n".to_string(),
        };
        // Room for "rbtl-" + name + "-" + rank + "-" + part, rank and part at their
        // longest (10 digits each).
        let budget = self
            .client_ref()
            .max_key_len()
            .saturating_sub(PREFIX.len() + 3 + 10 + 10);
        let name = key_name(key, budget).ok_or_else(|| {
            rbtl_btl::Error::Modex(format!(
                "the PMI server allows keys of only {} bytes, too short for the modex \
                 key scheme; use a launcher with a larger keylen_max",
                self.client_ref().max_key_len()
            ))
        })?;
        Ok(format!("{PREFIX}-{name}-{rank}-{part}"))
    }
}

impl Drop for PmiModex {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.finalize();
        }
    }
}

fn modex_error(what: &str, key: &str, err: Error) -> rbtl_btl::Error {
    rbtl_btl::Error::Modex(format!("{what} {key:?} over PMI: {err}"))
}

impl Modex for PmiModex {
    fn rank(&self) -> u32 {
        self.client_ref().rank()
    }

    fn size(&self) -> u32 {
        self.client_ref().size()
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> rbtl_btl::Result<()> {
        self.publish_as(self.rank(), key, value)
    }

    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(self)
    }

    fn local_ranks(&self) -> Option<Vec<u32>> {
        self.local.clone()
    }

    fn abort(&mut self, code: i32, message: &str) -> rbtl_btl::Result<()> {
        self.client()
            .abort(code, message)
            .map_err(|e| rbtl_btl::Error::Modex(format!("abort over PMI: {e}")))
    }

    fn fence(&mut self) -> rbtl_btl::Result<()> {
        self.client()
            .barrier()
            .map_err(|e| rbtl_btl::Error::Modex(format!("modex fence over PMI: {e}")))
    }

    fn lookup(&mut self, rank: u32, key: &str) -> rbtl_btl::Result<Option<Vec<u8>>> {
        if rank >= self.size() {
            return Err(rbtl_btl::Error::Modex(format!(
                "no rank {rank} in a job of {} processes",
                self.size()
            )));
        }
        self.lookup_in(None, rank, key)
    }
}

impl PmiModex {
    /// Publish `value` under `key` as rank `rank` (another numbering than the job's:
    /// a launcher's universe) in this job's key-value space.
    pub fn publish_as(&mut self, rank: u32, key: &str, value: &[u8]) -> rbtl_btl::Result<()> {
        let text = base64_encode(value);
        let count_key = self.pmi_key(key, rank, None)?;
        let inline = format!("1_{}_{text}", value.len());
        if inline.len() <= self.client_ref().max_value_len() {
            return self
                .client()
                .put(&count_key, &inline)
                .map_err(|e| modex_error("publishing", key, e));
        }
        let chunk = self.client_ref().max_value_len();
        let parts: Vec<&str> = text
            .as_bytes()
            .chunks(chunk)
            .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
            .collect();
        for (i, part) in parts.iter().enumerate() {
            let pmi_key = self.pmi_key(key, rank, Some(i))?;
            self.client()
                .put(&pmi_key, part)
                .map_err(|e| modex_error("publishing", key, e))?;
        }
        // The count goes last: a reader that sees it sees a complete set of parts.
        let count = format!("{}_{}", parts.len(), value.len());
        self.client()
            .put(&count_key, &count)
            .map_err(|e| modex_error("publishing", key, e))
    }

    /// What `rank` published under `key` in the key-value space `kvs` (another
    /// job's, by name; `None`: this job's).
    pub fn lookup_in(
        &mut self,
        kvs: Option<&str>,
        rank: u32,
        key: &str,
    ) -> rbtl_btl::Result<Option<Vec<u8>>> {
        let get = |this: &mut Self, pmi_key: &str| {
            let c = this.client();
            match kvs {
                Some(k) => c.get_in(k, pmi_key),
                None => c.get(pmi_key),
            }
            .map_err(|e| modex_error("looking up", key, e))
        };
        let count_key = self.pmi_key(key, rank, None)?;
        let Some(count) = get(self, &count_key)? else {
            return Ok(None);
        };
        let corrupt = |why: String| {
            rbtl_btl::Error::Modex(format!(
                "rank {rank}'s modex entry {key:?} is damaged ({why}); \
                 was it written by another program or version?"
            ))
        };
        let mut fields = count.splitn(3, '_');
        let (parts, len) = fields
            .next()
            .zip(fields.next())
            .and_then(|(p, l)| Some((p.parse::<usize>().ok()?, l.parse::<usize>().ok()?)))
            .ok_or_else(|| corrupt(format!("part count {count:?}")))?;
        // The whole value, when it fit in the count's key.
        let (mut text, parts) = match fields.next() {
            Some(inline) if parts == 1 => (inline.to_string(), 0),
            Some(_) => return Err(corrupt(format!("{parts} parts and a value inline"))),
            None => (String::new(), parts),
        };
        for i in 0..parts {
            let part_key = self.pmi_key(key, rank, Some(i))?;
            let part = get(self, &part_key)?.ok_or_else(|| {
                rbtl_btl::Error::Modex(format!(
                    "rank {rank} published {key:?} in {parts} parts but part {i} is \
                         missing; call fence after publish on every rank before lookup"
                ))
            })?;
            text.push_str(&part);
        }
        let bytes = base64_decode(&text).ok_or_else(|| corrupt("not base64".into()))?;
        if bytes.len() != len {
            return Err(corrupt(format!("{} bytes instead of {len}", bytes.len())));
        }
        Ok(Some(bytes))
    }
}

/// The job this process belongs to: its rank, the job size and the modex to use.
pub struct Job {
    /// This process's rank.
    pub rank: u32,
    /// Number of processes in the job.
    pub size: u32,
    /// A [`PmiModex`] under a PMI launcher, a [`SingletonModex`] otherwise.
    pub modex: Box<dyn Modex + Send>,
    /// The node this process runs on, with the launcher's placement when it gives
    /// one.
    pub node: NodeId,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// The job from the environment: PMI when a launcher set `PMI_FD` or `PMI_PORT`
/// ([`Client::from_env`]), a one-process job with a [`SingletonModex`] otherwise.
/// The node's identity includes the launcher's placement of this rank when its PMI
/// server has a `PMI_process_mapping`; one that is malformed is an error.
pub fn job() -> Result<Job, Error> {
    Ok(match Client::from_env()? {
        Some(mut client) => {
            let map = match client.get(PROCESS_MAPPING_KEY)? {
                Some(text) => Some(parse_process_mapping(&text, client.size())?),
                None => None,
            };
            let launcher_node = map
                .as_ref()
                .and_then(|m| m.get(client.rank() as usize).copied());
            let (rank, size) = (client.rank(), client.size());
            let modex = match &map {
                Some(m) => PmiModex::with_placement(client, m),
                None => PmiModex::new(client),
            };
            Job {
                rank,
                size,
                modex: Box::new(modex),
                node: NodeId::this(launcher_node),
            }
        }
        None => Job {
            rank: 0,
            size: 1,
            modex: Box::new(SingletonModex::new()),
            node: NodeId::this(None),
        },
    })
}

/// The `<name>` part of the PMI keys for modex key `key`, at most `budget` bytes:
/// `key` itself when it is made of `[A-Za-z0-9_]` and fits, else a sanitized prefix,
/// `-` and 16 hex digits of a hash of `key` (a name with `-` never collides with a
/// verbatim one). `None` when `budget` is too small even for that.
fn key_name(key: &str, budget: usize) -> Option<String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if !key.is_empty() && key.len() <= budget && key.chars().all(plain) {
        return Some(key.to_string());
    }
    let hash = format!("{:016x}", fnv1a(key.as_bytes()));
    let room = budget.checked_sub(hash.len() + 1)?;
    let prefix: String = key
        .chars()
        .map(|c| if plain(c) { c } else { '_' })
        .take(room.min(24))
        .collect();
    Some(format!("{prefix}-{hash}"))
}

/// 64-bit FNV-1a.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Base64 with the URL alphabet and no padding (PMI values are text).
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..chunk.len() + 1 {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// The inverse of [`base64_encode`]; `None` for text it cannot have produced.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| ALPHABET.iter().position(|&a| a == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.as_bytes().chunks(4) {
        if chunk.len() == 1 {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        let data: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        for len in 0..data.len() {
            let text = base64_encode(&data[..len]);
            assert!(super::super::wire::check_token(&text).is_ok());
            assert_eq!(text.len(), (len * 4).div_ceil(3));
            assert_eq!(base64_decode(&text).as_deref(), Some(&data[..len]));
        }
    }

    #[test]
    fn base64_matches_known_values() {
        assert_eq!(base64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64_encode(b"fo"), "Zm8");
        assert_eq!(base64_encode(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64_decode("Zm9vYg").as_deref(), Some(&b"foob"[..]));
        assert_eq!(base64_decode("Z"), None);
        assert_eq!(base64_decode("Zm9v=="), None);
    }

    #[test]
    fn key_names_are_plain_or_hashed() {
        assert_eq!(key_name("btl_sm", 30).as_deref(), Some("btl_sm"));
        let dotted = key_name("btl.sm", 30).unwrap();
        assert!(
            dotted.starts_with("btl_sm-") && dotted.len() == 7 + 16,
            "{dotted}"
        );
        assert_ne!(key_name("btl.sm", 30), key_name("btl_sm", 30));
        assert_ne!(key_name("btl.sm", 30), key_name("btl-sm", 30));
        let long = "x".repeat(200);
        let name = key_name(&long, 30).unwrap();
        assert!(name.len() <= 30, "{name}");
        assert_ne!(key_name(&long, 30), key_name(&"x".repeat(201), 30));
        assert_eq!(key_name("anything", 10).as_deref(), Some("anything"));
        assert_eq!(key_name("any.thing", 10), None);
        assert!(key_name("", 30).unwrap().starts_with('-'));
    }
}
