//! The operator end to end, as a user runs it: the README's `kubectl` lines, through the real
//! `kubectl` binary, against the conformance apiserver, with two real etcd servers.
//!
//! 1. `kubectl apply -f deploy/` (the CRD first, waited for);
//! 2. the operator's Deployment, as stored, started as two pods (the real binary with
//!    exactly its args and env, as uid 65532, each on its own pod IP): one leads, one waits;
//! 3. two EtcdMirrors make two agent Deployments, owned by them, with the spec's resources;
//! 4. those agents, started from the Deployments' own pod specs, mirror until
//!    `kubectl get etcdmirrors` says `Syncing`; a spec change rolls an agent, Drain does not;
//! 5. `kubectl wait --for=condition=CutoverReady` after `spec.mode: Drain`;
//! 6. deleting the other EtcdMirror removes its Deployment, and its agent stops;
//! 7. `kubectl get events` shows the operator's and the agents' Events;
//! 8. the leader stops on SIGTERM and the standby takes over;
//! 9. every request each pod made is allowed by its RBAC: the operator's by deploy/rbac.yaml,
//!    each agent's by the Role the operator wrote for it.
//!
//! `kubectl` comes from `$KUBECTL` or PATH. Without one the test is skipped, loudly, unless
//! `TIDEMARK_REQUIRE_KUBECTL` is set (CI sets it and installs Debian's kubernetes-client).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::agent::{bin, converge, load};
use support::pod::Pod;
use support::{Etcd, Flags, V};
use tidemark_model::conformance::{AuditRecord, ConformanceServer};

const SEC: Duration = Duration::from_secs(1);

fn deploy(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file)
}

fn kubectl_bin() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// `kubectl ARGS` with the test's kubeconfig: (success, stdout, stderr).
fn kubectl(kc: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(kubectl_bin())
        .args(args)
        .env("KUBECONFIG", kc)
        .output()
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(kc: &Path, args: &[&str]) -> String {
    let (success, out, err) = kubectl(kc, args);
    assert!(success, "kubectl {args:?} failed:\n{out}{err}");
    out
}

/// `kubectl get ... -o json`, or `None` when it is not found.
fn get_json(kc: &Path, args: &[&str]) -> Option<Value> {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["-o", "json"]);
    let (success, out, err) = kubectl(kc, &a);
    if !success {
        assert!(
            err.contains("NotFound") || err.contains("not found"),
            "{err}"
        );
        return None;
    }
    Some(serde_json::from_str(&out).unwrap())
}

async fn eventually<T>(what: &str, t: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + t;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {t:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// RBAC's matching of one rule against one request.
fn allows(rule: &Value, r: &AuditRecord) -> bool {
    let any = |k: &str, v: &str| {
        rule[k]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == v || x == "*"))
    };
    let names = rule["resourceNames"].as_array();
    any("apiGroups", &r.group)
        && any("resources", &r.resource)
        && any("verbs", &r.verb)
        && names.is_none_or(|n| {
            r.name
                .as_ref()
                .is_some_and(|name| n.iter().any(|x| x == name))
        })
}

fn mirror_yaml(name: &str, src: &Etcd, sp: &str, tgt: &Etcd, tp: &str, pod: &str) -> String {
    format!(
        "apiVersion: tidemark.dev/v1alpha1\nkind: EtcdMirror\nmetadata:\n  name: {name}\n  \
         namespace: mirrors\nspec:\n  source:\n    endpointList: [\"{}\"]\n    prefix: {sp}\n  \
         target:\n    endpointList: [\"{}\"]\n    prefix: {tp}\n{pod}",
        src.url, tgt.url
    )
}

fn spec_hash(d: &Value) -> Value {
    d["spec"]["template"]["metadata"]["annotations"]["tidemark.dev/spec-hash"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_runs_one_agent_per_etcdmirror() {
    if std::process::Command::new(kubectl_bin())
        .args(["version", "--client"])
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("TIDEMARK_REQUIRE_KUBECTL").is_none(),
            "TIDEMARK_REQUIRE_KUBECTL is set but {} does not run",
            kubectl_bin()
        );
        eprintln!("!!!!! SKIPPING the operator test: no kubectl (set KUBECTL or PATH) !!!!!");
        return;
    }
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    load(&src, "/a/", 200, 32).await;
    load(&src, "/b/", 100, 32).await;
    let dir = tempfile::tempdir().unwrap();
    let server = ConformanceServer::start().await.unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, server.kubeconfig_yaml_for("admin")).unwrap();
    // The pods run a copy of the binary that their runAsUser can read.
    let exe = dir.path().join("tidemark-mirror");
    std::fs::copy(bin(), &exe).unwrap();

    // README: the CRD, waited for; then the rest of deploy/.
    ok(&kc, &["apply", "-f", deploy("crd.yaml").to_str().unwrap()]);
    ok(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/etcdmirrors.tidemark.dev",
            "--timeout=10s",
        ],
    );
    let applied = ok(&kc, &["apply", "-f", deploy("").to_str().unwrap()]);
    for created in [
        "namespace/tidemark",
        "deployment.apps/tidemark-operator",
        "serviceaccount/tidemark-operator",
        "clusterrole.rbac.authorization.k8s.io/tidemark-operator",
        "networkpolicy.networking.k8s.io/tidemark-operator",
    ] {
        assert!(
            applied.contains(created),
            "{created} not applied:\n{applied}"
        );
    }

    // The operator's Deployment as stored, run as two replicas.
    let operator = get_json(&kc, &["deployment", "tidemark-operator", "-n", "tidemark"]).unwrap();
    let replicas = operator["spec"]["replicas"].as_u64().unwrap();
    assert_eq!(replicas, 2, "a standby takes over from a lost leader");
    let mut ops: Vec<Pod> = (0..replicas)
        .map(|i| {
            Pod::start(
                dir.path(),
                &exe,
                &operator,
                &format!("tidemark-operator-{i}"),
                &format!("127.0.0.{}", 11 + i),
                &server,
            )
        })
        .collect();
    for p in &mut ops {
        p.ready(30 * SEC).await;
    }
    let roles = |ops: &[Pod]| -> Vec<String> {
        ops.iter()
            .map(|p| {
                p.statusz()
                    .map(|s| s["role"].as_str().unwrap_or("").to_string())
                    .unwrap_or_default()
            })
            .collect()
    };
    let leader = eventually("one operator leads", 30 * SEC, || {
        let r = roles(&ops);
        (r.iter().filter(|x| *x == "leader").count() == 1 && r.iter().any(|x| x == "standby"))
            .then(|| r.iter().position(|x| x == "leader").unwrap())
    })
    .await;

    // Two EtcdMirrors, one with pod settings.
    let manifest = dir.path().join("mirrors.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: mirrors\n---\n{}---\n{}",
            mirror_yaml(
                "a",
                &src,
                "/a/",
                &tgt,
                "/ma/",
                "  pod:\n    resources:\n      requests: {cpu: 250m, memory: 96Mi}\n    \
                 priorityClassName: mirror-critical\n"
            ),
            mirror_yaml("b", &src, "/b/", &tgt, "/mb/", "")
        ),
    )
    .unwrap();
    ok(&kc, &["apply", "-f", manifest.to_str().unwrap()]);
    let mirror = |name: &str| get_json(&kc, &["etcdmirror", name, "-n", "mirrors"]).unwrap();
    let deployment = |name: &str| get_json(&kc, &["deployment", name, "-n", "mirrors"]);
    let (da, db) = eventually("two agent Deployments", 30 * SEC, || {
        Some((
            deployment("tidemark-mirror-a")?,
            deployment("tidemark-mirror-b")?,
        ))
    })
    .await;
    for (d, m) in [(&da, mirror("a")), (&db, mirror("b"))] {
        let owner = &d["metadata"]["ownerReferences"][0];
        assert_eq!(owner["uid"], m["metadata"]["uid"], "{d}");
        assert_eq!(owner["kind"], "EtcdMirror");
        assert_eq!(owner["controller"], true);
        assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
        assert_eq!(d["spec"]["replicas"], 1);
    }
    let pod_a = &da["spec"]["template"]["spec"];
    assert_eq!(
        pod_a["containers"][0]["resources"],
        serde_json::json!({"requests": {"cpu": "250m", "memory": "96Mi"}})
    );
    assert_eq!(pod_a["priorityClassName"], "mirror-critical");
    assert_eq!(
        pod_a["containers"][0]["image"],
        operator["spec"]["template"]["spec"]["containers"][0]["image"],
        "agents run the operator's image"
    );
    assert_eq!(
        db["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"], "512Mi",
        "the default resources"
    );
    for kind in ["serviceaccount", "role", "rolebinding"] {
        for name in ["tidemark-mirror-a", "tidemark-mirror-b"] {
            assert!(
                get_json(&kc, &[kind, name, "-n", "mirrors"]).is_some(),
                "{kind} {name}"
            );
        }
    }

    // The agents, from their Deployments' pod specs.
    let mut agent_a = Pod::start(dir.path(), &exe, &da, "agent-a", "127.0.0.21", &server);
    let mut agent_b = Pod::start(dir.path(), &exe, &db, "agent-b", "127.0.0.22", &server);
    agent_a.ready(60 * SEC).await;
    agent_b.ready(60 * SEC).await;
    eventually(
        "both mirrors Syncing in kubectl get etcdmirrors",
        60 * SEC,
        || {
            let table = ok(&kc, &["get", "etcdmirrors", "-n", "mirrors"]);
            let syncing = table.lines().filter(|l| l.contains("Syncing")).count();
            (syncing == 2).then(|| {
                for column in ["PHASE", "WATERMARK", "LAG", "AGE"] {
                    assert!(table.contains(column), "no {column} column:\n{table}");
                }
            })
        },
    )
    .await;
    converge(&src, "/a/", &tgt, "/ma/", &[], 10 * SEC).await;
    converge(&src, "/b/", &tgt, "/mb/", &[], 10 * SEC).await;
    // A stranger on the pod network cannot cut over: no control on the admin port.
    let addr = agent_a.port("admin");
    let post = format!(
        "POST /v1/drain HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\n\r\n{{}}"
    );
    assert_eq!(support::agent::exchange(&addr, &post).unwrap().0, 404);

    // A spec change rolls the agent (a new pod-template hash); the agent of the old pod
    // keeps running until the Deployment replaces it.
    ok(
        &kc,
        &[
            "patch",
            "etcdmirror",
            "b",
            "-n",
            "mirrors",
            "--type=merge",
            "-p",
            r#"{"spec":{"pod":{"nodeSelector":{"zone":"b"}}}}"#,
        ],
    );
    let rolled = eventually("Deployment b rolled", 30 * SEC, || {
        let d = deployment("tidemark-mirror-b")?;
        (spec_hash(&d) != spec_hash(&db)).then_some(d)
    })
    .await;
    assert_eq!(
        rolled["spec"]["template"]["spec"]["nodeSelector"]["zone"],
        "b"
    );
    assert!(agent_b.exited().is_none(), "{}", agent_b.log());

    // README: cut over by switching the mode, and wait for it. The pod is not rolled.
    ok(
        &kc,
        &[
            "patch",
            "etcdmirror",
            "a",
            "-n",
            "mirrors",
            "--type=merge",
            "-p",
            r#"{"spec":{"mode":"Drain"}}"#,
        ],
    );
    let kc2 = kc.clone();
    let (waited, out, err) = tokio::task::spawn_blocking(move || {
        kubectl(
            &kc2,
            &[
                "wait",
                "etcdmirror/a",
                "-n",
                "mirrors",
                "--for=condition=CutoverReady",
                "--timeout=90s",
            ],
        )
    })
    .await
    .unwrap();
    assert!(waited, "kubectl wait: {out}{err}\n{}", agent_a.log());
    assert!(out.contains("condition met"), "{out}");
    let after = deployment("tidemark-mirror-a").unwrap();
    assert_eq!(
        spec_hash(&after),
        spec_hash(&da),
        "Drain must not roll the agent"
    );
    assert_eq!(
        after["metadata"]["generation"],
        da["metadata"]["generation"]
    );

    // Deleting an EtcdMirror removes its agent objects, and its running agent stops.
    ok(&kc, &["delete", "etcdmirror", "b", "-n", "mirrors"]);
    let left = || -> Vec<&str> {
        ["deployment", "serviceaccount", "role", "rolebinding"]
            .into_iter()
            .filter(|k| get_json(&kc, &[k, "tidemark-mirror-b", "-n", "mirrors"]).is_some())
            .collect()
    };
    let deadline = tokio::time::Instant::now() + 60 * SEC;
    while !left().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let still = left();
    assert!(
        still.is_empty(),
        "b's agent objects still there after 60s: {still:?}\noperator logs:\n{}",
        ops.iter()
            .map(|o| o.log())
            .collect::<Vec<_>>()
            .join("\n---\n")
    );
    let exit = agent_b.exit_within(30 * SEC).await;
    assert!(exit.success(), "agent b: {exit}\n{}", agent_b.log());
    assert!(deployment("tidemark-mirror-a").is_some());

    // Events from the operator and the agents.
    eventually("the operator's and the agents' Events", 20 * SEC, || {
        let events = ok(&kc, &["get", "events", "-n", "mirrors"]);
        ["AgentCreated", "AgentUpdated", "Syncing", "CutoverReady"]
            .iter()
            .all(|r| events.contains(r))
            .then_some(())
    })
    .await;

    // The leader stops on SIGTERM (releasing the lease); the standby takes over.
    let exit = ops[leader].terminate().await;
    assert!(exit.success(), "operator: {exit}\n{}", ops[leader].log());
    let standby = 1 - leader;
    eventually("the standby leads", 30 * SEC, || {
        (ops[standby].statusz()?["role"] == "leader").then_some(())
    })
    .await;
    // The new leader reconciles what exists (and writes nothing new for a settled mirror).
    eventually("the new leader reconciled a", 30 * SEC, || {
        ops[standby].statusz()?["mirrors"]
            .get("mirrors/a")
            .map(|_| ())
    })
    .await;
    let exit = agent_a.terminate().await;
    assert!(exit.success(), "agent a: {exit}\n{}", agent_a.log());
    for host in agent_a.fs.mounts.values() {
        assert_eq!(
            std::fs::read_dir(host).unwrap().count(),
            0,
            "Secret scratch left in {host:?}"
        );
    }

    // Every request each pod made is one its RBAC allows.
    let rbac: Vec<Value> = {
        let text = std::fs::read_to_string(deploy("rbac.yaml")).unwrap();
        serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect()
    };
    let cluster_rules = rbac[0]["rules"].as_array().unwrap().clone();
    let lease_role = rbac.iter().find(|d| d["kind"] == "Role").unwrap();
    let audit = server.audit();
    let operator_user = &ops[0].user;
    let mut operator_requests = 0;
    for r in audit
        .iter()
        .filter(|r| r.user.as_ref() == Some(operator_user))
    {
        operator_requests += 1;
        let lease_ok = r.namespace.as_deref() == lease_role["metadata"]["namespace"].as_str()
            && lease_role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|rule| allows(rule, r));
        assert!(
            lease_ok || cluster_rules.iter().any(|rule| allows(rule, r)),
            "deploy/rbac.yaml does not allow the operator's {r:?}"
        );
        assert_ne!(r.resource, "secrets", "the operator read a Secret: {r:?}");
    }
    assert!(
        operator_requests > 10,
        "the operator's requests were not attributed"
    );
    for agent in [&agent_a, &agent_b] {
        let sa = agent.pod_spec["serviceAccountName"].as_str().unwrap();
        let role = server.with_api(|api, _| {
            api.peek(
                &tidemark_model::apiserver::Gvr::new("rbac.authorization.k8s.io", "v1", "roles"),
                "mirrors",
                sa,
            )
            .cloned()
        });
        // b's Role is gone with b; a's is still there. Check b against what it was.
        let rules = match role {
            Some(r) => r["rules"].clone(),
            None => serde_json::to_value(tidemark_api::workload::role_rules(
                "b",
                &support::agent::config(&src, "/b/", &tgt, "/mb/"),
            ))
            .unwrap(),
        };
        let mine: Vec<&AuditRecord> = audit
            .iter()
            .filter(|r| r.user.as_ref() == Some(&agent.user))
            .collect();
        assert!(
            mine.iter()
                .any(|r| r.verb == "patch" && r.resource == "etcdmirrors/status"),
            "{} wrote no status: {mine:#?}",
            agent.name
        );
        for r in mine {
            assert_eq!(r.namespace.as_deref(), Some("mirrors"), "{r:?}");
            assert!(
                rules.as_array().unwrap().iter().any(|rule| allows(rule, r)),
                "the Role of {} does not allow {r:?}",
                agent.name
            );
        }
    }
}
