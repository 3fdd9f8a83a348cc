use super::*;

const T0: Instant = Instant(1_767_225_600_000_000_000); // 2026-01-01T00:00:00Z

fn secret(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "labels": labels}, "data": data})
}

#[test]
fn timestamps() {
    assert_eq!(rfc3339(T0), "2026-01-01T00:00:00Z");
    assert_eq!(rfc3339(Instant(0)), "1970-01-01T00:00:00Z");
    assert_eq!(
        rfc3339(Instant(951_782_400_000_000_000 + 3_723_000_000_000)),
        "2000-02-29T01:02:03Z"
    );
}

#[test]
fn create_get_conflicts() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    let a = s
        .create(T0, &g, "kube-system", secret("a", json!({}), json!({})))
        .unwrap();
    assert_eq!(meta_str(&a, "resourceVersion").as_deref(), Some("1"));
    assert_eq!(
        meta_str(&a, "creationTimestamp").as_deref(),
        Some("2026-01-01T00:00:00Z")
    );
    assert_eq!(a["type"], "Opaque");
    assert!(a.pointer("/metadata/generation").is_none());
    let e = s
        .create(T0, &g, "kube-system", secret("a", json!({}), json!({})))
        .unwrap_err();
    assert_eq!((e.code(), e.reason()), (409, "AlreadyExists"));
    let e = s.get(&g, "kube-system", "b").unwrap_err();
    assert_eq!(e.code(), 404);
    assert_eq!(e.status("")["reason"], "NotFound");

    // Stale update.
    let mut stale = a.clone();
    stale["data"] = json!({"k": "dg=="});
    s.update(T0, &g, "kube-system", "a", stale.clone(), Subresource::Main)
        .unwrap();
    let e = s
        .update(T0, &g, "kube-system", "a", stale, Subresource::Main)
        .unwrap_err();
    assert_eq!((e.code(), e.reason()), (409, "Conflict"));
}

#[test]
fn secret_limit_counts_decoded_bytes() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    // 1 MiB decoded exactly is fine; one byte more is 422.
    let ok = b64_encode(&vec![b'x'; SECRET_DATA_LIMIT]);
    s.create(T0, &g, "ns", secret("ok", json!({}), json!({ "k": ok })))
        .unwrap();
    let big = b64_encode(&vec![b'x'; SECRET_DATA_LIMIT + 1]);
    let e = s
        .create(T0, &g, "ns", secret("big", json!({}), json!({ "k": big })))
        .unwrap_err();
    assert_eq!((e.code(), e.reason()), (422, "Invalid"));
    assert_eq!(b64_encode(b"hello"), "aGVsbG8=");
    assert_eq!(b64_decoded_len("aGVsbG8="), Some(5));
}

#[test]
fn list_with_selectors() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    for (n, l) in [
        ("a", json!({"x": "1"})),
        ("b", json!({"x": "2"})),
        ("c", json!({})),
    ] {
        s.create(T0, &g, "ns", secret(n, l, json!({}))).unwrap();
    }
    s.create(T0, &g, "other", secret("d", json!({"x": "1"}), json!({})))
        .unwrap();
    let names = |s: &mut ApiServer, ns: Option<&str>, sel: &str| -> Vec<String> {
        s.list(&g, ns, Some(sel))
            .unwrap()
            .0
            .iter()
            .map(|o| meta_str(o, "name").unwrap())
            .collect()
    };
    assert_eq!(names(&mut s, Some("ns"), "x=1"), ["a"]);
    assert_eq!(names(&mut s, Some("ns"), "x"), ["a", "b"]);
    assert_eq!(names(&mut s, Some("ns"), "!x"), ["c"]);
    assert_eq!(names(&mut s, Some("ns"), "x!=1"), ["b", "c"]);
    assert_eq!(names(&mut s, Some("ns"), "x in (1,2)"), ["a", "b"]);
    assert_eq!(names(&mut s, None, "x=1"), ["a", "d"]);
    assert_eq!(s.list(&g, None, Some("x in 1")).unwrap_err().code(), 400);
}

#[test]
fn generation_status_and_terminating() {
    let mut s = ApiServer::new();
    let g = Gvr::compositions();
    let c = s
        .create(
            T0,
            &g,
            "ns",
            json!({"metadata": {"name": "c", "finalizers": ["eno.azure.io/cleanup"]},
                   "spec": {"synthesizer": {"name": "s"}}, "status": {"ignored": true}}),
        )
        .unwrap();
    assert_eq!(c["kind"], "Composition");
    assert_eq!(c["metadata"]["generation"], 1);
    assert!(c.get("status").is_none());
    // Status write does not bump generation; main write keeps status.
    let mut st = c.clone();
    st["status"] = json!({"currentSynthesis": {"uuid": "u1"}});
    let c = s
        .update(T0, &g, "ns", "c", st, Subresource::Status)
        .unwrap();
    assert_eq!(c["metadata"]["generation"], 1);
    let mut sp = c.clone();
    sp["spec"]["synthesizer"]["name"] = json!("t");
    sp.as_object_mut().unwrap().remove("status");
    let c = s.update(T0, &g, "ns", "c", sp, Subresource::Main).unwrap();
    assert_eq!(c["metadata"]["generation"], 2);
    assert_eq!(c["status"]["currentSynthesis"]["uuid"], "u1");
    // Annotation patch with a stale precondition fails, with a fresh one succeeds.
    let mut ann = BTreeMap::new();
    ann.insert("k".to_string(), Some("v".to_string()));
    let e = s
        .patch_annotations(T0, &g, "ns", "c", &ann, Some("1"))
        .unwrap_err();
    assert_eq!(e.code(), 409);
    let rv = meta_str(&c, "resourceVersion").unwrap();
    let c = s
        .patch_annotations(T0, &g, "ns", "c", &ann, Some(&rv))
        .unwrap();
    assert_eq!(c["metadata"]["annotations"]["k"], "v");
    assert_eq!(c["metadata"]["generation"], 2);
    // Delete with a finalizer => terminating; removing the finalizer removes it.
    let t = s.delete(T0, &g, "ns", "c", None, None).unwrap().unwrap();
    assert!(t.pointer("/metadata/deletionTimestamp").is_some());
    let p = Patch::Json(vec![
        json!({"op": "remove", "path": "/metadata/finalizers"}),
    ]);
    s.patch(T0, &g, "ns", "c", &p, Subresource::Main).unwrap();
    assert!(s.peek(&g, "ns", "c").is_none());
    // Without finalizers delete removes at once.
    s.create(T0, &g, "ns", json!({"metadata": {"name": "d"}}))
        .unwrap();
    assert!(s.delete(T0, &g, "ns", "d", None, None).unwrap().is_none());
    let kinds: Vec<_> = s
        .events_since(&g, Some("ns"), None, 0)
        .unwrap()
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds.first(), Some(&EventType::Added));
    assert_eq!(kinds.last(), Some(&EventType::Deleted));
}

#[test]
fn faults_fire_once() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    s.inject_fault(Fault::conflict_next_write("secrets", "a"));
    let e = s
        .create(T0, &g, "ns", secret("a", json!({}), json!({})))
        .unwrap_err();
    assert_eq!(e.reason(), "Conflict");
    s.create(T0, &g, "ns", secret("a", json!({}), json!({})))
        .unwrap();
    let t = s.mark_terminating(T0, &g, "ns", "a").unwrap();
    assert!(t.pointer("/metadata/deletionTimestamp").is_some());
}

#[test]
fn json_patch_ops() {
    let doc = json!({"a": [1, 2], "b": {"c": 1}});
    let out = json_patch(
        &doc,
        &[
            json!({"op": "add", "path": "/a/-", "value": 3}),
            json!({"op": "replace", "path": "/b/c", "value": 2}),
            json!({"op": "test", "path": "/b/c", "value": 2}),
            json!({"op": "copy", "from": "/b", "path": "/d"}),
            json!({"op": "move", "from": "/d", "path": "/e"}),
            json!({"op": "remove", "path": "/a/0"}),
        ],
    )
    .unwrap();
    assert_eq!(out, json!({"a": [2, 3], "b": {"c": 2}, "e": {"c": 2}}));
    assert!(json_patch(&doc, &[json!({"op": "test", "path": "/b/c", "value": 9})]).is_err());
}

#[test]
fn deleting_an_owner_collects_its_dependents() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    let owner = s
        .create(T0, &g, "ns", secret("owner", json!({}), json!({})))
        .unwrap();
    let uid = meta_str(&owner, "uid").unwrap();
    let owned = |name: &str, uids: &[&str]| {
        let mut o = secret(name, json!({}), json!({}));
        o["metadata"]["ownerReferences"] = json!(uids
            .iter()
            .map(|u| json!({"apiVersion": "v1", "kind": "Secret", "name": "x", "uid": u}))
            .collect::<Vec<_>>());
        o
    };
    s.create(T0, &g, "ns", owned("only-owner", &[&uid]))
        .unwrap();
    s.create(T0, &g, "ns", owned("two-owners", &[&uid, "other"]))
        .unwrap();
    s.create(T0, &g, "other-ns", owned("elsewhere", &[&uid]))
        .unwrap();
    assert!(
        s.peek(&g, "other-ns", "elsewhere").is_none(),
        "an owner in another namespace is absent to the garbage collector"
    );
    let grandchild_owner = meta_str(s.peek(&g, "ns", "only-owner").unwrap(), "uid").unwrap();
    s.create(T0, &g, "ns", owned("grandchild", &[&grandchild_owner]))
        .unwrap();
    assert_eq!(s.delete(T0, &g, "ns", "owner", None, None).unwrap(), None);
    assert!(s.peek(&g, "ns", "only-owner").is_none());
    assert!(
        s.peek(&g, "ns", "grandchild").is_none(),
        "the cascade recurses"
    );
    let left = s.peek(&g, "ns", "two-owners").unwrap();
    assert_eq!(left["metadata"]["ownerReferences"][0]["uid"], "other");
}

#[test]
fn a_dependent_created_after_its_owner_was_deleted_is_collected() {
    // A controller acting on a stale cache re-creates a deleted object's dependent; the
    // garbage collector removes it, as in Kubernetes.
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    let owner = s
        .create(T0, &g, "ns", secret("owner", json!({}), json!({})))
        .unwrap();
    let uid = meta_str(&owner, "uid").unwrap();
    let mut child = secret("child", json!({}), json!({}));
    child["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "Secret", "name": "owner", "uid": uid}]);
    s.create(T0, &g, "ns", child.clone()).unwrap();
    assert!(s.peek(&g, "ns", "child").is_some(), "its owner exists");
    s.delete(T0, &g, "ns", "owner", None, None).unwrap();
    assert!(s.peek(&g, "ns", "child").is_none());
    let created = s.create(T0, &g, "ns", child).unwrap();
    assert_eq!(created["metadata"]["name"], "child", "the create succeeds");
    assert!(
        s.peek(&g, "ns", "child").is_none(),
        "and the collector removes it"
    );
}

#[test]
fn apply_creates_then_replaces_what_the_manager_wrote() {
    let mut s = ApiServer::new();
    let g = Gvr::secrets();
    let (code, a) = s
        .apply(
            T0,
            &g,
            "ns",
            "a",
            secret("a", json!({"x": "1", "y": "2"}), json!({})),
        )
        .unwrap();
    assert_eq!(code, 201);
    let (code, b) = s
        .apply(T0, &g, "ns", "a", secret("a", json!({"x": "1"}), json!({})))
        .unwrap();
    assert_eq!(code, 200);
    assert_eq!(
        b["metadata"]["labels"],
        json!({"x": "1"}),
        "a dropped field goes"
    );
    assert_eq!(meta_str(&a, "uid"), meta_str(&b, "uid"));
    let (_, c) = s
        .apply(T0, &g, "ns", "a", secret("a", json!({"x": "1"}), json!({})))
        .unwrap();
    assert_eq!(
        meta_str(&b, "resourceVersion"),
        meta_str(&c, "resourceVersion"),
        "an unchanged apply writes nothing"
    );
}
