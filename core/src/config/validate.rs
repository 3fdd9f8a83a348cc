//! `MirrorConfig::validate`: every problem in a config at once, each at its spec path.

use super::endpoint::endpoint_url;
use super::{
    ConfigErrors, ConfigProblem, EndpointSpec, InitialSyncMode, MirrorConfig,
    ETCD_DEFAULT_MAX_REQUEST_BYTES, MAX_ENDPOINTS, MAX_EXCLUDE_PREFIXES, MAX_PAGE_BYTES,
    MAX_STRING_LENGTH, MAX_WATCH_BUFFER_BYTES,
};
use std::time::Duration;

impl MirrorConfig {
    /// Checks the whole config and returns every problem at once.
    pub fn validate(&self) -> Result<(), ConfigErrors> {
        let mut p = Vec::new();
        long_strings(self, &mut p);
        let mut bad = |field: &str, problem: String| {
            p.push(ConfigProblem {
                field: field.into(),
                problem,
            })
        };
        for (side, ep) in [("source", &self.source), ("target", &self.target)] {
            validate_endpoint(side, ep, &mut bad);
        }
        if self.target.prefix.is_empty() && self.sync.dest_prefix.is_empty() {
            bad(
                "target.prefix",
                "is empty, so the mirror would own the whole target keyspace; set a prefix such as \"/mirror/\"".into(),
            );
        }
        if let Some(l) = &self.link {
            if l.is_empty() || l.len() > 253 {
                bad(
                    "link",
                    "must be 1 to 253 characters; omit it to derive one from the prefixes".into(),
                );
            }
        }
        if self.initial_sync.start_revision < 0 {
            bad(
                "initialSync.startRevision",
                "must be 0 (scan) or a positive source revision".into(),
            );
        }
        if self.initial_sync.start_revision > 0
            && self.initial_sync.mode == InitialSyncMode::RequireEmpty
        {
            bad(
                "initialSync.startRevision",
                "requires initialSync.mode Overwrite or OverwriteAndPrune: RequireEmpty always scans".into(),
            );
        }
        if self.initial_sync.abandon_watermark.is_some_and(|w| w < 1) {
            bad(
                "initialSync.abandonWatermark",
                "must be the positive fence watermark that SourceHistoryMismatch reported; omit it otherwise".into(),
            );
        }
        let s = &self.sync;
        if s.max_txn_ops < 2 {
            bad("sync.maxTxnOps", format!("is {}; it must be at least 2 (one op plus the fence put), and at most the target's --max-txn-ops (default 128)", s.max_txn_ops));
        }
        if s.max_txn_ops > 100_000 {
            bad(
                "sync.maxTxnOps",
                format!(
                    "is {}; etcd rejects Txns above its --max-txn-ops (default 128)",
                    s.max_txn_ops
                ),
            );
        }
        if s.txn_flush_bytes < 1024 || s.txn_flush_bytes > ETCD_DEFAULT_MAX_REQUEST_BYTES * 64 {
            bad("sync.txnFlushBytes", format!("is {}; use 1KiB..96MiB and keep it below the target's --max-request-bytes (default 1.5MiB)", s.txn_flush_bytes));
        }
        if s.max_txns_in_flight == 0 || s.max_txns_in_flight > 64 {
            bad(
                "sync.maxTxnsInFlight",
                format!("is {}; use 1..64", s.max_txns_in_flight),
            );
        }
        if s.source_read_percent == 0 || s.source_read_percent > 100 {
            bad(
                "sync.sourceReadPercent",
                format!(
                    "is {}; use 1..100 (100 reads the source back to back)",
                    s.source_read_percent
                ),
            );
        }
        if s.page_key_limit == 0 || s.page_key_limit > 100_000 {
            bad(
                "sync.pageKeyLimit",
                format!("is {}; use 1..100000", s.page_key_limit),
            );
        }
        if s.page_bytes < 1024 || s.page_bytes > MAX_PAGE_BYTES {
            bad(
                "sync.pageBytes",
                format!(
                    "is {}; use 1024..{MAX_PAGE_BYTES} (64MiB): pages are held in memory",
                    s.page_bytes
                ),
            );
        }
        if s.watch_buffer_bytes < 64 * 1024 {
            bad(
                "sync.watchBufferBytes",
                format!(
                    "is {}; use at least 64KiB: one watch response of a busy source can hold more",
                    s.watch_buffer_bytes
                ),
            );
        }
        if s.watch_buffer_bytes > MAX_WATCH_BUFFER_BYTES {
            bad(
                "sync.watchBufferBytes",
                format!(
                    "is {}; use at most {MAX_WATCH_BUFFER_BYTES} (1GiB): the buffer is held in memory",
                    s.watch_buffer_bytes
                ),
            );
        }
        if s.exclude_prefixes.len() > MAX_EXCLUDE_PREFIXES {
            bad(
                "sync.excludePrefixes",
                format!(
                    "has {} entries; at most {MAX_EXCLUDE_PREFIXES} are accepted",
                    s.exclude_prefixes.len()
                ),
            );
        }
        if s.request_timeout < Duration::from_millis(100) {
            bad("sync.requestTimeout", "must be at least 100ms".into());
        }
        let b = &s.reconnect_backoff;
        if b.initial_delay.is_zero() {
            bad(
                "sync.reconnectBackoff.initialDelay",
                "must be positive, e.g. \"1s\"".into(),
            );
        }
        if b.max_delay < b.initial_delay {
            bad(
                "sync.reconnectBackoff.maxDelay",
                "must be at least initialDelay".into(),
            );
        }
        if s.progress_interval < Duration::from_secs(1) {
            bad("sync.progressInterval", "must be at least 1s".into());
        }
        if s.resync_loop_threshold == 0 {
            bad("sync.resyncLoopThreshold", "must be at least 1".into());
        }
        if s.quota_probe_interval < Duration::from_secs(1) {
            bad("sync.quotaProbeInterval", "must be at least 1s".into());
        }
        for (i, ex) in s.exclude_prefixes.iter().enumerate() {
            if ex.is_empty() {
                bad(
                    &format!("sync.excludePrefixes[{i}]"),
                    "is empty, which would exclude everything; remove it".into(),
                );
            }
        }
        if self.reconciliation.enabled && self.reconciliation.interval < Duration::from_secs(1) {
            bad(
                "reconciliation.interval",
                "must be at least 1s when reconciliation is enabled".into(),
            );
        }
        let base = self.target_base();
        let ck = self.checkpoint_key();
        if !ck.starts_with(&base) || ck.len() == base.len() {
            bad(
                "checkpoint.key",
                format!(
                    "must start with target.prefix + sync.destPrefix ({:?}) and be longer than it",
                    String::from_utf8_lossy(&base)
                ),
            );
        } else if !ck[base.len()..].contains(&0) {
            bad(
                "checkpoint.key",
                "must contain a \\0 byte after the target range base, so it can never collide with a mirrored key".into(),
            );
        }
        if self.source.endpoint_list == self.target.endpoint_list
            && !self.source.endpoint_list.is_empty()
            && ranges_overlap(self.source.prefix.as_bytes(), &base)
        {
            bad(
                "target.prefix",
                "source and target are the same endpoints and the ranges overlap (DirectionConflict): the mirror would copy its own writes".into(),
            );
        }
        if p.is_empty() {
            Ok(())
        } else {
            Err(ConfigErrors(p))
        }
    }
}

/// Every string in the config, at its spec path, no longer than [`MAX_STRING_LENGTH`].
fn long_strings(c: &MirrorConfig, out: &mut Vec<ConfigProblem>) {
    fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<ConfigProblem>) {
        match v {
            serde_json::Value::String(s) if s.len() > MAX_STRING_LENGTH => {
                out.push(ConfigProblem {
                    field: path.to_string(),
                    problem: format!(
                        "is {} bytes long; at most {MAX_STRING_LENGTH} are accepted",
                        s.len()
                    ),
                });
            }
            serde_json::Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}[{i}]"), out);
                }
            }
            serde_json::Value::Object(m) => {
                for (k, item) in m {
                    let p = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(item, &p, out);
                }
            }
            _ => {}
        }
    }
    // A config of plain strings, numbers and lists always serialises; if it ever did not,
    // the other checks still run.
    if let Ok(v) = serde_json::to_value(c) {
        walk(&v, "", out);
    }
}

/// Two prefixes overlap when one is a prefix of the other.
pub fn ranges_overlap(a: &[u8], b: &[u8]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn validate_endpoint(side: &str, ep: &EndpointSpec, bad: &mut impl FnMut(&str, String)) {
    match (ep.endpoint_list.is_empty(), ep.service_ref.is_some()) {
        (true, false) => bad(
            &format!("{side}.endpointList"),
            "is empty; list at least one URL such as \"http://127.0.0.1:2379\" (or set serviceRef)"
                .into(),
        ),
        (false, true) => bad(
            &format!("{side}.serviceRef"),
            "set exactly one of endpointList or serviceRef".into(),
        ),
        _ => {}
    }
    if ep.endpoint_list.len() > MAX_ENDPOINTS {
        bad(
            &format!("{side}.endpointList"),
            format!(
                "has {} entries; at most {MAX_ENDPOINTS} are accepted",
                ep.endpoint_list.len()
            ),
        );
    }
    let mut schemes = std::collections::BTreeSet::new();
    for (i, url) in ep.endpoint_list.iter().enumerate() {
        match endpoint_url(url) {
            Ok(scheme) => {
                schemes.insert(scheme);
            }
            Err(problem) => bad(&format!("{side}.endpointList[{i}]"), problem.to_string()),
        }
    }
    if schemes.len() > 1 {
        bad(
            &format!("{side}.endpointList"),
            "mixes http:// and https://; use one scheme".into(),
        );
    }
    let has_tls = ep.tls.is_some();
    if schemes.contains("https") && !has_tls {
        bad(
            &format!("{side}.tls"),
            "is required for https:// endpoints (set caFile, or `tls: {}` for the system roots)"
                .into(),
        );
    }
    if schemes.contains("http") && has_tls {
        bad(
            &format!("{side}.tls"),
            "is set but the endpoints are http://; use https:// URLs or remove tls".into(),
        );
    }
    if let Some(tls) = &ep.tls {
        if tls.insecure_skip_verify && !tls.insecure_skip_verify_acknowledge_risk {
            bad(
                &format!("{side}.tls.insecureSkipVerify"),
                "requires insecureSkipVerifyAcknowledgeRisk: true; prefer caFile".into(),
            );
        }
        if tls.insecure_skip_verify && (tls.ca_file.is_some() || tls.ca_bundle_ref.is_some()) {
            bad(
                &format!("{side}.tls.insecureSkipVerify"),
                "is set together with a CA (caFile or caBundleRef), which it would silently \
                 ignore; remove insecureSkipVerify to verify against the CA"
                    .into(),
            );
        }
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            bad(
                &format!("{side}.tls"),
                "certFile and keyFile must be set together".into(),
            );
        }
        for r in [&tls.secret_ref, &tls.ca_bundle_ref].into_iter().flatten() {
            if r.name.is_empty() {
                bad(
                    &format!("{side}.tls.secretRef.name"),
                    "must not be empty".into(),
                );
            }
        }
    }
    if let Some(auth) = &ep.auth {
        if schemes.contains("http") && !auth.plaintext_acknowledge_risk {
            bad(
                &format!("{side}.auth"),
                "sends the password over plain http://, readable by anyone on the path; use \
                 https:// endpoints with tls, or set auth.plaintextAcknowledgeRisk: true"
                    .into(),
            );
        }
        if auth.username.as_deref().unwrap_or("").is_empty() && auth.secret_ref.is_none() {
            bad(
                &format!("{side}.auth.username"),
                "is required when auth is set".into(),
            );
        }
        if auth.password_file.is_none() && auth.secret_ref.is_none() {
            bad(
                &format!("{side}.auth.passwordFile"),
                "is required when auth is set (or secretRef)".into(),
            );
        }
        if let Some(r) = &auth.secret_ref {
            if r.name.is_empty() {
                bad(
                    &format!("{side}.auth.secretRef.name"),
                    "must not be empty".into(),
                );
            }
        }
    }
    if let Some(s) = &ep.service_ref {
        if s.name.is_empty() {
            bad(
                &format!("{side}.serviceRef.name"),
                "must not be empty".into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{refused, valid};
    use super::super::*;

    #[test]
    fn sizes_and_counts_are_bounded_as_in_the_crd() {
        let mut c = valid();
        c.source.prefix = "/".repeat(MAX_STRING_LENGTH + 1);
        c.sync.exclude_prefixes = vec!["x".into(); MAX_EXCLUDE_PREFIXES + 1];
        c.target.endpoint_list = vec!["http://127.0.0.1:22379".into(); MAX_ENDPOINTS + 1];
        c.sync.page_bytes = u64::MAX;
        c.sync.watch_buffer_bytes = u64::MAX;
        let f = refused(&c);
        for want in [
            "source.prefix",
            "sync.excludePrefixes",
            "target.endpointList",
            "sync.pageBytes",
            "sync.watchBufferBytes",
        ] {
            assert!(f.iter().any(|x| x == want), "{want} not refused: {f:?}");
        }
        let mut c = valid();
        c.sync.exclude_prefixes = vec!["x".into(); MAX_EXCLUDE_PREFIXES];
        c.source.prefix = "/".repeat(MAX_STRING_LENGTH);
        c.sync.page_bytes = MAX_PAGE_BYTES;
        c.sync.watch_buffer_bytes = MAX_WATCH_BUFFER_BYTES;
        assert_eq!(
            refused(&c),
            Vec::<String>::new(),
            "the limits themselves pass"
        );
        // A long string deep in a list is named by its index.
        let mut c = valid();
        c.sync.exclude_prefixes = vec!["a".into(), "b".repeat(MAX_STRING_LENGTH + 1)];
        assert_eq!(refused(&c), vec!["sync.excludePrefixes[1]".to_string()]);
    }

    #[test]
    fn auth_needs_tls_or_an_acknowledgement() {
        let mut c = valid();
        c.target.auth = Some(AuthSpec {
            username: Some("mirror".into()),
            password_file: Some("/run/pw".into()),
            ..AuthSpec::default()
        });
        assert_eq!(refused(&c), vec!["target.auth".to_string()]);
        c.target.auth.as_mut().unwrap().plaintext_acknowledge_risk = true;
        assert_eq!(refused(&c), Vec::<String>::new());
        c.target.auth.as_mut().unwrap().plaintext_acknowledge_risk = false;
        c.target.endpoint_list = vec!["https://t:2379".into()];
        c.target.tls = Some(TlsSpec::default());
        assert_eq!(refused(&c), Vec::<String>::new());
    }

    #[test]
    fn a_ca_with_insecure_skip_verify_is_refused() {
        let mut c = valid();
        c.target.endpoint_list = vec!["https://t:2379".into()];
        c.target.tls = Some(TlsSpec {
            ca_file: Some("/etc/ca.crt".into()),
            insecure_skip_verify: true,
            insecure_skip_verify_acknowledge_risk: true,
            ..TlsSpec::default()
        });
        assert_eq!(
            refused(&c),
            vec!["target.tls.insecureSkipVerify".to_string()]
        );
        c.target.tls.as_mut().unwrap().ca_file = None;
        assert_eq!(refused(&c), Vec::<String>::new());
    }

    #[test]
    fn validate_reports_every_problem_with_field_names() {
        let mut c = valid();
        c.sync.max_txn_ops = 1;
        c.sync.source_read_percent = 0;
        c.initial_sync.start_revision = 5;
        c.target.tls = Some(TlsSpec {
            insecure_skip_verify: true,
            ..Default::default()
        });
        c.checkpoint.key = Some("/elsewhere/x".into());
        let errs = c.validate().unwrap_err().0;
        let fields: Vec<_> = errs.iter().map(|p| p.field.as_str()).collect();
        for f in [
            "sync.maxTxnOps",
            "sync.sourceReadPercent",
            "initialSync.startRevision",
            "target.tls",
            "target.tls.insecureSkipVerify",
            "checkpoint.key",
        ] {
            assert!(fields.contains(&f), "missing {f} in {fields:?}");
        }
    }

    #[test]
    fn direction_conflict_on_same_cluster_overlap() {
        let mut c = valid();
        c.target.endpoint_list = c.source.endpoint_list.clone();
        c.target.prefix = "/app/sub/".into();
        let errs = c.validate().unwrap_err().0;
        assert!(errs.iter().any(|p| p.problem.contains("DirectionConflict")));
        c.target.prefix = "/other/".into();
        c.validate().unwrap();
    }
}
