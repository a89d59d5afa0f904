//! The out-of-band exchange of address blobs (Open MPI: the modex, over PMIx; here over
//! the launcher's PMI key-value store). Each module publishes under its own key, all
//! ranks fence, then each looks up its peers' blobs in `add_procs`.

use crate::{Error, Result};
use std::collections::HashMap;

/// A job-wide key-value exchange.
pub trait Modex {
    /// This process's rank.
    fn rank(&self) -> u32;
    /// Number of processes in the job.
    fn size(&self) -> u32;
    /// Publish `value` under `key` for every rank to see after the next fence.
    fn publish(&mut self, key: &str, value: &[u8]) -> Result<()>;
    /// Wait until every rank has published (a barrier).
    fn fence(&mut self) -> Result<()>;
    /// What `rank` published under `key`, if anything.
    fn lookup(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>>;
    /// The ranks the process manager placed on this process's node, ascending, when
    /// it says (hydra's and Slurm's `PMI_process_mapping`): for transports that size
    /// what they make per node. `None` when it does not say: any rank may be here.
    fn local_ranks(&self) -> Option<Vec<u32>> {
        None
    }
    /// Ask the process manager behind the exchange to end the whole job with exit
    /// code `code`, printing `message` (as `MPI_Abort`). One without a process manager
    /// does nothing: the caller then exits by itself.
    fn abort(&mut self, _code: i32, _message: &str) -> Result<()> {
        Ok(())
    }
    /// The exchange itself, for the process manager's own services beyond the
    /// modex (reaching other jobs, spawning): `None` where there are none.
    fn as_any_mut(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
}

/// The modex of a job of one process: what it publishes is all there is.
#[derive(Debug, Default)]
pub struct SingletonModex {
    values: HashMap<String, Vec<u8>>,
}

impl SingletonModex {
    /// An empty one.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Modex for SingletonModex {
    fn rank(&self) -> u32 {
        0
    }

    fn size(&self) -> u32 {
        1
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.values.insert(key.to_string(), value.to_vec());
        Ok(())
    }

    fn fence(&mut self) -> Result<()> {
        Ok(())
    }

    fn lookup(&mut self, rank: u32, key: &str) -> Result<Option<Vec<u8>>> {
        if rank != 0 {
            return Err(Error::Modex(format!(
                "no rank {rank} in a job of one process"
            )));
        }
        Ok(self.values.get(key).cloned())
    }
}
