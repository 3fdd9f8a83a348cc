//! `inventory_select`: arbitrary inventory Secrets against the selection rules.
//!
//! Input: a few snapshots built the way the recorder builds them, then damaged by arbitrary
//! mutations (dropped, duplicated, renamed, re-annotated, bit-flipped, terminating chunks),
//! plus arbitrary extra Secrets. Properties, checked by an independent reading of
//! README "Inventory snapshots" and docs/design.md "Inventory recovery":
//! - a selected snapshot is complete and consistent: exactly the live chunks of one UUID,
//!   indices `0..count` once each, names matching, metadata identical on every chunk, hashes
//!   matching when present, entries equal to the decoded chunks in index order (never mixed);
//! - it is strictly the newest group and every live Secret's timestamp parses;
//! - with no damage at all, the newest snapshot is selected with exactly its entries (or the
//!   outcome is `AmbiguousTimestamp` when two syntheses share the newest instant);
//! - the result does not depend on input order, nor on Secrets of other lineages;
//! - tombstones never include a present identity and only come from the selected snapshot.

use arbitrary::{Arbitrary, Unstructured};
use std::collections::{BTreeMap, BTreeSet};
use tidemark_core::inventory::chunk::decode_chunk;
use tidemark_core::inventory::entry::normalize;
use tidemark_core::inventory::secret::{chunk_sha256, snapshot_sha256};
use tidemark_core::inventory::select::select_with_limit;
use tidemark_core::inventory::*;

const LINEAGE: &str = "0123456789abcdef0123456789abcdef";
const OTHER_LINEAGE: &str = "fedcba9876543210fedcba9876543210";

const ANNS: [&str; 12] = [
    ANN_FORMAT_VERSION,
    ANN_COMPOSITION_NAME,
    ANN_COMPOSITION_NAMESPACE,
    ANN_SYNTHESIZER_NAME,
    ANN_SYNTHESIS_UUID,
    ANN_SYNTHESIZED,
    ANN_CHUNK_INDEX,
    ANN_CHUNK_COUNT,
    ANN_CHUNK_SHA256,
    ANN_SNAPSHOT_SHA256,
    ANN_LINEAGE,
    "unrelated.example/annotation",
];

#[derive(Debug, Arbitrary)]
struct Plan {
    limit: u8,
    snaps: Vec<SnapSpec>,
    extras: Vec<RawSecret>,
    mutations: Vec<Mutation>,
    perm: Vec<u8>,
    present: Vec<u8>,
}

#[derive(Debug, Arbitrary)]
struct SnapSpec {
    uuid: u8,
    secs: u8,
    nanos: u16,
    comp: u8,
    entries: Vec<EntrySpec>,
}

#[derive(Debug, Arbitrary)]
struct EntrySpec {
    group: u8,
    kind: u8,
    ns: Option<u8>,
    name: u8,
    deletion_group: Option<i8>,
}

#[derive(Debug, Arbitrary)]
struct RawSecret {
    name: String,
    our_lineage: bool,
    annotations: Vec<(u8, String)>,
    data: Option<Vec<u8>>,
    terminating: bool,
}

#[derive(Debug, Arbitrary)]
enum Mutation {
    Drop(u8),
    Duplicate(u8, u8),
    SetAnnotation(u8, u8, String),
    CopyAnnotation { from: u8, to: u8, key: u8 },
    RemoveAnnotation(u8, u8),
    FlipData(u8, u16, u8),
    ReplaceData(u8, Vec<u8>),
    Terminate(u8),
    Rename(u8, String),
    Relabel(u8),
}

fn entry(s: &EntrySpec) -> Entry {
    Entry {
        group: ["", "apps", "eno.azure.io"][usize::from(s.group % 3)].into(),
        version: "v1".into(),
        kind: ["ConfigMap", "Deployment", "Secret", "Service"][usize::from(s.kind % 4)].into(),
        namespace: s.ns.map(|n| format!("ns{}", n % 3)),
        name: format!("r{}", s.name % 16),
        labels: None,
        annotations: s
            .deletion_group
            .map(|g| BTreeMap::from([(ANN_DELETION_GROUP.to_string(), g.to_string())])),
    }
}

/// A built (undamaged) snapshot, for the "clean input" property.
struct Built {
    uuid: String,
    time: Timestamp,
    entries: Vec<Entry>,
    secrets: Vec<Secret>,
}

pub fn run(data: &[u8]) {
    let Ok(plan) = Plan::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    // The largest entry here (a namespaced, annotated Deployment) needs about 130 bytes.
    let limit = 200 + usize::from(plan.limit) * 4;
    let mut built: Vec<Built> = Vec::new();
    for s in plan.snaps.iter().take(4) {
        let entries = normalize(s.entries.iter().take(24).map(entry).collect());
        let uuid = format!("uuid-{}", s.uuid % 5);
        let time = Timestamp::from_unix_nanos(
            1_790_000_000_000_000_000
                + i128::from(s.secs % 6) * 1_000_000_000
                + i128::from(s.nanos % 3),
        );
        let src = SnapshotSource {
            lineage: LINEAGE.into(),
            composition_name: format!("comp-{}", s.comp % 3),
            composition_namespace: "ns".into(),
            synthesizer_name: "syn".into(),
            synthesis_uuid: uuid.clone(),
            synthesized: time,
        };
        let secrets = build_snapshot_secrets(&src, &entries, "kube-system", limit)
            .expect("entries of this size always fit a chunk");
        built.push(Built {
            uuid,
            time,
            entries,
            secrets,
        });
    }
    let mut secrets: Vec<Secret> = built.iter().flat_map(|b| b.secrets.clone()).collect();
    for x in plan.extras.iter().take(4) {
        let lineage = if x.our_lineage {
            LINEAGE
        } else {
            OTHER_LINEAGE
        };
        secrets.push(Secret {
            name: x.name.clone(),
            namespace: "kube-system".into(),
            terminating: x.terminating,
            labels: BTreeMap::from([(LABEL_LINEAGE.to_string(), lineage.to_string())]),
            annotations: x
                .annotations
                .iter()
                .take(12)
                .map(|(k, v)| (ANNS[usize::from(*k) % ANNS.len()].to_string(), v.clone()))
                .collect(),
            data: x
                .data
                .iter()
                .map(|d| (DATA_KEY.to_string(), d.clone()))
                .collect(),
            ..Secret::default()
        });
    }
    let damaged = !plan.extras.is_empty() || !plan.mutations.is_empty();
    for m in plan.mutations.iter().take(6) {
        mutate(&mut secrets, m);
    }

    let result = select_with_limit(&secrets, LINEAGE, limit);
    check_selection(&secrets, &result, limit);

    // Clean input: the newest snapshot wins, with exactly its entries.
    let uuids: BTreeSet<&str> = built.iter().map(|b| b.uuid.as_str()).collect();
    if !damaged && !built.is_empty() && uuids.len() == built.len() {
        let newest = built.iter().map(|b| b.time).max().unwrap();
        let at_newest: Vec<&Built> = built.iter().filter(|b| b.time == newest).collect();
        if at_newest.len() > 1 {
            assert!(
                matches!(&result, Selection::Invalid(i) if i.reason == Reason::AmbiguousTimestamp),
                "tie at the newest instant must be AmbiguousTimestamp, got {result:?}"
            );
        } else {
            let Selection::Selected(s) = &result else {
                panic!("clean history, newest snapshot not selected: {result:?}");
            };
            assert_eq!(s.synthesis_uuid, at_newest[0].uuid);
            assert_eq!(
                s.entries, at_newest[0].entries,
                "entries differ from what was recorded"
            );
            assert_eq!(s.secret_names.len(), at_newest[0].secrets.len());
        }
    }

    // Order independence, and other lineages are invisible.
    if !secrets.is_empty() {
        let mut shuffled = secrets.clone();
        for (i, p) in plan.perm.iter().take(64).enumerate() {
            let n = shuffled.len();
            shuffled.swap(i % n, usize::from(*p) % n);
        }
        shuffled.push(Secret {
            name: "stranger".into(),
            labels: BTreeMap::from([(LABEL_LINEAGE.to_string(), OTHER_LINEAGE.to_string())]),
            ..Secret::default()
        });
        assert_eq!(
            select_with_limit(&shuffled, LINEAGE, limit),
            result,
            "selection depends on input order or on another lineage"
        );
    }

    // Tombstones.
    if let Selection::Selected(s) = &result {
        let present: BTreeSet<Identity> = plan
            .present
            .iter()
            .take(16)
            .filter_map(|i| s.entries.get(usize::from(*i) % s.entries.len().max(1)))
            .map(Entry::identity)
            .collect();
        let t = tombstones(&s.entries, &present);
        let selected: BTreeSet<Identity> = s.entries.iter().map(Entry::identity).collect();
        for e in &t {
            assert!(
                !present.contains(&e.identity()),
                "tombstone of a present resource"
            );
            assert!(
                selected.contains(&e.identity()),
                "tombstone not from the snapshot"
            );
        }
        assert_eq!(t.len() + present.len(), selected.len());
        assert_eq!(deletion_order(&t).len(), t.len());
    }
}

fn pick(n: usize, i: u8) -> Option<usize> {
    (n > 0).then(|| usize::from(i) % n)
}

fn mutate(secrets: &mut Vec<Secret>, m: &Mutation) {
    let n = secrets.len();
    match m {
        Mutation::Drop(i) => {
            if let Some(i) = pick(n, *i) {
                secrets.remove(i);
            }
        }
        Mutation::Duplicate(i, suffix) => {
            if let Some(i) = pick(n, *i) {
                let mut s = secrets[i].clone();
                if suffix % 2 == 1 {
                    s.name.push_str("-copy");
                }
                secrets.push(s);
            }
        }
        Mutation::SetAnnotation(i, k, v) => {
            if let Some(i) = pick(n, *i) {
                let key = ANNS[usize::from(*k) % ANNS.len()];
                secrets[i].annotations.insert(key.into(), v.clone());
            }
        }
        Mutation::CopyAnnotation { from, to, key } => {
            if let (Some(f), Some(t)) = (pick(n, *from), pick(n, *to)) {
                let key = ANNS[usize::from(*key) % ANNS.len()];
                match secrets[f].annotations.get(key).cloned() {
                    Some(v) => secrets[t].annotations.insert(key.into(), v),
                    None => secrets[t].annotations.remove(key),
                };
            }
        }
        Mutation::RemoveAnnotation(i, k) => {
            if let Some(i) = pick(n, *i) {
                secrets[i]
                    .annotations
                    .remove(ANNS[usize::from(*k) % ANNS.len()]);
            }
        }
        Mutation::FlipData(i, pos, byte) => {
            if let Some(i) = pick(n, *i) {
                if let Some(d) = secrets[i].data.get_mut(DATA_KEY) {
                    if !d.is_empty() {
                        let p = usize::from(*pos) % d.len();
                        d[p] ^= byte | 1;
                    }
                }
            }
        }
        Mutation::ReplaceData(i, bytes) => {
            if let Some(i) = pick(n, *i) {
                secrets[i].data.insert(DATA_KEY.into(), bytes.clone());
            }
        }
        Mutation::Terminate(i) => {
            if let Some(i) = pick(n, *i) {
                secrets[i].terminating = true;
            }
        }
        Mutation::Rename(i, name) => {
            if let Some(i) = pick(n, *i) {
                secrets[i].name = name.clone();
            }
        }
        Mutation::Relabel(i) => {
            if let Some(i) = pick(n, *i) {
                secrets[i]
                    .labels
                    .insert(LABEL_LINEAGE.into(), OTHER_LINEAGE.into());
            }
        }
    }
}

/// Strict decimal, as selection reads indices and counts.
fn index(s: &str) -> Option<usize> {
    if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn check_selection(secrets: &[Secret], result: &Selection, limit: usize) {
    let live: Vec<&Secret> = secrets
        .iter()
        .filter(|s| {
            !s.terminating && s.labels.get(LABEL_LINEAGE).map(String::as_str) == Some(LINEAGE)
        })
        .collect();
    if live.is_empty() {
        assert_eq!(*result, Selection::None, "no live Secrets but {result:?}");
        return;
    }
    assert_ne!(
        *result,
        Selection::None,
        "live Secrets exist but selection is None"
    );
    let Selection::Selected(s) = result else {
        return;
    };
    assert_eq!(s.lineage, LINEAGE);
    // Every live Secret is orderable, and the selected UUID is strictly newest.
    let mut newest_other: Option<Timestamp> = None;
    for x in &live {
        let uuid = x
            .annotations
            .get(ANN_SYNTHESIS_UUID)
            .expect("selected despite a Secret without UUID");
        assert!(!uuid.is_empty());
        let t = x
            .annotations
            .get(ANN_SYNTHESIZED)
            .and_then(|t| Timestamp::parse_rfc3339(t).ok())
            .expect("selected despite an unparseable timestamp");
        if *uuid != s.synthesis_uuid {
            newest_other = Some(newest_other.map_or(t, |o| o.max(t)));
        }
    }
    if let Some(o) = newest_other {
        assert!(
            o < s.synthesized,
            "selected {} but another synthesis is as new",
            s.synthesis_uuid
        );
    }
    // The group: complete, consistent, never mixed.
    let group: Vec<&Secret> = live
        .iter()
        .copied()
        .filter(|x| x.annotations.get(ANN_SYNTHESIS_UUID) == Some(&s.synthesis_uuid))
        .collect();
    let first = group[0];
    let count = index(&first.annotations[ANN_CHUNK_COUNT]).expect("count parses");
    assert!(count > 0);
    assert_eq!(
        group.len(),
        count,
        "selected group has {} chunks, count {count}",
        group.len()
    );
    assert_eq!(s.secret_names.len(), count);
    let mut by_index: BTreeMap<usize, &Secret> = BTreeMap::new();
    for x in &group {
        assert_eq!(
            x.annotations.get(ANN_FORMAT_VERSION).map(String::as_str),
            Some(FORMAT_VERSION)
        );
        if let Some(l) = x.annotations.get(ANN_LINEAGE) {
            assert_eq!(l, LINEAGE, "chunk annotated with another lineage");
        }
        for k in [
            ANN_CHUNK_COUNT,
            ANN_COMPOSITION_NAME,
            ANN_COMPOSITION_NAMESPACE,
            ANN_SYNTHESIZER_NAME,
            ANN_SNAPSHOT_SHA256,
        ] {
            assert_eq!(
                x.annotations.get(k),
                first.annotations.get(k),
                "mixed snapshot on {k}"
            );
        }
        let t = Timestamp::parse_rfc3339(&x.annotations[ANN_SYNTHESIZED]).unwrap();
        assert_eq!(t, s.synthesized, "mixed timestamps in the selected group");
        let i = index(&x.annotations[ANN_CHUNK_INDEX]).expect("index parses");
        assert!(by_index.insert(i, x).is_none(), "chunk {i} twice");
    }
    assert_eq!(
        by_index.keys().copied().collect::<Vec<_>>(),
        (0..count).collect::<Vec<_>>(),
        "indices are not 0..count"
    );
    let comp = &first.annotations[ANN_COMPOSITION_NAME];
    assert_eq!(&s.composition_name, comp);
    let mut entries = Vec::new();
    let mut datas: Vec<&[u8]> = Vec::new();
    for (i, x) in &by_index {
        assert_eq!(x.name, secret_name(comp, LINEAGE, *i), "name mismatch");
        assert_eq!(s.secret_names[*i], x.name);
        let d = x.data.get(DATA_KEY).expect("selected chunk without data");
        assert!(d.len() <= limit);
        if let Some(h) = x.annotations.get(ANN_CHUNK_SHA256) {
            assert!(
                h.eq_ignore_ascii_case(&chunk_sha256(d)),
                "chunk hash mismatch accepted"
            );
        }
        datas.push(d);
        entries.extend(decode_chunk(d).expect("selected chunk does not decode"));
    }
    if let Some(h) = first.annotations.get(ANN_SNAPSHOT_SHA256) {
        assert!(
            h.eq_ignore_ascii_case(&snapshot_sha256(datas.iter().copied())),
            "snapshot hash mismatch accepted"
        );
    }
    assert_eq!(
        s.entries, entries,
        "entries are not the chunks in index order"
    );
}
