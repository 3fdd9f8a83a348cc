//! The run trace as a hash: every input and output of every agent, with its time.
//!
//! Two runs of one schedule must produce the same hash (the determinism self-check), and a
//! replayed saved schedule must reproduce the hash recorded when it was saved.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// A streaming SHA-256 over `serde_json` of each record; off when not wanted (speed).
#[derive(Debug, Clone)]
pub struct Trace {
    hasher: Option<Sha256>,
    /// Records hashed.
    pub records: u64,
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Trace {
    /// A trace that hashes when `on`.
    pub fn new(on: bool) -> Trace {
        Trace {
            hasher: on.then(Sha256::new),
            records: 0,
        }
    }

    /// Hashes one record: time, agent, direction and the serialised value.
    pub fn record<T: Serialize>(&mut self, now: u64, agent: u32, dir: &str, value: &T) {
        self.records += 1;
        if let Some(h) = self.hasher.as_mut() {
            h.update(now.to_le_bytes());
            h.update(agent.to_le_bytes());
            h.update(dir.as_bytes());
            // Serialising core types cannot fail: plain data, string map keys.
            let _ = serde_json::to_writer(HashWriter(h), value);
            h.update(b"\n");
        }
    }

    /// The hex digest so far ("" when hashing is off).
    pub fn hash(&self) -> String {
        self.hasher
            .as_ref()
            .map(|h| hex::encode(h.clone().finalize()))
            .unwrap_or_default()
    }
}
