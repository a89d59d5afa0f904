//! A job's modex for tests: every rank in this process, all on one node.

use rbtl_btl::{Modex, Proc, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What each rank published, by rank and key.
type Published = Arc<Mutex<HashMap<(u32, String), Vec<u8>>>>;

/// One rank's view of the job's modex (clones share what was published).
#[derive(Clone, Default)]
pub struct Shared {
    /// This rank.
    pub rank: u32,
    /// The job's ranks, every one on this node.
    pub size: u32,
    /// What each rank published.
    published: Published,
}

impl Shared {
    /// Rank 0's view of a job of `size`.
    pub fn job(size: u32) -> Shared {
        Shared {
            size,
            ..Shared::default()
        }
    }

    /// The job's ranks, every one on this node.
    pub fn procs(&self) -> Vec<Proc> {
        let node = crate::peer::node_id();
        (0..self.size)
            .map(|rank| Proc {
                rank,
                node: node.clone(),
            })
            .collect()
    }

    /// The same modex as `rank` sees it.
    pub fn at(&self, rank: u32) -> Shared {
        Shared {
            rank,
            ..self.clone()
        }
    }
}

impl Modex for Shared {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<()> {
        let mut published = self.published.lock().unwrap();
        published.insert((self.rank, key.to_string()), value.to_vec());
        Ok(())
    }
    fn fence(&mut self) -> Result<()> {
        Ok(())
    }
    fn lookup(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>> {
        let published = self.published.lock().unwrap();
        Ok(published.get(&(rank, key.to_string())).cloned())
    }
    fn local_ranks(&self) -> Option<Vec<u32>> {
        Some((0..self.size).collect())
    }
}
