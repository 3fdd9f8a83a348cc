//! The flags of `tidemark-inventory`, its config file, and their validation.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tidemark_core::inventory::{Mode, Policy, Protection};
use tidemark_runtime::{AdminArgs, LogFormat};

/// Records the resource inventory of every Ready Eno synthesis as chunked Secrets in the
/// downstream cluster, and on recovery selects the newest complete snapshot of a lineage and
/// deletes the resources the current synthesis no longer has.
#[derive(Debug, Parser)]
#[command(name = "tidemark-inventory", version)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Optional config file (YAML or JSON) with the same settings in camelCase
    /// (kubeconfig, context, downstreamKubeconfig, downstreamContext, secretNamespace,
    /// namespace, selector, recovery, minInterval, resync, requestTimeout,
    /// allowCrossNamespaceLineage, maxDeletions, maxDeletionFraction,
    /// deletableProtectedKinds, groupWait). Flags win.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Kubeconfig of the cluster holding Eno's Compositions (default: in-cluster or
    /// $KUBECONFIG / ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Context in that kubeconfig.
    #[arg(long, global = true)]
    pub(crate) context: Option<String>,
    /// Kubeconfig of the downstream cluster (Secrets, recovered resources); defaults to the
    /// Eno cluster.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) downstream_kubeconfig: Option<PathBuf>,
    /// Context for the downstream cluster.
    #[arg(long, global = true)]
    pub(crate) downstream_context: Option<String>,
    /// Namespace of the inventory Secrets in the downstream cluster [default: kube-system].
    #[arg(long, global = true)]
    pub(crate) secret_namespace: Option<String>,
    /// Timeout of one Kubernetes request, e.g. 30s.
    #[arg(long, global = true, value_name = "DURATION")]
    pub(crate) request_timeout: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain)]
    pub(crate) log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Watch Compositions and record (after the recovery decision) every Ready synthesis.
    Controller(ControllerArgs),
    /// Decide and record one Composition once, then exit.
    Record {
        /// The Composition, NAMESPACE/NAME.
        #[arg(long, value_name = "NS/NAME")]
        composition: String,
        /// What the recovery decision made first may do.
        #[arg(long, value_enum, default_value_t = RecoveryMode::Apply)]
        recovery: RecoveryMode,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Show (default), apply or skip recovery for one Composition's current synthesis.
    Recover {
        /// The Composition, NAMESPACE/NAME.
        #[arg(long, value_name = "NS/NAME")]
        composition: String,
        /// Delete the planned resources (in Eno's deletion-group order, lowest group first,
        /// waiting for each group to be gone; skipping `eno.azure.io/deletion-strategy:
        /// orphan` and protected kinds) and record `Applied(n)`. A plan over the budget is
        /// held (`Held`) instead.
        #[arg(long, conflicts_with = "skip")]
        apply: bool,
        /// With --apply: release a held plan of up to N deletions (the budget does not apply).
        #[arg(long, value_name = "N", requires = "apply")]
        allow_deletions: Option<u64>,
        /// Record `Skipped`: recording proceeds, nothing is deleted.
        #[arg(long)]
        skip: bool,
        /// Compute and print only (the default).
        #[arg(long, conflicts_with_all = ["apply", "skip"])]
        dry_run: bool,
        #[command(flatten)]
        policy: PolicyArgs,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Offline: select a snapshot from `kubectl get secrets -o yaml|json` output and print
    /// one JSON object; with --current also the tombstones.
    Inspect {
        /// Secrets: a List (JSON or YAML), one object, or multi-document YAML.
        #[arg(long, value_name = "FILE")]
        secrets: PathBuf,
        /// The current synthesis's ResourceSlices, in the same forms.
        #[arg(long, value_name = "FILE")]
        current: Option<PathBuf>,
        /// The lineage to select (default: the Composition's, else the only lineage the
        /// Secrets carry).
        #[arg(long)]
        lineage: Option<String>,
        /// The Composition recovered for (`kubectl get composition -o yaml`): enables the
        /// namespace and time checks, as the controller makes them.
        #[arg(long, value_name = "FILE")]
        composition: Option<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
    },
}

/// What recovery may delete on its own (shared by every command that plans recovery).
#[derive(Debug, Clone, Args)]
pub(crate) struct PolicyArgs {
    /// Accept a snapshot recorded for another namespace, or a lineage override naming
    /// another namespace's lineage. Only for moving a Composition on purpose: otherwise a
    /// user of one namespace could point recovery at another namespace's resources.
    #[arg(long)]
    pub(crate) allow_cross_namespace_lineage: bool,
    /// Hold a plan (delete nothing, wait for an operator) that would delete more than N
    /// resources [default: 100].
    #[arg(long, value_name = "N")]
    pub(crate) max_deletions: Option<u64>,
    /// Hold a plan that would delete more than this fraction of the snapshot's entries
    /// [default: 0.5].
    #[arg(long, value_name = "FRACTION")]
    pub(crate) max_deletion_fraction: Option<f64>,
    /// Protected tombstones recovery may delete after all: Namespace,
    /// CustomResourceDefinition, kube-system (anything in that namespace). Comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "KINDS")]
    pub(crate) deletable_protected_kinds: Vec<String>,
}

/// How recovery waits between deletion groups.
#[derive(Debug, Clone, Args)]
pub(crate) struct WaitArgs {
    /// Longest wait for one deletion group's objects to be gone (finalizers) before the
    /// next group starts anyway, e.g. 5m [default: 5m].
    #[arg(long, value_name = "DURATION")]
    pub(crate) group_wait: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct ControllerArgs {
    /// Namespace of the Compositions to watch [default: default].
    #[arg(long)]
    pub(crate) namespace: Option<String>,
    /// Equality label selector for Compositions, e.g. `team=a,env=prod`.
    #[arg(long)]
    pub(crate) selector: Option<String>,
    /// `apply` deletes tombstones automatically (as Eno does); `plan` records the plan and
    /// waits for `recover --apply` or `--skip`.
    #[arg(long, value_enum)]
    pub(crate) recovery: Option<RecoveryMode>,
    /// Least time between two reconciles of one Composition (jittered), e.g. 1s.
    #[arg(long, value_name = "DURATION")]
    pub(crate) min_interval: Option<String>,
    /// Full resync period, e.g. 10m.
    #[arg(long, value_name = "DURATION")]
    pub(crate) resync: Option<String>,
    #[command(flatten)]
    pub(crate) policy: PolicyArgs,
    #[command(flatten)]
    pub(crate) wait: WaitArgs,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RecoveryMode {
    Apply,
    Plan,
}

impl From<RecoveryMode> for Mode {
    fn from(m: RecoveryMode) -> Mode {
        match m {
            RecoveryMode::Apply => Mode::Apply,
            RecoveryMode::Plan => Mode::Plan,
        }
    }
}

/// The optional config file.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FileConfig {
    pub(crate) kubeconfig: Option<PathBuf>,
    pub(crate) context: Option<String>,
    pub(crate) downstream_kubeconfig: Option<PathBuf>,
    pub(crate) downstream_context: Option<String>,
    pub(crate) secret_namespace: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) selector: Option<String>,
    pub(crate) recovery: Option<RecoveryMode>,
    pub(crate) min_interval: Option<String>,
    pub(crate) resync: Option<String>,
    pub(crate) request_timeout: Option<String>,
    pub(crate) allow_cross_namespace_lineage: Option<bool>,
    pub(crate) max_deletions: Option<u64>,
    pub(crate) max_deletion_fraction: Option<f64>,
    pub(crate) deletable_protected_kinds: Option<Vec<String>>,
    pub(crate) group_wait: Option<String>,
}

/// The recovery policy from flags, then the config file, then the defaults. Values that
/// would make the budget meaningless are refused with the fix.
pub(crate) fn policy(
    p: &PolicyArgs,
    file: &FileConfig,
    allow_deletions: Option<u64>,
) -> Result<Policy> {
    let d = Policy::default();
    let fraction = p
        .max_deletion_fraction
        .or(file.max_deletion_fraction)
        .unwrap_or(d.max_deletion_fraction);
    if !(fraction > 0.0 && fraction <= 1.0) {
        bail!("--max-deletion-fraction {fraction}: must be above 0 and at most 1 (e.g. 0.5)");
    }
    let kinds = if p.deletable_protected_kinds.is_empty() {
        file.deletable_protected_kinds.clone().unwrap_or_default()
    } else {
        p.deletable_protected_kinds.clone()
    };
    let deletable_protected = kinds
        .iter()
        .map(|k| k.trim().parse::<Protection>())
        .collect::<Result<_, _>>()
        .context("--deletable-protected-kinds")?;
    Ok(Policy {
        allow_cross_namespace_lineage: p.allow_cross_namespace_lineage
            || file.allow_cross_namespace_lineage.unwrap_or(false),
        max_deletions: p
            .max_deletions
            .or(file.max_deletions)
            .unwrap_or(d.max_deletions),
        max_deletion_fraction: fraction,
        deletable_protected,
        allow_deletions,
    })
}

pub(crate) fn read_file_config(path: Option<&Path>) -> Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

pub(crate) fn duration(flag: &str, v: Option<&str>, default: Duration) -> Result<Duration> {
    match v {
        None => Ok(default),
        Some(s) => {
            tidemark_core::duration::parse(s).map_err(|e| anyhow::anyhow!("--{flag} {s:?}: {e}"))
        }
    }
}

pub(crate) fn parse_selector(s: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').with_context(|| {
            format!("--selector: {part:?} is not key=value (only equality selectors are supported)")
        })?;
        if k.ends_with('!') {
            bail!("--selector: {part:?}: only equality selectors are supported");
        }
        out.insert(
            k.trim().to_string(),
            v.trim_start_matches('=').trim().to_string(),
        );
    }
    Ok(out)
}

pub(crate) fn split_composition(s: &str) -> Result<(String, String)> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => bail!("--composition {s:?}: expected NAMESPACE/NAME"),
    }
}
