//! The checkpoint ("fence") record stored in the target.
//!
//! Anyone with write access to the target can edit these bytes, so decoding is strict and
//! fails closed: an unknown version, an unknown or repeated field, trailing bytes or a
//! malformed value is `CheckpointInvalid`, and the mirror writes nothing.
//! See `docs/design.md` ("The fence record").

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::etcd::{EventKind, KeyValue};
use crate::mirror::finding::{AnchorDiff, AnchorField};

/// The record version this build writes. Version 2 added [`Anchor`]: a build that only
/// knows version 1 refuses it by version, with a message that says to upgrade, instead of
/// resuming without the source-history proof. Version 3 added the events after the anchor
/// ([`Anchor::after`]), so a proof can replay the window up to the watermark. Version 4
/// added [`Checkpoint::seq`]: pipelined Txns compare the record they build on by value, and
/// a build that does not know `seq` must not resume from (or overwrite) such a chain.
pub const VERSION: u32 = 4;
/// Records that carry [`Scan::residue_above`] are written as version 5, and only those: a
/// build that does not know the field would resume the scan without deleting the pages a
/// dead process left past the cursor, so it must refuse the record by version. Every other
/// record stays version 4, which the previous build still reads.
pub const RESIDUE_VERSION: u32 = 5;
/// The newest record version this build reads.
pub const NEWEST_READABLE: u32 = RESIDUE_VERSION;
/// The oldest record version this build still reads (records without an anchor).
pub const OLDEST_READABLE: u32 = 1;

/// A fact of the source history the target's data came from: at revision `rev` the source
/// key `key` was written with this create revision, version and value. Before it writes
/// after any (re)connect, the mirror reads the key back at `rev` and refuses a source
/// where the fact does not hold (a restore from an older snapshot keeps the cluster ID but
/// not the history). See `docs/design.md` ("Source history").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Anchor {
    /// The source key (not rewritten).
    #[serde(with = "crate::bytes_b64")]
    pub key: Vec<u8>,
    /// Its mod revision: the revision of the put.
    pub rev: i64,
    pub create: i64,
    pub ver: i64,
    /// The first 16 hex digits of SHA-256 of the value.
    pub sha: String,
    /// The mirror saw the key deleted after `rev`: the put holds at `rev` only, not up to
    /// the watermark, so a proof cannot read it back at the watermark.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// How many in-scope events the mirror saw after the put, up to the record's watermark:
    /// deletes, and puts deleted again in their own revision (any other later put would be
    /// the anchor). A proof replays the source's watch over that window and must see
    /// exactly these.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub after: u32,
    /// Digest of those events, chained in watch order (see [`Anchor::chain`]); empty when
    /// there are none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub after_sha: String,
    /// The put came from a scan page, not from the watch: the events between it and the
    /// scan were never seen, so the window after it cannot be replayed. Also set on anchors
    /// of version 2 records, which did not count the events after them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scanned: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Anchor {
    /// The anchor for a key-value as the source reported it.
    pub fn of(kv: &KeyValue) -> Anchor {
        Anchor::with_digest(kv, value_digest(&kv.value))
    }

    /// [`Anchor::of`] with the value's digest ([`value_digest`]) already computed: a caller
    /// that chains the same put as well hashes its value once.
    pub fn with_digest(kv: &KeyValue, sha: String) -> Anchor {
        Anchor {
            key: kv.key.clone(),
            rev: kv.mod_revision,
            create: kv.create_revision,
            ver: kv.version,
            sha,
            gone: false,
            after: 0,
            after_sha: String::new(),
            scanned: false,
        }
    }

    /// Extends a digest of the events after the anchor with one more. The mirror computes
    /// it as it applies the events and a proof as it replays them, so both must see the
    /// same events in the same order.
    pub fn chain(digest: &str, rev: i64, kind: EventKind, key: &[u8]) -> String {
        let mut h = Sha256::new();
        h.update(digest.as_bytes());
        h.update(rev.to_be_bytes());
        h.update([u8::from(kind == EventKind::Put)]);
        h.update((key.len() as u64).to_be_bytes());
        h.update(key);
        hex::encode(&h.finalize()[..8])
    }

    /// [`Anchor::chain`] with a put's value too. The chains a running process keeps in
    /// memory (everything fed since a break, everything a genesis watch delivered) hold
    /// puts that outlive their revision, and a restored history can repeat such a put's key
    /// at its revision with another value; only the value tells them apart. The recorded
    /// chain (`after_sha`) keeps the key-only form: its puts are deleted in their own
    /// revision, and records already written must still replay to the same digest.
    pub fn chain_value(
        digest: &str,
        rev: i64,
        kind: EventKind,
        key: &[u8],
        value: &[u8],
    ) -> String {
        let value_sha = (kind == EventKind::Put).then(|| value_digest(value));
        Anchor::chain_digested(digest, rev, kind, key, value_sha.as_deref())
    }

    /// [`Anchor::chain_value`] given the put's value digest ([`value_digest`]; `None` for a
    /// delete), so a value the caller digests for another use is hashed once.
    pub fn chain_digested(
        digest: &str,
        rev: i64,
        kind: EventKind,
        key: &[u8],
        value_sha: Option<&str>,
    ) -> String {
        let d = Anchor::chain(digest, rev, kind, key);
        let Some(value_sha) = value_sha.filter(|_| kind == EventKind::Put) else {
            return d;
        };
        let mut h = Sha256::new();
        h.update(d.as_bytes());
        h.update(value_sha.as_bytes());
        hex::encode(&h.finalize()[..8])
    }

    /// What differs between this anchor and a key-value read back at its revision, or
    /// `None` when the fact holds.
    pub fn mismatch(&self, kv: Option<&KeyValue>) -> Option<AnchorDiff> {
        let Some(kv) = kv else {
            return Some(AnchorDiff::Missing);
        };
        let found = Anchor::of(kv);
        let mut diffs = Vec::new();
        if found.key != self.key {
            diffs.push(AnchorField::Key);
        }
        if found.rev != self.rev {
            diffs.push(AnchorField::ModRevision {
                got: found.rev,
                want: self.rev,
            });
        }
        if found.create != self.create {
            diffs.push(AnchorField::CreateRevision {
                got: found.create,
                want: self.create,
            });
        }
        if found.ver != self.ver {
            diffs.push(AnchorField::Version {
                got: found.ver,
                want: self.ver,
            });
        }
        if found.sha != self.sha {
            diffs.push(AnchorField::Value);
        }
        (!diffs.is_empty()).then_some(AnchorDiff::Differs(diffs))
    }
}

/// The anchor's value digest: 64 bits of SHA-256, lowercase hex.
pub fn value_digest(value: &[u8]) -> String {
    let d = Sha256::digest(value);
    hex::encode(&d[..8])
}

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
    /// How many mirrored keys (excluded prefixes not counted) the source held at `base`.
    /// With the events the watch delivered it gives the count at any later delivered
    /// revision, which an untrusted source's quiet-range proof needs. `None` when unknown
    /// (a record from an older build).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_count: Option<i64>,
    /// Set by a claim that resumes this scan: target keys in the mirrored windows at or past
    /// the cursor with a mod revision above it were put by pages of an earlier attempt after
    /// its last fence write. The resumed scan deletes them before it writes anything, since
    /// a restored source may not put them again (docs/design.md, "Genesis pages"). Cleared
    /// by the write that ends that sweep. Needs record version 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub residue_above: Option<i64>,
}

/// The record. `watermark = W` with `split == None` and `scan == None` promises that the
/// target range equals the source range at revision W, rewritten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub v: u32,
    /// Write sequence number: one more on every record written, so no two records of a
    /// link are byte-equal. A pipelined Txn compares the fence's value with the record
    /// the previous Txn installs; that compare then matches only that one record, whatever
    /// order the Txns reach the server in. 0 in records before version 4.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub seq: u64,
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
    /// A fact of the source history this record's data came from (`None`: a version 1
    /// record, or nothing in-range read yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anchor: Option<Anchor>,
}

/// Why a checkpoint could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint is not valid JSON for record v{VERSION}: {0}")]
    Malformed(String),
    #[error("checkpoint version {0} is not supported by this build (it reads v{OLDEST_READABLE} to v{NEWEST_READABLE}); upgrade tidemark or restore the checkpoint")]
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

    /// Decodes and validates a record, failing closed on anything unexpected: a repeated
    /// field (JSON would let the last one win), an unknown field or trailing bytes are
    /// refused, and serde's message names the field.
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, CheckpointError> {
        // `encode` writes one compact object; JSON parsers allow whitespace around it, a
        // record must not carry even that.
        if bytes.first() != Some(&b'{') || bytes.last() != Some(&b'}') {
            return Err(CheckpointError::Malformed(
                "a record is one JSON object with no bytes before or after it".into(),
            ));
        }
        /// The version alone, read first so a newer record is refused by version.
        #[derive(Deserialize)]
        struct VersionOnly {
            v: Option<serde_json::Value>,
        }
        let head: VersionOnly =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
        let v = head
            .v
            .as_ref()
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| CheckpointError::Malformed("missing numeric field \"v\"".into()))?;
        if !(u64::from(OLDEST_READABLE)..=u64::from(NEWEST_READABLE)).contains(&v) {
            return Err(CheckpointError::UnsupportedVersion(v));
        }
        let c: Checkpoint =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Malformed(e.to_string()))?;
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
        if self.v < 4 && self.seq > 0 {
            return bad("seq", "needs record version 4");
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
            if s.residue_above.is_some_and(|r| r < 0) {
                return bad("scan.residue_above", "is negative");
            }
            if s.residue_above.is_some() && s.scanned {
                return bad("scan.residue_above", "is set on a scan that is done");
            }
            // A split may be recorded while genesis replays an oversized revision.
        }
        if self.has_residue() != (self.v == RESIDUE_VERSION) {
            return bad(
                "scan.residue_above",
                "is present exactly in version 5 records",
            );
        }
        if let Some(a) = &self.anchor {
            if self.v < 2 {
                return bad("anchor", "needs record version 2");
            }
            if a.key.is_empty() {
                return bad("anchor.key", "is empty");
            }
            if a.create < 1 || a.rev < a.create {
                return bad(
                    "anchor.rev",
                    "must be at or above anchor.create, which is positive",
                );
            }
            if a.ver < 1 {
                return bad("anchor.ver", "must be positive");
            }
            if a.sha.len() != 16 || !is_digest(&a.sha) {
                return bad("anchor.sha", "must be 16 lowercase hex digits");
            }
            if self.v < 3 && (a.after > 0 || !a.after_sha.is_empty() || a.scanned) {
                return bad("anchor.after", "needs record version 3");
            }
            if (a.after == 0) != a.after_sha.is_empty() || !is_digest(&a.after_sha) {
                return bad(
                    "anchor.after_sha",
                    "must be 16 lowercase hex digits exactly when anchor.after is positive",
                );
            }
            if self.v >= 3 && self.scan.is_none() && a.rev > self.watermark {
                // The anchor vouches for the copy at the watermark, so it is not newer.
                return bad("anchor.rev", "must not be above the watermark");
            }
        }
        Ok(())
    }

    /// Rewrites an older record as the current version. A version 2 anchor did not count
    /// the events after it, so it becomes unreplayable (`scanned`).
    pub fn upgrade(&mut self) {
        if self.v < 3 {
            if let Some(a) = &mut self.anchor {
                a.scanned = true;
            }
        }
        self.v = self.v.max(VERSION);
        self.settle_version();
    }

    /// Sets or clears [`Scan::residue_above`], with the version that goes with it.
    pub fn set_residue_above(&mut self, above: Option<i64>) {
        if let Some(s) = self.scan.as_mut() {
            s.residue_above = above;
        }
        self.settle_version();
    }

    /// Whether the record carries a resumed scan's residue mark (`scan.residue_above`).
    pub fn has_residue(&self) -> bool {
        self.scan
            .as_ref()
            .is_some_and(|s| s.residue_above.is_some())
    }

    /// The version this record's content needs: 5 exactly while a residue is recorded, so
    /// every other record stays readable by the previous build.
    pub fn settle_version(&mut self) {
        if self.has_residue() {
            self.v = RESIDUE_VERSION;
        } else if self.v == RESIDUE_VERSION {
            self.v = VERSION;
        }
    }

    /// The anchor whose window since it a proof can replay: counted events (version 3) and
    /// not from a scan.
    pub fn replayable_anchor(&self) -> Option<&Anchor> {
        self.anchor.as_ref().filter(|a| self.v >= 3 && !a.scanned)
    }

    /// Records a (re)copy starting from a scan at `base`: no promise holds until it finishes,
    /// a partly applied revision is dropped, and the anchor goes (it vouched for the copy
    /// being replaced; the scan's pages bring the next one).
    pub fn start_scan(&mut self, base: i64, prune: bool, base_count: Option<i64>) {
        self.scan = Some(Scan {
            base,
            cursor: Vec::new(),
            scanned: false,
            rmax: base,
            smax: Some(0),
            base_count,
            residue_above: None,
        });
        self.settle_version();
        self.split = None;
        self.prune_pending = prune;
        self.prune_floor = 0;
        self.anchor = None;
    }

    /// Whether the watermark invariant currently holds for this record.
    pub fn is_consistent(&self) -> bool {
        self.split.is_none() && self.scan.is_none()
    }
}

/// Lowercase hex digits only (an empty string passes; lengths are checked by the caller).
fn is_digest(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && (s.is_empty() || s.len() == 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The field decoding names when it refuses `c`.
    fn refused_field(c: &Checkpoint) -> Option<&'static str> {
        match Checkpoint::decode(&c.encode()) {
            Err(CheckpointError::BadField { field, .. }) => Some(field),
            _ => None,
        }
    }

    fn sample() -> Checkpoint {
        Checkpoint {
            v: VERSION,
            seq: 0,
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
                residue_above: None,
            }),
            prune_pending: true,
            prune_floor: 7,
            source_cluster: "a".into(),
            target_cluster: "b".into(),
            anchor: Some(Anchor::of(&KeyValue {
                key: b"/app/k".to_vec(),
                value: b"v".to_vec(),
                create_revision: 5,
                mod_revision: 9,
                version: 2,
                lease: 0,
            })),
        }
    }

    #[test]
    fn a_digest_computed_once_chains_like_the_value() {
        let v = b"some value".to_vec();
        for kind in [EventKind::Put, EventKind::Delete] {
            let once = Anchor::chain_digested("ab", 7, kind, b"k", Some(&value_digest(&v)));
            assert_eq!(once, Anchor::chain_value("ab", 7, kind, b"k", &v));
        }
        let other = Anchor::chain_value("ab", 7, EventKind::Put, b"k", b"other");
        assert_ne!(
            other,
            Anchor::chain_value("ab", 7, EventKind::Put, b"k", &v)
        );
    }

    /// A resumed scan's residue mark is written as version 5 and only then: the previous
    /// build (which reads up to version 4) refuses exactly those records, by version.
    #[test]
    fn a_residue_mark_needs_version_five_and_only_it_does() {
        let mut c = sample();
        c.set_residue_above(Some(17));
        assert_eq!(c.v, RESIDUE_VERSION);
        let bytes = c.encode();
        assert_eq!(Checkpoint::decode(&bytes).unwrap(), c);
        let mut j: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(j["scan"]["residue_above"], 17);
        j["v"] = VERSION.into();
        assert!(matches!(
            Checkpoint::decode(&serde_json::to_vec(&j).unwrap()),
            Err(CheckpointError::BadField {
                field: "scan.residue_above",
                ..
            })
        ));
        let mut done = c.clone();
        done.scan.as_mut().unwrap().scanned = true;
        assert_eq!(refused_field(&done), Some("scan.residue_above"));
        c.set_residue_above(None);
        assert_eq!(
            c.v, VERSION,
            "cleared: readable by the previous build again"
        );
        assert!(!String::from_utf8(c.encode()).unwrap().contains("residue"));
        let mut bumped = c.clone();
        bumped.v = RESIDUE_VERSION;
        assert_eq!(refused_field(&bumped), Some("scan.residue_above"));
        bumped.upgrade();
        assert_eq!(bumped.v, VERSION);
        assert_eq!(Checkpoint::decode(&bumped.encode()).unwrap(), bumped);
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
        j["v"] = (NEWEST_READABLE + 1).into();
        assert_eq!(
            Checkpoint::decode(&serde_json::to_vec(&j).unwrap()),
            Err(CheckpointError::UnsupportedVersion(
                u64::from(NEWEST_READABLE) + 1
            ))
        );
        j["v"] = VERSION.into();
        j["extra"] = true.into();
        assert!(Checkpoint::decode(&serde_json::to_vec(&j).unwrap()).is_err());
        let mut c = sample();
        c.holder = "short".into();
        assert_eq!(refused_field(&c), Some("holder"));
    }

    #[test]
    fn repeated_fields_and_trailing_bytes_are_refused() {
        let text = String::from_utf8(sample().encode()).unwrap();
        // The same key twice: JSON parsers usually let the last one win; this one refuses.
        let twice = text.replacen("\"watermark\":42", "\"watermark\":42,\"watermark\":7", 1);
        assert_ne!(twice, text);
        match Checkpoint::decode(twice.as_bytes()) {
            Err(CheckpointError::Malformed(m)) => assert!(m.contains("watermark"), "{m}"),
            other => panic!("accepted a repeated field: {other:?}"),
        }
        let v = format!("\"v\":{VERSION}");
        let v_twice = text.replacen(&v, &format!("{v},\"v\":1"), 1);
        assert_ne!(v_twice, text);
        assert!(Checkpoint::decode(v_twice.as_bytes()).is_err());
        let trailing = format!("{text}{{}}");
        assert!(Checkpoint::decode(trailing.as_bytes()).is_err());
        for padded in [format!("{text} "), format!("{text}\n"), format!(" {text}")] {
            assert!(
                matches!(
                    Checkpoint::decode(padded.as_bytes()),
                    Err(CheckpointError::Malformed(_))
                ),
                "{padded:?}"
            );
        }
        // A repeated key inside a nested object is refused as well, and named.
        let anchor_twice = text.replacen("\"rev\":", "\"rev\":1,\"rev\":", 1);
        assert_ne!(anchor_twice, text);
        match Checkpoint::decode(anchor_twice.as_bytes()) {
            Err(CheckpointError::Malformed(m)) => assert!(m.contains("rev"), "{m}"),
            other => panic!("accepted a repeated nested field: {other:?}"),
        }
    }

    #[test]
    fn the_events_after_the_anchor_need_version_3_and_a_digest() {
        let mut c = sample();
        let a = c.anchor.as_mut().unwrap();
        a.after = 2;
        a.after_sha = Anchor::chain(
            &Anchor::chain("", 10, EventKind::Delete, b"/app/x"),
            11,
            EventKind::Put,
            b"/app/y",
        );
        assert_eq!(Checkpoint::decode(&c.encode()).unwrap(), c);

        let mut no_digest = c.clone();
        no_digest.anchor.as_mut().unwrap().after_sha.clear();
        let mut stray_digest = sample();
        stray_digest.anchor.as_mut().unwrap().after_sha = c.anchor.clone().unwrap().after_sha;
        for bad in [no_digest, stray_digest] {
            assert_eq!(refused_field(&bad), Some("anchor.after_sha"));
        }
        let mut v2 = c.clone();
        v2.v = 2;
        assert_eq!(refused_field(&v2), Some("anchor.after"));
        // A version 2 anchor did not count the events after it: it cannot be replayed, and
        // stays so once the record is rewritten as the current version. Decoding keeps the
        // record as it was written (it re-encodes the same).
        let mut v2 = sample();
        v2.v = 2;
        let mut read = Checkpoint::decode(&v2.encode()).unwrap();
        assert_eq!(read, v2);
        assert!(read.replayable_anchor().is_none());
        assert!(sample().replayable_anchor().is_some());
        read.upgrade();
        assert_eq!(read.v, VERSION);
        assert!(read.anchor.as_ref().unwrap().scanned);
        assert!(read.replayable_anchor().is_none());
        assert_eq!(Checkpoint::decode(&read.encode()).unwrap(), read);
        // Outside a scan, the anchor vouches for the watermark and is not newer.
        let mut ahead = sample();
        ahead.scan = None;
        ahead.watermark = 8;
        assert_eq!(refused_field(&ahead), Some("anchor.rev"));
    }

    #[test]
    fn version_1_records_decode_without_an_anchor_and_cannot_carry_one() {
        let mut c = sample();
        c.v = 1;
        c.anchor = None;
        assert_eq!(Checkpoint::decode(&c.encode()).unwrap(), c);
        c.anchor = sample().anchor;
        assert_eq!(refused_field(&c), Some("anchor"));
    }

    #[test]
    fn an_anchor_names_what_differs() {
        let a = sample().anchor.unwrap();
        let kv = KeyValue {
            key: b"/app/k".to_vec(),
            value: b"v".to_vec(),
            create_revision: 5,
            mod_revision: 9,
            version: 2,
            lease: 0,
        };
        assert_eq!(a.mismatch(Some(&kv)), None);
        let other = KeyValue {
            value: b"w".to_vec(),
            create_revision: 3,
            ..kv.clone()
        };
        assert_eq!(
            a.mismatch(Some(&other)),
            Some(AnchorDiff::Differs(vec![
                AnchorField::CreateRevision { got: 3, want: 5 },
                AnchorField::Value
            ]))
        );
        assert_eq!(a.mismatch(None), Some(AnchorDiff::Missing));
        let mut bad = sample();
        bad.anchor.as_mut().unwrap().sha = "XYZ".into();
        assert_eq!(refused_field(&bad), Some("anchor.sha"));
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
        assert_eq!(refused_field(&c), Some("scan.smax"));
        let mut c = sample();
        c.scan.as_mut().unwrap().base_count = Some(-1);
        assert_eq!(refused_field(&c), Some("scan.base_count"));
    }

    proptest! {
        #[test]
        fn encode_decode_identity(epoch in 0u64..u64::MAX, wm in 0i64..i64::MAX/2, cursor in proptest::collection::vec(any::<u8>(), 0..20), pp in any::<bool>()) {
            let mut c = sample();
            c.epoch = epoch; c.watermark = wm; c.prune_pending = pp;
            c.scan = Some(Scan { base: wm, cursor, scanned: pp, rmax: wm, smax: pp.then_some(wm), base_count: None, residue_above: None });
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
