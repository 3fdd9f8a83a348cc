//! Coverage marks: how often each fault kind and recovery path was hit.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Named counters, ordered for stable output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    pub marks: BTreeMap<String, u64>,
}

impl Coverage {
    /// Counts one hit.
    pub fn mark(&mut self, name: &str) {
        self.add(name, 1);
    }

    /// Counts `n` hits (no entry for zero, so absent means never hit).
    pub fn add(&mut self, name: &str, n: u64) {
        if n > 0 {
            *self.marks.entry(name.to_string()).or_default() += n;
        }
    }

    /// Records a condition the core raised.
    pub fn mark_condition(&mut self, name: &str) {
        self.mark(&format!("core.condition.{name}"));
    }

    /// Adds another run's marks.
    pub fn merge(&mut self, other: &Coverage) {
        for (k, v) in &other.marks {
            *self.marks.entry(k.clone()).or_default() += v;
        }
    }

    /// Hits of one mark.
    pub fn get(&self, name: &str) -> u64 {
        self.marks.get(name).copied().unwrap_or(0)
    }
}
