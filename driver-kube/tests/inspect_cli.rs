//! `tidemark-inventory inspect` over the core's inventory fixtures (one per Reason, a valid
//! selection, and current slices), run as the real binary.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures/inventory")
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tidemark-inventory"))
        .args(args)
        .output()
        .expect("run tidemark-inventory");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs inspect and returns the single JSON object it printed.
fn inspect(args: &[&str]) -> Value {
    let mut all = vec!["inspect"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = run(&all);
    assert_eq!(code, 0, "inspect {args:?} failed: {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line of JSON: {stdout}");
    let v: Value = serde_json::from_str(lines[0]).expect("stdout is JSON");
    assert!(v.is_object());
    v
}

/// The `# Expect:` and `# Lineage` facts a fixture states about itself.
fn header(path: &Path) -> (String, String) {
    let text = std::fs::read_to_string(path).expect("fixture readable");
    let expect = text
        .lines()
        .find_map(|l| l.strip_prefix("# Expect: "))
        .expect("fixture has an Expect line")
        .to_string();
    let lineage = text
        .lines()
        .find_map(|l| l.strip_prefix("# Lineage "))
        .and_then(|l| l.split_whitespace().next())
        .expect("fixture names its lineage")
        .to_string();
    (expect, lineage)
}

#[test]
fn every_reason_fixture_is_reported_invalid_with_its_reason() {
    let dir = fixtures();
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("fixtures directory") {
        let path = entry.expect("dir entry").path();
        let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !file.ends_with(".yaml") || file == "valid.yaml" || file == "current-slices.yaml" {
            continue;
        }
        let (expect, lineage) = header(&path);
        let reason = expect
            .split("reason ")
            .nth(1)
            .map(|r| r.trim_end_matches('.').trim().to_string())
            .expect("invalid fixtures name a reason");
        let p = path.to_str().expect("utf-8 path");
        let v = inspect(&["--secrets", p, "--lineage", &lineage]);
        assert_eq!(v["outcome"], "invalid", "{file}: {v}");
        assert_eq!(v["reason"], reason.as_str(), "{file}: {v}");
        assert!(
            v["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{file}"
        );
        // With current slices an invalid history still yields no tombstones.
        let cur = dir.join("current-slices.yaml");
        let v = inspect(&[
            "--secrets",
            p,
            "--lineage",
            &lineage,
            "--current",
            cur.to_str().expect("utf-8"),
        ]);
        assert_eq!(v["tombstones"], serde_json::json!([]), "{file}");
        seen.push(reason);
    }
    seen.sort();
    let mut all: Vec<String> = tidemark_core::inventory::Reason::ALL
        .iter()
        .map(|r| r.name().to_string())
        .collect();
    all.sort();
    assert_eq!(seen, all, "one fixture per Reason");
}

#[test]
fn valid_fixture_selects_and_computes_sorted_tombstones() {
    let dir = fixtures();
    let valid = dir.join("valid.yaml");
    let (_, lineage) = header(&valid);
    let p = valid.to_str().expect("utf-8");
    let v = inspect(&["--secrets", p, "--lineage", &lineage]);
    assert_eq!(v["outcome"], "selected");
    assert_eq!(v["lineage"], lineage.as_str());
    assert_eq!(v["synthesisUUID"], "b2c5e8a1-6f3d-4c1a-9e7b-2d4f6a8c0e13");
    assert_eq!(v["chunks"], 2);
    assert_eq!(v["entries"], 9);
    assert!(v["compositionName"].is_string() && v["synthesized"].is_string());
    assert!(v.get("tombstones").is_none());

    let cur = dir.join("current-slices.yaml");
    let v = inspect(&[
        "--secrets",
        p,
        "--lineage",
        &lineage,
        "--current",
        cur.to_str().expect("utf-8"),
    ]);
    let t = v["tombstones"].as_array().expect("tombstones");
    let names: Vec<(String, String)> = t
        .iter()
        .map(|x| {
            (
                x["kind"].as_str().unwrap_or("").to_string(),
                x["name"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for want in [
        ("ConfigMap", "web-legacy"),
        ("Secret", "web-old-creds"),
        ("CustomResourceDefinition", "widgets.example.com"),
        ("PodDisruptionBudget", "web"),
    ] {
        assert!(
            names.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {names:?}"
        );
    }
    assert_eq!(t.len(), 4, "{t:?}");
    // Eno's deletion order, lowest group first, each with its effective group; the CRD is
    // planned but protected.
    let order: Vec<(&str, &Value, &Value)> = t
        .iter()
        .map(|x| {
            (
                x["name"].as_str().unwrap_or(""),
                &x["deletionGroup"],
                &x["protected"],
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            (
                "widgets.example.com",
                &json!(-1),
                &json!("CustomResourceDefinition")
            ),
            ("web-legacy", &json!(2), &Value::Null),
            ("web-old-creds", &json!(100), &Value::Null),
            ("web", &json!(100), &Value::Null),
        ]
    );
    assert_eq!(v["decision"], "Applied");
    assert!(v["unchecked"].is_string(), "no --composition: {v}");
    for x in t {
        for k in ["group", "version", "kind", "name"] {
            assert!(x.get(k).is_some(), "{k} in {x}");
        }
    }
}

#[test]
fn json_list_and_single_lineage_inference() {
    // The same Secrets as a JSON List: convert the YAML fixture.
    let dir = fixtures();
    let yaml = std::fs::read_to_string(dir.join("missing-chunk.yaml")).expect("fixture");
    let v: Value = serde_yaml::from_str(&yaml).expect("yaml");
    let tmp = std::env::temp_dir().join(format!("tidemark-inspect-{}.json", std::process::id()));
    std::fs::write(&tmp, serde_json::to_string(&v).expect("json")).expect("write");
    let out = inspect(&["--secrets", tmp.to_str().expect("utf-8")]);
    assert_eq!(out["reason"], "MissingChunk");
    let _ = std::fs::remove_file(&tmp);

    // An unknown lineage has no inventory.
    let p = dir.join("valid.yaml");
    let out = inspect(&["--secrets", p.to_str().expect("utf-8"), "--lineage", "0123"]);
    assert_eq!(out["outcome"], "none");
    assert!(out.get("tombstones").is_none());
}

#[test]
fn unusable_input_fails_with_a_clear_message() {
    let (code, stdout, stderr) = run(&["inspect", "--secrets", "/nonexistent/secrets.yaml"]);
    assert_ne!(code, 0);
    assert!(stdout.is_empty());
    assert!(stderr.contains("/nonexistent/secrets.yaml"), "{stderr}");

    let tmp = std::env::temp_dir().join(format!("tidemark-garbage-{}.yaml", std::process::id()));
    std::fs::write(&tmp, "items: [unclosed\n").expect("write");
    let (code, _, stderr) = run(&["inspect", "--secrets", tmp.to_str().expect("utf-8")]);
    assert_ne!(code, 0);
    assert!(stderr.contains("neither JSON nor YAML"), "{stderr}");
    let _ = std::fs::remove_file(&tmp);

    // Limits that would make the budget meaningless, and unknown protections, are refused
    // with the fix.
    let valid = fixtures().join("valid.yaml");
    let v = valid.to_str().expect("utf-8");
    for (flag, value, says) in [
        ("--max-deletion-fraction", "1.5", "at most 1"),
        ("--max-deletion-fraction", "0", "above 0"),
        (
            "--deletable-protected-kinds",
            "Namespace,Secret",
            "use Namespace, CustomResourceDefinition or kube-system",
        ),
    ] {
        let (code, _, stderr) = run(&["inspect", "--secrets", v, "--lineage", "x", flag, value]);
        assert_eq!(code, 2, "{flag} {value}");
        assert!(stderr.contains(says), "{flag} {value}: {stderr}");
    }

    // Several lineages without --lineage: ambiguous, so no decision.
    let valid = fixtures().join("valid.yaml");
    let (code, _, stderr) = run(&["inspect", "--secrets", valid.to_str().expect("utf-8")]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--lineage"), "{stderr}");
}
