//! Key rewriting and scan windows.
//!
//! One anchored formula: `key' = target.prefix + destPrefix + strip_prefix(key, source.prefix)`.
//! `excludePrefixes` (source-relative) are elided from every scan by splitting the range
//! into windows that never overlap an excluded range, and the fence key is excluded by
//! exact match everywhere.

use crate::config::MirrorConfig;
use crate::etcd::prefix_end;
use sha2::{Digest, Sha256};

/// A half-open key window `[start, end)`. `end == [0]` means "to the end of the keyspace"
/// (etcd's spelling), and an empty `start` is written as `[0]` for the same reason.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Window {
    pub start: Vec<u8>,
    pub end: Vec<u8>,
}

impl Window {
    /// Whether `key` falls inside the window.
    pub fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && before_end(key, &self.end)
    }
}

/// `key < end`, where `end == [0]` is +infinity.
pub fn before_end(key: &[u8], end: &[u8]) -> bool {
    end == [0] || key < end
}

/// The key space of one link: what is in scope, where it goes, and what to skip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpace {
    source_prefix: Vec<u8>,
    target_base: Vec<u8>,
    /// Source-relative excluded prefixes, sorted, none a prefix of another.
    excludes: Vec<Vec<u8>>,
    checkpoint: Vec<u8>,
}

impl KeySpace {
    /// Builds the key space of a (validated) config.
    pub fn new(cfg: &MirrorConfig) -> KeySpace {
        let mut ex: Vec<Vec<u8>> = cfg
            .sync
            .exclude_prefixes
            .iter()
            .filter(|e| !e.is_empty())
            .map(|e| e.as_bytes().to_vec())
            .collect();
        ex.sort();
        let mut excludes: Vec<Vec<u8>> = Vec::new();
        for e in ex {
            if !excludes.iter().any(|kept| e.starts_with(kept)) {
                excludes.push(e);
            }
        }
        KeySpace {
            source_prefix: cfg.source.prefix.as_bytes().to_vec(),
            target_base: cfg.target_base(),
            excludes,
            checkpoint: cfg.checkpoint_key(),
        }
    }

    /// The fence key.
    pub fn checkpoint_key(&self) -> &[u8] {
        &self.checkpoint
    }

    /// `target.prefix + destPrefix`.
    pub fn target_base(&self) -> &[u8] {
        &self.target_base
    }

    /// `source.prefix`.
    pub fn source_prefix(&self) -> &[u8] {
        &self.source_prefix
    }

    /// Whether `target_key` is the fence (excluded by exact match everywhere).
    pub fn is_checkpoint(&self, target_key: &[u8]) -> bool {
        target_key == self.checkpoint.as_slice()
    }

    fn excluded_rel(&self, rel: &[u8]) -> bool {
        self.excludes.iter().any(|e| rel.starts_with(e))
    }

    /// The whole source range `[key, range_end)` the watch covers.
    pub fn source_range(&self) -> (Vec<u8>, Vec<u8>) {
        range_of(&self.source_prefix)
    }

    /// The whole target range `[key, range_end)` the mirror owns.
    pub fn target_range(&self) -> (Vec<u8>, Vec<u8>) {
        range_of(&self.target_base)
    }

    /// Whether a source key is mirrored.
    pub fn in_scope(&self, source_key: &[u8]) -> bool {
        self.rewrite(source_key).is_some()
    }

    /// The target key for a source key; `None` when it is out of range, excluded, or
    /// would land on the fence key.
    pub fn rewrite(&self, source_key: &[u8]) -> Option<Vec<u8>> {
        let rel = source_key.strip_prefix(self.source_prefix.as_slice())?;
        if self.excluded_rel(rel) {
            return None;
        }
        let mut out = Vec::with_capacity(self.target_base.len() + rel.len());
        out.extend_from_slice(&self.target_base);
        out.extend_from_slice(rel);
        if out == self.checkpoint {
            return None;
        }
        Some(out)
    }

    /// The source key a target key mirrors; `None` for the fence, keys outside the target
    /// range, and keys under an excluded prefix (those are not ours to touch).
    pub fn unrewrite(&self, target_key: &[u8]) -> Option<Vec<u8>> {
        if self.is_checkpoint(target_key) {
            return None;
        }
        let rel = target_key.strip_prefix(self.target_base.as_slice())?;
        if self.excluded_rel(rel) {
            return None;
        }
        let mut out = self.source_prefix.clone();
        out.extend_from_slice(rel);
        Some(out)
    }

    /// Source scan windows: the source range minus every excluded range, in key order.
    pub fn source_windows(&self) -> Vec<Window> {
        windows(&self.source_prefix, &self.excludes)
    }

    /// Target scan windows, the image of [`Self::source_windows`]. The fence key is
    /// inside them and must be skipped by exact match.
    pub fn target_windows(&self) -> Vec<Window> {
        windows(&self.target_base, &self.excludes)
    }

    /// A log-safe name for a key: the link's prefix and a short hash, never the key itself.
    pub fn redact(&self, key: &[u8]) -> String {
        redact(&self.source_prefix, key)
    }
}

/// `prefix + "#" + hex(sha256(key))[..8]`: identifies a key in logs without revealing it.
pub fn redact(prefix: &[u8], key: &[u8]) -> String {
    let digest = hex::encode(Sha256::digest(key));
    format!("{}#{}", String::from_utf8_lossy(prefix), &digest[..8])
}

fn range_of(prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        (vec![0], vec![0])
    } else {
        (prefix.to_vec(), prefix_end(prefix))
    }
}

fn windows(base: &[u8], excludes: &[Vec<u8>]) -> Vec<Window> {
    let (mut start, end) = range_of(base);
    let mut out = Vec::new();
    for ex in excludes {
        let mut ex_start = base.to_vec();
        ex_start.extend_from_slice(ex);
        let ex_end = prefix_end(&ex_start);
        if ex_start > start {
            out.push(Window {
                start: start.clone(),
                end: ex_start.clone(),
            });
        }
        if ex_end == [0] {
            return out;
        }
        start = ex_end;
    }
    if before_end(&start, &end) {
        out.push(Window { start, end });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn space(src: &str, tgt: &str, dest: &str, ex: &[&str]) -> KeySpace {
        let mut c = MirrorConfig::new(src, tgt);
        c.sync.dest_prefix = dest.into();
        c.sync.exclude_prefixes = ex.iter().map(|s| s.to_string()).collect();
        KeySpace::new(&c)
    }

    #[test]
    fn rewrite_is_anchored() {
        let k = space("/app/", "/mirror/", "east/", &["tmp/"]);
        assert_eq!(k.rewrite(b"/app/a").unwrap(), b"/mirror/east/a".to_vec());
        assert_eq!(k.rewrite(b"/app/tmp/x"), None);
        assert_eq!(k.rewrite(b"/other/a"), None);
        // "/app/" appearing later in a key is not rewritten.
        assert_eq!(
            k.rewrite(b"/app//app/").unwrap(),
            b"/mirror/east//app/".to_vec()
        );
        assert_eq!(k.unrewrite(b"/mirror/east/a").unwrap(), b"/app/a".to_vec());
        assert_eq!(k.unrewrite(b"/mirror/east/tmp/x"), None);
        assert_eq!(k.unrewrite(b"/mirror/east/\0tidemark-checkpoint"), None);
    }

    #[test]
    fn a_source_key_cannot_land_on_the_fence() {
        let k = space("/app/", "/mirror/", "", &[]);
        assert_eq!(k.rewrite(b"/app/\0tidemark-checkpoint"), None);
    }

    #[test]
    fn windows_elide_excludes() {
        let k = space("/a/", "/t/", "", &["b", "d/", "b/x"]);
        let w = k.source_windows();
        assert_eq!(
            w,
            vec![
                Window {
                    start: b"/a/".to_vec(),
                    end: b"/a/b".to_vec()
                },
                Window {
                    start: b"/a/c".to_vec(),
                    end: b"/a/d/".to_vec()
                },
                Window {
                    start: b"/a/d0".to_vec(),
                    end: b"/a0".to_vec()
                },
            ]
        );
        let all = space("", "/t/", "", &[]);
        assert_eq!(
            all.source_windows(),
            vec![Window {
                start: vec![0],
                end: vec![0]
            }]
        );
    }

    #[test]
    fn redaction_hides_the_key() {
        let r = redact(b"/app/", b"/app/secret-name");
        assert!(r.starts_with("/app/#"));
        assert!(!r.contains("secret"));
        assert_eq!(r.len(), "/app/#".len() + 8);
    }

    proptest! {
        #[test]
        fn rewrite_exclude_and_windows_agree(
            rel in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'/'), Just(0u8), Just(0xffu8)], 0..6),
            ex in proptest::collection::vec(proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'/')], 1..3), 0..3),
        ) {
            let ex: Vec<String> = ex.into_iter().map(|e| String::from_utf8(e).unwrap()).collect();
            let exr: Vec<&str> = ex.iter().map(|s| s.as_str()).collect();
            let k = space("/s/", "/t/", "d/", &exr);
            let mut key = b"/s/".to_vec();
            key.extend_from_slice(&rel);
            let in_window = k.source_windows().iter().any(|w| w.contains(&key));
            let excluded = ex.iter().any(|e| rel.starts_with(e.as_bytes()));
            prop_assert_eq!(in_window, !excluded);
            match k.rewrite(&key) {
                Some(t) => {
                    prop_assert!(!excluded);
                    prop_assert_eq!(k.unrewrite(&t), Some(key.clone()));
                    prop_assert!(k.target_windows().iter().any(|w| w.contains(&t)));
                }
                None => prop_assert!(excluded || k.is_checkpoint(&[b"/t/d/".as_slice(), &rel].concat())),
            }
        }
    }
}
