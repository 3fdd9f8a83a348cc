//! Wiring of the real `tidemark_core::mirror::Mirror` into the simulator.

use crate::agent::Replicator;
use tidemark_core::mirror::{Input, Mirror, Output, Status};
use tidemark_core::{Instant, MirrorConfig};

impl Replicator for Mirror {
    fn handle_input(&mut self, now: Instant, input: Input) {
        Mirror::handle_input(self, now, input);
    }

    fn poll_output(&mut self, now: Instant) -> Output {
        Mirror::poll_output(self, now)
    }

    fn status(&self) -> &Status {
        Mirror::status(self)
    }
}

/// Builds the real mirror core for an agent.
pub fn build(cfg: MirrorConfig, seed: u64) -> Result<Box<dyn Replicator>, String> {
    Mirror::new(cfg, seed)
        .map(|m| Box::new(m) as Box<dyn Replicator>)
        .map_err(|e| e.to_string())
}
