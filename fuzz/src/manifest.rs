//! `manifest_parse`: ResourceSlice manifests and kubectl output are untrusted strings.
//!
//! Input: pieces separated by `0xFF` (never valid UTF-8, so it cannot occur inside a
//! manifest); a piece starting with `!` is an Eno tombstone (`deleted: true`). Every four
//! pieces form one ResourceSlice. The whole input is also read as a kube JSON document
//! (Secret, Composition, ResourceSlice, Synthesis, List).
//!
//! Properties: nothing panics; the inventory is sorted, deduped and made of valid entries;
//! every inventory identity is present (so tombstones against the same synthesis are empty);
//! the inventory chunks and decodes back to itself; Patch targets never become entries.

use std::collections::BTreeSet;
use tidemark_core::inventory::chunk::{chunk_entries, decode_chunk, ChunkError};
use tidemark_core::inventory::entry::{normalize, parse_manifest, ParsedManifest};
use tidemark_core::inventory::view::{list_items, SliceResource, SliceView};
use tidemark_core::inventory::*;

pub fn run(data: &[u8]) {
    kube_documents(data);
    let mut resources = Vec::new();
    for piece in data.split(|b| *b == 0xFF).take(64) {
        let Ok(text) = std::str::from_utf8(piece) else {
            continue;
        };
        let (deleted, manifest) = match text.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        if let Ok(ParsedManifest::Resource(e)) = parse_manifest(manifest) {
            e.validate()
                .unwrap_or_else(|why| panic!("parse_manifest produced an invalid entry: {why}"));
            let _ = (e.resource_id().api_version(), effective_deletion_group(&e));
        }
        resources.push(SliceResource {
            manifest: manifest.to_string(),
            deleted,
        });
    }
    let slices: Vec<SliceView> = resources
        .chunks(4)
        .enumerate()
        .map(|(i, r)| SliceView {
            name: format!("slice-{i}"),
            terminating: false,
            resources: r.to_vec(),
        })
        .collect();
    let (Ok(entries), Ok(present)) = (entries_from_slices(&slices), present_identities(&slices))
    else {
        return;
    };
    assert_eq!(
        normalize(entries.clone()),
        entries,
        "inventory not sorted and deduped"
    );
    let ids: BTreeSet<Identity> = entries.iter().map(Entry::identity).collect();
    assert_eq!(
        ids.len(),
        entries.len(),
        "duplicate identity in the inventory"
    );
    for e in &entries {
        e.validate().expect("inventory entry is invalid");
        assert!(
            present.contains(&e.identity()),
            "inventory entry not present"
        );
        assert!(
            !(e.group == "eno.azure.io" && e.version == "v1" && e.kind == "Patch"),
            "a Patch became an entry"
        );
    }
    assert!(
        tombstones(&entries, &present).is_empty(),
        "tombstones against the synthesis itself"
    );
    for limit in [256, DEFAULT_CHUNK_LIMIT] {
        match chunk_entries(&entries, limit) {
            Ok(chunks) => {
                let mut back = Vec::new();
                for c in &chunks {
                    assert!(c.len() <= limit, "chunk over the limit");
                    back.extend(decode_chunk(c).expect("a chunk we wrote does not decode"));
                }
                assert_eq!(back, entries, "chunking does not round-trip");
            }
            Err(ChunkError::TooLarge { size, .. }) => assert!(size > limit),
            Err(e) => panic!("chunking failed: {e}"),
        }
    }
}

fn kube_documents(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for item in list_items(&v) {
        let _ = Secret::from_kube_json(item).map(|s| s.to_kube_json());
        let _ = CompositionView::from_kube_json(item).map(|c| lineage_of(&c));
        let _ = SliceView::from_kube_json(item);
        let _ = SynthesisView::from_kube_json(item);
        let _ = ObjectView::from_kube_json(item);
    }
    let _ = decode_chunk(data);
    if let Some(s) = v.as_str() {
        let _ = Timestamp::parse_rfc3339(s).map(|t| t.format_rfc3339_nanos());
        let _ = Decision::parse(s);
    }
}
