//! `config_parse`: config files and EtcdMirror specs are operator input, as YAML or JSON.
//!
//! Properties: parsing and `validate()` never panic; a rejected config names at least one
//! problem; `Mirror::new` accepts exactly the valid Sync configs (Drain is refused by this
//! build) and a fresh mirror's first outputs do not panic; a parsed config survives a JSON
//! round trip unchanged and validates the same way.

use tidemark_core::config::{MirrorConfig, Mode};
use tidemark_core::mirror::{Mirror, Output};
use tidemark_core::Instant;

pub fn run(data: &[u8]) {
    if let Ok(cfg) = serde_json::from_slice::<MirrorConfig>(data) {
        check(cfg);
    }
    if let Ok(cfg) = serde_yaml::from_slice::<MirrorConfig>(data) {
        check(cfg);
    }
}

fn check(cfg: MirrorConfig) {
    let verdict = cfg.validate();
    if let Err(e) = &verdict {
        assert!(
            !e.0.is_empty(),
            "validate() failed without naming a problem"
        );
        let _ = e.to_string();
    }
    let _ = (cfg.link_id(), cfg.checkpoint_key(), cfg.target_base());

    match Mirror::new(cfg.clone(), 7) {
        Ok(mut m) => {
            assert!(verdict.is_ok(), "Mirror::new accepted an invalid config");
            let now = Instant::from_nanos(1);
            for _ in 0..4 {
                if !matches!(m.poll_output(now), Output::Command { .. }) {
                    break;
                }
            }
        }
        Err(_) => assert!(
            verdict.is_err() || cfg.mode == Mode::Drain,
            "Mirror::new refused a valid Sync config"
        ),
    }

    let json = serde_json::to_vec(&cfg).expect("a parsed config serialises");
    let back: MirrorConfig = serde_json::from_slice(&json).unwrap_or_else(|e| {
        panic!(
            "a parsed config does not parse back from its own JSON ({e}): {}",
            String::from_utf8_lossy(&json)
        )
    });
    assert_eq!(back, cfg, "JSON round trip changed the config");
    assert_eq!(back.validate().is_ok(), verdict.is_ok());
}
