//! Chunking: packing an inventory into Secret-sized JSON arrays, and naming the chunks.
//!
//! Packing is greedy over the sorted entries, so the same inventory always yields the same
//! chunks (and the recorder can skip unchanged Secrets byte for byte). Whole entries only:
//! a chunk is itself a valid `inventory.json`.

use super::entry::{Entry, EntryError};
use thiserror::Error;

/// Kubernetes' limit on a Secret's data, counted on decoded bytes.
pub const DEFAULT_CHUNK_LIMIT: usize = 1_048_576;
/// Longest object name (DNS-1123 subdomain).
pub const MAX_NAME_LEN: usize = 253;

/// Why an inventory cannot be chunked.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ChunkError {
    /// One entry alone does not fit in a chunk; we never drop entries silently.
    #[error("entry {kind} {name:?} needs {size} bytes, more than the chunk limit of {limit}")]
    TooLarge {
        /// Kind of the offending entry.
        kind: String,
        /// Name of the offending entry.
        name: String,
        /// Bytes it needs as `[entry]`.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The limit cannot even hold `[]`.
    #[error("chunk limit {0} is below the 2 bytes of an empty array")]
    LimitTooSmall(usize),
    /// serde_json failed (not expected for these types).
    #[error("cannot serialise entry: {0}")]
    Serialize(String),
}

/// Packs `entries` (in the given order; pass [`super::entry::normalize`]d entries) into JSON
/// arrays of at most `limit` bytes each. An empty inventory is one chunk `[]`.
pub fn chunk_entries(entries: &[Entry], limit: usize) -> Result<Vec<Vec<u8>>, ChunkError> {
    if limit < 2 {
        return Err(ChunkError::LimitTooSmall(limit));
    }
    let mut chunks = Vec::new();
    let mut cur: Vec<u8> = Vec::with_capacity(limit.min(64 * 1024));
    cur.push(b'[');
    let mut item = Vec::with_capacity(256);
    for e in entries {
        item.clear();
        serde_json::to_writer(&mut item, e).map_err(|e| ChunkError::Serialize(e.to_string()))?;
        if item.len() + 2 > limit {
            return Err(ChunkError::TooLarge {
                kind: e.kind.clone(),
                name: e.name.clone(),
                size: item.len() + 2,
                limit,
            });
        }
        let has_items = cur.len() > 1;
        let need = cur.len() + usize::from(has_items) + item.len() + 1;
        if need > limit {
            cur.push(b']');
            chunks.push(std::mem::replace(
                &mut cur,
                Vec::with_capacity(limit.min(64 * 1024)),
            ));
            cur.push(b'[');
        } else if has_items {
            cur.push(b',');
        }
        cur.extend_from_slice(&item);
    }
    cur.push(b']');
    chunks.push(cur);
    Ok(chunks)
}

/// Why a chunk read back from a Secret could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeChunkError {
    /// Not a JSON array of entries; carries serde_json's message.
    #[error("not a JSON array of entries: {0}")]
    NotEntries(String),
    /// An entry that fails [`Entry::validate`].
    #[error(transparent)]
    Invalid(#[from] EntryError),
}

/// Decodes one chunk: a JSON array of valid entries.
pub fn decode_chunk(bytes: &[u8]) -> Result<Vec<Entry>, DecodeChunkError> {
    let mut entries = Vec::new();
    decode_chunk_into(bytes, &mut entries)?;
    Ok(entries)
}

/// [`decode_chunk`] appending to `out`, so that selection builds a snapshot's entries in one
/// vector instead of decoding every chunk into its own and copying it over. Returns how many
/// entries were appended; on error `out` is left as it was.
///
/// Accepts and rejects exactly what `serde_json::from_slice::<Vec<Entry>>` followed by
/// [`Entry::validate`] on every entry does, with the same error for the same input: syntax
/// and type errors are reported before any entry is validated.
pub fn decode_chunk_into(bytes: &[u8], out: &mut Vec<Entry>) -> Result<usize, DecodeChunkError> {
    let start = out.len();
    let parsed = match std::str::from_utf8(bytes) {
        // One UTF-8 check over the chunk lets serde_json skip re-checking every string.
        Ok(text) => append_entries(&mut serde_json::Deserializer::from_str(text), out),
        // The byte reader accepts some non-UTF-8 input (inside ignored fields); keep its
        // verdict and its message rather than rejecting more than before.
        Err(_) => append_entries(&mut serde_json::Deserializer::from_slice(bytes), out),
    };
    let checked = parsed
        .map_err(|e| DecodeChunkError::NotEntries(e.to_string()))
        .and_then(|()| {
            out[start..]
                .iter()
                .try_for_each(Entry::validate)
                .map_err(DecodeChunkError::from)
        });
    match checked {
        Ok(()) => Ok(out.len() - start),
        Err(e) => {
            out.truncate(start);
            Err(e)
        }
    }
}

/// Deserialises one JSON array of entries onto the end of `out`, then requires the end of
/// input, as `serde_json::from_slice` does.
fn append_entries<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    out: &mut Vec<Entry>,
) -> Result<(), serde_json::Error> {
    serde::de::DeserializeSeed::deserialize(AppendEntries(out), &mut *de)?;
    de.end()
}

/// A sequence visitor that pushes each entry onto a borrowed vector.
struct AppendEntries<'a>(&'a mut Vec<Entry>);

impl<'de> serde::de::DeserializeSeed<'de> for AppendEntries<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for AppendEntries<'_> {
    type Value = ();

    // Same wording as serde's `Vec<T>` visitor, so error messages do not change.
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<Entry>()? {
            self.0.push(e);
        }
        Ok(())
    }
}

/// `<comp-name>-<lineage>-<index>`, with the Composition name cut so the whole name fits
/// 253 characters, and any `-`/`.` left at the cut removed so it stays DNS-1123 valid.
pub fn secret_name(composition_name: &str, lineage: &str, index: usize) -> String {
    let suffix = format!("-{lineage}-{index}");
    let room = MAX_NAME_LEN.saturating_sub(suffix.len());
    let mut cut = composition_name;
    if cut.len() > room {
        // Names are ASCII (DNS-1123); floor to a char boundary anyway to never panic.
        let mut end = room;
        while !cut.is_char_boundary(end) {
            end -= 1;
        }
        cut = &cut[..end];
    }
    let cut = cut.trim_end_matches(['-', '.']);
    format!("{cut}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(i: usize, pad: usize) -> Entry {
        Entry {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: Some("ns".into()),
            name: format!("d{i:06}{}", "x".repeat(pad)),
            labels: None,
            annotations: None,
        }
    }

    #[test]
    fn empty_is_one_empty_array() {
        assert_eq!(
            chunk_entries(&[], DEFAULT_CHUNK_LIMIT).unwrap(),
            vec![b"[]".to_vec()]
        );
    }

    #[test]
    fn too_large_entry_is_an_error() {
        let e = entry(0, 200);
        assert!(matches!(
            chunk_entries(&[e], 100),
            Err(ChunkError::TooLarge { limit: 100, .. })
        ));
        assert_eq!(chunk_entries(&[], 1), Err(ChunkError::LimitTooSmall(1)));
    }

    #[test]
    fn exact_fit() {
        let e = entry(0, 0);
        let one = serde_json::to_vec(&e).unwrap().len();
        let c = chunk_entries(&[e.clone(), e.clone()], 2 * one + 3).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].len(), 2 * one + 3);
        let c = chunk_entries(&[e.clone(), e], 2 * one + 2).unwrap();
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn decode_keeps_the_byte_readers_verdict_on_non_utf8() {
        // serde_json's byte reader skips an ignored string without checking its UTF-8.
        let raw = b"[{\"version\":\"v1\",\"kind\":\"K\",\"name\":\"n\",\"x\":\"\xff\"}]";
        let from_slice = serde_json::from_slice::<Vec<Entry>>(raw).map_err(|e| e.to_string());
        let got = decode_chunk(raw);
        assert_eq!(
            got.as_ref().map(Vec::len).map_err(ToString::to_string),
            from_slice
                .as_ref()
                .map(Vec::len)
                .map_err(ToString::to_string)
        );
        // In a field that is kept, it is an error either way.
        let raw = b"[{\"version\":\"v1\",\"kind\":\"K\",\"name\":\"\xff\"}]";
        assert!(serde_json::from_slice::<Vec<Entry>>(raw).is_err());
        assert!(decode_chunk(raw).is_err());
    }

    #[test]
    fn names_are_cut_to_253() {
        let l = "0123456789abcdef0123456789abcdef";
        assert_eq!(secret_name("comp", l, 0), format!("comp-{l}-0"));
        let long = "a".repeat(300);
        let n = secret_name(&long, l, 12);
        assert_eq!(n.len(), 253);
        assert!(n.ends_with(&format!("-{l}-12")));
        // A cut landing on '-' or '.' drops them.
        let tricky = format!("{}-.-{}", "b".repeat(215), "c".repeat(40));
        let n = secret_name(&tricky, l, 3);
        assert!(n.len() <= 253);
        assert!(n.starts_with(&format!("{}-{l}", "b".repeat(215))), "{n}");
    }

    proptest! {
        #[test]
        fn round_trip_and_limit(n in 0usize..200, pads in proptest::collection::vec(0usize..300, 0..200), limit in 400usize..4000) {
            let entries: Vec<Entry> = (0..n).map(|i| entry(i, pads.get(i).copied().unwrap_or(0))).collect();
            let chunks = chunk_entries(&entries, limit).unwrap();
            prop_assert!(!chunks.is_empty());
            let mut back = Vec::new();
            for c in &chunks {
                prop_assert!(c.len() <= limit);
                back.extend(decode_chunk(c).unwrap());
            }
            prop_assert_eq!(back, entries);
            // Greedy: no chunk could have taken the next chunk's first entry.
            for w in chunks.windows(2) {
                let first = decode_chunk(&w[1]).unwrap().remove(0);
                let add = serde_json::to_vec(&first).unwrap().len() + 1;
                prop_assert!(w[0].len() + add > limit);
            }
        }

        /// `decode_chunk_into` is `from_slice` + `validate`, message for message, on damaged
        /// chunks too (bit flips can make invalid UTF-8 that the byte reader still accepts in
        /// an ignored field), and appends without disturbing what `out` held.
        #[test]
        fn decode_into_matches_from_slice(
            n in 0usize..6,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            extra in prop_oneof![Just(""), Just(",\"x\":\"\u{e9}\""), Just(",\"x\":\"\\ud800\""), Just(",\"version\":\"\"")],
        ) {
            let entries: Vec<Entry> = (0..n).map(|i| entry(i, 0)).collect();
            let mut bytes = serde_json::to_vec(&entries).unwrap();
            if n > 0 {
                // An extra field in the first entry: unknown (ignored), or a duplicate/invalid one.
                let at = bytes.iter().position(|b| *b == b'}').unwrap();
                bytes.splice(at..at, extra.bytes());
            }
            for (at, x) in &flips {
                if !bytes.is_empty() {
                    let i = at % bytes.len();
                    bytes[i] ^= x;
                }
            }
            let reference = serde_json::from_slice::<Vec<Entry>>(&bytes)
                .map_err(|e| format!("not a JSON array of entries: {e}"))
                .and_then(|v| {
                    v.iter()
                        .try_for_each(Entry::validate)
                        .map_err(|e| e.to_string())
                        .map(|()| v)
                });
            let prior = vec![entry(99, 1)];
            let mut out = prior.clone();
            match decode_chunk_into(&bytes, &mut out) {
                Ok(k) => {
                    let v = reference.unwrap();
                    prop_assert_eq!(k, v.len());
                    prop_assert_eq!(&out[..1], &prior[..]);
                    prop_assert_eq!(&out[1..], &v[..]);
                }
                Err(e) => {
                    prop_assert_eq!(Err(e.to_string()), reference);
                    prop_assert_eq!(out, prior);
                }
            }
        }

        #[test]
        fn names_always_valid(name in "[a-z0-9]([-a-z0-9.]{0,260}[a-z0-9])?", idx in 0usize..100_000) {
            let n = secret_name(&name, "0123456789abcdef0123456789abcdef", idx);
            prop_assert!(n.len() <= MAX_NAME_LEN);
            let first = n.as_bytes()[0];
            prop_assert!(first.is_ascii_alphanumeric() || first == b'-');
            prop_assert!(!n.contains("-.-") || name.contains("-.-"));
        }
    }
}
