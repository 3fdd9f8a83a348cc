//! A model Kubernetes apiserver: pure, deterministic, no clock and no IO.
//!
//! It keeps namespaced (and cluster-scoped, namespace `""`) objects as JSON and reproduces
//! the semantics tidemark's inventory driver relies on: resourceVersion preconditions, 409
//! `AlreadyExists`/`Conflict`, 404, 422 for Secret data over 1 MiB, finalizers and
//! terminating objects, label selectors, uid/creationTimestamp assignment, metadata.generation
//! bumps, and a watch event log. The simulator drives it directly; the conformance server
//! (`conformance`, beside this module) serves the same model over HTTP to a real
//! `kube::Client`, so one model backs both uses. Time is an argument ([`Instant`] read as
//! nanoseconds since the Unix epoch).

pub mod inventory;
mod object;
pub mod patch;
pub mod selector;
pub mod types;

use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use tidemark_core::Instant;

use object::*;
pub use object::{meta_str, rfc3339, string_map};
use patch::obj_mut;
pub use patch::{json_patch, merge_patch};
pub use selector::{Requirement, Selector, SelectorError};
pub use types::*;

type Key = (Gvr, String, String);

/// How many watch events the log keeps; older resourceVersions answer 410 Gone.
const WATCH_LOG_LIMIT: usize = 100_000;

/// Secret data limit, counted on decoded bytes (as the apiserver does).
pub const SECRET_DATA_LIMIT: usize = 1024 * 1024;

/// The model apiserver.
#[derive(Debug, Clone)]
pub struct ApiServer {
    objects: BTreeMap<Key, Value>,
    types: BTreeMap<Gvr, TypeInfo>,
    rv: u64,
    uids: u64,
    faults: VecDeque<Fault>,
    log: VecDeque<WatchEvent>,
}

impl Default for ApiServer {
    fn default() -> Self {
        ApiServer::new()
    }
}

impl ApiServer {
    /// An empty apiserver knowing Secrets, ConfigMaps, Events, Compositions, ResourceSlices
    /// and EtcdMirrors; other resources are accepted with the kind their objects carry.
    pub fn new() -> ApiServer {
        let mut s = ApiServer {
            objects: BTreeMap::new(),
            types: BTreeMap::new(),
            rv: 0,
            uids: 0,
            faults: VecDeque::new(),
            log: VecDeque::new(),
        };
        s.register(Gvr::secrets(), "Secret", false, false);
        s.register(Gvr::new("", "v1", "configmaps"), "ConfigMap", false, false);
        s.register(Gvr::new("", "v1", "events"), "Event", false, false);
        s.register(
            Gvr::new("events.k8s.io", "v1", "events"),
            "Event",
            false,
            false,
        );
        s.register(Gvr::compositions(), "Composition", true, true);
        s.register(Gvr::resource_slices(), "ResourceSlice", true, true);
        s.register(Gvr::etcd_mirrors(), "EtcdMirror", true, true);
        s
    }

    /// Declares a resource type.
    pub fn register(&mut self, gvr: Gvr, kind: &str, status_subresource: bool, generation: bool) {
        self.types.insert(
            gvr,
            TypeInfo {
                kind: kind.to_string(),
                status_subresource,
                generation,
            },
        );
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Queues a fault; faults fire in order, each once.
    pub fn inject_fault(&mut self, fault: Fault) {
        self.faults.push_back(fault);
    }

    /// Drops all pending faults.
    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Sets pending faults aside, for environment writes (Eno, an operator) that must not
    /// consume faults meant for the system under test; give them back with
    /// [`ApiServer::restore_faults`].
    pub fn take_faults(&mut self) -> VecDeque<Fault> {
        std::mem::take(&mut self.faults)
    }

    /// Puts faults taken with [`ApiServer::take_faults`] back in front of any queued since.
    pub fn restore_faults(&mut self, mut faults: VecDeque<Fault>) {
        faults.append(&mut self.faults);
        self.faults = faults;
    }

    /// Pending faults, for assertions.
    pub fn pending_faults(&self) -> usize {
        self.faults.len()
    }

    fn take_fault(&mut self, op: Op, gvr: &Gvr, name: &str) -> Result<(), ApiError> {
        let pos = self.faults.iter().position(|f| {
            f.op.covers(op)
                && f.resource.as_ref().is_none_or(|r| *r == gvr.resource)
                && f.name.as_ref().is_none_or(|n| n == name)
        });
        match pos.and_then(|p| self.faults.remove(p)) {
            Some(f) => Err(f.error),
            None => Ok(()),
        }
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn next_uid(&mut self) -> String {
        self.uids += 1;
        let n = self.uids;
        format!("00000000-0000-4000-8000-{n:012x}")
    }

    fn kind_of(&self, gvr: &Gvr, obj: &Value) -> String {
        match self.types.get(gvr) {
            Some(t) => t.kind.clone(),
            None => obj
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Unknown")
                .to_string(),
        }
    }

    fn info(&self, gvr: &Gvr) -> TypeInfo {
        self.types.get(gvr).cloned().unwrap_or(TypeInfo {
            kind: String::new(),
            status_subresource: false,
            generation: true,
        })
    }

    fn record(&mut self, kind: EventType, gvr: &Gvr, namespace: &str, object: Value) {
        self.log.push_back(WatchEvent {
            rv: self.rv,
            gvr: gvr.clone(),
            namespace: namespace.to_string(),
            kind,
            object,
        });
        while self.log.len() > WATCH_LOG_LIMIT {
            self.log.pop_front();
        }
    }

    /// POST: creates `obj` in `namespace`.
    pub fn create(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let requested = meta_str(&obj, "name").unwrap_or_default();
        self.take_fault(Op::Create, gvr, &requested)?;
        if !obj.is_object() {
            return Err(ApiError::BadRequest("body must be an object".into()));
        }
        if gvr.group == "apiextensions.k8s.io" && gvr.resource == "customresourcedefinitions" {
            // A real apiserver serves a new CRD's kind at once and reports it Established.
            let at = rfc3339(now);
            let cond = |t: &str| {
                serde_json::json!({"type": t, "status": "True", "reason": t,
                    "message": "", "lastTransitionTime": at})
            };
            obj["status"] = serde_json::json!({
                "conditions": [cond("NamesAccepted"), cond("Established")],
                "acceptedNames": obj["spec"]["names"].clone(),
            });
        }
        let body_ns = meta_str(&obj, "namespace").unwrap_or_default();
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::BadRequest(format!(
                "the namespace of the provided object ({body_ns}) does not match the namespace sent on the request ({namespace})"
            )));
        }
        let kind = self.kind_of(gvr, &obj);
        let mut name = requested;
        if name.is_empty() {
            match meta_str(&obj, "generateName") {
                Some(prefix) if !prefix.is_empty() => {
                    name = format!("{prefix}{:05x}", (self.uids + 1) & 0xfffff);
                }
                _ => {
                    return Err(ApiError::Invalid {
                        kind,
                        name: String::new(),
                        message: "metadata.name: Required value: name or generateName is required"
                            .into(),
                    })
                }
            }
        }
        validate_name(&kind, &name)?;
        let key = (gvr.clone(), namespace.to_string(), name.clone());
        if self.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists {
                resource: gvr.resource.clone(),
                name,
            });
        }
        normalize_secret(gvr, &kind, &name, &mut obj)?;
        let info = self.info(gvr);
        let rv = self.next_rv();
        let uid = self.next_uid();
        let o = obj_mut(&mut obj);
        o.insert("apiVersion".into(), json!(gvr.api_version()));
        o.insert("kind".into(), json!(kind));
        if info.status_subresource {
            o.remove("status");
        }
        let m = meta_mut(&mut obj);
        m.insert("name".into(), json!(name));
        if namespace.is_empty() {
            m.remove("namespace");
        } else {
            m.insert("namespace".into(), json!(namespace));
        }
        m.insert("uid".into(), json!(uid));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        m.insert("creationTimestamp".into(), json!(rfc3339(now)));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if info.generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
        self.objects.insert(key, obj.clone());
        self.record(EventType::Added, gvr, namespace, obj.clone());
        if self.owners_all_gone(namespace, &obj) {
            // Kubernetes' garbage collector deletes a dependent whose owners no longer
            // exist, however it was created (a controller acting on a stale cache after
            // its owner was deleted does exactly this). The create itself succeeds.
            let _ = self.delete(now, gvr, namespace, &name, None, None);
        }
        Ok(obj)
    }

    /// Whether `obj` names owners and none of them exists (by uid) in its namespace or at
    /// cluster scope.
    fn owners_all_gone(&self, namespace: &str, obj: &Value) -> bool {
        let Some(refs) = obj
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .filter(|r| !r.is_empty())
        else {
            return false;
        };
        !refs.iter().any(|r| {
            self.objects.iter().any(|((_, ns, _), o)| {
                (ns == namespace || ns.is_empty()) && o["metadata"]["uid"] == r["uid"]
            })
        })
    }

    /// GET.
    pub fn get(&mut self, gvr: &Gvr, namespace: &str, name: &str) -> Result<Value, ApiError> {
        self.take_fault(Op::Get, gvr, name)?;
        self.peek(gvr, namespace, name)
            .cloned()
            .ok_or_else(|| not_found(gvr, name))
    }

    /// Reads an object without consuming faults (for tests and invariants).
    pub fn peek(&self, gvr: &Gvr, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(&(gvr.clone(), namespace.to_string(), name.to_string()))
    }

    /// LIST in one namespace (or all namespaces with `None`), filtered by a label selector
    /// string. Returns the items sorted by namespace and name, and the list resourceVersion.
    pub fn list(
        &mut self,
        gvr: &Gvr,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<(Vec<Value>, u64), ApiError> {
        self.take_fault(Op::List, gvr, "")?;
        let sel = Selector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let items = self
            .objects
            .iter()
            .filter(|((g, ns, _), obj)| {
                g == gvr
                    && namespace.is_none_or(|n| n == ns)
                    && sel.matches(&string_map(obj, "labels"))
            })
            .map(|(_, obj)| obj.clone())
            .collect();
        Ok((items, self.rv))
    }

    /// The `{kind}List` object the REST API returns for a list.
    pub fn list_object(&mut self, gvr: &Gvr, items: Vec<Value>, rv: u64) -> Value {
        let kind = self
            .types
            .get(gvr)
            .map(|t| t.kind.clone())
            .or_else(|| {
                items
                    .first()
                    .and_then(|o| o.get("kind"))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .unwrap_or_default();
        json!({
            "apiVersion": gvr.api_version(),
            "kind": format!("{kind}List"),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        })
    }

    /// PUT: replaces the object. A non-empty metadata.resourceVersion is a precondition.
    pub fn update(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        obj: Value,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        self.take_fault(Op::Update, gvr, name)?;
        self.replace(now, gvr, namespace, name, obj, sub)
    }

    fn replace(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        mut obj: Value,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        let key = (gvr.clone(), namespace.to_string(), name.to_string());
        let current = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(gvr, name))?;
        if !obj.is_object() {
            return Err(ApiError::BadRequest("body must be an object".into()));
        }
        let kind = self.kind_of(gvr, &current);
        if let Some(body_name) = meta_str(&obj, "name") {
            if !body_name.is_empty() && body_name != name {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({name})"
                )));
            }
        }
        let cur_rv = meta_str(&current, "resourceVersion").unwrap_or_default();
        if let Some(want) = meta_str(&obj, "resourceVersion") {
            if !want.is_empty() && want != cur_rv {
                return Err(conflict(gvr, name));
            }
        }
        if let Some(uid) = meta_str(&obj, "uid") {
            let cur_uid = meta_str(&current, "uid").unwrap_or_default();
            if !uid.is_empty() && uid != cur_uid {
                return Err(ApiError::Conflict {
                    resource: gvr.resource.clone(),
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"
                    ),
                });
            }
        }
        let info = self.info(gvr);
        let mut next = match sub {
            Subresource::Status => {
                // Only status moves; everything else stays as stored.
                let mut next = current.clone();
                match obj.get("status") {
                    Some(s) => obj_mut(&mut next).insert("status".into(), s.clone()),
                    None => obj_mut(&mut next).remove("status"),
                };
                next
            }
            Subresource::Main => {
                normalize_secret(gvr, &kind, name, &mut obj)?;
                if info.status_subresource {
                    match current.get("status") {
                        Some(s) => obj_mut(&mut obj).insert("status".into(), s.clone()),
                        None => obj_mut(&mut obj).remove("status"),
                    };
                }
                // Server-owned metadata survives whatever the client sent.
                let cm = current.get("metadata").cloned().unwrap_or(json!({}));
                let m = meta_mut(&mut obj);
                for k in [
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match cm.get(k) {
                        Some(v) => m.insert(k.into(), v.clone()),
                        None => m.remove(k),
                    };
                }
                m.insert("name".into(), json!(name));
                if namespace.is_empty() {
                    m.remove("namespace");
                } else {
                    m.insert("namespace".into(), json!(namespace));
                }
                let o = obj_mut(&mut obj);
                o.insert("apiVersion".into(), json!(gvr.api_version()));
                o.insert("kind".into(), json!(kind));
                obj
            }
        };
        if info.generation && spec_changed(&current, &next) {
            let g = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            meta_mut(&mut next).insert("generation".into(), json!(g + 1));
        }
        // Terminating objects whose last finalizer went away are removed.
        let terminating = current.pointer("/metadata/deletionTimestamp").is_some();
        let no_finalizers = next
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_none_or(|a| a.is_empty());
        if strip_rv(&current) == strip_rv(&next) {
            // A no-op write does not move the resourceVersion.
            return Ok(current);
        }
        let _ = now;
        let rv = self.next_rv();
        meta_mut(&mut next).insert("resourceVersion".into(), json!(rv.to_string()));
        if terminating && no_finalizers {
            self.objects.remove(&key);
            self.record(EventType::Deleted, gvr, namespace, next.clone());
            if let Some(uid) = meta_str(&next, "uid") {
                self.collect_garbage(now, namespace, &uid);
            }
        } else {
            self.objects.insert(key, next.clone());
            self.record(EventType::Modified, gvr, namespace, next.clone());
        }
        Ok(next)
    }

    /// PATCH: merge or JSON patch. A metadata.resourceVersion in the patched result that
    /// differs from the stored one is a precondition failure (409), as in Kubernetes.
    pub fn patch(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        patch: &Patch,
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        self.take_fault(Op::Patch, gvr, name)?;
        let current = self
            .peek(gvr, namespace, name)
            .cloned()
            .ok_or_else(|| not_found(gvr, name))?;
        let kind = self.kind_of(gvr, &current);
        let patched = match patch {
            Patch::Merge(p) => {
                let mut t = current.clone();
                merge_patch(&mut t, p);
                t
            }
            Patch::Json(ops) => json_patch(&current, ops).map_err(|message| ApiError::Invalid {
                kind: kind.clone(),
                name: name.to_string(),
                message,
            })?,
        };
        self.replace(now, gvr, namespace, name, patched, sub)
    }

    /// Sets (or with `None` removes) metadata annotations, optionally only if the object is
    /// still at `resource_version`.
    pub fn patch_annotations(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
        resource_version: Option<&str>,
    ) -> Result<Value, ApiError> {
        let mut ann = Map::new();
        for (k, v) in annotations {
            ann.insert(k.clone(), v.as_ref().map_or(Value::Null, |s| json!(s)));
        }
        let mut meta = json!({ "annotations": ann });
        if let Some(rv) = resource_version {
            obj_mut(&mut meta).insert("resourceVersion".into(), json!(rv));
        }
        self.patch(
            now,
            gvr,
            namespace,
            name,
            &Patch::Merge(json!({ "metadata": meta })),
            Subresource::Main,
        )
    }

    /// DELETE with optional resourceVersion/uid preconditions. Objects with finalizers become
    /// terminating (deletionTimestamp set) and the terminating object is returned; otherwise
    /// the object is removed and `None` is returned.
    pub fn delete(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        precondition_rv: Option<&str>,
        precondition_uid: Option<&str>,
    ) -> Result<Option<Value>, ApiError> {
        self.take_fault(Op::Delete, gvr, name)?;
        let key = (gvr.clone(), namespace.to_string(), name.to_string());
        let current = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(gvr, name))?;
        if let Some(rv) = precondition_rv {
            if meta_str(&current, "resourceVersion").as_deref() != Some(rv) {
                return Err(ApiError::Conflict {
                    resource: gvr.resource.clone(),
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta_str(&current, "resourceVersion").unwrap_or_default()
                    ),
                });
            }
        }
        if let Some(uid) = precondition_uid {
            if meta_str(&current, "uid").as_deref() != Some(uid) {
                return Err(ApiError::Conflict {
                    resource: gvr.resource.clone(),
                    name: name.to_string(),
                    message: format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&current, "uid").unwrap_or_default()
                    ),
                });
            }
        }
        let has_finalizers = current
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if has_finalizers {
            if current.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(Some(current));
            }
            let mut next = current;
            let rv = self.next_rv();
            let m = meta_mut(&mut next);
            m.insert("deletionTimestamp".into(), json!(rfc3339(now)));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            self.objects.insert(key, next.clone());
            self.record(EventType::Modified, gvr, namespace, next.clone());
            Ok(Some(next))
        } else {
            self.objects.remove(&key);
            let rv = self.next_rv();
            let mut gone = current;
            meta_mut(&mut gone).insert("resourceVersion".into(), json!(rv.to_string()));
            let uid = meta_str(&gone, "uid");
            self.record(EventType::Deleted, gvr, namespace, gone);
            if let Some(uid) = uid {
                self.collect_garbage(now, namespace, &uid);
            }
            Ok(None)
        }
    }

    /// The garbage collector's background cascade, done at once: every object in the owner's
    /// namespace (every namespace, for a cluster-scoped owner) loses its ownerReferences to
    /// `uid`, and one left with no owner is deleted, dependents of dependents included.
    fn collect_garbage(&mut self, now: Instant, namespace: &str, uid: &str) {
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|((_, ns, _), _)| namespace.is_empty() || ns == namespace)
            .filter(|(_, o)| {
                o.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for (gvr, ns, name) in dependents {
            let Some(mut obj) = self
                .objects
                .get(&(gvr.clone(), ns.clone(), name.clone()))
                .cloned()
            else {
                continue;
            };
            let left = match obj
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut)
            {
                Some(refs) => {
                    refs.retain(|r| r["uid"] != uid);
                    refs.len()
                }
                None => 0,
            };
            if left == 0 {
                // Deleted as a client would: finalizers hold it, preconditions do not apply.
                let _ = self.delete(now, &gvr, &ns, &name, None, None);
            } else {
                let _ = self.replace(now, &gvr, &ns, &name, obj, Subresource::Main);
            }
        }
    }

    /// Server-side apply, for a single field manager: the applied object replaces what the
    /// clients wrote (so a field left out of it is removed, as SSA removes fields its manager
    /// stopped applying), the server's metadata and the status stay, and an absent object is
    /// created. Fields written by other managers are not tracked.
    pub fn apply(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
        mut obj: Value,
    ) -> Result<(u16, Value), ApiError> {
        if !obj.is_object() {
            return Err(ApiError::BadRequest("body must be an object".into()));
        }
        meta_mut(&mut obj).insert("name".into(), json!(name));
        if self.peek(gvr, namespace, name).is_none() {
            return Ok((201, self.create(now, gvr, namespace, obj)?));
        }
        self.take_fault(Op::Patch, gvr, name)?;
        Ok((
            200,
            self.replace(now, gvr, namespace, name, obj, Subresource::Main)?,
        ))
    }

    /// Fault helper: makes an object terminating by adding a finalizer (if it has none) and
    /// setting deletionTimestamp, as a stuck deletion looks in a real cluster.
    pub fn mark_terminating(
        &mut self,
        now: Instant,
        gvr: &Gvr,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let key = (gvr.clone(), namespace.to_string(), name.to_string());
        let mut obj = self
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(gvr, name))?;
        let rv = self.next_rv();
        let m = meta_mut(&mut obj);
        let fins = m.entry("finalizers").or_insert_with(|| json!([]));
        if fins.as_array().is_none_or(|a| a.is_empty()) {
            *fins = json!(["tidemark.dev/test-hold"]);
        }
        m.entry("deletionTimestamp")
            .or_insert_with(|| json!(rfc3339(now)));
        m.insert("resourceVersion".into(), json!(rv.to_string()));
        self.objects.insert(key, obj.clone());
        self.record(EventType::Modified, gvr, namespace, obj.clone());
        Ok(obj)
    }

    /// Watch events for `gvr` (in `namespace`, or all) matching the selector with a
    /// resourceVersion above `after`. `Err` means `after` fell out of the log (410 Gone).
    pub fn events_since(
        &self,
        gvr: &Gvr,
        namespace: Option<&str>,
        label_selector: Option<&str>,
        after: u64,
    ) -> Result<Vec<WatchEvent>, ApiError> {
        let sel = Selector::parse(label_selector.unwrap_or(""))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        if let Some(first) = self.log.front() {
            if after + 1 < first.rv && after < self.rv {
                return Err(ApiError::Internal("Gone: too old resource version".into()));
            }
        }
        Ok(self
            .log
            .iter()
            .filter(|e| {
                e.rv > after
                    && e.gvr == *gvr
                    && namespace.is_none_or(|n| n == e.namespace)
                    && sel.matches(&string_map(&e.object, "labels"))
            })
            .cloned()
            .collect())
    }

    /// Every stored object of one type, for invariant checks.
    pub fn all(&self, gvr: &Gvr) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|((g, _, _), _)| g == gvr)
            .map(|(_, v)| v)
            .collect()
    }
}

#[cfg(test)]
mod tests;
