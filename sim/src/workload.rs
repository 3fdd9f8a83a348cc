//! The seeded source workload: what applications do to the source cluster meanwhile.

use crate::model::etcd::MAX_REQUEST_BYTES;
use crate::model::{EtcdCluster, Mutation, WatchOut};
use crate::schedule::WorkloadOptions;
use tidemark_core::etcd::prefix_end;
use tidemark_core::rng::Rng;

/// Headroom below `--max-request-bytes` for a large value, so that the rewritten key plus the
/// fence put still fit one target request (a value the target can never take is an operator
/// problem, reported as TooLarge, not a replication bug).
pub const LARGE_VALUE_HEADROOM: usize = 8 * 1024;

/// Generates source writes.
#[derive(Debug)]
pub struct Workload {
    opts: WorkloadOptions,
    prefix: String,
    rng: Rng,
    /// Bulk loads waiting for their DeleteRange: (bulk prefix, keys still to write).
    bulk: Option<(String, u32)>,
    bulk_seq: u32,
    lease_seq: u32,
    /// Writes done, by kind (coverage).
    pub counts: std::collections::BTreeMap<&'static str, u64>,
}

impl Workload {
    /// A workload over `prefix` (the source prefix of the link).
    pub fn new(opts: WorkloadOptions, prefix: &str, seed: u64) -> Workload {
        Workload {
            opts,
            prefix: prefix.to_string(),
            rng: Rng::new(seed ^ 0x0a11_ce55),
            bulk: None,
            bulk_seq: 0,
            lease_seq: 0,
            counts: Default::default(),
        }
    }

    /// Mean gap between operations, nanoseconds (exponential-ish spread around it).
    pub fn next_gap_ns(&mut self) -> u64 {
        let mean = 1_000_000_000 / u64::from(self.opts.ops_per_s.max(1));
        1 + self.rng.below(2 * mean)
    }

    fn key(&mut self) -> Vec<u8> {
        let n = self.rng.below(u64::from(self.opts.keys.max(1)));
        format!("{}k/{n:05}", self.prefix).into_bytes()
    }

    fn value(&mut self) -> Vec<u8> {
        let n = 1 + self.rng.below(64) as usize;
        let x = self.rng.next_u64();
        let mut v = format!("{x:016x}").into_bytes();
        v.resize(n, b'.');
        v
    }

    /// Writes the preload, before any agent starts.
    pub fn preload(&mut self, c: &mut EtcdCluster, out: &mut Vec<WatchOut>) {
        for i in 0..self.opts.preload {
            let key = format!("{}k/{:05}", self.prefix, i % self.opts.keys.max(1)).into_bytes();
            let value = self.value();
            c.write(
                &[Mutation::Put {
                    key,
                    value,
                    lease: 0,
                }],
                out,
            );
        }
    }

    /// Performs one operation on the source at `now`.
    pub fn step(&mut self, now: u64, c: &mut EtcdCluster, out: &mut Vec<WatchOut>) {
        if let Some((p, left)) = self.bulk.clone() {
            // Continue a bulk load: up to 100 keys per Txn.
            let n = left.min(100);
            let base = self.opts.bulk_keys - left;
            let muts: Vec<Mutation> = (0..n)
                .map(|i| Mutation::Put {
                    key: format!("{p}{:04}", base + i).into_bytes(),
                    value: b"bulk".to_vec(),
                    lease: 0,
                })
                .collect();
            c.write(&muts, out);
            self.bulk = if left > n { Some((p, left - n)) } else { None };
            if self.bulk.is_none() {
                *self.counts.entry("bulk_load").or_default() += 1;
            }
            return;
        }
        let o = &self.opts;
        let weights = [
            o.w_put,
            o.w_delete,
            o.w_txn,
            o.w_bulk,
            o.w_delete_range,
            o.w_large,
            o.w_lease,
            o.w_out_of_scope,
            o.w_excluded,
        ];
        let total: u32 = weights.iter().sum();
        let mut pick = self.rng.below(u64::from(total.max(1))) as u32;
        let mut kind = 0;
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                kind = i;
                break;
            }
            pick -= w;
        }
        let name = match kind {
            0 => {
                let (key, value) = (self.key(), self.value());
                c.write(
                    &[Mutation::Put {
                        key,
                        value,
                        lease: 0,
                    }],
                    out,
                );
                "put"
            }
            1 => {
                let key = self.key();
                c.write(&[Mutation::DeleteRange { key, end: vec![] }], out);
                "delete"
            }
            2 => {
                let n = 2 + self.rng.below(u64::from(self.opts.max_txn_ops.max(2) - 1)) as usize;
                let mut keys = std::collections::BTreeSet::new();
                for _ in 0..n {
                    keys.insert(self.key());
                }
                let muts: Vec<Mutation> = keys
                    .into_iter()
                    .map(|key| {
                        if self.rng.below(4) == 0 {
                            Mutation::DeleteRange { key, end: vec![] }
                        } else {
                            Mutation::Put {
                                key,
                                value: self.value(),
                                lease: 0,
                            }
                        }
                    })
                    .collect();
                c.write(&muts, out);
                "txn"
            }
            3 => {
                // At most 8 bulk prefixes per run keeps the key count (and the sim's cost)
                // bounded on seeds whose DeleteRange weight is zero.
                if self.opts.bulk_keys > 0 && self.bulk_seq < 8 {
                    self.bulk_seq += 1;
                    let p = format!("{}bulk{:03}/", self.prefix, self.bulk_seq);
                    self.bulk = Some((p, self.opts.bulk_keys));
                }
                "bulk_start"
            }
            4 => {
                // Delete a whole bulk prefix (up to 1000 keys in one revision), or a slice
                // of the plain keys.
                let (key, end) = if self.bulk_seq > 0 && self.rng.below(2) == 0 {
                    let b = 1 + self.rng.below(u64::from(self.bulk_seq));
                    let p = format!("{}bulk{b:03}/", self.prefix).into_bytes();
                    let e = prefix_end(&p);
                    (p, e)
                } else {
                    let a = self.key();
                    let mut b = self.key();
                    if b < a {
                        b = a.clone();
                    }
                    b.push(b'~');
                    (a, b)
                };
                c.write(&[Mutation::DeleteRange { key, end }], out);
                "delete_range"
            }
            5 => {
                let key = self.key();
                let size =
                    MAX_REQUEST_BYTES - LARGE_VALUE_HEADROOM - self.rng.below(64 * 1024) as usize;
                c.write(
                    &[Mutation::Put {
                        key,
                        value: vec![b'L'; size],
                        lease: 0,
                    }],
                    out,
                );
                "large"
            }
            6 => {
                let ttl_ns = (1 + self.rng.below(20)) * 1_000_000_000;
                let lease = c.store.grant_lease(now + ttl_ns);
                self.lease_seq += 1;
                let n = 1 + self.rng.below(4);
                let muts: Vec<Mutation> = (0..n)
                    .map(|i| Mutation::Put {
                        key: format!("{}lease/{:04}-{i}", self.prefix, self.lease_seq).into_bytes(),
                        value: b"leased".to_vec(),
                        lease,
                    })
                    .collect();
                c.write(&muts, out);
                "lease"
            }
            7 => {
                let n = self.rng.below(50);
                let value = self.value();
                c.write(
                    &[Mutation::Put {
                        key: format!("/other/{n}").into_bytes(),
                        value,
                        lease: 0,
                    }],
                    out,
                );
                "out_of_scope"
            }
            _ => {
                let n = self.rng.below(50);
                let value = self.value();
                c.write(
                    &[Mutation::Put {
                        key: format!("{}skip/{n}", self.prefix).into_bytes(),
                        value,
                        lease: 0,
                    }],
                    out,
                );
                "excluded"
            }
        };
        *self.counts.entry(name).or_default() += 1;
    }
}
