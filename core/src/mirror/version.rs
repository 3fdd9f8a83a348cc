//! etcd server versions: the support floor and progress-notify trust.

use serde::{Deserialize, Serialize};

/// A `major.minor.patch` server version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    /// The oldest source/target the mirror supports (Txn, watch progress, RequestProgress).
    pub const FLOOR: Version = Version {
        major: 3,
        minor: 4,
        patch: 0,
    };

    /// Parses "3.5.13", "v3.4.23" or "3.5.0-rc.1" (pre-release suffixes are ignored).
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.trim().trim_start_matches('v');
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        let patch = it.next().unwrap_or("0").parse().ok()?;
        Some(Version {
            major,
            minor,
            patch,
        })
    }

    /// Whether watch progress notifications can move the watermark. Before 3.4.31 and
    /// 3.5.13 a notification could claim a revision whose events were still pending for an
    /// unsynced watcher (etcd issues #15220 and #17507); trusting it would skip events.
    pub fn progress_notify_trusted(self) -> bool {
        match (self.major, self.minor) {
            (3, 4) => self.patch >= 31,
            (3, 5) => self.patch >= 13,
            (3, m) => m > 5,
            (m, _) => m > 3,
        }
    }
}

impl Version {
    /// Whether compaction drops the tombstone at exactly the compact revision, so a watch
    /// started there misses that delete (etcd #18089; fixed in 3.4.33 and 3.5.15).
    pub fn drops_compact_tombstone(self) -> bool {
        match (self.major, self.minor) {
            (3, 4) => self.patch < 33,
            (3, 5) => self.patch < 15,
            (3, m) => m < 4,
            (m, _) => m < 3,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors() {
        let v = |s| Version::parse(s).unwrap();
        assert!(!v("3.4.23").progress_notify_trusted());
        assert!(v("3.4.31").progress_notify_trusted());
        assert!(!v("3.5.12").progress_notify_trusted());
        assert!(v("3.5.13").progress_notify_trusted());
        assert!(v("3.6.0").progress_notify_trusted());
        assert!(v("v3.5.16-rc.0") >= Version::FLOOR);
        assert!(v("3.3.27") < Version::FLOOR);
        assert_eq!(Version::parse("x"), None);
    }
}
