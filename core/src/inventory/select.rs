//! Selection: which snapshot of a lineage, if any, recovery may trust.
//!
//! Rules (README "Inventory snapshots"; docs/design.md "Inventory recovery"): group the lineage's live Secrets by
//! synthesis UUID; only the newest group by `synthesized` is a candidate, and it is selected
//! only if complete and consistent. Anything doubtful about the newest group is
//! [`Selection::Invalid`] — never a fallback to older history, since an older snapshot
//! would tombstone things a newer, lost synthesis may have re-added. Older groups are ignored
//! (they are leftovers of replacements), except that an unparseable timestamp anywhere makes
//! the order, and so the outcome, unknown. The result never depends on input order.

use super::chunk::{decode_chunk_into, secret_name, DEFAULT_CHUNK_LIMIT};
use super::entry::{Entry, ResourceId};
use super::secret::{chunk_sha256, Secret, SnapshotHasher};
use super::timestamp::Timestamp;
use super::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt;

/// Most chunks a snapshot may claim (a 10 GiB inventory is not an inventory of identities);
/// bounds the work a hand-edited count can cause.
pub const MAX_CHUNK_COUNT: usize = 10_000;

/// Why a lineage's history cannot be trusted. Serialised as the variant name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Reason {
    /// The newest snapshot lacks an index in `0..count`.
    MissingChunk,
    /// The newest snapshot has two Secrets with one index.
    DuplicateChunk,
    /// Chunks of one UUID disagree on timestamp, count, composition, synthesizer or snapshot hash.
    MixedSnapshot,
    /// Missing/unparseable metadata, missing data, or data that is not a JSON array of entries.
    MalformedChunk,
    /// A chunk's bytes do not match its chunk or snapshot hash (hand edits, mixed writes).
    HashMismatch,
    /// Two UUIDs share the newest instant: which one is newest is unknown.
    AmbiguousTimestamp,
    /// A `synthesized` annotation is missing or not RFC 3339: the order is unknown.
    BadTimestamp,
    /// A Secret's name is not `<comp-name>-<lineage>-<index>` for its own metadata.
    NameMismatch,
    /// A format version other than `1`.
    UnsupportedFormat,
    /// A chunk over the data limit, a claimed count over [`MAX_CHUNK_COUNT`], or (recording)
    /// one entry larger than a chunk.
    TooLarge,
    /// Two live Compositions share the lineage, or a chunk is annotated with another lineage
    /// than the one it is labelled with.
    LineageConflict,
}

impl Reason {
    /// The API name, as used in JSON, events and conditions.
    pub fn name(self) -> &'static str {
        match self {
            Reason::MissingChunk => "MissingChunk",
            Reason::DuplicateChunk => "DuplicateChunk",
            Reason::MixedSnapshot => "MixedSnapshot",
            Reason::MalformedChunk => "MalformedChunk",
            Reason::HashMismatch => "HashMismatch",
            Reason::AmbiguousTimestamp => "AmbiguousTimestamp",
            Reason::BadTimestamp => "BadTimestamp",
            Reason::NameMismatch => "NameMismatch",
            Reason::UnsupportedFormat => "UnsupportedFormat",
            Reason::TooLarge => "TooLarge",
            Reason::LineageConflict => "LineageConflict",
        }
    }

    /// Every reason, in declaration order.
    pub const ALL: [Reason; 11] = [
        Reason::MissingChunk,
        Reason::DuplicateChunk,
        Reason::MixedSnapshot,
        Reason::MalformedChunk,
        Reason::HashMismatch,
        Reason::AmbiguousTimestamp,
        Reason::BadTimestamp,
        Reason::NameMismatch,
        Reason::UnsupportedFormat,
        Reason::TooLarge,
        Reason::LineageConflict,
    ];
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An invalid outcome: the machine-readable reason and a sentence for humans.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invalid {
    /// Why.
    pub reason: Reason,
    /// Which Secrets and values, for operators.
    pub detail: String,
}

/// A complete, consistent snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The lineage it was selected for.
    pub lineage: String,
    /// Synthesis UUID.
    pub synthesis_uuid: String,
    /// Synthesis time.
    pub synthesized: Timestamp,
    /// Composition name when recorded.
    pub composition_name: String,
    /// Composition namespace.
    pub composition_namespace: String,
    /// Synthesizer name.
    pub synthesizer_name: String,
    /// Secret names in index order.
    pub secret_names: Vec<String>,
    /// All entries, chunks concatenated in index order.
    pub entries: Vec<Entry>,
}

/// The result of selection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Selection {
    /// The lineage has no live inventory Secrets.
    None,
    /// The newest snapshot is complete and consistent.
    Selected(Snapshot),
    /// The newest history is doubtful: no tombstones may be derived.
    Invalid(Invalid),
}

impl Selection {
    /// The one-line JSON object `tidemark-inventory inspect` prints:
    /// `{"outcome":"selected","lineage","synthesisUUID","synthesized","compositionName","chunks","entries"}`,
    /// `{"outcome":"invalid","reason","detail"}` or `{"outcome":"none"}`, plus
    /// `"tombstones":[{"group","version","kind","namespace"?,"name"}]` when given.
    pub fn inspect_json(&self, tombstones: Option<&[Entry]>) -> Value {
        let mut v = match self {
            Selection::None => json!({"outcome": "none"}),
            Selection::Selected(s) => json!({
                "outcome": "selected",
                "lineage": s.lineage,
                "synthesisUUID": s.synthesis_uuid,
                "synthesized": s.synthesized.format_rfc3339_nanos(),
                "compositionName": s.composition_name,
                "chunks": s.secret_names.len(),
                "entries": s.entries.len(),
            }),
            Selection::Invalid(i) => json!({
                "outcome": "invalid",
                "reason": i.reason.name(),
                "detail": i.detail,
            }),
        };
        if let (Some(t), Some(obj)) = (tombstones, v.as_object_mut()) {
            let ids: Vec<ResourceId> = t.iter().map(Entry::resource_id).collect();
            obj.insert("tombstones".into(), json!(ids));
        }
        v
    }
}

fn invalid(reason: Reason, detail: String) -> Selection {
    Selection::Invalid(Invalid { reason, detail })
}

/// Strict non-negative decimal (no sign, no spaces), as the recorder writes.
fn parse_index(s: &str) -> Option<usize> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The lineages labelled on live Secrets, sorted; lets `inspect` pick the lineage when the
/// operator did not name one (exactly one present) or list the choices.
pub fn lineages_in(secrets: &[Secret]) -> Vec<String> {
    let set: std::collections::BTreeSet<&String> = secrets
        .iter()
        .filter(|s| !s.terminating)
        .filter_map(|s| s.labels.get(LABEL_LINEAGE))
        .collect();
    set.into_iter().cloned().collect()
}

/// [`select_with_limit`] with the 1 MiB Secret limit.
pub fn select(secrets: &[Secret], lineage: &str) -> Selection {
    select_with_limit(secrets, lineage, DEFAULT_CHUNK_LIMIT)
}

/// Selects the lineage's snapshot among `secrets` (any order; Secrets of other lineages and
/// terminating Secrets are ignored). `limit` is the chunk data limit a chunk may not exceed.
pub fn select_with_limit(secrets: &[Secret], lineage: &str, limit: usize) -> Selection {
    let mut live: Vec<&Secret> = secrets
        .iter()
        .filter(|s| {
            !s.terminating && s.labels.get(LABEL_LINEAGE).map(String::as_str) == Some(lineage)
        })
        .collect();
    if live.is_empty() {
        return Selection::None;
    }
    // Total order => the first problem found (and its detail) is independent of input order.
    live.sort_by(|a, b| {
        (&a.namespace, &a.name)
            .cmp(&(&b.namespace, &b.name))
            .then_with(|| a.cmp(b))
    });

    // Group by synthesis UUID and order each group by its (latest) timestamp.
    let mut groups: BTreeMap<&str, Vec<&Secret>> = BTreeMap::new();
    for s in &live {
        match s
            .annotations
            .get(ANN_SYNTHESIS_UUID)
            .filter(|u| !u.is_empty())
        {
            Some(u) => groups.entry(u.as_str()).or_default().push(s),
            None => {
                return invalid(
                    Reason::MalformedChunk,
                    format!(
                        "Secret {} has no {ANN_SYNTHESIS_UUID} annotation; its snapshot is unknown",
                        s.name
                    ),
                )
            }
        }
    }
    // Each Secret's timestamp is parsed once here and handed to the newest group's checks.
    let mut timed: BTreeMap<&str, Vec<(&Secret, Timestamp)>> = BTreeMap::new();
    let mut times: BTreeMap<&str, Timestamp> = BTreeMap::new();
    for (uuid, members) in &groups {
        let mut with_time = Vec::with_capacity(members.len());
        for s in members {
            let Some(raw) = s.annotations.get(ANN_SYNTHESIZED) else {
                return invalid(
                    Reason::BadTimestamp,
                    format!(
                        "Secret {} (synthesis {uuid}) has no {ANN_SYNTHESIZED} annotation",
                        s.name
                    ),
                );
            };
            let t = match Timestamp::parse_rfc3339(raw) {
                Ok(t) => t,
                Err(e) => {
                    return invalid(
                        Reason::BadTimestamp,
                        format!("Secret {} (synthesis {uuid}): {e}", s.name),
                    )
                }
            };
            let slot = times.entry(uuid).or_insert(t);
            *slot = (*slot).max(t);
            with_time.push((*s, t));
        }
        timed.insert(uuid, with_time);
    }
    let Some(newest_time) = times.values().max().copied() else {
        return Selection::None;
    };
    let newest: Vec<&str> = times
        .iter()
        .filter(|(_, t)| **t == newest_time)
        .map(|(u, _)| *u)
        .collect();
    if newest.len() > 1 {
        return invalid(
            Reason::AmbiguousTimestamp,
            format!(
                "syntheses {} share the newest timestamp {newest_time}",
                newest.join(", ")
            ),
        );
    }
    // Only the newest group's chunks are checked, hashed and decoded; older groups cost no
    // more than reading their annotations above.
    let uuid = newest[0];
    validate_group(uuid, &timed[uuid], lineage, limit)
}

/// An annotation's value, borrowed: the checks below compare thousands of them.
fn ann<'a>(s: &'a Secret, k: &str) -> Option<&'a str> {
    s.annotations.get(k).map(String::as_str)
}

/// Checks the newest group (its members with their parsed timestamps, in Secret name order)
/// and decodes it. The checks run in phases (metadata of every chunk, agreement, indices,
/// names, sizes and hashes, then decoding), so which problem is reported does not depend on
/// how the phases are implemented.
fn validate_group(
    uuid: &str,
    chunks: &[(&Secret, Timestamp)],
    lineage: &str,
    limit: usize,
) -> Selection {
    for (s, _) in chunks {
        match s.annotations.get(ANN_FORMAT_VERSION) {
            Some(v) if v == FORMAT_VERSION => {}
            other => {
                return invalid(
                    Reason::UnsupportedFormat,
                    format!(
                    "Secret {} has format version {other:?}; only {FORMAT_VERSION:?} is understood",
                    s.name
                ),
                )
            }
        }
        if let Some(l) = s.annotations.get(ANN_LINEAGE).filter(|l| *l != lineage) {
            return invalid(
                Reason::LineageConflict,
                format!(
                    "Secret {} is labelled lineage {lineage} but annotated lineage {l}",
                    s.name
                ),
            );
        }
        for k in [ANN_COMPOSITION_NAME, ANN_CHUNK_INDEX, ANN_CHUNK_COUNT] {
            if s.annotations.get(k).is_none_or(|v| v.is_empty()) {
                return invalid(
                    Reason::MalformedChunk,
                    format!("Secret {} has no {k} annotation", s.name),
                );
            }
        }
    }
    // Every chunk must agree with the first on the snapshot metadata.
    let (first, first_time) = chunks[0];
    for (s, t) in &chunks[1..] {
        if *t != first_time {
            return invalid(
                Reason::MixedSnapshot,
                format!(
                    "synthesis {uuid}: Secrets {} and {} disagree on {ANN_SYNTHESIZED}",
                    first.name, s.name
                ),
            );
        }
        for k in [
            ANN_CHUNK_COUNT,
            ANN_COMPOSITION_NAME,
            ANN_COMPOSITION_NAMESPACE,
            ANN_SYNTHESIZER_NAME,
            ANN_SNAPSHOT_SHA256,
        ] {
            if ann(s, k) != ann(first, k) {
                return invalid(
                    Reason::MixedSnapshot,
                    format!(
                        "synthesis {uuid}: Secrets {} and {} disagree on {k}",
                        first.name, s.name
                    ),
                );
            }
        }
    }
    let count_raw = ann(first, ANN_CHUNK_COUNT).unwrap_or_default();
    let Some(count) = parse_index(count_raw).filter(|c| *c > 0) else {
        return invalid(
            Reason::MalformedChunk,
            format!("Secret {} has chunk count {count_raw:?}", first.name),
        );
    };
    if count > MAX_CHUNK_COUNT {
        return invalid(
            Reason::TooLarge,
            format!("synthesis {uuid} claims {count} chunks, more than {MAX_CHUNK_COUNT}"),
        );
    }
    let mut slots: Vec<Option<&Secret>> = vec![None; count];
    for (s, _) in chunks {
        let raw = ann(s, ANN_CHUNK_INDEX).unwrap_or_default();
        let Some(i) = parse_index(raw).filter(|i| *i < count) else {
            return invalid(
                Reason::MalformedChunk,
                format!("Secret {} has chunk index {raw:?} (count {count})", s.name),
            );
        };
        if let Some(prev) = slots[i] {
            return invalid(
                Reason::DuplicateChunk,
                format!(
                    "synthesis {uuid}: Secrets {} and {} both hold chunk {i}",
                    prev.name, s.name
                ),
            );
        }
        slots[i] = Some(s);
    }
    let mut ordered: Vec<&Secret> = Vec::with_capacity(count);
    for (i, slot) in slots.iter().enumerate() {
        match slot {
            Some(s) => ordered.push(s),
            None => {
                return invalid(
                    Reason::MissingChunk,
                    format!("synthesis {uuid}: chunk {i} of {count} is missing"),
                )
            }
        }
    }
    let comp_name = ann(first, ANN_COMPOSITION_NAME).unwrap_or_default();
    for (i, s) in ordered.iter().enumerate() {
        let want = secret_name(comp_name, lineage, i);
        if s.name != want {
            return invalid(
                Reason::NameMismatch,
                format!(
                    "Secret {} holds chunk {i} of {comp_name}; expected the name {want}",
                    s.name
                ),
            );
        }
    }
    // One pass over the bytes feeds both hashes; the snapshot hash is compared only after
    // every chunk passed its own checks, as before.
    let snapshot_hash = ann(first, ANN_SNAPSHOT_SHA256);
    let mut snapshot_hasher = snapshot_hash.map(|_| SnapshotHasher::default());
    let mut datas: Vec<&[u8]> = Vec::with_capacity(count);
    for s in &ordered {
        let Some(d) = s.inventory_bytes() else {
            return invalid(
                Reason::MalformedChunk,
                format!("Secret {} has no {DATA_KEY}", s.name),
            );
        };
        if d.len() > limit {
            return invalid(
                Reason::TooLarge,
                format!(
                    "Secret {} holds {} bytes, more than {limit}",
                    s.name,
                    d.len()
                ),
            );
        }
        if let Some(h) = s.annotations.get(ANN_CHUNK_SHA256) {
            let got = chunk_sha256(d);
            if !h.eq_ignore_ascii_case(&got) {
                return invalid(
                    Reason::HashMismatch,
                    format!(
                        "Secret {}: {DATA_KEY} has SHA-256 {got}, annotation says {h}",
                        s.name
                    ),
                );
            }
        }
        if let Some(hasher) = &mut snapshot_hasher {
            hasher.update(d);
        }
        datas.push(d);
    }
    if let (Some(h), Some(hasher)) = (snapshot_hash, snapshot_hasher) {
        let got = hasher.finish();
        if !h.eq_ignore_ascii_case(&got) {
            return invalid(
                Reason::HashMismatch,
                format!("synthesis {uuid}: the chunks hash to {got}, annotation says {h}"),
            );
        }
    }
    // All chunks decode into one vector: no per-chunk vectors to allocate and copy.
    let mut entries = Vec::new();
    for (s, d) in ordered.iter().zip(&datas) {
        if let Err(e) = decode_chunk_into(d, &mut entries) {
            return invalid(Reason::MalformedChunk, format!("Secret {}: {e}", s.name));
        }
    }
    Selection::Selected(Snapshot {
        lineage: lineage.to_string(),
        synthesis_uuid: uuid.to_string(),
        synthesized: first_time,
        composition_name: comp_name.to_string(),
        composition_namespace: ann(first, ANN_COMPOSITION_NAMESPACE)
            .unwrap_or_default()
            .to_string(),
        synthesizer_name: ann(first, ANN_SYNTHESIZER_NAME)
            .unwrap_or_default()
            .to_string(),
        secret_names: ordered.iter().map(|s| s.name.clone()).collect(),
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::secret::{build_snapshot_secrets, SnapshotSource};
    use proptest::prelude::*;

    const L: &str = "0123456789abcdef0123456789abcdef";

    fn entries(n: usize, tag: &str) -> Vec<Entry> {
        (0..n)
            .map(|i| Entry {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("ns".into()),
                name: format!("{tag}-{i:04}"),
                labels: None,
                annotations: None,
            })
            .collect()
    }

    fn snap(uuid: &str, t: &str, comp: &str, e: &[Entry], limit: usize) -> Vec<Secret> {
        let src = SnapshotSource {
            lineage: L.into(),
            composition_name: comp.into(),
            composition_namespace: "ns".into(),
            synthesizer_name: "syn".into(),
            synthesis_uuid: uuid.into(),
            synthesized: Timestamp::parse_rfc3339(t).unwrap(),
        };
        build_snapshot_secrets(&src, e, "kube-system", limit).unwrap()
    }

    fn reason(s: &Selection) -> Option<Reason> {
        match s {
            Selection::Invalid(i) => Some(i.reason),
            _ => None,
        }
    }

    fn sel(secrets: &[Secret]) -> Selection {
        select_with_limit(secrets, L, 1000)
    }

    const T1: &str = "2026-12-02T14:00:00Z";
    const T2: &str = "2026-12-02T14:00:00.5Z";

    #[test]
    fn selects_newest_complete() {
        let old = snap("a", T1, "comp", &entries(30, "old"), 1000);
        let new = snap("b", T2, "comp2", &entries(40, "new"), 1000);
        assert!(new.len() > 2);
        let all: Vec<Secret> = old.iter().chain(&new).cloned().collect();
        let Selection::Selected(s) = sel(&all) else {
            panic!("{:?}", sel(&all))
        };
        assert_eq!(s.synthesis_uuid, "b");
        assert_eq!(s.entries, entries(40, "new"));
        assert_eq!(s.composition_name, "comp2");
        assert_eq!(s.secret_names.len(), new.len());
        assert_eq!(select(&[], L), Selection::None);
        // Other lineages and terminating Secrets are invisible.
        let mut t = new.clone();
        for x in &mut t {
            x.terminating = true;
        }
        assert_eq!(sel(&t), Selection::None);
        let j = sel(&new).inspect_json(Some(&entries(1, "t")));
        assert_eq!(j["outcome"], "selected");
        assert_eq!(j["synthesized"], "2026-12-02T14:00:00.500000000Z");
        assert_eq!(j["tombstones"][0]["name"], "t-0000");
        assert!(j["tombstones"][0].get("labels").is_none());
    }

    #[test]
    fn lists_lineages() {
        let mut s = snap("a", T1, "comp", &entries(1, "x"), 1000);
        let mut other = s[0].clone();
        other.labels.insert(LABEL_LINEAGE.into(), "ffff".into());
        let mut gone = s[0].clone();
        gone.labels.insert(LABEL_LINEAGE.into(), "dead".into());
        gone.terminating = true;
        s.push(other);
        s.push(gone);
        assert_eq!(lineages_in(&s), [L.to_string(), "ffff".to_string()]);
    }

    #[test]
    fn newest_incomplete_never_falls_back() {
        let old = snap("a", T1, "comp", &entries(5, "old"), 1000);
        let mut new = snap("b", T2, "comp", &entries(40, "new"), 1000);
        new.remove(1);
        let all: Vec<Secret> = old.iter().chain(&new).cloned().collect();
        assert_eq!(reason(&sel(&all)), Some(Reason::MissingChunk));
        // A terminating newest chunk counts as missing.
        let mut new = snap("b", T2, "comp", &entries(40, "new"), 1000);
        new[0].terminating = true;
        assert_eq!(reason(&sel(&new)), Some(Reason::MissingChunk));
    }

    #[test]
    fn older_incomplete_groups_are_ignored() {
        let mut old = snap("a", T1, "comp", &entries(40, "old"), 1000);
        old.remove(0);
        let new = snap("b", T2, "comp", &entries(3, "new"), 1000);
        let all: Vec<Secret> = old.iter().chain(&new).cloned().collect();
        assert!(matches!(sel(&all), Selection::Selected(s) if s.synthesis_uuid == "b"));
    }

    #[test]
    fn eno_written_secrets_without_hashes_are_accepted() {
        let mut s = snap("b", T1, "comp", &entries(40, "new"), 1000);
        for x in &mut s {
            x.annotations.remove(ANN_CHUNK_SHA256);
            x.annotations.remove(ANN_SNAPSHOT_SHA256);
            x.annotations.remove(ANN_LINEAGE);
            // Eno writes whole seconds.
            x.annotations
                .insert(ANN_SYNTHESIZED.into(), "2026-12-02T14:00:00Z".into());
        }
        assert!(matches!(sel(&s), Selection::Selected(_)));
    }

    #[test]
    fn every_reason() {
        let base = || snap("b", T2, "comp", &entries(40, "x"), 1000);
        let check = |secrets: Vec<Secret>, want: Reason| {
            assert_eq!(reason(&sel(&secrets)), Some(want), "{:?}", sel(&secrets));
        };
        // DuplicateChunk: chunk 0 stored twice under different names.
        let mut s = base();
        let mut dup = s[0].clone();
        dup.name = "copy".into();
        s.push(dup);
        check(s, Reason::DuplicateChunk);
        // MixedSnapshot: same UUID, different count.
        let mut s = base();
        s[1].annotations.insert(ANN_CHUNK_COUNT.into(), "9".into());
        check(s, Reason::MixedSnapshot);
        // MixedSnapshot: same UUID, different (but parseable) time.
        let mut s = base();
        s[1].annotations.insert(ANN_SYNTHESIZED.into(), T1.into());
        check(s, Reason::MixedSnapshot);
        // MalformedChunk: data not an array of entries (hash annotation removed).
        let mut s = base();
        s[0].data.insert(DATA_KEY.into(), b"{\"x\":1}".to_vec());
        s[0].annotations.remove(ANN_CHUNK_SHA256);
        s.iter_mut().for_each(|x| {
            x.annotations.remove(ANN_SNAPSHOT_SHA256);
        });
        check(s, Reason::MalformedChunk);
        // HashMismatch: a hand edit.
        let mut s = base();
        s[0].data.insert(DATA_KEY.into(), b"[]".to_vec());
        check(s, Reason::HashMismatch);
        // HashMismatch on the snapshot hash only.
        let mut s = base();
        let h = "0".repeat(64);
        s.iter_mut().for_each(|x| {
            x.annotations.insert(ANN_SNAPSHOT_SHA256.into(), h.clone());
        });
        check(s, Reason::HashMismatch);
        // AmbiguousTimestamp: another UUID at the same instant (different precision text).
        let mut s = base();
        let mut other = snap(
            "c",
            "2026-12-02T14:00:00.500000000Z",
            "comp2",
            &entries(1, "y"),
            1000,
        );
        s.append(&mut other);
        check(s, Reason::AmbiguousTimestamp);
        // BadTimestamp, even on an older group.
        let mut s = base();
        let mut older = snap("a", T1, "comp", &entries(1, "y"), 1000);
        older[0]
            .annotations
            .insert(ANN_SYNTHESIZED.into(), "yesterday".into());
        s.append(&mut older);
        check(s, Reason::BadTimestamp);
        // NameMismatch.
        let mut s = base();
        s[0].name = "renamed".into();
        check(s, Reason::NameMismatch);
        // UnsupportedFormat.
        let mut s = base();
        s[2].annotations
            .insert(ANN_FORMAT_VERSION.into(), "2".into());
        check(s, Reason::UnsupportedFormat);
        // TooLarge: a chunk over the limit, or an absurd count.
        let s = snap("b", T2, "comp", &entries(40, "x"), 5000);
        assert_eq!(reason(&sel(&s)), Some(Reason::TooLarge));
        let mut s = snap("b", T2, "comp", &entries(1, "x"), 1000);
        s[0].annotations
            .insert(ANN_CHUNK_COUNT.into(), "100000".into());
        check(s, Reason::TooLarge);
        // LineageConflict: labelled one lineage, annotated another.
        let mut s = base();
        s[0].annotations.insert(ANN_LINEAGE.into(), "ffff".into());
        check(s, Reason::LineageConflict);
        // MalformedChunk: a bad index, no UUID.
        let mut s = base();
        s[0].annotations.insert(ANN_CHUNK_INDEX.into(), "-1".into());
        check(s, Reason::MalformedChunk);
        let mut s = base();
        s[0].annotations.remove(ANN_SYNTHESIS_UUID);
        check(s, Reason::MalformedChunk);
    }

    /// Builds two snapshots A (older) and B (newer) of one Composition, so they share
    /// Secret names, as a non-atomic replacement leaves them.
    fn two_snapshots(na: usize, nb: usize) -> (Vec<Secret>, Vec<Secret>) {
        (
            snap("a", T1, "comp", &entries(na, "a"), 600),
            snap("b", T2, "comp", &entries(nb, "b"), 600),
        )
    }

    proptest! {
        #[test]
        fn independent_of_input_order(
            na in 0usize..40, nb in 0usize..40,
            picks in proptest::collection::vec(0u8..4, 0..20),
            seed in proptest::collection::vec(any::<u32>(), 0..64),
        ) {
            let (a, b) = two_snapshots(na, nb);
            // Mix: for each index take A's, B's, both, or neither.
            let mut input = Vec::new();
            for i in 0..a.len().max(b.len()) {
                let p = picks.get(i).copied().unwrap_or(1);
                if p & 1 == 1 { if let Some(x) = b.get(i) { input.push(x.clone()); } }
                if p & 2 == 2 { if let Some(x) = a.get(i) { input.push(x.clone()); } }
            }
            let expected = sel(&input);
            // Deterministic permutation from the seed.
            let mut shuffled = input.clone();
            for (k, r) in seed.iter().enumerate() {
                if shuffled.len() > 1 {
                    let i = k % shuffled.len();
                    let j = (*r as usize) % shuffled.len();
                    shuffled.swap(i, j);
                }
            }
            prop_assert_eq!(sel(&shuffled), expected.clone());
            shuffled.reverse();
            prop_assert_eq!(sel(&shuffled), expected);
        }

        #[test]
        fn never_selects_a_mixed_snapshot(
            na in 0usize..40, nb in 0usize..40,
            picks in proptest::collection::vec(0u8..4, 0..20),
            swap_data in proptest::collection::vec(any::<bool>(), 0..20),
            strip_hashes in any::<bool>(),
        ) {
            let (a, b) = two_snapshots(na, nb);
            let mut input = Vec::new();
            for i in 0..a.len().max(b.len()) {
                let p = picks.get(i).copied().unwrap_or(1);
                let mut take = |x: Option<&Secret>| {
                    if let Some(x) = x {
                        let mut x = x.clone();
                        // A hand edit / mixed write: the other snapshot's bytes under these annotations.
                        if !strip_hashes && swap_data.get(i).copied().unwrap_or(false) {
                            let other = if x.annotations[ANN_SYNTHESIS_UUID] == "a" { b.get(i) } else { a.get(i) };
                            if let Some(o) = other { x.data = o.data.clone(); }
                        }
                        if strip_hashes {
                            x.annotations.remove(ANN_CHUNK_SHA256);
                            x.annotations.remove(ANN_SNAPSHOT_SHA256);
                        }
                        input.push(x);
                    }
                };
                if p & 1 == 1 { take(b.get(i)); }
                if p & 2 == 2 { take(a.get(i)); }
            }
            if let Selection::Selected(s) = sel(&input) {
                let want = if s.synthesis_uuid == "a" { entries(na, "a") } else { entries(nb, "b") };
                prop_assert_eq!(&s.entries, &want);
                // Selected is always the newest UUID present.
                let newest_present = input.iter().any(|x| x.annotations[ANN_SYNTHESIS_UUID] == "b");
                prop_assert_eq!(s.synthesis_uuid == "b", newest_present);
            }
        }
    }
}
