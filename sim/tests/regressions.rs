//! Saved schedules, replayed. `sim/regressions/*.json` must pass; `sim/regressions/open/`
//! holds failing schedules of open core findings, which must still reproduce (ignored by
//! default so an open finding does not block CI; run with `--ignored`). When an open one
//! starts passing, move it up a level: it becomes a regression guard.

use std::path::{Path, PathBuf};
use tidemark_sim::runner::run;
use tidemark_sim::SavedRun;

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "json"));
    v.sort();
    v
}

fn load(p: &Path) -> SavedRun {
    let text = std::fs::read_to_string(p).expect("regression file is readable");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions")
}

#[test]
fn fixed_regressions_pass() {
    for p in files(&root()) {
        let saved = load(&p);
        let r = run(&saved.schedule, false);
        assert!(r.passed(), "{} fails again: {:?}", p.display(), r.violation);
    }
}

#[test]
#[ignore = "open core findings; run with --ignored to confirm they still reproduce"]
fn open_findings_still_reproduce() {
    let mut fixed = Vec::new();
    for p in files(&root().join("open")) {
        let saved = load(&p);
        let want = saved.violation.as_ref().map(|v| v.invariant.clone());
        let r = run(&saved.schedule, false);
        let got = r.violation.as_ref().map(|v| v.invariant.clone());
        if got.is_none() {
            fixed.push(p.display().to_string());
        } else {
            assert_eq!(
                got,
                want,
                "{} now fails differently: {:?}",
                p.display(),
                r.violation
            );
        }
    }
    assert!(
        fixed.is_empty(),
        "these now pass; move them to sim/regressions/: {fixed:?}"
    );
}

#[test]
fn saved_runs_replay_to_the_same_trace() {
    // Replaying a saved schedule is deterministic: two replays give one trace hash.
    for p in files(&root().join("open"))
        .into_iter()
        .chain(files(&root()))
        .take(2)
    {
        let saved = load(&p);
        let a = run(&saved.schedule, true);
        let b = run(&saved.schedule, true);
        assert_eq!(a.trace_hash, b.trace_hash, "{}", p.display());
    }
}
