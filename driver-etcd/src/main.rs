//! `tidemark-mirror`: the standalone mirror agent.
//!
//! `run` replicates a source etcd key range into a target etcd cluster with a fenced
//! checkpoint stored in the target; `checkpoint` prints that checkpoint; `check-config`
//! validates a config without connecting.

use anyhow::{bail, Context};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use tidemark_core::config::{InitialSyncMode, MirrorConfig, Mode};
use tidemark_core::etcd::{Cluster, Command, RangeRequest, Reply, SortBy};
use tidemark_core::mirror::io::{Control, StopReason};
use tidemark_core::mirror::{Checkpoint, Mirror, Phase, Status};
use tidemark_core::Instant;
use tidemark_etcd::agent::{AgentOptions, StatusSink};
use tidemark_etcd::config::Overrides;
use tidemark_etcd::drain::ControlClient;
use tidemark_etcd::metrics::MirrorMetrics;
use tidemark_etcd::resource::{Ended, StatusFeed};
use tidemark_etcd::{Agent, Executor};
use tidemark_runtime::{Admin, AdminArgs, AdminHandle, LogFormat, Progress, Shutdown};
use tokio::sync::mpsc;

#[derive(Debug, Parser)]
#[command(
    name = "tidemark-mirror",
    version,
    about = "Fenced, checkpointed one-way replication of an etcd key range into another etcd cluster",
    long_about = "Fenced, checkpointed one-way replication of an etcd key range into another etcd cluster.\n\n\
The checkpoint (fence) lives inside the target, so the agent is stateless: kill it at any \
moment and start it again; it resumes from the checkpoint without rescanning."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the mirror until stopped (SIGTERM/SIGINT), drained, or failed permanently.
    Run(RunArgs),
    /// Print the decoded checkpoint (fence record) stored in the target, as JSON.
    Checkpoint(CheckpointArgs),
    /// Validate a config (and the files it names) without connecting; print the result.
    CheckConfig(ConfigArgs),
    /// Print the EtcdMirror CustomResourceDefinition (YAML, as checked in at deploy/crd.yaml).
    Crd,
    /// Compare the target range with the rewritten source range key by key; exit 0 when
    /// equal. On a live source, retries until equal or --wait elapses.
    Verify(VerifyArgs),
    /// Check a config against the live clusters without writing anything: reachability
    /// and versions, permissions, limits, the fence, RequireEmpty, quota room and lag.
    /// Exits 0 when all pass, 1 on warnings, 2 on a blocker.
    Preflight(PreflightArgs),
    /// Ask a running agent to drain and cut over (POST /v1/drain on its control listener),
    /// wait for the cut-over, and print the cut-over record (`status.cutover`) as JSON;
    /// exit 0 on CutoverReady. (Under `run --resource`, set `spec.mode: Drain` instead.)
    Drain(DrainArgs),
    /// Run the operator: one managed agent Deployment (with its ServiceAccount and a Role
    /// limited to what the EtcdMirror names) per EtcdMirror, removed with it. One replica
    /// acts at a time (leader election on a Lease).
    Operator(OperatorArgs),
}

#[derive(Debug, clap::Args)]
struct OperatorArgs {
    /// The tidemark-mirror image the agents run (normally the operator's own).
    #[arg(long, value_name = "IMAGE", env = "TIDEMARK_AGENT_IMAGE")]
    agent_image: String,
    /// imagePullPolicy of the agents.
    #[arg(long, value_enum)]
    agent_image_pull_policy: Option<PullPolicy>,
    /// Log format of the agents.
    #[arg(long, value_enum, default_value = "json")]
    agent_log_format: LogFormat,
    /// Watch only these namespaces (comma-separated or repeated); default: all.
    #[arg(long = "namespace", value_name = "NS", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// Namespace of the leader Lease (the operator's own; set POD_NAMESPACE from the
    /// downward API).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, value_name = "NAME", default_value = "tidemark-operator")]
    lease_name: String,
    /// Kubeconfig file (default: in-cluster, or $KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    #[command(flatten)]
    admin: AdminArgs,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value = "plain")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PullPolicy {
    #[value(name = "Always")]
    Always,
    #[value(name = "IfNotPresent")]
    IfNotPresent,
    #[value(name = "Never")]
    Never,
}

#[derive(Debug, clap::Args)]
struct DrainArgs {
    /// The agent's control listener (its --control-addr).
    #[arg(long, value_name = "HOST:PORT", default_value = tidemark_runtime::admin::DEFAULT_CONTROL_ADDR)]
    control_addr: String,
    /// The agent's control Unix socket (its --control-socket), instead of --control-addr.
    #[arg(long, value_name = "PATH", conflicts_with = "control_addr")]
    control_socket: Option<PathBuf>,
    /// File holding the bearer token of the agent's --control-token-file.
    #[arg(long, value_name = "FILE")]
    control_token_file: Option<PathBuf>,
    /// Give up (exit 1) when no cut-over is published within this long.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    timeout: std::time::Duration,
    /// Do not draw drain progress on the terminal.
    #[arg(long)]
    no_progress: bool,
}

#[derive(Debug, clap::Args)]
struct PreflightArgs {
    #[command(flatten)]
    spec: SpecArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    output: OutputFormat,
    /// Most source keys read to size the range and find its largest value.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    sample_keys: u64,
}

/// Where the spec comes from: a config file, or an EtcdMirror (`run` and `preflight`).
#[derive(Debug, clap::Args)]
struct SpecArgs {
    /// Mirror config (YAML or JSON, EtcdMirror field names).
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        required_unless_present = "resource",
        conflicts_with = "resource"
    )]
    config: Option<PathBuf>,
    /// Take the spec from this EtcdMirror (its Secrets and Services resolved); `run` also
    /// writes its status back through the status subresource. In-cluster credentials unless
    /// --kubeconfig or --context is given.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    resource: Option<tidemark_api::ResourceRef>,
    /// Kubeconfig file for --resource.
    #[arg(long, value_name = "FILE", requires = "resource")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for --resource.
    #[arg(long, value_name = "NAME", requires = "resource")]
    context: Option<String>,
    #[command(flatten)]
    overrides: OverrideArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
struct VerifyArgs {
    #[command(flatten)]
    cfg: ConfigArgs,
    /// Keep comparing until equal for at most this long (e.g. "30s"; "0" compares once).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    wait: std::time::Duration,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    tidemark_core::duration::parse(s).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// Mirror config (YAML or JSON, EtcdMirror field names).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    #[command(flatten)]
    overrides: OverrideArgs,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    #[command(flatten)]
    spec: SpecArgs,
    #[command(flatten)]
    admin: AdminArgs,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value = "plain")]
    log_format: LogFormat,
    /// Do not draw genesis progress on the terminal.
    #[arg(long)]
    no_progress: bool,
    /// After a drain ends (cut over or failed), keep serving /statusz this long so a
    /// waiting `tidemark-mirror drain` can read the outcome; SIGTERM ends it early.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    drain_linger: std::time::Duration,
}

#[derive(Debug, clap::Args)]
struct CheckpointArgs {
    #[command(flatten)]
    cfg: ConfigArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    Sync,
    Drain,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum InitialSyncArg {
    #[value(name = "RequireEmpty")]
    RequireEmpty,
    #[value(name = "Overwrite")]
    Overwrite,
    #[value(name = "OverwriteAndPrune")]
    OverwriteAndPrune,
}

/// Flags that override config fields.
#[derive(Debug, Clone, clap::Args)]
struct OverrideArgs {
    /// Override source.endpointList (comma-separated URLs).
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    source_endpoints: Option<Vec<String>>,
    /// Override target.endpointList (comma-separated URLs).
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    target_endpoints: Option<Vec<String>>,
    /// Override source.prefix.
    #[arg(long, value_name = "PREFIX")]
    source_prefix: Option<String>,
    /// Override target.prefix.
    #[arg(long, value_name = "PREFIX")]
    target_prefix: Option<String>,
    /// Override sync.destPrefix.
    #[arg(long, value_name = "PREFIX")]
    dest_prefix: Option<String>,
    /// Override mode.
    #[arg(long, value_enum)]
    mode: Option<ModeArg>,
    /// Override initialSync.mode.
    #[arg(long, value_enum)]
    initial_sync_mode: Option<InitialSyncArg>,
    /// Override initialSync.startRevision.
    #[arg(long, value_name = "REV")]
    start_revision: Option<i64>,
    /// Set initialSync.abandonWatermark: the fence watermark that a SourceHistoryMismatch
    /// failure reported. Only a failed source-history proof on
    /// a checkpoint at exactly this watermark abandons it and copies the current source
    /// afresh with initialSync.mode; a proven history ignores it.
    #[arg(long, value_name = "W")]
    abandon_watermark: Option<i64>,
    /// Override sync.maxTxnOps.
    #[arg(long, value_name = "N")]
    max_txn_ops: Option<u32>,
    /// Override link (the link identity recorded in the fence).
    #[arg(long, value_name = "ID")]
    link: Option<String>,
    /// Enable the periodic diff-and-repair pass with this interval (reconciliation.interval).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    reconcile_interval: Option<std::time::Duration>,
    /// Override reconciliation.deleteOrphans.
    #[arg(long, value_name = "BOOL")]
    delete_orphans: Option<bool>,
    /// Override sync.maxOpsPerSecond (0 = unpaced).
    #[arg(long, value_name = "N")]
    max_ops_per_second: Option<u32>,
}

impl OverrideArgs {
    fn to_overrides(&self) -> Overrides {
        Overrides {
            source_endpoints: self.source_endpoints.clone(),
            target_endpoints: self.target_endpoints.clone(),
            source_prefix: self.source_prefix.clone(),
            target_prefix: self.target_prefix.clone(),
            dest_prefix: self.dest_prefix.clone(),
            mode: self.mode.map(|m| match m {
                ModeArg::Sync => Mode::Sync,
                ModeArg::Drain => Mode::Drain,
            }),
            initial_sync_mode: self.initial_sync_mode.map(|m| match m {
                InitialSyncArg::RequireEmpty => InitialSyncMode::RequireEmpty,
                InitialSyncArg::Overwrite => InitialSyncMode::Overwrite,
                InitialSyncArg::OverwriteAndPrune => InitialSyncMode::OverwriteAndPrune,
            }),
            start_revision: self.start_revision,
            abandon_watermark: self.abandon_watermark,
            max_txn_ops: self.max_txn_ops,
            link: self.link.clone(),
            reconcile_interval: self.reconcile_interval,
            delete_orphans: self.delete_orphans,
            max_ops_per_second: self.max_ops_per_second,
        }
    }
}

fn load(a: &ConfigArgs) -> anyhow::Result<MirrorConfig> {
    tidemark_etcd::config::load(&a.config, &a.overrides.to_overrides())
        .with_context(|| format!("config {}", a.config.display()))
}

/// The operator's start-up validation, before anything connects.
fn operator_options(a: &OperatorArgs) -> anyhow::Result<tidemark_etcd::operator::OperatorOptions> {
    let image = a.agent_image.trim();
    if image.is_empty() || image.contains(char::is_whitespace) {
        bail!("--agent-image {:?} is not an image reference; give e.g. registry.example/tidemark/tidemark-mirror:0.1.0", a.agent_image);
    }
    let label = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    for ns in a.namespaces.iter().chain([&a.lease_namespace]) {
        if !label(ns) {
            bail!("namespace {ns:?} is not a namespace name (lowercase letters, digits and '-', at most 63)");
        }
    }
    if !tidemark_api::pod::is_dns_subdomain(&a.lease_name) {
        bail!(
            "--lease-name {:?} is not an object name (lowercase DNS subdomain)",
            a.lease_name
        );
    }
    let identity = tidemark_etcd::operator::identity();
    Ok(tidemark_etcd::operator::OperatorOptions {
        namespaces: a.namespaces.clone(),
        settings: tidemark_api::workload::AgentSettings {
            image: image.to_string(),
            image_pull_policy: a.agent_image_pull_policy.map(|p| format!("{p:?}")),
            log_format: match a.agent_log_format {
                LogFormat::Json => "json".into(),
                LogFormat::Plain => "plain".into(),
            },
        },
        lease: tidemark_etcd::operator::LeaseConfig::new(
            &a.lease_namespace,
            &a.lease_name,
            &identity,
        ),
    })
}

async fn operator(a: OperatorArgs) -> anyhow::Result<ExitCode> {
    let shutdown = Shutdown::install().context("installing signal handlers")?;
    tidemark_runtime::logging::init(a.log_format, "info")?;
    let opts = operator_options(&a)?;
    let client =
        tidemark_etcd::resource::client(a.kubeconfig.as_deref(), a.context.clone()).await?;
    let admin = Admin::new("tidemark-operator", env!("CARGO_PKG_VERSION"));
    let handle = admin.handle();
    let server = admin
        .serve(&a.admin.config())
        .await
        .context("starting the admin server")?;
    tracing::info!(
        identity = %opts.lease.identity,
        namespaces = ?opts.namespaces,
        agent_image = %opts.settings.image,
        admin = %server.local_addr(),
        "starting operator"
    );
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.recv().await;
        let _ = stop_tx.send(true);
    });
    let result = tidemark_etcd::operator::run(client, opts, handle, stop_rx).await;
    let _ = server.shutdown().await;
    result?;
    tracing::info!("operator stopped");
    Ok(ExitCode::SUCCESS)
}

/// At most one EtcdMirror status patch per this interval; phase changes go out at once.
const STATUS_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);

/// What `run --resource` keeps for the status publisher.
type FromResource = (
    kube::Client,
    tidemark_api::ResourceRef,
    tidemark_api::Resolved,
);

/// The validated config to run, from `--config` or `--resource`; nothing has connected to
/// etcd yet.
async fn run_spec(
    a: &SpecArgs,
    secrets: &std::path::Path,
) -> anyhow::Result<(MirrorConfig, Option<FromResource>)> {
    let overrides = a.overrides.to_overrides();
    if let Some(path) = &a.config {
        let c = tidemark_etcd::config::load(path, &overrides)
            .with_context(|| format!("config {}", path.display()))?;
        return Ok((c, None));
    }
    let Some(r) = a.resource.clone() else {
        bail!("one of --config or --resource is required");
    };
    let client =
        tidemark_etcd::resource::client(a.kubeconfig.as_deref(), a.context.clone()).await?;
    let resolved = tidemark_etcd::resource::load(client.clone(), &r, secrets, &overrides).await?;
    tracing::info!(resource = %r, generation = resolved.generation, uid = %resolved.uid, "spec read from the EtcdMirror");
    Ok((resolved.config.clone(), Some((client, r, resolved))))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tidemark-mirror: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = rt.block_on(async move {
        match cli.cmd {
            Cmd::Run(a) => run(a).await,
            Cmd::Checkpoint(a) => checkpoint(a).await,
            Cmd::Verify(a) => verify(a).await,
            Cmd::Crd => {
                print!("{}", tidemark_api::crd_yaml());
                Ok(ExitCode::SUCCESS)
            }
            Cmd::Drain(a) => drain(a).await,
            Cmd::Preflight(a) => preflight(a).await,
            Cmd::Operator(a) => operator(a).await,
            Cmd::CheckConfig(a) => {
                let c = load(&a)?;
                println!(
                    "config OK: link {}, {} -> {}",
                    c.link_id(),
                    c.source.prefix,
                    String::from_utf8_lossy(&c.target_base())
                );
                for w in tidemark_etcd::config::warnings(&c) {
                    println!("warning: {w}");
                }
                println!(
                    "not checked without connecting: whether source and target are one cluster \
                     under two names (localhost and 127.0.0.1, say); `run` compares cluster IDs \
                     at connect and refuses overlapping ranges (DirectionConflict)"
                );
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tidemark-mirror: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Pushes status into the admin server, metrics and the terminal progress line.
struct Sink {
    admin: AdminHandle,
    metrics: MirrorMetrics,
    progress: Option<Progress>,
    show_progress: bool,
    last_phase: Option<Phase>,
    /// The EtcdMirror status publisher, with --resource.
    resource: Option<StatusFeed>,
    /// The EtcdMirror's Events, with --resource.
    events: Option<tidemark_etcd::events::EventFeed>,
}

impl StatusSink for Sink {
    fn publish(&mut self, s: &Status, now: Instant) {
        if let Some(f) = &self.resource {
            f.offer(s, now);
        }
        if let Some(e) = &mut self.events {
            e.offer(s);
        }
        self.admin.heartbeat();
        self.metrics.update(s);
        match serde_json::to_value(s) {
            Ok(v) => self.admin.set_status(v),
            Err(e) => tracing::warn!(error = %e, "status not serialisable"),
        }
        let available = s.condition(tidemark_core::mirror::ConditionType::Available);
        if available {
            self.admin.set_ready();
        } else {
            self.admin.set_not_ready(format!("phase {:?}", s.phase));
        }
        if self.last_phase != Some(s.phase) {
            tracing::info!(phase = ?s.phase, watermark = s.last_applied_revision, "phase");
            self.last_phase = Some(s.phase);
        }
        if !self.show_progress {
            return;
        }
        let total = (s.initial_sync_total_key_count > 0).then_some(s.initial_sync_total_key_count);
        if s.phase == Phase::InitialSync {
            let p = self
                .progress
                .get_or_insert_with(|| Progress::new("genesis", total).with_unit("keys"));
            p.set_total(total);
            p.set(s.initial_sync_copied_key_count);
        } else if let Some(p) = self.progress.take() {
            p.finish();
        }
    }
}

async fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    // Signals first: from here on SIGTERM no longer kills the process mid-write.
    let shutdown = Shutdown::install().context("installing signal handlers")?;
    tidemark_runtime::logging::init(a.log_format, "info")?;
    // Resolved Secret material lives here (mode 0600) until the agent exits.
    let scratch = std::env::temp_dir();
    let secrets = tempfile::Builder::new()
        .prefix("tidemark-secrets-")
        .tempdir()
        .with_context(|| {
            format!(
                "creating a directory for Secret material under {} (TMPDIR); mount a writable \
                 emptyDir with medium: Memory there, or point TMPDIR at a writable directory",
                scratch.display()
            )
        })?;
    let (config, resource) = run_spec(&a.spec, secrets.path()).await?;
    for w in tidemark_etcd::config::warnings(&config) {
        tracing::warn!(field = %w.field, "{}", w.problem);
    }
    let exec = Executor::from_config(&config)?;
    let seed = getrandom::u64().map_err(|e| anyhow::anyhow!("OS random number generator: {e}"))?;
    let mut mirror = Mirror::new(config.clone(), seed)?;
    if let Some((_, _, resolved)) = &resource {
        // The EtcdMirror design: an agent never claims an epoch below the spec generation,
        // so an agent still running an older spec cannot out-rank the newer one.
        mirror.set_epoch_floor(u64::try_from(resolved.generation).unwrap_or(0));
    }

    let mut admin = Admin::new("tidemark-mirror", env!("CARGO_PKG_VERSION"));
    let handle = admin.handle();
    let metrics = MirrorMetrics::default();
    handle.with_registry(|r| {
        metrics.register(r);
        for (label, cluster) in [("source", Cluster::Source), ("target", Cluster::Target)] {
            r.sub_registry_with_label(("cluster".into(), label.into()))
                .register(
                    "tidemark_mirror_tls_reloads",
                    "Times the TLS certificate, key or CA files changed and were loaded again",
                    exec.conn(cluster).tls_reloads(),
                );
        }
    });
    let (ctl_tx, ctl_rx) = mpsc::channel::<Control>(16);
    // Under --resource the EtcdMirror is the control surface (`spec.mode: Drain`), and
    // Kubernetes RBAC decides who may change it; no HTTP control is served at all.
    let http_controls: &[(&str, Control)] = if resource.is_some() {
        &[]
    } else {
        &[
            ("drain", Control::Drain),
            ("reconcile", Control::Reconcile),
            ("pause", Control::Pause),
            ("resume", Control::Resume),
            ("shutdown", Control::Shutdown),
        ]
    };
    for &(name, control) in http_controls {
        let mut rx = admin.control(name, 4);
        let tx = ctl_tx.clone();
        tokio::spawn(async move {
            while let Some(req) = rx.recv().await {
                match tx.send(control).await {
                    Ok(()) => req.accept(serde_json::json!({"accepted": name})),
                    Err(_) => req.refuse("the mirror has stopped"),
                }
            }
        });
    }
    let (events, event_task) = match &resource {
        Some((client, r, resolved)) => {
            let (feed, task) = tidemark_etcd::events::spawn(client.clone(), r, &resolved.uid);
            (Some(feed), Some(task))
        }
        None => (None, None),
    };
    let publisher = resource.map(|(client, r, resolved)| {
        tidemark_etcd::resource::spawn(client, r, &resolved, STATUS_INTERVAL, ctl_tx.clone())
    });
    drop(ctl_tx);
    let server = admin
        .serve(&a.admin.config())
        .await
        .context("starting the admin server")?;
    // After the listeners are bound (probes answer meanwhile, /readyz says not ready), before
    // anything is written.
    start_checks(&config).await?;

    tracing::info!(
        link = %config.link_id(),
        source = ?config.source.endpoint_list,
        source_prefix = %config.source.prefix,
        target = ?config.target.endpoint_list,
        target_base = %String::from_utf8_lossy(&config.target_base()),
        admin = %server.local_addr(),
        "starting mirror"
    );
    let mut sink = Sink {
        admin: handle,
        metrics,
        progress: None,
        show_progress: !a.no_progress,
        last_phase: None,
        resource: publisher.as_ref().map(|(feed, _)| feed.clone()),
        events,
    };
    let agent = Agent::new(mirror, exec, AgentOptions::default());
    // The signal is shared by the agent and the post-drain linger.
    let (sig_tx, sig_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.recv().await;
        let _ = sig_tx.send(true);
    });
    let mut agent_sig = sig_rx.clone();
    let (reason, mirror) = agent
        .run(
            ctl_rx,
            async move {
                let _ = agent_sig.wait_for(|s| *s).await;
            },
            &mut sink,
        )
        .await;
    if let Some(p) = sink.progress.take() {
        p.finish();
    }
    let s = mirror.status();
    if let Some(e) = &mut sink.events {
        e.offer(s);
    }
    drop(sink.events.take());
    if let Some(t) = event_task {
        t.finish().await;
    }
    if let Some((_, p)) = publisher {
        match p.finish().await {
            Ok(Ended::Finished) => {}
            Ok(Ended::Deleted) => tracing::warn!("the EtcdMirror is gone; no final status written"),
            Err(e) => tracing::warn!(error = %e, "the final EtcdMirror status was not written"),
        }
    }
    let drain_ended = match &reason {
        StopReason::Drained => true,
        StopReason::Failed { .. } => {
            config.mode == Mode::Drain || s.drain_target_revision.is_some()
        }
        StopReason::Shutdown => false,
    };
    if drain_ended && !a.drain_linger.is_zero() {
        let mut sig = sig_rx;
        let _ = tokio::time::timeout(a.drain_linger, sig.wait_for(|s| *s)).await;
    }
    let _ = server.shutdown().await;
    match reason {
        StopReason::Shutdown => {
            tracing::info!(watermark = s.last_applied_revision, "stopped");
            Ok(ExitCode::SUCCESS)
        }
        StopReason::Drained => {
            tracing::info!(
                watermark = s.last_applied_revision,
                "drained; the target is now primary"
            );
            Ok(ExitCode::SUCCESS)
        }
        StopReason::Failed { kind, message } => {
            tracing::error!(kind = kind.name(), %message, "mirror failed");
            eprintln!("tidemark-mirror: failed ({}): {message}", kind.name());
            Ok(ExitCode::from(1))
        }
    }
}

async fn checkpoint(a: CheckpointArgs) -> anyhow::Result<ExitCode> {
    let config = load(&a.cfg)?;
    let exec = Executor::from_config(&config)?;
    let key = config.checkpoint_key();
    let reply = exec
        .run(Command::Range(RangeRequest {
            cluster: Cluster::Target,
            key: key.clone(),
            range_end: Vec::new(),
            revision: 0,
            limit: 0,
            count_only: false,
            keys_only: false,
            sort: SortBy::Key,
        }))
        .await
        .map_err(|f| anyhow::anyhow!("reading the checkpoint from the target: {f}"))?;
    let Reply::Range(r) = reply else {
        bail!("unexpected reply to a range read");
    };
    let Some(kv) = r.kvs.first() else {
        eprintln!(
            "no checkpoint at {:?} in the target (no agent has claimed this link yet)",
            String::from_utf8_lossy(&key)
        );
        return Ok(ExitCode::from(3));
    };
    match Checkpoint::decode(&kv.value) {
        Ok(c) => {
            let mut v = serde_json::to_value(&c)?;
            if let Some(o) = v.as_object_mut() {
                o.insert("targetModRevision".into(), kv.mod_revision.into());
            }
            println!("{}", serde_json::to_string_pretty(&v)?);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!(
                "checkpoint at {:?} is invalid (the mirror fails closed on it): {e}",
                String::from_utf8_lossy(&key)
            );
            Ok(ExitCode::from(1))
        }
    }
}

async fn verify(a: VerifyArgs) -> anyhow::Result<ExitCode> {
    let config = load(&a.cfg)?;
    let exec = Executor::from_config(&config)?;
    let ks = tidemark_core::mirror::KeySpace::new(&config);
    let deadline = std::time::Instant::now() + a.wait;
    loop {
        let c = tidemark_etcd::verify::compare(&exec, &ks)
            .await
            .map_err(|f| anyhow::anyhow!("comparing source and target: {f}"))?;
        if c.equal() || std::time::Instant::now() >= deadline {
            println!("{}", serde_json::to_string_pretty(&c)?);
            if c.equal() {
                eprintln!(
                    "target == source: {} keys compared key by key",
                    c.source_keys
                );
                return Ok(ExitCode::SUCCESS);
            }
            eprintln!(
                "target != source: {} missing, {} divergent, {} orphan",
                c.missing, c.divergent, c.orphan
            );
            return Ok(ExitCode::from(1));
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn preflight(a: PreflightArgs) -> anyhow::Result<ExitCode> {
    tidemark_runtime::logging::init(LogFormat::Plain, "error")?;
    let secrets = tempfile::Builder::new()
        .prefix("tidemark-secrets-")
        .tempdir()
        .context("creating a directory for Secret material (TMPDIR)")?;
    let (config, _) = run_spec(&a.spec, secrets.path()).await?;
    let opts = tidemark_etcd::preflight::Options {
        sample_keys: a.sample_keys,
    };
    let report =
        tidemark_etcd::preflight::check(&config, tidemark_etcd::preflight::Scope::Full, &opts)
            .await?;
    match a.output {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "result": report.worst(),
                "findings": report.findings,
            }))?
        ),
        OutputFormat::Text => tidemark_etcd::preflight::print(&report),
    }
    Ok(ExitCode::from(report.worst().exit_code()))
}

/// The permission and limit checks of `preflight`, before the mirror writes anything; a
/// blocker stops `run` with exit code 2 and preflight's message.
async fn start_checks(config: &MirrorConfig) -> anyhow::Result<()> {
    use tidemark_etcd::preflight::{check, Options, Scope, START_BUDGET};
    let report = match tokio::time::timeout(
        START_BUDGET,
        check(config, Scope::Start, &Options::default()),
    )
    .await
    {
        Ok(r) => r?,
        Err(_) => {
            tracing::warn!("start checks did not finish within {START_BUDGET:?}; starting anyway");
            return Ok(());
        }
    };
    for f in &report.findings {
        match f.level {
            tidemark_etcd::preflight::Level::Pass => {
                tracing::debug!(check = %f.check, "{}", f.detail)
            }
            tidemark_etcd::preflight::Level::Warn => {
                tracing::warn!(check = %f.check, "{}", f.detail)
            }
            tidemark_etcd::preflight::Level::Block => {
                tracing::error!(check = %f.check, "{}", f.detail)
            }
        }
    }
    let blockers: Vec<String> = report
        .blockers()
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect();
    if !blockers.is_empty() {
        bail!(
            "refusing to start; nothing was written:\n  {}",
            blockers.join("\n  ")
        );
    }
    Ok(())
}

async fn drain(a: DrainArgs) -> anyhow::Result<ExitCode> {
    tidemark_runtime::logging::init(LogFormat::Plain, "info")?;
    let mut client = match &a.control_socket {
        Some(p) => ControlClient::unix(p),
        None => ControlClient::tcp(&a.control_addr),
    };
    if let Some(f) = &a.control_token_file {
        client = client.with_token_file(f)?;
    }
    match tidemark_etcd::drain::drain(&client, a.timeout, !a.no_progress).await {
        Ok(cutover) => {
            println!("{}", serde_json::to_string_pretty(&cutover)?);
            eprintln!(
                "cut-over ready: the target is verified and its fence role is Primary (drained at revision {})",
                cutover["drainedRevision"]
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("tidemark-mirror drain: {e}");
            Ok(ExitCode::from(1))
        }
    }
}
