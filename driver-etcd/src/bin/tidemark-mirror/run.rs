//! `run` and `operator`: the long-running commands, wired from the library's agent,
//! admin server, status publisher and start checks.

use crate::cli::{OperatorArgs, RunArgs, SpecArgs};
use anyhow::{bail, Context};
use std::process::ExitCode;
use tidemark_core::config::{MirrorConfig, Mode};
use tidemark_core::etcd::Cluster;
use tidemark_core::mirror::io::{Control, StopReason};
use tidemark_core::mirror::{Mirror, Phase, Status};
use tidemark_core::Instant;
use tidemark_etcd::agent::{AgentOptions, StatusSink};
use tidemark_etcd::metrics::MirrorMetrics;
use tidemark_etcd::resource::{Ended, StatusFeed};
use tidemark_etcd::{Agent, Executor};
use tidemark_runtime::{Admin, AdminHandle, LogFormat, Progress, Shutdown};
use tokio::sync::mpsc;

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

pub(crate) async fn operator(a: OperatorArgs) -> anyhow::Result<ExitCode> {
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
pub(crate) async fn run_spec(
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

pub(crate) async fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
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
