//! A pod, as far as a kubelet would run one of ours: the first container of a pod spec
//! started as a process with exactly its args and env, under the pod's constraints.
//!
//! - Its own IP: a distinct 127.0.0.N (all of 127/8 is loopback on Linux), so `0.0.0.0:PORT`
//!   in the args binds `127.0.0.N:PORT` and several pods share a port number as they would
//!   on a node.
//! - Its `runAsUser`/`runAsGroup` when the test runs as root.
//! - A working directory and HOME it cannot write; writable directories only where an
//!   `emptyDir` is mounted; absolute paths in env values mapped into that tree.
//! - Its ServiceAccount's identity: a kubeconfig whose bearer token names
//!   `system:serviceaccount:<ns>:<sa>`, which the conformance apiserver records per request.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tidemark_model::conformance::ConformanceServer;

/// A pod's filesystem.
pub struct Fs {
    /// The read-only root: working directory and HOME.
    pub ro: PathBuf,
    /// mountPath -> a writable host directory, for every emptyDir mount.
    pub mounts: BTreeMap<String, PathBuf>,
    /// `runAsUser`/`runAsGroup` when the test can switch to them (it runs as root).
    pub ids: Option<(u32, u32)>,
}

impl Fs {
    pub fn new(dir: &Path, pod: &Value, container: &Value) -> Fs {
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
        Fs { ro, mounts, ids }
    }

    /// A container env value with paths mapped into the pod: under a mount, to its host
    /// directory; any other absolute path, into the read-only root.
    pub fn map(&self, value: &str) -> String {
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

/// A running pod; killed when dropped.
pub struct Pod {
    child: Option<Child>,
    pub name: String,
    pub ip: String,
    pub fs: Fs,
    pub log: PathBuf,
    /// The bearer token (user) its requests carry.
    pub user: String,
    pub pod_spec: Value,
    pub container: Value,
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The user a pod of `namespace` with ServiceAccount `sa` acts as.
pub fn service_account_user(namespace: &str, sa: &str) -> String {
    format!("system:serviceaccount:{namespace}:{sa}")
}

impl Pod {
    /// Starts the first container of `deployment` (as stored: the Deployment object) as
    /// pod `name` on `ip`, with its ServiceAccount's credentials for `server`.
    pub fn start(
        dir: &Path,
        exe: &Path,
        deployment: &Value,
        name: &str,
        ip: &str,
        server: &ConformanceServer,
    ) -> Pod {
        let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
        let pod_spec = deployment["spec"]["template"]["spec"].clone();
        let container = pod_spec["containers"][0].clone();
        let sa = pod_spec["serviceAccountName"].as_str().unwrap_or("default");
        let user = service_account_user(namespace, sa);
        let dir = dir.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let fs = Fs::new(&dir, &pod_spec, &container);
        let kc = dir.join("kubeconfig");
        std::fs::write(&kc, server.kubeconfig_yaml_for(&user)).unwrap();
        std::fs::set_permissions(&kc, std::fs::Permissions::from_mode(0o644)).unwrap();
        let log = dir.join("pod.log");
        let f = std::fs::File::create(&log).unwrap();
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().replace("0.0.0.0:", &format!("{ip}:")))
            .collect();
        let mut cmd = Command::new(exe);
        cmd.args(&args)
            .env_clear()
            .env("HOME", &fs.ro)
            .env("HOSTNAME", name)
            .env("KUBECONFIG", &kc)
            .current_dir(&fs.ro)
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f);
        // Temporary files go to TMPDIR, or /tmp: writable only where an emptyDir is mounted.
        cmd.env("TMPDIR", fs.map("/tmp"));
        for e in container["env"].as_array().into_iter().flatten() {
            let name = e["name"].as_str().unwrap();
            let value = match (
                e["value"].as_str(),
                e.pointer("/valueFrom/fieldRef/fieldPath"),
            ) {
                (Some(v), _) => fs.map(v),
                (None, Some(p)) if p == "metadata.namespace" => namespace.to_string(),
                (None, Some(p)) if p == "metadata.name" => name.to_string(),
                other => panic!("env {name}: {other:?} is not emulated"),
            };
            cmd.env(name, value);
        }
        if let Some((uid, gid)) = fs.ids {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        let child = cmd.spawn().unwrap();
        Pod {
            child: Some(child),
            name: name.into(),
            ip: ip.into(),
            fs,
            log,
            user,
            pod_spec,
            container,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `HOST:PORT` of the named container port.
    pub fn port(&self, name: &str) -> String {
        let p = self.container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("no port {name}"));
        format!("{}:{}", self.ip, p["containerPort"])
    }

    /// GET `path` on the admin port, as the kubelet or Prometheus would.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let addr = self.port("admin");
        super::agent::exchange(
            &addr,
            &format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n"),
        )
    }

    pub fn statusz(&self) -> Option<Value> {
        let (code, body) = self.get("/statusz")?;
        (code == 200).then(|| serde_json::from_str(&body).ok())?
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().unwrap()
    }

    /// SIGTERM, then the exit status within the pod's grace period (panics past it).
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let id = self.child.as_ref().unwrap().id();
        Command::new("kill")
            .args(["-TERM", &id.to_string()])
            .status()
            .unwrap();
        let grace = self.pod_spec["terminationGracePeriodSeconds"]
            .as_u64()
            .unwrap_or(30);
        self.exit_within(Duration::from_secs(grace)).await
    }

    pub async fn exit_within(&mut self, t: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + t;
        loop {
            if let Some(s) = self.exited() {
                return s;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pod {} did not exit within {t:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `/readyz` answers 200 on the pod IP (panics when the process exits).
    pub async fn ready(&mut self, t: Duration) {
        let deadline = std::time::Instant::now() + t;
        loop {
            if let Some(code) = self.exited() {
                panic!(
                    "pod {} exited with {code} at start; log:\n{}",
                    self.name,
                    self.log()
                );
            }
            if self.get("/readyz").is_some_and(|(c, _)| c == 200) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "pod {}: /readyz not 200 within {t:?}: {:?}\nlog:\n{}",
                self.name,
                self.get("/readyz"),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
