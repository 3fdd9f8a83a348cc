//! One-shot operations behind `tidemark-inventory record` and `recover`, and the JSON
//! reports they print.

use crate::drive::{drive, wall_timestamp, Clock};
use crate::exec::Executor;
use crate::settings::ControllerConfig;
use serde_json::{json, Value};
use tidemark_core::inventory::{
    tombstones_json, Mode, Outcome, RecordOutcome, Recorder, Recovery, RecoveryOutcome, ResourceId,
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
    drive(&mut m, exec, &Clock::start(), cfg.request_timeout).await
}

/// Runs the recorder once for `namespace/name`.
pub async fn record_once(
    exec: &Executor,
    cfg: &ControllerConfig,
    namespace: &str,
    name: &str,
) -> RecordOutcome {
    let mut m = Recorder::new(cfg.recorder(), namespace, name);
    drive(&mut m, exec, &Clock::start(), cfg.request_timeout).await
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
/// (each with its effective deletion group, and its protection if it has one), a held plan
/// with how to release it and, when applied, the result for each tombstone and the waits
/// between groups.
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
            obj.insert("tombstones".into(), tombstones_json(&plan.tombstones));
            if let Some(h) = held_json(namespace, name, decision.outcome) {
                obj.insert("held".into(), h);
            }
            if !plan.waits.is_empty() {
                obj.insert("waits".into(), json!(plan.waits));
            }
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
            if let Some(h) = held_json(namespace, name, d.outcome) {
                obj.insert("held".into(), h);
            }
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

/// A held plan's numbers and the command that releases it.
fn held_json(namespace: &str, name: &str, outcome: Outcome) -> Option<Value> {
    let Outcome::Held {
        deletions, limit, ..
    } = outcome
    else {
        return None;
    };
    Some(json!({
        "deletions": deletions,
        "limit": limit,
        "release": format!(
            "tidemark-inventory recover --composition {namespace}/{name} --apply --allow-deletions {deletions}"
        ),
    }))
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
/// failure the operator should retry. An applying run that ended held did not do what was
/// asked, so it is not a success for `recover --apply`.
pub fn recovery_succeeded(mode: Mode, out: &RecoveryOutcome) -> bool {
    let held = |o: Outcome| matches!(o, Outcome::Held { .. }) && mode == Mode::Apply;
    match out {
        RecoveryOutcome::Decided { decision, .. } => !held(decision.outcome),
        RecoveryOutcome::AlreadyDecided(d) => !held(d.outcome),
        RecoveryOutcome::NotEligible(_) => true,
        _ => false,
    }
}
