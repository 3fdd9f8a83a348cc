//! The checker's own reading of the key rewrite and the fence record.
//!
//! Written independently from the core (from docs/design.md "The fence record" and the key rewriting of the README), so a
//! bug in the core's rewrite or checkpoint encoding shows up as a violation instead of being
//! shared by the code under test and its checker.

use serde_json::Value;
use tidemark_core::etcd::prefix_end;
use tidemark_core::MirrorConfig;

/// The key mapping of one link.
#[derive(Debug, Clone)]
pub struct Oracle {
    pub source_prefix: Vec<u8>,
    pub excludes: Vec<Vec<u8>>,
    pub target_base: Vec<u8>,
    pub fence_key: Vec<u8>,
}

impl Oracle {
    /// The mapping a config describes.
    pub fn new(cfg: &MirrorConfig) -> Oracle {
        Oracle {
            source_prefix: cfg.source.prefix.as_bytes().to_vec(),
            excludes: cfg
                .sync
                .exclude_prefixes
                .iter()
                .map(|e| e.as_bytes().to_vec())
                .collect(),
            target_base: cfg.target_base(),
            fence_key: cfg.checkpoint_key(),
        }
    }

    /// `target.prefix + destPrefix + strip(key, source.prefix)`, or None when out of scope.
    pub fn rewrite(&self, key: &[u8]) -> Option<Vec<u8>> {
        let rel = key.strip_prefix(self.source_prefix.as_slice())?;
        if self.excludes.iter().any(|e| rel.starts_with(e)) {
            return None;
        }
        let mut k = self.target_base.clone();
        k.extend_from_slice(rel);
        Some(k)
    }

    /// The source range `[prefix, prefix_end)`.
    pub fn source_range(&self) -> (Vec<u8>, Vec<u8>) {
        (self.source_prefix.clone(), prefix_end(&self.source_prefix))
    }

    /// The target range `[base, prefix_end(base))`.
    pub fn target_range(&self) -> (Vec<u8>, Vec<u8>) {
        (self.target_base.clone(), prefix_end(&self.target_base))
    }

    /// Whether a target key is inside the mirror's range.
    pub fn in_target_range(&self, key: &[u8]) -> bool {
        let (b, e) = self.target_range();
        crate::model::store::in_range(key, &b, &e)
    }
}

/// The fields of a fence record the checker reads.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Fence {
    pub link: String,
    pub epoch: u64,
    pub holder: String,
    pub role: String,
    pub watermark: i64,
    pub split: Option<(i64, u64)>,
    pub scan_base: Option<i64>,
    pub prune_pending: bool,
}

impl Fence {
    /// Parses the JSON fence record (docs/design.md "The fence record"); None if it does not decode.
    pub fn parse(bytes: &[u8]) -> Option<Fence> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        let split = match v.get("split") {
            Some(Value::Null) | None => None,
            Some(s) => Some((s.get("rev")?.as_i64()?, s.get("done")?.as_u64()?)),
        };
        let scan_base = match v.get("scan") {
            Some(Value::Null) | None => None,
            Some(s) => Some(s.get("base")?.as_i64()?),
        };
        Some(Fence {
            link: v.get("link")?.as_str()?.to_string(),
            epoch: v.get("epoch")?.as_u64()?,
            holder: v.get("holder")?.as_str()?.to_string(),
            role: v
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("Mirror")
                .to_string(),
            watermark: v.get("watermark")?.as_i64()?,
            split,
            scan_base,
            prune_pending: v
                .get("prune_pending")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    /// `split == null && scan == null`: the watermark invariant applies.
    pub fn settled(&self) -> bool {
        self.split.is_none() && self.scan_base.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrite_is_anchored_and_excludes() {
        let mut c = MirrorConfig::new("/app/", "/mirror/");
        c.sync.dest_prefix = "east/".into();
        c.sync.exclude_prefixes = vec!["skip/".into()];
        let o = Oracle::new(&c);
        assert_eq!(o.rewrite(b"/app/x").unwrap(), b"/mirror/east/x".to_vec());
        assert_eq!(o.rewrite(b"/app/skip/x"), None);
        assert_eq!(o.rewrite(b"/other/app/x"), None);
        assert!(o.in_target_range(&o.fence_key));
    }

    #[test]
    fn fence_parses_design_shape() {
        let f = Fence::parse(br#"{"v":1,"link":"l","epoch":3,"holder":"ab","role":"Mirror","watermark":9,"split":null,"scan":{"base":4,"cursor":""},"prune_pending":true}"#).unwrap();
        assert_eq!(f.scan_base, Some(4));
        assert!(!f.settled());
        assert!(Fence::parse(b"garbage").is_none());
    }
}
