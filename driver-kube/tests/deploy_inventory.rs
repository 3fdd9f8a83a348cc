//! `deploy/inventory/`: the manifests parse, the pod is hardened, the RBAC grants only what
//! the controller uses, and the real binary started with exactly the Deployment's arguments
//! (credentials from `KUBECONFIG`, as a pod gets them from its service account; working
//! directory unwritable, as with `readOnlyRootFilesystem`) becomes ready on `/readyz`.

mod common;

use common::{http_get, kubeconfig_file, Env};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/inventory")
}

/// Every document of every YAML file in `deploy/inventory/`.
fn documents() -> Vec<Value> {
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir())
        .expect("deploy/inventory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("read manifest");
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).expect("YAML");
            if !v.is_null() {
                out.push(v);
            }
        }
    }
    out
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn deployment(docs: &[Value]) -> &Value {
    let d = of_kind(docs, "Deployment");
    assert_eq!(d.len(), 1, "one Deployment");
    d[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_pod_is_hardened_and_probed() {
    let docs = documents();
    let d = deployment(&docs);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(pod["serviceAccountName"], "tidemark-inventory");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        strings(&c["securityContext"]["capabilities"]["drop"]),
        ["ALL"]
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(strings(&c["args"])[0], "controller");
    // The ServiceAccount it names exists.
    assert!(of_kind(&docs, "ServiceAccount")
        .iter()
        .any(|s| s["metadata"]["name"] == "tidemark-inventory"));
}

#[test]
fn rbac_grants_only_what_the_controller_uses() {
    let docs = documents();
    // (kind, name) => rules as (apiGroup, resource, verb).
    let mut granted: Vec<(String, String, String, String, String)> = Vec::new();
    for kind in ["ClusterRole", "Role"] {
        for r in of_kind(&docs, kind) {
            let name = r["metadata"]["name"].as_str().unwrap_or("").to_string();
            for rule in r["rules"].as_array().expect("rules") {
                for g in strings(&rule["apiGroups"]) {
                    for res in strings(&rule["resources"]) {
                        for v in strings(&rule["verbs"]) {
                            granted.push((kind.into(), name.clone(), g.clone(), res.clone(), v));
                        }
                    }
                }
            }
        }
    }
    for (kind, name, group, res, verb) in &granted {
        assert!(
            group != "*" && res != "*" && verb != "*",
            "wildcard in {kind}/{name}"
        );
        let allowed: &[&str] = match (group.as_str(), res.as_str()) {
            ("eno.azure.io", "compositions") => &["get", "list", "watch", "patch"],
            ("eno.azure.io", "resourceslices") => &["get"],
            ("", "secrets") if kind == "Role" && name == "tidemark-inventory-secrets" => {
                &["get", "list", "create", "update"]
            }
            ("events.k8s.io", "events") => &["create", "patch"],
            _ if name == "tidemark-inventory-recovery" => &["get", "delete"],
            _ => &[],
        };
        assert!(
            allowed.contains(&verb.as_str()),
            "{kind}/{name} grants {verb} on {group}/{res}"
        );
        // Nothing protected is deletable, and no Secret outside kube-system at all.
        assert!(
            !(verb == "delete"
                && ["namespaces", "customresourcedefinitions"].contains(&res.as_str())),
            "{kind}/{name} may delete {res}"
        );
    }
    let secrets_role = of_kind(&docs, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "tidemark-inventory-secrets")
        .expect("the Secrets Role");
    assert_eq!(secrets_role["metadata"]["namespace"], "kube-system");
    // Delete rights take effect only through namespaced RoleBindings.
    for b in of_kind(&docs, "ClusterRoleBinding") {
        assert_ne!(b["roleRef"]["name"], "tidemark-inventory-recovery");
    }
    assert!(of_kind(&docs, "RoleBinding")
        .iter()
        .any(|b| b["roleRef"]["name"] == "tidemark-inventory-recovery"));
}

/// A working directory nothing can be written to. Permission bits do not stop root, so as
/// root `/proc` serves (no file can be created there).
fn unwritable_dir(env: &Env) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("tidemark-ro-{}", env.prefix));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    let writable = |d: &Path| std::fs::write(d.join("probe"), b"x").is_ok();
    let dir = if writable(&dir) {
        PathBuf::from("/proc")
    } else {
        dir
    };
    assert!(!writable(&dir), "{} must be unwritable", dir.display());
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_starts_as_the_manifest_says() {
    let env = Env::new().await;
    let docs = documents();
    let c = &deployment(&docs)["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&c["args"]);
    let addr = args
        .iter()
        .position(|a| a == "--admin-addr")
        .and_then(|i| args.get(i + 1))
        .expect("the Deployment sets --admin-addr");
    let port: u16 = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("admin port");
    assert!(
        std::net::TcpListener::bind(("0.0.0.0", port)).is_ok(),
        "port {port} of the Deployment's --admin-addr is taken on this machine; free it to run this test"
    );
    let kc = kubeconfig_file(&env);
    let cwd = unwritable_dir(&env);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidemark-inventory"))
        .args(&args)
        .env("KUBECONFIG", &kc)
        .env("POD_NAME", "tidemark-inventory-test")
        .env_remove("HOME")
        .current_dir(&cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the controller");
    let mut ready = None;
    for _ in 0..100 {
        if let Some(r) = http_get(port, "/readyz") {
            if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
                ready = Some(r);
                break;
            }
        }
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(ready.is_some(), "not ready on /readyz; stderr: {stderr}");
    assert!(stderr.contains("controller starting"), "{stderr}");
}
