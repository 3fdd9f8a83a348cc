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

/// The chance of a batch missing a fault kind below which the batch must hit it.
pub const MISS_CHANCE: f64 = 1e-6;

/// Seeds sampled (far from any batch) to learn how often a batch's schedules draw each kind.
const SAMPLE_SEEDS: std::ops::Range<u64> = (1 << 48)..(1 << 48) + 1_000;

/// How a batch's fault coverage was judged (issue R1: a batch that never hits a fault kind it
/// should have hit fails).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultCoverage {
    /// Kinds the batch was large enough to expect, with their hits.
    pub expected: Vec<(String, u64)>,
    /// Kinds drawn too rarely to expect in a batch this size: (kind, share of schedules
    /// that draw it).
    pub rare: Vec<(String, f64)>,
    /// Kinds no sampled schedule draws (dropped by the caller, or not generated for this
    /// replicator).
    pub never_drawn: Vec<String>,
}

impl FaultCoverage {
    /// Judges `hits` (a batch's merged marks) for a batch of `seeds` runs whose schedules are
    /// built like `make` builds them (None: the batch skips that seed). How often each kind
    /// is drawn is measured on a fixed sample of other seeds, so the expectation does not
    /// come from the batch itself.
    pub fn judge(
        hits: &Coverage,
        seeds: u64,
        make: impl Fn(u64) -> Option<crate::Schedule>,
    ) -> FaultCoverage {
        let mut drawn: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut sampled = 0u64;
        for seed in SAMPLE_SEEDS {
            let Some(s) = make(seed) else { continue };
            sampled += 1;
            let kinds: std::collections::BTreeSet<&'static str> =
                s.faults.iter().map(|f| f.fault.kind()).collect();
            for k in kinds {
                *drawn.entry(k).or_default() += 1;
            }
        }
        let mut out = FaultCoverage::default();
        for kind in crate::schedule::Fault::all_kinds() {
            let share = drawn.get(kind).copied().unwrap_or(0) as f64 / sampled.max(1) as f64;
            if share == 0.0 {
                out.never_drawn.push(kind.to_string());
            } else if (1.0 - share).powf(seeds as f64) < MISS_CHANCE {
                out.expected
                    .push((kind.to_string(), hits.get(&format!("fault.{kind}"))));
            } else {
                out.rare.push((kind.to_string(), share));
            }
        }
        out
    }

    /// Expected kinds the batch never hit.
    pub fn missing(&self) -> Vec<&str> {
        self.expected
            .iter()
            .filter(|(_, n)| *n == 0)
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// One paragraph for a batch summary.
    pub fn summary(&self, seeds: u64) -> String {
        let expected: Vec<String> = self
            .expected
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        let rare: Vec<String> = self
            .rare
            .iter()
            .map(|(k, p)| format!("{k} ({:.1}% of schedules)", p * 100.0))
            .collect();
        let mut s = format!(
            "fault kinds expected in {seeds} seeds: {}\nskipped as too rare for {seeds} seeds (a miss more likely than {MISS_CHANCE:e}): {}",
            or_none(&expected),
            or_none(&rare)
        );
        if !self.never_drawn.is_empty() {
            s.push_str(&format!(
                "\nnot drawn in this batch's schedules: {}",
                self.never_drawn.join(", ")
            ));
        }
        let missing = self.missing();
        if !missing.is_empty() {
            s.push_str(&format!(
                "\nFAULT COVERAGE: expected but never hit: {}",
                missing.join(", ")
            ));
        }
        s
    }
}

fn or_none(v: &[String]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::{Fault, ReplicatorKind, TimedFault};
    use crate::Schedule;

    /// Every schedule crashes the agent; one in a hundred also pauses it.
    fn make(seed: u64) -> Option<Schedule> {
        let mut s = Schedule::generate(7, ReplicatorKind::Reference);
        s.faults = vec![TimedFault {
            at_ms: 1_000,
            fault: Fault::Crash {
                agent: 0,
                down_ms: 10,
            },
        }];
        if seed.is_multiple_of(100) {
            s.faults.push(TimedFault {
                at_ms: 2_000,
                fault: Fault::Pause { ms: 10 },
            });
        }
        Some(s)
    }

    #[test]
    fn a_batch_must_hit_what_its_size_makes_likely_and_may_miss_what_is_rare() {
        let j = FaultCoverage::judge(&Coverage::default(), 50, make);
        assert_eq!(j.missing(), vec!["crash"]);
        assert!(j
            .rare
            .iter()
            .any(|(k, p)| k == "pause" && *p > 0.0 && *p < 0.02));
        assert!(j.never_drawn.contains(&"twin".to_string()));
        assert!(j.summary(50).contains("expected but never hit: crash"));
        let mut hits = Coverage::default();
        hits.mark("fault.crash");
        assert!(FaultCoverage::judge(&hits, 50, make).missing().is_empty());
        // In a batch large enough, the rare kind is expected too.
        assert_eq!(
            FaultCoverage::judge(&hits, 5_000, make).missing(),
            vec!["pause"]
        );
    }
}
