//! `checkpoint_decode`: the fence record is bytes anyone with target write access can edit.
//!
//! Properties: decoding never panics; anything accepted satisfies the documented record
//! constraints (fail closed), re-encodes, decodes to the same record, and encodes
//! canonically (encode . decode . encode == encode).

use tidemark_core::mirror::checkpoint::{
    Checkpoint, NEWEST_READABLE, OLDEST_READABLE, RESIDUE_VERSION,
};

pub fn run(data: &[u8]) {
    let Ok(c) = Checkpoint::decode(data) else {
        return;
    };
    // What acceptance promises, checked independently of the decoder's own checks.
    assert!(
        (OLDEST_READABLE..=NEWEST_READABLE).contains(&c.v),
        "accepted an unknown version {}",
        c.v
    );
    assert!(!c.link.is_empty(), "accepted an empty link");
    assert!(
        c.holder.len() == 32 && c.holder.bytes().all(|b| b.is_ascii_hexdigit()),
        "accepted holder {:?}",
        c.holder
    );
    assert!(c.watermark >= 0, "accepted a negative watermark");
    assert!(c.prune_floor >= 0, "accepted a negative prune_floor");
    if let Some(s) = &c.split {
        assert!(s.rev > c.watermark, "accepted split.rev <= watermark");
        // A split may be recorded during a scan: genesis replays an oversized revision.
    }
    if let Some(s) = &c.scan {
        assert!(s.base >= 0, "accepted a negative scan.base");
        assert!(
            s.smax.is_none_or(|m| m >= 0),
            "accepted a negative scan.smax"
        );
        assert!(
            s.base_count.is_none_or(|n| n >= 0),
            "accepted a negative scan.base_count"
        );
        assert!(
            s.residue_above.is_none_or(|r| r >= 0) && (s.residue_above.is_none() || !s.scanned),
            "accepted scan.residue_above {:?} (scanned: {})",
            s.residue_above,
            s.scanned
        );
    }
    assert_eq!(
        c.scan.as_ref().is_some_and(|s| s.residue_above.is_some()),
        c.v == RESIDUE_VERSION,
        "a residue mark must come with record version {RESIDUE_VERSION} and only with it (v {})",
        c.v
    );
    if let Some(a) = &c.anchor {
        assert!(c.v >= 2, "accepted an anchor in a version 1 record");
        assert!(!a.key.is_empty(), "accepted an empty anchor key");
        assert!(
            a.create >= 1 && a.rev >= a.create,
            "accepted anchor revisions {a:?}"
        );
        assert!(a.ver >= 1, "accepted anchor version {}", a.ver);
        assert!(
            a.sha.len() == 16
                && a.sha
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "accepted anchor digest {:?}",
            a.sha
        );
    }
    let enc = c.encode();
    let again = Checkpoint::decode(&enc).unwrap_or_else(|e| {
        panic!("a record the decoder accepted does not survive re-encoding: {e}")
    });
    assert_eq!(again, c, "re-decoded record differs");
    assert_eq!(again.encode(), enc, "encoding is not canonical");
}
