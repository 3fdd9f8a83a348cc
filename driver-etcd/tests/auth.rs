//! Least-privilege etcd users and `tidemark-mirror preflight`, on real etcd 3.4 and 3.5 with
//! auth enabled: the roles the README gives are enough to mirror, resume, reconcile and
//! drain; a missing permission, a too-small server limit, a foreign or cut-over fence, a
//! non-empty target and a source behind the watermark are each found by preflight; `run`
//! refuses a target it cannot write before writing; a short token TTL does not matter.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod support;

use etcd_client::{Client, ConnectOptions, Permission};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;
use support::agent::{bin, config, password_auth, Proc};
use support::{dump, pair, Etcd, V};
use tidemark_core::config::{InitialSyncMode, MirrorConfig};
use tidemark_core::mirror::{Checkpoint, Role};

const SEC: Duration = Duration::from_secs(1);
const ROOT_PW: &str = "root-pw-5e2";

/// A client logged in as root (after [`secure`]).
async fn root(e: &Etcd) -> Client {
    Client::connect(
        [e.url.as_str()],
        Some(ConnectOptions::new().with_user("root", ROOT_PW)),
    )
    .await
    .unwrap()
}

/// Enables auth with a root user and `user` holding one role of `perms`.
async fn secure(e: &Etcd, user: &str, password: &str, perms: Vec<Permission>) {
    let mut c = e.client().await;
    c.user_add("root", ROOT_PW, None).await.unwrap();
    c.user_grant_role("root", "root").await.unwrap();
    let role = format!("{user}-role");
    c.role_add(&role).await.unwrap();
    for p in perms {
        c.role_grant_permission(&role, p).await.unwrap();
    }
    c.user_add(user, password, None).await.unwrap();
    c.user_grant_role(user, &role).await.unwrap();
    c.auth_enable().await.unwrap();
}

async fn rev(e: &Etcd) -> i64 {
    let r = root(e).await.get("\0", None).await.unwrap();
    r.header().unwrap().revision()
}

async fn put_many(e: &Etcd, prefix: &str, n: usize) {
    let mut c = root(e).await;
    for i in 0..n {
        c.put(format!("{prefix}{i:05}"), format!("v{i}"), None)
            .await
            .unwrap();
    }
}

/// The README's roles: read on the source prefix, readwrite on the target prefix.
async fn least_privilege_pair(v: V, dir: &Path) -> Option<(Etcd, Etcd, MirrorConfig)> {
    roles(v, dir, Permission::read_write("/dr/").with_prefix()).await
}

/// Read on the source prefix, `target` on the target cluster.
async fn roles(v: V, dir: &Path, target: Permission) -> Option<(Etcd, Etcd, MirrorConfig)> {
    let (src, tgt) = pair(v).await?;
    secure(
        &src,
        "mirror-reader",
        "src-pw",
        vec![Permission::read("/app/").with_prefix()],
    )
    .await;
    secure(&tgt, "mirror-writer", "tgt-pw", vec![target]).await;
    let mut cfg = config(&src, "/app/", &tgt, "/dr/");
    cfg.source.auth = Some(password_auth(dir, "mirror-reader", "src-pw"));
    cfg.target.auth = Some(password_auth(dir, "mirror-writer", "tgt-pw"));
    Some((src, tgt, cfg))
}

/// `tidemark-mirror preflight --output json`: exit code and check -> level.
fn preflight(cfg: &MirrorConfig, dir: &Path) -> (i32, BTreeMap<String, String>, String) {
    let file = dir.join("preflight.json");
    std::fs::write(&file, serde_json::to_vec(cfg).unwrap()).unwrap();
    let out = std::process::Command::new(bin())
        .args(["preflight", "--output", "json", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let j: Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "preflight printed no JSON ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let levels = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["check"].as_str().unwrap().to_string(),
                f["level"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (out.status.code().unwrap_or(-1), levels, text)
}

fn level<'a>(levels: &'a BTreeMap<String, String>, check: &str) -> &'a str {
    levels.get(check).map_or("missing", String::as_str)
}

async fn equal_ranges(src: &Etcd, tgt: &Etcd) {
    let deadline = tokio::time::Instant::now() + 20 * SEC;
    loop {
        let s: Vec<_> = dump(&mut root(src).await, b"/app/")
            .await
            .into_iter()
            .map(|(k, v)| (k[5..].to_vec(), v))
            .collect();
        let t: Vec<_> = dump(&mut root(tgt).await, b"/dr/")
            .await
            .into_iter()
            .filter(|(k, _)| !k.contains(&0))
            .map(|(k, v)| (k[4..].to_vec(), v))
            .collect();
        if s == t {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "target != source: {} vs {} keys",
            t.len(),
            s.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn least_privilege(v: V) {
    let dir = tempfile::tempdir().unwrap();
    let Some((src, tgt, mut cfg)) = least_privilege_pair(v, dir.path()).await else {
        return;
    };
    put_many(&src, "/app/a", 200).await;
    cfg.reconciliation.enabled = true;
    cfg.reconciliation.interval = SEC;
    let (code, levels, text) = preflight(&cfg, dir.path());
    assert!(code < 2, "least privilege is enough: {text}");
    for c in [
        "source.read",
        "target.write",
        "target.maxTxnOps",
        "fence",
        "target.empty",
        "source.size",
    ] {
        assert_eq!(level(&levels, c), "pass", "{c}: {text}");
    }
    assert!(
        text.contains("200 keys read"),
        "the size sample read the range: {text}"
    );

    let mut a = Proc::start(&cfg, dir.path(), "a");
    let r = rev(&src).await;
    a.wait("synced and reconciled", 30 * SEC, |s| {
        s["phase"] == "Syncing"
            && s["lastAppliedRevision"].as_i64() >= Some(r)
            && s["reconcilePasses"].as_i64() >= Some(1)
    })
    .await;
    equal_ranges(&src, &tgt).await;
    // Resume: killed, the source moves on, a new agent continues from the fence.
    a.kill();
    put_many(&src, "/app/b", 50).await;
    let b = Proc::start(&cfg, dir.path(), "b");
    let r = rev(&src).await;
    b.wait("resumed", 30 * SEC, |s| {
        s["phase"] == "Syncing" && s["lastAppliedRevision"].as_i64() >= Some(r)
    })
    .await;
    equal_ranges(&src, &tgt).await;
    // Drain over the control listener.
    assert_eq!(b.post("/v1/drain").unwrap().0, 200);
    b.wait("cut over", 60 * SEC, |s| {
        s["conditions"]["CutoverReady"]["status"] == true
    })
    .await;
    let fence = root(&tgt)
        .await
        .get(cfg.checkpoint_key(), None)
        .await
        .unwrap();
    let ck = Checkpoint::decode(fence.kvs()[0].value()).unwrap();
    assert_eq!(ck.role, Role::Primary);
    equal_ranges(&src, &tgt).await;
}
both_versions!(
    least_privilege_users_mirror_resume_reconcile_and_drain,
    least_privilege
);

async fn read_only_target(v: V) {
    let dir = tempfile::tempdir().unwrap();
    let read_only = Permission::read("/dr/").with_prefix();
    let Some((src, tgt, cfg)) = roles(v, dir.path(), read_only).await else {
        return;
    };
    put_many(&src, "/app/a", 10).await;
    let (code, levels, text) = preflight(&cfg, dir.path());
    assert_eq!(code, 2, "{text}");
    assert_eq!(level(&levels, "target.write"), "block", "{text}");
    assert!(text.contains("readwrite"), "the fix is named: {text}");
    let before = rev(&tgt).await;
    let mut a = Proc::start(&cfg, dir.path(), "a");
    let status = a.exit(30 * SEC);
    assert_eq!(status.code(), Some(2), "{}", a.log());
    assert!(a.log().contains("target.write"), "{}", a.log());
    assert_eq!(
        rev(&tgt).await,
        before,
        "run wrote to a target it may not write"
    );
}
both_versions!(
    a_read_only_target_user_is_refused_before_any_write,
    read_only_target
);

async fn short_token_ttl(v: V) {
    let dir = tempfile::tempdir().unwrap();
    let Some((mut src, mut tgt, cfg)) = least_privilege_pair(v, dir.path()).await else {
        return;
    };
    for e in [&mut src, &mut tgt] {
        e.restart_with(|args| args.push("--auth-token-ttl=2".into()))
            .await;
    }
    let mut a = Proc::start(&cfg, dir.path(), "a");
    // Writes spread over several token lifetimes.
    for round in 0..4 {
        put_many(&src, &format!("/app/r{round}-"), 20).await;
        tokio::time::sleep(3 * SEC).await;
    }
    let r = rev(&src).await;
    a.wait("caught up past token expiry", 30 * SEC, |s| {
        s["phase"] == "Syncing" && s["lastAppliedRevision"].as_i64() >= Some(r)
    })
    .await;
    equal_ranges(&src, &tgt).await;
    assert!(a.term().success(), "{}", a.log());
}
both_versions!(
    a_token_ttl_shorter_than_the_run_still_converges,
    short_token_ttl
);

/// Each blocker, set up for real and found by name.
async fn blockers(v: V) {
    let dir = tempfile::tempdir().unwrap();
    let Some((src, mut tgt, cfg)) = least_privilege_pair(v, dir.path()).await else {
        return;
    };
    let d = dir.path();
    let expect = |cfg: &MirrorConfig, check: &str| {
        let (code, levels, text) = preflight(cfg, d);
        assert_eq!(code, 2, "{check}: {text}");
        assert_eq!(level(&levels, check), "block", "{check}: {text}");
    };

    // Unreachable source.
    let mut c = cfg.clone();
    c.source.endpoint_list = vec!["http://127.0.0.1:1".into()];
    expect(&c, "source.reachable");
    // A wrong password.
    let mut c = cfg.clone();
    let wrong = tempfile::tempdir().unwrap();
    c.target.auth = Some(password_auth(wrong.path(), "mirror-writer", "wrong-pw"));
    expect(&c, &format!("target.endpoint {}", tgt.url));
    // No read on the source range.
    let mut c = cfg.clone();
    c.source.prefix = "/other/".into();
    expect(&c, "source.read");
    // Same cluster, overlapping ranges (the target user can read its own range).
    let mut c = cfg.clone();
    c.source = c.target.clone();
    c.source.endpoint_list = vec![tgt.url.replace("127.0.0.1", "localhost")];
    c.source.prefix = "/dr/".into();
    c.sync.dest_prefix = "copy/".into();
    expect(&c, "direction");
    // More ops per Txn than the target allows.
    let mut c = cfg.clone();
    c.sync.max_txn_ops = 512;
    expect(&c, "target.maxTxnOps");
    // Larger Txns than the target accepts.
    tgt.restart_with(|args| args.push("--max-request-bytes=65536".into()))
        .await;
    expect(&cfg, "target.requestBytes");

    // A non-empty target with RequireEmpty.
    let mut c = cfg.clone();
    c.sync.txn_flush_bytes = 32 * 1024;
    root(&tgt).await.put("/dr/stray", "x", None).await.unwrap();
    expect(&c, "target.empty");
    root(&tgt).await.delete("/dr/stray", None).await.unwrap();
    let (code, _, text) = preflight(&c, d);
    assert!(code < 2, "a clean setup passes: {text}");

    // Fences: this link's, edited to another link, to Primary, and ahead of the source.
    put_many(&src, "/app/a", 5).await;
    let mut a = Proc::start(&c, d, "a");
    let r = rev(&src).await;
    a.wait("synced", 30 * SEC, |s| {
        s["phase"] == "Syncing" && s["lastAppliedRevision"].as_i64() >= Some(r)
    })
    .await;
    assert!(a.term().success(), "{}", a.log());
    let key = c.checkpoint_key();
    let get = root(&tgt).await.get(key.clone(), None).await.unwrap();
    let ours = Checkpoint::decode(get.kvs()[0].value()).unwrap();
    let edit = |f: &dyn Fn(&mut Checkpoint)| {
        let mut ck = ours.clone();
        f(&mut ck);
        ck.encode()
    };
    for (what, record, check) in [
        (
            "another link",
            edit(&|ck| ck.link = "someone-else".into()),
            "fence",
        ),
        ("cut over", edit(&|ck| ck.role = Role::Primary), "fence"),
        (
            "ahead of the source",
            edit(&|ck| ck.watermark = 1_000_000),
            "source.history",
        ),
        ("corrupt", b"{\"v\":4}".to_vec(), "fence"),
    ] {
        root(&tgt)
            .await
            .put(key.clone(), record, None)
            .await
            .unwrap();
        let (code, levels, text) = preflight(&c, d);
        assert_eq!(code, 2, "{what}: {text}");
        assert_eq!(level(&levels, check), "block", "{what}: {text}");
    }
    let mut c2 = c.clone();
    c2.initial_sync.mode = InitialSyncMode::Overwrite;
    root(&tgt)
        .await
        .put(key.clone(), ours.encode(), None)
        .await
        .unwrap();
    let (code, levels, text) = preflight(&c2, d);
    assert!(code < 2, "{text}");
    assert_eq!(level(&levels, "lag"), "pass", "{text}");

    // One source revision of 100 puts, more than a Txn of 16 ops holds: split (a warning),
    // or with oversizedRevision: Fail, a blocker.
    let ops: Vec<etcd_client::TxnOp> = (0..100)
        .map(|i| etcd_client::TxnOp::put(format!("/app/rev/{i:03}"), "v", None))
        .collect();
    root(&src)
        .await
        .txn(etcd_client::Txn::new().and_then(ops))
        .await
        .unwrap();
    c2.sync.max_txn_ops = 16;
    let (_, levels, text) = preflight(&c2, d);
    assert_eq!(level(&levels, "source.largestRevision"), "warn", "{text}");
    c2.sync.oversized_revision = tidemark_core::config::OversizedRevision::Fail;
    expect(&c2, "source.largestRevision");
}
both_versions!(preflight_finds_each_blocker, blockers);
