//! The shipped manifests, started for real: `deploy/deployment.yaml`'s container runs the
//! real `tidemark-mirror` binary with exactly its args and env, under the pod's constraints
//! (its `runAsUser` when the test runs as root, a working directory and HOME it cannot write,
//! a writable directory only where an `emptyDir` is mounted), against the conformance
//! apiserver and two real etcd servers. The kubelet's probes must pass from a non-loopback
//! address, the admin port must carry no control, and every request the agent makes must be
//! allowed by `deploy/rbac.yaml`. A manifest that could not start fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use kube::api::{Api, PostParams};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use support::agent::{bin, config, exchange, load};
use support::{Etcd, Flags, V};
use tidemark_api::{EtcdMirror, EtcdMirrorSpec};
use tidemark_model::conformance::{AuditRecord, ConformanceServer};

fn manifest(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

/// The first non-loopback IPv4 address of this host, as the kubelet would probe a pod IP.
fn non_loopback_ip() -> String {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .expect("`hostname -I` lists this host's addresses");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
        .expect("this test needs a non-loopback IPv4 address (the kubelet probes the pod IP)")
        .to_string()
}

/// Does a Role rule allow this request (RBAC's matching, for the fields the Role uses)?
fn allows(rule: &Value, r: &AuditRecord) -> bool {
    let any = |list: Vec<String>, v: &str| list.iter().any(|x| x == "*" || x == v);
    let names = strings(&rule["resourceNames"]);
    any(strings(&rule["apiGroups"]), &r.group)
        && any(strings(&rule["resources"]), &r.resource)
        && any(strings(&rule["verbs"]), &r.verb)
        && (names.is_empty() || r.name.as_ref().is_some_and(|n| names.contains(n)))
}

/// Kills the agent when the test ends, passed or not: a leftover would hold the
/// Deployment's fixed port for the next run.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A directory tree standing in for the pod's filesystem.
struct Pod {
    /// The read-only root: working directory and HOME.
    ro: PathBuf,
    /// mountPath -> a writable host directory, for every emptyDir mount.
    mounts: BTreeMap<String, PathBuf>,
    /// `runAsUser`/`runAsGroup` when the test can switch to them (it runs as root).
    ids: Option<(u32, u32)>,
}

impl Pod {
    fn new(dir: &Path, pod: &Value, container: &Value) -> Pod {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = std::fs::metadata("/proc/self").unwrap().uid() == 0;
        let sc = &pod["securityContext"];
        let ids = root.then(|| {
            let uid = sc["runAsUser"].as_u64().expect("runAsUser") as u32;
            let gid = sc["runAsGroup"].as_u64().unwrap_or(uid.into()) as u32;
            assert_ne!(uid, 0, "runAsNonRoot");
            (uid, gid)
        });
        let ro = dir.join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        let empty_dirs: Vec<String> = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v.get("emptyDir").is_some())
            .map(|v| v["name"].as_str().unwrap().to_string())
            .collect();
        let mut mounts = BTreeMap::new();
        for (i, m) in container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if !empty_dirs.iter().any(|n| m["name"] == n.as_str()) {
                continue;
            }
            let host = dir.join(format!("mount{i}"));
            std::fs::create_dir(&host).unwrap();
            if let Some((uid, gid)) = ids {
                std::os::unix::fs::chown(&host, Some(uid), Some(gid)).unwrap();
            }
            mounts.insert(m["mountPath"].as_str().unwrap().to_string(), host);
        }
        Pod { ro, mounts, ids }
    }

    /// A container env value with paths mapped into the pod: under a mount, to its host
    /// directory; any other absolute path, into the read-only root.
    fn map(&self, value: &str) -> String {
        for (mount, host) in &self.mounts {
            if let Some(rest) = value.strip_prefix(mount.as_str()) {
                if rest.is_empty() || rest.starts_with('/') {
                    return format!("{}{rest}", host.display());
                }
            }
        }
        match value.strip_prefix('/') {
            Some(rest) => self.ro.join(rest).display().to_string(),
            None => value.to_string(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_deployment_starts_and_serves_only_probes() {
    let Some(src) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let Some(tgt) = Etcd::start(V::V35, Flags::default()).await else {
        return;
    };
    let deployment = &manifest("deployment.yaml")[0];
    let role = manifest("rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Role")
        .unwrap();
    let pod_spec = &deployment["spec"]["template"]["spec"];
    let container = &pod_spec["containers"][0];
    let args = strings(&container["args"]);
    let resource = &args[args.iter().position(|a| a == "--resource").unwrap() + 1];
    let (ns, name) = resource.split_once('/').unwrap();
    let port = container["ports"][0]["containerPort"].as_u64().unwrap();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        assert_eq!(
            container[probe]["httpGet"]["port"], container["ports"][0]["name"],
            "{probe} uses the admin port"
        );
    }

    // The EtcdMirror the Deployment names, pointing at the two test servers.
    let dir = tempfile::tempdir().unwrap();
    let server = ConformanceServer::start().await.unwrap();
    let api: Api<EtcdMirror> = Api::namespaced(server.client().unwrap(), ns);
    load(&src, "/app/", 200, 32).await;
    let cfg = config(&src, "/app/", &tgt, "/mirror/");
    api.create(
        &PostParams::default(),
        &EtcdMirror::new(name, EtcdMirrorSpec::from(cfg)),
    )
    .await
    .unwrap();

    // The pod: the binary and kubeconfig readable by runAsUser, nothing else writable.
    let pod = Pod::new(dir.path(), pod_spec, container);
    let exe = dir.path().join("tidemark-mirror");
    std::fs::copy(bin(), &exe).unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml()).unwrap();
    std::fs::set_permissions(&kubeconfig, std::fs::Permissions::from_mode(0o644)).unwrap();
    let log = dir.path().join("agent.log");
    let f = std::fs::File::create(&log).unwrap();
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(&args)
        .env_clear()
        .env("HOME", &pod.ro)
        .env("KUBECONFIG", &kubeconfig)
        .current_dir(&pod.ro)
        .stdin(Stdio::null())
        .stdout(f.try_clone().unwrap())
        .stderr(f);
    // Temporary files go to TMPDIR, or /tmp: writable only where an emptyDir is mounted.
    cmd.env("TMPDIR", pod.map("/tmp"));
    for e in container["env"].as_array().into_iter().flatten() {
        cmd.env(
            e["name"].as_str().unwrap(),
            pod.map(e["value"].as_str().unwrap()),
        );
    }
    if let Some((uid, gid)) = pod.ids {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    let audit_from = server.audit().len();
    let mut child = Reaped(cmd.spawn().unwrap());
    let child = &mut child.0;
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // The kubelet's view: the pod IP, the probe paths.
    let addr = format!("{}:{port}", non_loopback_ip());
    let get = |path: &str| {
        exchange(
            &addr,
            &format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n"),
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(code) = child.try_wait().unwrap() {
            panic!(
                "the agent exited with {code} at start; log:\n{}",
                read_log()
            );
        }
        if get("/readyz").is_some_and(|(c, _)| c == 200) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz at {addr} not 200 within 60s: {:?}\nlog:\n{}",
            get("/readyz"),
            read_log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(get("/healthz").unwrap().0, 200);
    assert_eq!(get("/metrics").unwrap().0, 200);

    // A stranger on the pod network cannot cut over: the admin port has no control, and
    // under --resource no control listener exists at all.
    let post = format!(
        "POST /v1/drain HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\n\r\n{{}}"
    );
    let (code, body) = exchange(&addr, &post).unwrap();
    assert_eq!(code, 404, "POST /v1/drain on the admin port: {body}");
    assert!(
        !read_log().contains("control server listening"),
        "{}",
        read_log()
    );
    let status = get("/statusz").unwrap().1;
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        status["phase"],
        "Syncing",
        "{status}\nagent log:\n{}\nsource etcd log:\n{}",
        read_log(),
        src.log()
    );

    // Graceful SIGTERM within the pod's grace period.
    let grace = pod_spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(grace);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit within {grace}s of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exit.success(), "exit {exit}; log:\n{}", read_log());

    // Every request the agent made is one the Role grants, and it wrote its status.
    let requests = &server.audit()[audit_from..];
    assert!(
        requests
            .iter()
            .any(|r| r.verb == "patch" && r.resource == "etcdmirrors/status"),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.verb == "create" && r.resource == "events"),
        "the agent records Events: {requests:#?}"
    );
    let rules = role["rules"].as_array().unwrap();
    for r in requests {
        assert_eq!(r.namespace.as_deref(), Some(ns), "{r:?}");
        assert!(
            rules.iter().any(|rule| allows(rule, r)),
            "deploy/rbac.yaml does not allow {r:?}"
        );
    }
    // The Secret material directory was made where the emptyDir is mounted, and removed.
    for host in pod.mounts.values() {
        assert_eq!(std::fs::read_dir(host).unwrap().count(), 0, "{host:?}");
    }
}
