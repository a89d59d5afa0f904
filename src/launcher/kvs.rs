//! The job's key-value space behind PMI-1 `put` and `get`, held to the maxima the
//! server announces and to a budget per rank, so that no rank can grow the launcher
//! without bound.

use std::collections::HashMap;

/// The maxima announced by `get_maxes` (hydra's): the longest key-value space name,
/// key and value, in bytes.
pub(super) const KVSNAME_MAX: usize = 256;
pub(super) const KEYLEN_MAX: usize = 64;
pub(super) const VALLEN_MAX: usize = 1024;

/// The longest request line the server reads, newline included: a `put` with a key
/// and a value at their maxima, each byte of them escaped (two bytes on the wire),
/// and room for the command and field names. A longer line is refused and the
/// connection closed.
pub(super) const REQUEST_MAX: usize = KVSNAME_MAX + 2 * (KEYLEN_MAX + VALLEN_MAX) + 128;

/// What one rank may store in the key-value space: the bytes of its keys and values,
/// each entry counting [`ENTRY_COST`] more for its bookkeeping.
pub const STORE_PER_RANK: usize = 1 << 20;

/// What an entry costs beyond its key and value.
pub const ENTRY_COST: usize = 64;

/// Why a `put` or `get` is refused; [`Refusal::msg`] is the `msg=` token of the
/// error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// No key, or an empty one.
    NoKey,
    /// A key longer than [`KEYLEN_MAX`].
    KeyTooLong(usize),
    /// A value longer than [`VALLEN_MAX`].
    ValueTooLong(usize),
    /// The rank's budget ([`STORE_PER_RANK`]) would be exceeded.
    Full {
        /// What the rank stores already.
        used: usize,
        /// What the new entry costs.
        cost: usize,
    },
}

impl Refusal {
    /// One token (no spaces) saying what is wrong and the bound, for `msg=`.
    pub fn msg(&self) -> String {
        match self {
            Refusal::NoKey => "no_key_given".to_string(),
            Refusal::KeyTooLong(len) => {
                format!("key_of_{len}_bytes_exceeds_keylen_max_{KEYLEN_MAX}")
            }
            Refusal::ValueTooLong(len) => {
                format!("value_of_{len}_bytes_exceeds_vallen_max_{VALLEN_MAX}")
            }
            Refusal::Full { used, cost } => format!(
                "store_full:_this_rank_stores_{used}_bytes,_{cost}_more_would_exceed_\
                 its_{STORE_PER_RANK}_(keys+values+{ENTRY_COST}_per_entry)"
            ),
        }
    }
}

struct Entry {
    /// The rank whose budget the entry counts against: the last one to put it.
    owner: u32,
    value: String,
}

/// The key-value space of one job.
pub(super) struct KeyValueStore {
    entries: HashMap<String, Entry>,
    /// Bytes stored per rank, as [`KeyValueStore::cost`] counts them.
    used: Vec<usize>,
    limit: usize,
}

impl KeyValueStore {
    /// An empty space for `size` ranks, each allowed [`STORE_PER_RANK`].
    pub fn new(size: u32) -> Self {
        Self::with_limit(size, STORE_PER_RANK)
    }

    fn with_limit(size: u32, limit: usize) -> Self {
        Self {
            entries: HashMap::new(),
            used: vec![0; size as usize],
            limit,
        }
    }

    fn cost(key: &str, value: &str) -> usize {
        key.len() + value.len() + ENTRY_COST
    }

    fn check_key(key: &str) -> Result<(), Refusal> {
        if key.is_empty() {
            return Err(Refusal::NoKey);
        }
        if key.len() > KEYLEN_MAX {
            return Err(Refusal::KeyTooLong(key.len()));
        }
        Ok(())
    }

    /// Stores `value` under `key` for `rank`, replacing what was there.
    pub fn put(&mut self, rank: u32, key: &str, value: &str) -> Result<(), Refusal> {
        Self::check_key(key)?;
        if value.len() > VALLEN_MAX {
            return Err(Refusal::ValueTooLong(value.len()));
        }
        let Some(&used) = self.used.get(rank as usize) else {
            return Err(Refusal::Full { used: 0, cost: 0 });
        };
        let cost = Self::cost(key, value);
        let replaced = match self.entries.get(key) {
            Some(old) if old.owner == rank => Self::cost(key, &old.value),
            _ => 0,
        };
        if used - replaced + cost > self.limit {
            return Err(Refusal::Full { used, cost });
        }
        let entry = Entry {
            owner: rank,
            value: value.to_string(),
        };
        if let Some(old) = self.entries.insert(key.to_string(), entry) {
            self.used[old.owner as usize] -= Self::cost(key, &old.value);
        }
        self.used[rank as usize] += cost;
        Ok(())
    }

    /// The value under `key`: `Ok(None)` when there is none.
    pub fn get(&self, key: &str) -> Result<Option<&str>, Refusal> {
        Self::check_key(key)?;
        Ok(self.entries.get(key).map(|e| e.value.as_str()))
    }

    /// What `rank` stores now, in the units of [`STORE_PER_RANK`].
    #[cfg(test)]
    fn used(&self, rank: u32) -> usize {
        self.used[rank as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_over_the_maxima_are_refused() {
        let mut kvs = KeyValueStore::new(2);
        let key = "k".repeat(KEYLEN_MAX);
        let value = "v".repeat(VALLEN_MAX);
        assert_eq!(kvs.put(0, &key, &value), Ok(()));
        assert_eq!(kvs.get(&key), Ok(Some(value.as_str())));
        let long_key = "k".repeat(KEYLEN_MAX + 1);
        assert_eq!(
            kvs.put(0, &long_key, "x"),
            Err(Refusal::KeyTooLong(KEYLEN_MAX + 1))
        );
        assert_eq!(
            kvs.put(0, "x", &"v".repeat(60_000)),
            Err(Refusal::ValueTooLong(60_000))
        );
        assert_eq!(kvs.get(&long_key), Err(Refusal::KeyTooLong(KEYLEN_MAX + 1)));
        assert_eq!(kvs.put(1, "", "x"), Err(Refusal::NoKey));
        assert_eq!(kvs.get("missing"), Ok(None));
        for refusal in [
            Refusal::NoKey,
            Refusal::KeyTooLong(65),
            Refusal::ValueTooLong(2000),
            Refusal::Full { used: 1, cost: 2 },
        ] {
            let msg = refusal.msg();
            assert!(!msg.is_empty() && crate::pmi::wire::check_token(&msg).is_ok());
        }
    }

    #[test]
    fn each_rank_has_a_budget_and_replacing_reuses_it() {
        let per_entry = 1 + 10 + ENTRY_COST;
        let mut kvs = KeyValueStore::with_limit(2, 3 * per_entry);
        for key in ["a", "b", "c"] {
            kvs.put(0, key, &"v".repeat(10)).unwrap();
        }
        assert_eq!(kvs.used(0), 3 * per_entry);
        assert!(matches!(
            kvs.put(0, "d", &"v".repeat(10)),
            Err(Refusal::Full { .. })
        ));
        // Replacing one's own entry with one of the same size fits.
        kvs.put(0, "a", &"w".repeat(10)).unwrap();
        assert_eq!(kvs.get("a"), Ok(Some("wwwwwwwwww")));
        assert_eq!(kvs.used(0), 3 * per_entry);
        // Another rank taking over a key moves its cost to that rank.
        kvs.put(1, "b", "x").unwrap();
        assert_eq!(kvs.used(0), 2 * per_entry);
        assert_eq!(kvs.used(1), 1 + 1 + ENTRY_COST);
        kvs.put(0, "d", &"v".repeat(10)).unwrap();
        // A rank outside the job stores nothing.
        assert!(kvs.put(7, "e", "x").is_err());
    }
}
