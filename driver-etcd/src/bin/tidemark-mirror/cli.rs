//! The flags of `tidemark-mirror`: one struct per subcommand, with the config overrides
//! named as the EtcdMirror API names them.

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use tidemark_core::config::{InitialSyncMode, MirrorConfig, Mode};
use tidemark_etcd::config::Overrides;
use tidemark_runtime::{AdminArgs, LogFormat};

#[derive(Debug, Parser)]
#[command(
    name = "tidemark-mirror",
    version,
    about = "Fenced, checkpointed one-way replication of an etcd key range into another etcd cluster",
    long_about = "Fenced, checkpointed one-way replication of an etcd key range into another etcd cluster.\n\n\
The checkpoint (fence) lives inside the target, so the agent is stateless: kill it at any \
moment and start it again; it resumes from the checkpoint without rescanning."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Cmd {
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
pub(crate) struct OperatorArgs {
    /// The tidemark-mirror image the agents run (normally the operator's own).
    #[arg(long, value_name = "IMAGE", env = "TIDEMARK_AGENT_IMAGE")]
    pub(crate) agent_image: String,
    /// imagePullPolicy of the agents.
    #[arg(long, value_enum)]
    pub(crate) agent_image_pull_policy: Option<PullPolicy>,
    /// Log format of the agents.
    #[arg(long, value_enum, default_value = "json")]
    pub(crate) agent_log_format: LogFormat,
    /// Watch only these namespaces (comma-separated or repeated); default: all.
    #[arg(long = "namespace", value_name = "NS", value_delimiter = ',')]
    pub(crate) namespaces: Vec<String>,
    /// Namespace of the leader Lease (the operator's own; set POD_NAMESPACE from the
    /// downward API).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    pub(crate) lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, value_name = "NAME", default_value = "tidemark-operator")]
    pub(crate) lease_name: String,
    /// Kubeconfig file (default: in-cluster, or $KUBECONFIG).
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, value_name = "NAME")]
    pub(crate) context: Option<String>,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value = "plain")]
    pub(crate) log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum PullPolicy {
    #[value(name = "Always")]
    Always,
    #[value(name = "IfNotPresent")]
    IfNotPresent,
    #[value(name = "Never")]
    Never,
}

#[derive(Debug, clap::Args)]
pub(crate) struct DrainArgs {
    /// The agent's control listener (its --control-addr).
    #[arg(long, value_name = "HOST:PORT", default_value = tidemark_runtime::admin::DEFAULT_CONTROL_ADDR)]
    pub(crate) control_addr: String,
    /// The agent's control Unix socket (its --control-socket), instead of --control-addr.
    #[arg(long, value_name = "PATH", conflicts_with = "control_addr")]
    pub(crate) control_socket: Option<PathBuf>,
    /// File holding the bearer token of the agent's --control-token-file.
    #[arg(long, value_name = "FILE")]
    pub(crate) control_token_file: Option<PathBuf>,
    /// Give up (exit 1) when no cut-over is published within this long.
    #[arg(long, default_value = "30m", value_parser = parse_duration)]
    pub(crate) timeout: std::time::Duration,
    /// Do not draw drain progress on the terminal.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct PreflightArgs {
    #[command(flatten)]
    pub(crate) spec: SpecArgs,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) output: OutputFormat,
    /// Most source keys read to size the range and find its largest value.
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub(crate) sample_keys: u64,
}

/// Where the spec comes from: a config file, or an EtcdMirror (`run` and `preflight`).
#[derive(Debug, clap::Args)]
pub(crate) struct SpecArgs {
    /// Mirror config (YAML or JSON, EtcdMirror field names).
    #[arg(
        long,
        short = 'c',
        value_name = "FILE",
        required_unless_present = "resource",
        conflicts_with = "resource"
    )]
    pub(crate) config: Option<PathBuf>,
    /// Take the spec from this EtcdMirror (its Secrets and Services resolved); `run` also
    /// writes its status back through the status subresource. In-cluster credentials unless
    /// --kubeconfig or --context is given.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub(crate) resource: Option<tidemark_api::ResourceRef>,
    /// Kubeconfig file for --resource.
    #[arg(long, value_name = "FILE", requires = "resource")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for --resource.
    #[arg(long, value_name = "NAME", requires = "resource")]
    pub(crate) context: Option<String>,
    #[command(flatten)]
    pub(crate) overrides: OverrideArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct VerifyArgs {
    #[command(flatten)]
    pub(crate) cfg: ConfigArgs,
    /// Keep comparing until equal for at most this long (e.g. "30s"; "0" compares once).
    #[arg(long, default_value = "0", value_parser = parse_duration)]
    pub(crate) wait: std::time::Duration,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    tidemark_core::duration::parse(s).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub(crate) struct ConfigArgs {
    /// Mirror config (YAML or JSON, EtcdMirror field names).
    #[arg(long, short = 'c', value_name = "FILE")]
    pub(crate) config: PathBuf,
    #[command(flatten)]
    pub(crate) overrides: OverrideArgs,
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) spec: SpecArgs,
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value = "plain")]
    pub(crate) log_format: LogFormat,
    /// Do not draw genesis progress on the terminal.
    #[arg(long)]
    pub(crate) no_progress: bool,
    /// After a drain ends (cut over or failed), keep serving /statusz this long so a
    /// waiting `tidemark-mirror drain` can read the outcome; SIGTERM ends it early.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) drain_linger: std::time::Duration,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CheckpointArgs {
    #[command(flatten)]
    pub(crate) cfg: ConfigArgs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ModeArg {
    Sync,
    Drain,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum InitialSyncArg {
    #[value(name = "RequireEmpty")]
    RequireEmpty,
    #[value(name = "Overwrite")]
    Overwrite,
    #[value(name = "OverwriteAndPrune")]
    OverwriteAndPrune,
}

/// Flags that override config fields.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OverrideArgs {
    /// Override source.endpointList (comma-separated URLs).
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    pub(crate) source_endpoints: Option<Vec<String>>,
    /// Override target.endpointList (comma-separated URLs).
    #[arg(long, value_name = "URLS", value_delimiter = ',')]
    pub(crate) target_endpoints: Option<Vec<String>>,
    /// Override source.prefix.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) source_prefix: Option<String>,
    /// Override target.prefix.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) target_prefix: Option<String>,
    /// Override sync.destPrefix.
    #[arg(long, value_name = "PREFIX")]
    pub(crate) dest_prefix: Option<String>,
    /// Override mode.
    #[arg(long, value_enum)]
    pub(crate) mode: Option<ModeArg>,
    /// Override initialSync.mode.
    #[arg(long, value_enum)]
    pub(crate) initial_sync_mode: Option<InitialSyncArg>,
    /// Override initialSync.startRevision.
    #[arg(long, value_name = "REV")]
    pub(crate) start_revision: Option<i64>,
    /// Set initialSync.abandonWatermark: the fence watermark that a SourceHistoryMismatch
    /// failure reported. Only a failed source-history proof on
    /// a checkpoint at exactly this watermark abandons it and copies the current source
    /// afresh with initialSync.mode; a proven history ignores it.
    #[arg(long, value_name = "W")]
    pub(crate) abandon_watermark: Option<i64>,
    /// Override sync.maxTxnOps.
    #[arg(long, value_name = "N")]
    pub(crate) max_txn_ops: Option<u32>,
    /// Override link (the link identity recorded in the fence).
    #[arg(long, value_name = "ID")]
    pub(crate) link: Option<String>,
    /// Enable the periodic diff-and-repair pass with this interval (reconciliation.interval).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub(crate) reconcile_interval: Option<std::time::Duration>,
    /// Override reconciliation.deleteOrphans.
    #[arg(long, value_name = "BOOL")]
    pub(crate) delete_orphans: Option<bool>,
    /// Override sync.maxOpsPerSecond (0 = unpaced).
    #[arg(long, value_name = "N")]
    pub(crate) max_ops_per_second: Option<u32>,
}

impl OverrideArgs {
    pub(crate) fn to_overrides(&self) -> Overrides {
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

pub(crate) fn load(a: &ConfigArgs) -> anyhow::Result<MirrorConfig> {
    tidemark_etcd::config::load(&a.config, &a.overrides.to_overrides())
        .with_context(|| format!("config {}", a.config.display()))
}
