//! What each subcommand does, wired from the library: clients, the controller, its admin
//! server and metrics.

use crate::cli::*;
use anyhow::{Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;
use tidemark_core::inventory::{Mode, Policy};
use tidemark_kube::controller::{Controller, ControllerConfig, ControllerStats};
use tidemark_kube::exec::{Clusters, Executor};
use tidemark_kube::{inspect, ops};
use tidemark_runtime::{Admin, Shutdown};

pub(crate) async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client> {
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

pub(crate) struct Resolved {
    pub(crate) cfg: ControllerConfig,
    pub(crate) exec: Executor,
}

/// What one command runs with. `composition_namespace` is the namespace of the one
/// Composition `record` and `recover` act on: their scope, whatever the controller's default.
pub(crate) async fn resolve(
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

pub(crate) fn print_json(v: &serde_json::Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

pub(crate) async fn run(cli: Cli) -> Result<ExitCode> {
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
pub(crate) struct Metrics {
    pub(crate) reconciles: Counter,
    pub(crate) decisions: Counter,
    pub(crate) recorded: Counter,
    pub(crate) failures: Counter,
    pub(crate) compositions: Gauge,
    pub(crate) last: ControllerStats,
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
