//! The one-shot commands: `checkpoint`, `verify`, `preflight` and `drain`.

use crate::cli::{load, CheckpointArgs, DrainArgs, OutputFormat, PreflightArgs, VerifyArgs};
use crate::run::run_spec;
use anyhow::{bail, Context};
use std::process::ExitCode;
use tidemark_core::etcd::{Cluster, Command, RangeRequest, Reply};
use tidemark_core::mirror::Checkpoint;
use tidemark_etcd::drain::ControlClient;
use tidemark_etcd::Executor;
use tidemark_runtime::LogFormat;

pub(crate) async fn checkpoint(a: CheckpointArgs) -> anyhow::Result<ExitCode> {
    let config = load(&a.cfg)?;
    let exec = Executor::from_config(&config)?;
    let key = config.checkpoint_key();
    let reply = exec
        .run(Command::Range(RangeRequest::latest(
            Cluster::Target,
            key.clone(),
        )))
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

pub(crate) async fn verify(a: VerifyArgs) -> anyhow::Result<ExitCode> {
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

pub(crate) async fn preflight(a: PreflightArgs) -> anyhow::Result<ExitCode> {
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

pub(crate) async fn drain(a: DrainArgs) -> anyhow::Result<ExitCode> {
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
