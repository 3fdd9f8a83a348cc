//! Wiring of the real `tidemark_core::mirror::Mirror` into the simulator.

use crate::agent::Replicator;
use tidemark_core::MirrorConfig;

/// Builds the real mirror core for an agent.
pub fn build(_cfg: MirrorConfig, _seed: u64) -> Result<Box<dyn Replicator>, String> {
    Err("tidemark_core::mirror::Mirror is not available in this build yet".into())
}
