//! One-shot operations behind `tidemark-inventory record` and `recover`, and the JSON
//! reports they print.

use crate::controller::ControllerConfig;
use crate::drive::{drive, wall_timestamp, Clock};
use crate::exec::Executor;
use serde_json::{json, Value};
use tidemark_core::inventory::{
    Mode, RecordOutcome, Recorder, Recovery, RecoveryOutcome, ResourceId, ANN_DELETION_GROUP,
};

/// Runs the recovery machine once for `namespace/name` in `mode`.
pub async fn recover_once(
    exec: &Executor,
    cfg: &ControllerConfig,
    namespace: &str,
    name: &str,
    mode: Mode,
) -> RecoveryOutcome {
    let mut m = Recovery::new(cfg.recovery(mode), namespace, name, wall_timestamp());
    drive(&mut m, exec, &Clock::new(), cfg.request_timeout).await
}

/// Runs the recorder once for `namespace/name`.
pub async fn record_once(
    exec: &Executor,
    cfg: &ControllerConfig,
    namespace: &str,
    name: &str,
) -> RecordOutcome {
    let mut m = Recorder::new(cfg.recorder(), namespace, name);
    drive(&mut m, exec, &Clock::new(), cfg.request_timeout).await
}

fn id_json(id: &ResourceId) -> Value {
    serde_json::to_value(id).unwrap_or(Value::Null)
}

fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Apply => "apply",
        Mode::Plan => "plan",
        Mode::DryRun => "dry-run",
        Mode::Skip => "skip",
    }
}

/// The report `recover` prints: the selected snapshot, the tombstone plan in deletion order
/// (with each entry's deletion group) and, when applied, the result for each tombstone.
pub fn recovery_report(namespace: &str, name: &str, mode: Mode, out: &RecoveryOutcome) -> Value {
    let mut v = json!({
        "composition": format!("{namespace}/{name}"),
        "mode": mode_name(mode),
    });
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    match out {
        RecoveryOutcome::Decided {
            decision,
            plan,
            written,
        } => {
            obj.insert("result".into(), json!("Decided"));
            obj.insert(
                "decision".into(),
                serde_json::from_str(&decision.to_json()).unwrap_or(Value::Null),
            );
            obj.insert("written".into(), json!(written));
            obj.insert("lineage".into(), json!(plan.lineage));
            if let Some(sel) = &plan.selection {
                obj.insert("selection".into(), sel.inspect_json(None));
            }
            let tombstones: Vec<Value> = plan
                .tombstones
                .iter()
                .map(|e| {
                    let mut t = id_json(&e.resource_id());
                    if let Some(m) = t.as_object_mut() {
                        let group = e
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(ANN_DELETION_GROUP))
                            .cloned();
                        if let Some(g) = group {
                            m.insert("deletionGroup".into(), json!(g));
                        }
                    }
                    t
                })
                .collect();
            obj.insert("tombstones".into(), json!(tombstones));
            if !plan.results.is_empty() {
                let results: Vec<Value> = plan
                    .results
                    .iter()
                    .map(|(id, r)| {
                        let mut x = id_json(id);
                        if let Some(m) = x.as_object_mut() {
                            m.insert("result".into(), json!(format!("{r:?}")));
                        }
                        x
                    })
                    .collect();
                obj.insert("results".into(), json!(results));
            }
        }
        RecoveryOutcome::AlreadyDecided(d) => {
            obj.insert("result".into(), json!("AlreadyDecided"));
            obj.insert(
                "decision".into(),
                serde_json::from_str(&d.to_json()).unwrap_or(Value::Null),
            );
        }
        RecoveryOutcome::NotEligible(why) => {
            obj.insert("result".into(), json!("NotEligible"));
            obj.insert("detail".into(), json!(why.to_string()));
        }
        RecoveryOutcome::CurrentSlicesUnusable { detail } => {
            obj.insert("result".into(), json!("CurrentSlicesUnusable"));
            obj.insert("detail".into(), json!(detail));
        }
        RecoveryOutcome::CompositionChanged { detail } => {
            obj.insert("result".into(), json!("CompositionChanged"));
            obj.insert("detail".into(), json!(detail));
        }
        RecoveryOutcome::Failed {
            detail, retryable, ..
        } => {
            obj.insert("result".into(), json!("Failed"));
            obj.insert("detail".into(), json!(detail));
            obj.insert("retryable".into(), json!(retryable));
        }
    }
    v
}

/// The report `record` prints.
pub fn record_report(namespace: &str, name: &str, out: &RecordOutcome) -> Value {
    let mut v = serde_json::to_value(out).unwrap_or(Value::Null);
    if let Value::String(s) = v {
        v = json!({ s: {} });
    }
    json!({"composition": format!("{namespace}/{name}"), "outcome": v})
}

/// Whether a recovery outcome is a decision (or a reason not to make one), as opposed to a
/// failure the operator should retry.
pub fn recovery_succeeded(out: &RecoveryOutcome) -> bool {
    matches!(
        out,
        RecoveryOutcome::Decided { .. }
            | RecoveryOutcome::AlreadyDecided(_)
            | RecoveryOutcome::NotEligible(_)
    )
}
