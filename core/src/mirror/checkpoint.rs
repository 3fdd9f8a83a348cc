//! The checkpoint ("fence") record stored in the target.
//!
//! Anyone with write access to the target can edit these bytes, so decoding is strict and
//! fails closed: an unknown version, an unknown field or a malformed value is
//! `CheckpointInvalid`, and the mirror writes nothing.

use serde::{Deserialize, Serialize};

/// The only record version this build reads and writes.
pub const VERSION: u32 = 1;

/// Who the fence says owns the target range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// A mirror agent replicates into the range.
    Mirror,
    /// Cut-over happened: the target is primary and no mirror may write again.
    Primary,
}

/// A revision that is being applied across several Txns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    /// The source revision being split.
    pub rev: i64,
    /// How many of its ops (in watch order) are already applied.
    pub done: u32,
}

/// Genesis progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scan {
    /// R0: the source revision the watch replays from (base + 1).
    pub base: i64,
    /// The next source key to scan; empty before the first page.
    #[serde(with = "crate::bytes_b64")]
    pub cursor: Vec<u8>,
    /// True once the scan reached the end of the range and only the replay remains.
    #[serde(default)]
    pub scanned: bool,
    /// The highest revision any durable page was read at: the watch must be proven past it
    /// before the watermark invariant can hold again (a resumed agent needs it too).
    #[serde(default)]
    pub rmax: i64,
    /// The highest mod revision among the key-values the durable pages held: no value the
    /// scan wrote is newer. `None` when unknown (a record from an older build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smax: Option<i64>,
    /// How many keys the source range held at `base` (the R0 count). With the events the
    /// watch delivered it gives the count at any later delivered revision, which an untrusted
    /// source's quiet-range proof needs. `None` when unknown (a record from an older build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_count: Option<i64>,
}

/// The record. `watermark = W` with `split == None` and `scan == None` promises that the
/// target range equals the source range at revision W, rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub v: u32,
    pub link: String,
    pub epoch: u64,
    /// 128-bit per-process nonce (hex), so two agents at the same epoch are told apart.
    pub holder: String,
    pub role: Role,
    pub watermark: i64,
    pub split: Option<Split>,
    pub scan: Option<Scan>,
    /// A mark-and-sweep prune is owed; durable so an interrupted sweep resumes.
    pub prune_pending: bool,
    /// Target revision at which the current genesis attempt claimed the fence: every key
    /// it (re)writes has a mod revision at or above it, so older keys were not seen.
    #[serde(default)]
    pub prune_floor: i64,
    pub source_cluster: String,
    pub target_cluster: String,
}

/// Why a checkpoint could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not valid JSON for record v{VERSION}: {0}")]
    Malformed(String),
    #[error("checkpoint version {0} is not supported by this build (it reads v{VERSION}); upgrade tidemark or restore the checkpoint")]
    UnsupportedVersion(u64),
    #[error("checkpoint field {field} is invalid: {problem}")]
    BadField {
        field: &'static str,
        problem: String,
    },
}

impl Checkpoint {
    /// Encodes the record as compact JSON.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self)
            .expect("a Checkpoint always serialises: plain fields, no maps with non-string keys")
    }

    /// Decodes and validates a record, failing closed on anything unexpected.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        let raw: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        let v = raw
            .get("v")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| CheckpointError::Malformed("missing numeric field \"v\"".into()))?;
        if v != u64::from(VERSION) {
            return Err(CheckpointError::UnsupportedVersion(v));
        }
        let c: Checkpoint =
            serde_json::from_value(raw).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        c.check()?;
        Ok(c)
    }

    /// Whether [`Checkpoint::decode`] would accept this record once encoded: the mirror
    /// checks every record before writing it, so it never leaves one it cannot read back.
    pub fn check(&self) -> Result<(), CheckpointError> {
        let bad = |field, problem: &str| {
            Err(CheckpointError::BadField {
                field,
                problem: problem.into(),
            })
        };
        if self.link.is_empty() {
            return bad("link", "is empty");
        }
        if self.holder.len() != 32 || !self.holder.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad("holder", "must be 32 hex digits");
        }
        if self.watermark < 0 {
            return bad("watermark", "is negative");
        }
        if self.prune_floor < 0 {
            return bad("prune_floor", "is negative");
        }
        if let Some(s) = &self.split {
            if s.rev <= self.watermark {
                return bad("split.rev", "must be above the watermark");
            }
        }
        if let Some(s) = &self.scan {
            if s.base < 0 {
                return bad("scan.base", "is negative");
            }
            if s.smax.is_some_and(|m| m < 0) {
                return bad("scan.smax", "is negative");
            }
            if s.base_count.is_some_and(|n| n < 0) {
                return bad("scan.base_count", "is negative");
            }
            // A split may be recorded while genesis replays an oversized revision.
        }
        Ok(())
    }

    /// Whether the watermark invariant currently holds for this record.
    pub fn is_consistent(&self) -> bool {
        self.split.is_none() && self.scan.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Checkpoint {
        Checkpoint {
            v: VERSION,
            link: "link-1".into(),
            epoch: 3,
            holder: "00112233445566778899aabbccddeeff".into(),
            role: Role::Mirror,
            watermark: 42,
            split: None,
            scan: Some(Scan {
                base: 40,
                cursor: b"/app/\xff".to_vec(),
                scanned: false,
                rmax: 41,
                smax: Some(39),
                base_count: Some(3),
            }),
            prune_pending: true,
            prune_floor: 7,
            source_cluster: "a".into(),
            target_cluster: "b".into(),
        }
    }

    #[test]
    fn round_trips() {
        let c = sample();
        assert_eq!(Checkpoint::decode(&c.encode()).unwrap(), c);
    }

    #[test]
    fn fails_closed() {
        assert!(matches!(
            Checkpoint::decode(b"garbage"),
            Err(CheckpointError::Malformed(_))
        ));
        let mut j: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        j["v"] = 2.into();
        assert_eq!(
            Checkpoint::decode(&serde_json::to_vec(&j).unwrap()),
            Err(CheckpointError::UnsupportedVersion(2))
        );
        j["v"] = 1.into();
        j["extra"] = true.into();
        assert!(Checkpoint::decode(&serde_json::to_vec(&j).unwrap()).is_err());
        let mut c = sample();
        c.holder = "short".into();
        assert!(matches!(
            Checkpoint::decode(&c.encode()),
            Err(CheckpointError::BadField {
                field: "holder",
                ..
            })
        ));
    }

    #[test]
    fn records_without_smax_or_base_count_still_decode() {
        // Written by builds before these fields: both are unknown, not zero.
        let mut j: serde_json::Value = serde_json::from_slice(&sample().encode()).unwrap();
        let scan = j["scan"].as_object_mut().unwrap();
        scan.remove("smax");
        scan.remove("base_count");
        let c = Checkpoint::decode(&serde_json::to_vec(&j).unwrap()).unwrap();
        let s = c.scan.as_ref().unwrap();
        assert_eq!((s.smax, s.base_count), (None, None));
        // Unknown fields stay unwritten, so such a record encodes as it was.
        assert!(!String::from_utf8(c.encode()).unwrap().contains("smax"));
    }

    #[test]
    fn negative_smax_or_base_count_is_rejected() {
        let mut c = sample();
        c.scan.as_mut().unwrap().smax = Some(-1);
        assert!(matches!(
            Checkpoint::decode(&c.encode()),
            Err(CheckpointError::BadField {
                field: "scan.smax",
                ..
            })
        ));
        let mut c = sample();
        c.scan.as_mut().unwrap().base_count = Some(-1);
        assert!(matches!(
            Checkpoint::decode(&c.encode()),
            Err(CheckpointError::BadField {
                field: "scan.base_count",
                ..
            })
        ));
    }

    proptest! {
        #[test]
        fn encode_decode_identity(epoch in 0u64..u64::MAX, wm in 0i64..i64::MAX/2, cursor in proptest::collection::vec(any::<u8>(), 0..20), pp in any::<bool>()) {
            let mut c = sample();
            c.epoch = epoch; c.watermark = wm; c.prune_pending = pp;
            c.scan = Some(Scan { base: wm, cursor, scanned: pp, rmax: wm, smax: pp.then_some(wm), base_count: None });
            prop_assert_eq!(Checkpoint::decode(&c.encode()).unwrap(), c);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Checkpoint::decode(&bytes);
        }

        #[test]
        fn truncation_is_rejected(cut in 0usize..400) {
            let bytes = sample().encode();
            let cut = cut % bytes.len();
            prop_assert!(Checkpoint::decode(&bytes[..cut]).is_err());
        }

        #[test]
        fn any_single_byte_corruption_is_rejected_or_still_valid(idx in 0usize..400, b in any::<u8>()) {
            let mut bytes = sample().encode();
            let i = idx % bytes.len();
            bytes[i] = b;
            // Either rejected, or it decodes to a record that passes validation again.
            if let Ok(c) = Checkpoint::decode(&bytes) {
                prop_assert!(Checkpoint::decode(&c.encode()).is_ok());
            }
        }
    }
}
