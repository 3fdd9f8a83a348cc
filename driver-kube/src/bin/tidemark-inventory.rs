//! `tidemark-inventory`: records Eno Composition inventories as Secrets in the downstream
//! cluster and recovers lost history from them.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;
use tidemark_core::inventory::{Mode, Policy, Protection};
use tidemark_kube::controller::{Controller, ControllerConfig, ControllerStats};
use tidemark_kube::exec::{Clusters, Executor};
use tidemark_kube::{inspect, ops};
use tidemark_runtime::{logging, Admin, AdminArgs, LogFormat, Shutdown};

/// Records the resource inventory of every Ready Eno synthesis as chunked Secrets in the
/// downstream cluster, and on recovery selects the newest complete snapshot of a lineage and
/// deletes the resources the current synthesis no longer has.
#[derive(Debug, Parser)]
#[command(name = "tidemark-inventory", version)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Global {
    /// Optional config file (YAML or JSON) with the same settings in camelCase
    /// (kubeconfig, context, downstreamKubeconfig, downstreamContext, secretNamespace,
    /// namespace, selector, recovery, minInterval, resync, requestTimeout,
    /// allowCrossNamespaceLineage, maxDeletions, maxDeletionFraction,
    /// deletableProtectedKinds, groupWait). Flags win.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Kubeconfig of the cluster holding Eno's Compositions (default: in-cluster or
    /// $KUBECONFIG / ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Context in that kubeconfig.
    #[arg(long, global = true)]
    context: Option<String>,
    /// Kubeconfig of the downstream cluster (Secrets, recovered resources); defaults to the
    /// Eno cluster.
    #[arg(long, global = true, value_name = "FILE")]
    downstream_kubeconfig: Option<PathBuf>,
    /// Context for the downstream cluster.
    #[arg(long, global = true)]
    downstream_context: Option<String>,
    /// Namespace of the inventory Secrets in the downstream cluster [default: kube-system].
    #[arg(long, global = true)]
    secret_namespace: Option<String>,
    /// Timeout of one Kubernetes request, e.g. 30s.
    #[arg(long, global = true, value_name = "DURATION")]
    request_timeout: Option<String>,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Plain)]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
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
struct PolicyArgs {
    /// Accept a snapshot recorded for another namespace, or a lineage override naming
    /// another namespace's lineage. Only for moving a Composition on purpose: otherwise a
    /// user of one namespace could point recovery at another namespace's resources.
    #[arg(long)]
    allow_cross_namespace_lineage: bool,
    /// Hold a plan (delete nothing, wait for an operator) that would delete more than N
    /// resources [default: 100].
    #[arg(long, value_name = "N")]
    max_deletions: Option<u64>,
    /// Hold a plan that would delete more than this fraction of the snapshot's entries
    /// [default: 0.5].
    #[arg(long, value_name = "FRACTION")]
    max_deletion_fraction: Option<f64>,
    /// Protected tombstones recovery may delete after all: Namespace,
    /// CustomResourceDefinition, kube-system (anything in that namespace). Comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "KINDS")]
    deletable_protected_kinds: Vec<String>,
}

/// How recovery waits between deletion groups.
#[derive(Debug, Clone, Args)]
struct WaitArgs {
    /// Longest wait for one deletion group's objects to be gone (finalizers) before the
    /// next group starts anyway, e.g. 5m [default: 5m].
    #[arg(long, value_name = "DURATION")]
    group_wait: Option<String>,
}

#[derive(Debug, Args)]
struct ControllerArgs {
    /// Namespace of the Compositions to watch [default: default].
    #[arg(long)]
    namespace: Option<String>,
    /// Equality label selector for Compositions, e.g. `team=a,env=prod`.
    #[arg(long)]
    selector: Option<String>,
    /// `apply` deletes tombstones automatically (as Eno does); `plan` records the plan and
    /// waits for `recover --apply` or `--skip`.
    #[arg(long, value_enum)]
    recovery: Option<RecoveryMode>,
    /// Least time between two reconciles of one Composition (jittered), e.g. 1s.
    #[arg(long, value_name = "DURATION")]
    min_interval: Option<String>,
    /// Full resync period, e.g. 10m.
    #[arg(long, value_name = "DURATION")]
    resync: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    wait: WaitArgs,
    #[command(flatten)]
    admin: AdminArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RecoveryMode {
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
struct FileConfig {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    downstream_kubeconfig: Option<PathBuf>,
    downstream_context: Option<String>,
    secret_namespace: Option<String>,
    namespace: Option<String>,
    selector: Option<String>,
    recovery: Option<RecoveryMode>,
    min_interval: Option<String>,
    resync: Option<String>,
    request_timeout: Option<String>,
    allow_cross_namespace_lineage: Option<bool>,
    max_deletions: Option<u64>,
    max_deletion_fraction: Option<f64>,
    deletable_protected_kinds: Option<Vec<String>>,
    group_wait: Option<String>,
}

/// The recovery policy from flags, then the config file, then the defaults. Values that
/// would make the budget meaningless are refused with the fix.
fn policy(p: &PolicyArgs, file: &FileConfig, allow_deletions: Option<u64>) -> Result<Policy> {
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

fn read_file_config(path: Option<&Path>) -> Result<FileConfig> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("parsing config file {}", path.display()))
}

fn duration(flag: &str, v: Option<&str>, default: Duration) -> Result<Duration> {
    match v {
        None => Ok(default),
        Some(s) => {
            tidemark_core::duration::parse(s).map_err(|e| anyhow::anyhow!("--{flag} {s:?}: {e}"))
        }
    }
}

fn parse_selector(s: &str) -> Result<BTreeMap<String, String>> {
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

fn split_composition(s: &str) -> Result<(String, String)> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => bail!("--composition {s:?}: expected NAMESPACE/NAME"),
    }
}

async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<kube::Client> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let cfg = match kubeconfig {
        Some(p) => {
            let kc = Kubeconfig::read_from(p)
                .with_context(|| format!("reading kubeconfig {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .with_context(|| format!("using kubeconfig {}", p.display()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&opts)
            .await
            .context("loading the default kubeconfig")?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig given and none could be inferred")?,
    };
    kube::Client::try_from(cfg).context("building the Kubernetes client")
}

struct Resolved {
    cfg: ControllerConfig,
    exec: Executor,
}

/// What one command runs with. `composition_namespace` is the namespace of the one
/// Composition `record` and `recover` act on: their scope, whatever the controller's default.
async fn resolve(
    g: &Global,
    file: &FileConfig,
    composition_namespace: Option<&str>,
    policy: Policy,
    wait: &WaitArgs,
    c: Option<&ControllerArgs>,
) -> Result<Resolved> {
    let kubeconfig = g.kubeconfig.clone().or_else(|| file.kubeconfig.clone());
    let context = g.context.clone().or_else(|| file.context.clone());
    let eno = client(kubeconfig.as_deref(), context.as_deref()).await?;
    let dk = g
        .downstream_kubeconfig
        .clone()
        .or_else(|| file.downstream_kubeconfig.clone());
    let dc = g
        .downstream_context
        .clone()
        .or_else(|| file.downstream_context.clone());
    let downstream = if dk.is_none() && dc.is_none() {
        eno.clone()
    } else {
        client(dk.as_deref().or(kubeconfig.as_deref()), dc.as_deref()).await?
    };
    let d = ControllerConfig::default();
    let mut cfg = ControllerConfig {
        secret_namespace: g
            .secret_namespace
            .clone()
            .or_else(|| file.secret_namespace.clone())
            .unwrap_or(d.secret_namespace.clone()),
        request_timeout: duration(
            "request-timeout",
            g.request_timeout
                .as_deref()
                .or(file.request_timeout.as_deref()),
            d.request_timeout,
        )?,
        group_wait: duration(
            "group-wait",
            wait.group_wait.as_deref().or(file.group_wait.as_deref()),
            d.group_wait,
        )?,
        policy,
        ..d.clone()
    };
    if let Some(ns) = composition_namespace {
        cfg.namespace = ns.to_string();
    }
    if let Some(c) = c {
        cfg.namespace = c
            .namespace
            .clone()
            .or_else(|| file.namespace.clone())
            .unwrap_or(d.namespace);
        if let Some(sel) = c.selector.as_deref().or(file.selector.as_deref()) {
            cfg.match_labels = parse_selector(sel)?;
        }
        cfg.recovery_mode = c
            .recovery
            .or(file.recovery)
            .unwrap_or(RecoveryMode::Apply)
            .into();
        cfg.min_interval = duration(
            "min-interval",
            c.min_interval.as_deref().or(file.min_interval.as_deref()),
            d.min_interval,
        )?;
        cfg.resync = duration(
            "resync",
            c.resync.as_deref().or(file.resync.as_deref()),
            d.resync,
        )?;
    }
    Ok(Resolved {
        cfg,
        exec: Executor::new(Clusters { eno, downstream }),
    })
}

fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

async fn run(cli: Cli) -> Result<ExitCode> {
    let file = read_file_config(cli.global.config.as_deref())?;
    match &cli.command {
        Command::Inspect {
            secrets,
            current,
            lineage,
            composition,
            policy: p,
        } => {
            let spath = secrets.display().to_string();
            let stext = std::fs::read_to_string(secrets)
                .with_context(|| format!("reading --secrets {spath}"))?;
            let secrets = inspect::secrets_from(&stext, &spath)?;
            let slices = match current {
                Some(p) => {
                    let cpath = p.display().to_string();
                    let text = std::fs::read_to_string(p)
                        .with_context(|| format!("reading --current {cpath}"))?;
                    Some((inspect::slices_from(&text, &cpath)?, cpath))
                }
                None => None,
            };
            let comp = match composition {
                Some(p) => {
                    let path = p.display().to_string();
                    let text = std::fs::read_to_string(p)
                        .with_context(|| format!("reading --composition {path}"))?;
                    Some(inspect::composition_from(&text, &path)?)
                }
                None => None,
            };
            let out = inspect::inspect(
                &secrets,
                slices.as_ref().map(|(s, _)| s.as_slice()),
                lineage.as_deref(),
                slices.as_ref().map_or("", |(_, p)| p.as_str()),
                comp.as_ref(),
                &policy(p, &file, None)?,
            )?;
            println!("{}", inspect::to_ordered_json(&out));
            Ok(ExitCode::SUCCESS)
        }
        Command::Recover {
            composition,
            apply,
            allow_deletions,
            skip,
            dry_run: _,
            policy: p,
            wait,
        } => {
            let (ns, name) = split_composition(composition)?;
            let policy = policy(p, &file, *allow_deletions)?;
            let r = resolve(&cli.global, &file, Some(&ns), policy, wait, None).await?;
            let mode = if *apply {
                Mode::Apply
            } else if *skip {
                Mode::Skip
            } else {
                Mode::DryRun
            };
            let out = ops::recover_once(&r.exec, &r.cfg, &ns, &name, mode).await;
            print_json(&ops::recovery_report(&ns, &name, mode, &out))?;
            Ok(if ops::recovery_succeeded(mode, &out) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Record {
            composition,
            recovery,
            policy: p,
            wait,
        } => {
            let (ns, name) = split_composition(composition)?;
            let policy = policy(p, &file, None)?;
            let r = resolve(&cli.global, &file, Some(&ns), policy, wait, None).await?;
            let mode: Mode = (*recovery).into();
            let decided = ops::recover_once(&r.exec, &r.cfg, &ns, &name, mode).await;
            let recorded = ops::record_once(&r.exec, &r.cfg, &ns, &name).await;
            let ok = ops::recovery_succeeded(mode, &decided)
                && !matches!(
                    recorded,
                    tidemark_core::inventory::RecordOutcome::Failed { .. }
                );
            print_json(&json!({
                "recovery": ops::recovery_report(&ns, &name, mode, &decided),
                "record": ops::record_report(&ns, &name, &recorded),
            }))?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::Controller(c) => {
            let policy = policy(&c.policy, &file, None)?;
            let r = resolve(&cli.global, &file, None, policy, &c.wait, Some(c)).await?;
            let shutdown = Shutdown::install().context("installing signal handlers")?;
            let admin = Admin::new("tidemark-inventory", env!("CARGO_PKG_VERSION"));
            let handle = admin.handle();
            let server = admin
                .serve(&c.admin.config())
                .await
                .context("starting the admin server")?;
            tracing::info!(
                namespace = %r.cfg.namespace,
                secret_namespace = %r.cfg.secret_namespace,
                recovery = ?r.cfg.recovery_mode,
                policy = ?r.cfg.policy,
                "controller starting"
            );
            let mut metrics = Metrics::register(&handle);
            handle.set_ready();
            let controller = Controller::new(r.cfg.clone(), r.exec);
            let h = handle.clone();
            let stop = async move {
                let signal = shutdown.recv().await;
                tracing::info!(%signal, "stopping");
            };
            let stats = controller
                .run(stop, move |s| {
                    metrics.update(s);
                    h.heartbeat();
                    h.set_status(json!({"phase": "Watching", "stats": s}));
                })
                .await;
            handle.set_not_ready("shutting down");
            server
                .shutdown()
                .await
                .context("stopping the admin server")?;
            tracing::info!(?stats, "controller stopped");
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The controller's Prometheus metrics, mirrored from its counters.
struct Metrics {
    reconciles: Counter,
    decisions: Counter,
    recorded: Counter,
    failures: Counter,
    compositions: Gauge,
    last: ControllerStats,
}

impl Metrics {
    fn register(handle: &tidemark_runtime::AdminHandle) -> Metrics {
        let m = Metrics {
            reconciles: Counter::default(),
            decisions: Counter::default(),
            recorded: Counter::default(),
            failures: Counter::default(),
            compositions: Gauge::default(),
            last: ControllerStats::default(),
        };
        handle.with_registry(|r| {
            r.register(
                "tidemark_inventory_reconciles",
                "Composition reconciles run",
                m.reconciles.clone(),
            );
            r.register(
                "tidemark_inventory_decisions",
                "Recovery decisions written",
                m.decisions.clone(),
            );
            r.register(
                "tidemark_inventory_recorded",
                "Snapshots recorded (at least one Secret written)",
                m.recorded.clone(),
            );
            r.register(
                "tidemark_inventory_reconcile_failures",
                "Reconciles requeued after a failure",
                m.failures.clone(),
            );
            r.register(
                "tidemark_inventory_compositions",
                "Compositions known from the watch",
                m.compositions.clone(),
            );
        });
        m
    }

    fn update(&mut self, s: &ControllerStats) {
        self.reconciles
            .inc_by(s.reconciles.saturating_sub(self.last.reconciles));
        self.decisions
            .inc_by(s.decisions.saturating_sub(self.last.decisions));
        self.recorded
            .inc_by(s.recorded.saturating_sub(self.last.recorded));
        self.failures
            .inc_by(s.failures.saturating_sub(self.last.failures));
        self.compositions
            .set(i64::try_from(s.compositions).unwrap_or(i64::MAX));
        self.last = s.clone();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = logging::init(cli.global.log_format, "info") {
        eprintln!("tidemark-inventory: {e}");
        return ExitCode::from(2);
    }
    match run(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark-inventory: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
