//! Loading the agent's config: the EtcdMirror spec from YAML/JSON, command-line overrides,
//! and every check that must pass before anything connects.

use crate::error::DriverError;
use std::path::Path;
use tidemark_core::config::{
    ConfigErrors, ConfigProblem, EndpointSpec, InitialSyncMode, MirrorConfig, Mode,
};

/// Command-line values that replace config fields (a `None` leaves the field alone).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub source_endpoints: Option<Vec<String>>,
    pub target_endpoints: Option<Vec<String>>,
    pub source_prefix: Option<String>,
    pub target_prefix: Option<String>,
    pub dest_prefix: Option<String>,
    pub mode: Option<Mode>,
    pub initial_sync_mode: Option<InitialSyncMode>,
    pub start_revision: Option<i64>,
    /// `initialSync.abandonWatermark`: the way forward after `SourceHistoryMismatch`.
    pub abandon_watermark: Option<i64>,
    pub max_txn_ops: Option<u32>,
    pub link: Option<String>,
    /// Turns the periodic pass on with this interval.
    pub reconcile_interval: Option<std::time::Duration>,
    pub delete_orphans: Option<bool>,
    pub max_ops_per_second: Option<u32>,
}

impl Overrides {
    /// Writes every set override into `c`.
    pub fn apply(&self, c: &mut MirrorConfig) {
        if let Some(e) = &self.source_endpoints {
            c.source.endpoint_list = e.clone();
        }
        if let Some(e) = &self.target_endpoints {
            c.target.endpoint_list = e.clone();
        }
        if let Some(p) = &self.source_prefix {
            c.source.prefix = p.clone();
        }
        if let Some(p) = &self.target_prefix {
            c.target.prefix = p.clone();
        }
        if let Some(p) = &self.dest_prefix {
            c.sync.dest_prefix = p.clone();
        }
        if let Some(m) = self.mode {
            c.mode = m;
        }
        if let Some(m) = self.initial_sync_mode {
            c.initial_sync.mode = m;
        }
        if let Some(r) = self.start_revision {
            c.initial_sync.start_revision = r;
        }
        if let Some(w) = self.abandon_watermark {
            c.initial_sync.abandon_watermark = Some(w);
        }
        if let Some(n) = self.max_txn_ops {
            c.sync.max_txn_ops = n;
        }
        if let Some(l) = &self.link {
            c.link = Some(l.clone());
        }
        if let Some(i) = self.reconcile_interval {
            c.reconciliation.enabled = true;
            c.reconciliation.interval = i;
        }
        if let Some(d) = self.delete_orphans {
            c.reconciliation.delete_orphans = d;
        }
        if let Some(n) = self.max_ops_per_second {
            c.sync.max_ops_per_second = n;
        }
    }
}

/// Largest config file accepted; a real one is a few KiB, even with 1,024 excludePrefixes.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Most YAML nodes a config may expand to. An alias counts every time it is used, so a small
/// file of nested aliases ("billion laughs") is refused before it is built in memory.
pub const MAX_CONFIG_NODES: usize = 100_000;

/// Parses a config file (YAML, which also accepts JSON), bounded in size and in expansion.
pub fn parse(path: &Path) -> Result<MirrorConfig, DriverError> {
    use std::io::Read;
    let shown = path.display().to_string();
    let read = |error| DriverError::Read {
        path: shown.clone(),
        error,
    };
    let parse_error = |message: String| DriverError::Parse {
        path: shown.clone(),
        message,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read)?
        .take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(parse_error(format!(
            "is larger than {MAX_CONFIG_BYTES} bytes; a mirror config is a few KiB"
        )));
    }
    let text = String::from_utf8(bytes).map_err(|e| parse_error(format!("is not UTF-8 ({e})")))?;
    crate::yaml_budget::check(&text, MAX_CONFIG_NODES).map_err(parse_error)?;
    serde_yaml::from_str(&text).map_err(|e| parse_error(e.to_string()))
}

/// Problems that do not stop the agent but that an operator should fix; `run` logs them and
/// `check-config` prints them.
pub fn warnings(c: &MirrorConfig) -> Vec<ConfigProblem> {
    let mut out = Vec::new();
    for (side, ep) in [("source", &c.source), ("target", &c.target)] {
        if let Some(p) = ep.auth.as_ref().and_then(|a| a.password_file.as_ref()) {
            if let Some(mode) = file_mode(p).filter(|m| m & 0o070 != 0) {
                out.push(ConfigProblem {
                    field: format!("{side}.auth.passwordFile"),
                    problem: format!(
                        "{p:?} has mode {mode:04o}: its group can read the password; chmod 600 it"
                    ),
                });
            }
        }
    }
    out
}

fn file_mode(path: &str) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// Loads, overrides and fully validates a config; every problem is reported at once.
pub fn load(path: &Path, overrides: &Overrides) -> Result<MirrorConfig, DriverError> {
    let mut c = parse(path)?;
    overrides.apply(&mut c);
    validate(&c)?;
    Ok(c)
}

/// Core validation plus what only the driver can check: that every named file exists and
/// that this build can honour the connection settings.
pub fn validate(c: &MirrorConfig) -> Result<(), ConfigErrors> {
    let mut problems = match c.validate() {
        Ok(()) => Vec::new(),
        Err(ConfigErrors(p)) => p,
    };
    for (side, ep) in [("source", &c.source), ("target", &c.target)] {
        check_endpoint_files(side, ep, &mut problems);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigErrors(problems))
    }
}

fn check_endpoint_files(side: &str, ep: &EndpointSpec, out: &mut Vec<ConfigProblem>) {
    let mut file = |field: &str, path: &Option<String>| {
        if let Some(p) = path {
            if !Path::new(p).is_file() {
                out.push(ConfigProblem {
                    field: format!("{side}.{field}"),
                    problem: format!("file {p:?} does not exist or is not a regular file"),
                });
            }
        }
    };
    if let Some(t) = &ep.tls {
        file("tls.caFile", &t.ca_file);
        file("tls.certFile", &t.cert_file);
        file("tls.keyFile", &t.key_file);
    }
    if let Some(a) = &ep.auth {
        file("auth.passwordFile", &a.password_file);
        if let Some(p) = &a.password_file {
            if let Some(mode) = file_mode(p).filter(|m| m & 0o007 != 0) {
                out.push(ConfigProblem {
                    field: format!("{side}.auth.passwordFile"),
                    problem: format!(
                        "{p:?} has mode {mode:04o}: every user on the host can read the \
                         password; chmod 600 it (on Kubernetes, defaultMode: 0400)"
                    ),
                });
            }
        }
    }
    let mut push = |field: String, problem: String| out.push(ConfigProblem { field, problem });
    if ep.service_ref.is_some() {
        push(
            format!("{side}.serviceRef"),
            "is only resolved by the Kubernetes controller; the standalone agent needs endpointList".into(),
        );
    }
    if let Some(t) = &ep.tls {
        if t.secret_ref.is_some() || t.ca_bundle_ref.is_some() {
            push(
                format!("{side}.tls"),
                "secretRef/caBundleRef are only resolved by the Kubernetes controller; use caFile/certFile/keyFile".into(),
            );
        }
        if ep.endpoint_list.iter().any(|u| u.starts_with("http://")) {
            push(
                format!("{side}.endpointList"),
                "uses http:// but tls is set; use https:// URLs with TLS".into(),
            );
        }
    }
    if let Some(a) = &ep.auth {
        if a.secret_ref.is_some() {
            push(
                format!("{side}.auth.secretRef"),
                "is only resolved by the Kubernetes controller; use username + passwordFile".into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn minimal_config_loads() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            r#"
source: {endpointList: ["http://127.0.0.1:2379"], prefix: /app/}
target: {endpointList: ["http://127.0.0.1:22379"], prefix: /mirror/}
initialSync: {mode: RequireEmpty}
"#,
        );
        let c = load(&p, &Overrides::default()).unwrap();
        assert_eq!(c.source.prefix, "/app/");
        assert_eq!(c.sync.max_txn_ops, 128);
    }

    #[test]
    fn overrides_apply_before_validation() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            "source: {prefix: /app/}\ntarget: {prefix: /m/}\n",
        );
        assert!(load(&p, &Overrides::default()).is_err());
        let o = Overrides {
            source_endpoints: Some(vec!["http://127.0.0.1:1".into()]),
            target_endpoints: Some(vec!["http://127.0.0.1:2".into()]),
            target_prefix: Some("/other/".into()),
            ..Default::default()
        };
        let c = load(&p, &o).unwrap();
        assert_eq!(c.target.prefix, "/other/");
    }

    #[test]
    fn every_problem_is_listed_with_its_field() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            r#"
source:
  endpointList: ["https://127.0.0.1:2379"]
  prefix: /app/
  tls: {caFile: /nonexistent/ca.pem}
target:
  endpointList: ["http://127.0.0.1:22379"]
  prefix: /mirror/
  auth: {username: u, passwordFile: /nonexistent/pw}
sync: {maxTxnOps: 1}
"#,
        );
        let err = load(&p, &Overrides::default()).unwrap_err().to_string();
        for f in [
            "source.tls.caFile",
            "target.auth.passwordFile",
            "sync.maxTxnOps",
        ] {
            assert!(err.contains(f), "missing {f} in {err}");
        }
    }

    #[test]
    fn reconciliation_and_drain_from_file_and_flags() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            r#"
mode: Drain
source: {endpointList: ["http://127.0.0.1:2379"], prefix: /app/}
target: {endpointList: ["http://127.0.0.1:22379"], prefix: /mirror/}
reconciliation: {enabled: true, interval: 5m, deleteOrphans: true}
"#,
        );
        let c = load(&p, &Overrides::default()).unwrap();
        assert_eq!(c.mode, Mode::Drain);
        assert!(c.reconciliation.enabled && c.reconciliation.delete_orphans);
        assert_eq!(c.reconciliation.interval.as_secs(), 300);
        let o = Overrides {
            mode: Some(Mode::Sync),
            reconcile_interval: Some(std::time::Duration::from_secs(30)),
            delete_orphans: Some(false),
            max_ops_per_second: Some(500),
            ..Default::default()
        };
        let c = load(&p, &o).unwrap();
        assert_eq!(c.mode, Mode::Sync);
        assert_eq!(c.reconciliation.interval.as_secs(), 30);
        assert!(!c.reconciliation.delete_orphans);
        assert_eq!(c.sync.max_ops_per_second, 500);
        let o = Overrides {
            reconcile_interval: Some(std::time::Duration::from_millis(10)),
            ..Default::default()
        };
        let err = load(&p, &o).unwrap_err().to_string();
        assert!(err.contains("reconciliation.interval"), "{err}");
    }

    #[test]
    fn abandon_watermark_from_file_and_flag() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            r#"
source: {endpointList: ["http://127.0.0.1:2379"], prefix: /app/}
target: {endpointList: ["http://127.0.0.1:22379"], prefix: /mirror/}
initialSync: {mode: OverwriteAndPrune, abandonWatermark: 21}
"#,
        );
        let c = load(&p, &Overrides::default()).unwrap();
        assert_eq!(c.initial_sync.abandon_watermark, Some(21));
        let o = Overrides {
            abandon_watermark: Some(7),
            ..Default::default()
        };
        assert_eq!(
            load(&p, &o).unwrap().initial_sync.abandon_watermark,
            Some(7)
        );
        let o = Overrides {
            abandon_watermark: Some(0),
            ..Default::default()
        };
        let err = load(&p, &o).unwrap_err().to_string();
        assert!(err.contains("initialSync.abandonWatermark"), "{err}");
    }

    #[test]
    fn alias_bombs_and_huge_files_are_refused_before_they_are_built() {
        let d = tempfile::tempdir().unwrap();
        let mut bomb = String::from("x0: &x0 [a, a, a, a, a, a, a, a, a, a]\n");
        for i in 1..9 {
            bomb.push_str(&format!(
                "x{i}: &x{i} [{}]\n",
                vec![format!("*x{}", i - 1); 10].join(",")
            ));
        }
        bomb.push_str("source: {endpointList: [\"http://a:1\"], prefix: /a/}\n");
        let p = write(d.path(), "bomb.yaml", &bomb);
        let err = load(&p, &Overrides::default()).unwrap_err().to_string();
        assert!(
            err.contains("aliases") && err.contains("bomb.yaml"),
            "{err}"
        );
        let big = format!("# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
        let p = write(d.path(), "big.yaml", &big);
        let err = load(&p, &Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn password_files_readable_by_others_are_refused_and_by_group_warned() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let pw = write(d.path(), "pw", "hunter2");
        let cfg = format!(
            "source: {{endpointList: [\"http://127.0.0.1:2379\"], prefix: /app/}}\n\
             target: {{endpointList: [\"http://127.0.0.1:22379\"], prefix: /m/,\n\
             auth: {{username: u, passwordFile: {}, plaintextAcknowledgeRisk: true}}}}\n",
            pw.display()
        );
        let p = write(d.path(), "m.yaml", &cfg);
        let mode = |m| std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(m)).unwrap();
        mode(0o644);
        let err = load(&p, &Overrides::default()).unwrap_err().to_string();
        assert!(
            err.contains("target.auth.passwordFile") && err.contains("chmod 600"),
            "{err}"
        );
        assert!(!err.contains("hunter2"));
        mode(0o640);
        let c = load(&p, &Overrides::default()).unwrap();
        let w = warnings(&c);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].field, "target.auth.passwordFile");
        mode(0o600);
        assert!(warnings(&load(&p, &Overrides::default()).unwrap()).is_empty());
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "m.yaml",
            "source: {endpointList: [\"http://a:1\"], prefx: /a/}\ntarget: {prefix: /m/}\n",
        );
        let err = load(&p, &Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("prefx"), "{err}");
    }
}
