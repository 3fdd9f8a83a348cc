//! The status writer against the conformance apiserver (tidemark-model): status subresource,
//! observed generation, rate limit on the caller's clock, clearing of unset fields.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;
use tidemark_api::{
    EtcdMirror, EtcdMirrorSpec, EtcdMirrorStatus, Published, StatusWriter, WallClock, WriteError,
};
use tidemark_core::config::MirrorConfig;
use tidemark_core::mirror::{ConditionType, Phase, Status};
use tidemark_core::Instant;
use tidemark_model::conformance::ConformanceServer;

fn spec() -> EtcdMirrorSpec {
    let mut c = MirrorConfig::new("/app/", "/mirror/");
    c.source.endpoint_list = vec!["http://127.0.0.1:2379".into()];
    c.target.endpoint_list = vec!["http://127.0.0.1:22379".into()];
    EtcdMirrorSpec::from(c)
}

fn secs(s: u64) -> Instant {
    Instant::from_nanos(s * 1_000_000_000)
}

fn api_status(core: &Status, generation: Option<i64>) -> EtcdMirrorStatus {
    EtcdMirrorStatus::from_core(core, generation, |t| WallClock::unix().time(t))
}

#[tokio::test]
async fn status_is_patched_rate_limited_with_the_observed_generation() {
    let server = ConformanceServer::start().await.unwrap();
    let api: Api<EtcdMirror> = Api::namespaced(server.client().unwrap(), "ns");
    let created = api
        .create(&PostParams::default(), &EtcdMirror::new("m", spec()))
        .await
        .unwrap();
    let generation = created.metadata.generation;
    assert_eq!(generation, Some(1));

    let mut w = StatusWriter::new(api.clone(), "m", Duration::from_secs(5));
    let mut core = Status {
        phase: Phase::InitialSync,
        last_applied_revision: 10,
        last_error: Some("source unreachable".into()),
        ..Default::default()
    };
    core.set_condition(
        secs(100),
        ConditionType::SourceReachable,
        false,
        "Dial",
        "refused",
    );
    assert_eq!(
        w.publish(secs(100), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::Written
    );
    assert_eq!(
        w.publish(secs(101), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::Unchanged
    );

    core.phase = Phase::Syncing;
    core.last_applied_revision = 11;
    core.last_error = None;
    core.set_condition(
        secs(102),
        ConditionType::SourceReachable,
        true,
        "Connected",
        "",
    );
    assert_eq!(
        w.publish(secs(102), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::RateLimited
    );
    assert!(!w.due(secs(104)));
    assert!(w.due(secs(105)));
    assert_eq!(
        w.publish(secs(105), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::Written
    );

    let got = api.get_status("m").await.unwrap();
    let st = got.status.expect("status written");
    assert_eq!(st.last_applied_revision, 11);
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(
        st.last_error, None,
        "a cleared field is cleared on the server"
    );
    let c = st.condition("SourceReachable").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "Connected")
    );
    assert_eq!(c.observed_generation, Some(1));
    assert_eq!(c.last_transition_time.0.to_string(), "1970-01-01T00:01:42Z");
    assert_eq!(
        got.metadata.generation,
        Some(1),
        "a status write does not bump the generation"
    );
    assert_eq!(got.spec, spec(), "a status write leaves the spec alone");

    // A spec change bumps the generation; the next status carries it.
    let mut changed = spec();
    changed.config.mode = tidemark_core::config::Mode::Drain;
    let patched = api
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": changed})),
        )
        .await
        .unwrap();
    let generation = patched.metadata.generation;
    assert_eq!(generation, Some(2));
    core.phase = Phase::Draining;
    assert_eq!(
        w.publish(secs(106), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::RateLimited
    );
    assert_eq!(
        w.publish_now(secs(106), &api_status(&core, generation))
            .await
            .unwrap(),
        Published::Written
    );
    let st = api.get_status("m").await.unwrap().status.unwrap();
    assert_eq!(st.observed_generation, Some(2));
    assert_eq!(st.phase, tidemark_api::status::Phase::Draining);

    api.delete("m", &DeleteParams::default()).await.unwrap();
    core.last_applied_revision = 12;
    match w
        .publish_now(secs(200), &api_status(&core, generation))
        .await
    {
        Err(WriteError::NotFound(name)) => assert_eq!(name, "m"),
        other => panic!("expected NotFound, got {other:?}"),
    }
}
