//! What the simulator runs as an agent: the real mirror core, or its test double
//! ([`crate::reference`]), both through core's one contract ([`Machine`], docs/design.md,
//! "The core contract").

use crate::reference::RefReplicator;
use crate::schedule::ReplicatorKind;
use tidemark_core::mirror::{Input, Mirror, Output, Status};
use tidemark_core::{Machine, MirrorConfig};

/// A machine with the mirror's inputs, outputs and status, so the simulator drives the real
/// mirror or its test double the same way.
pub trait Replicator:
    Machine<Input = Input, Output = Output, Status = Status> + std::fmt::Debug
{
}

impl<T> Replicator for T where
    T: Machine<Input = Input, Output = Output, Status = Status> + std::fmt::Debug
{
}

/// Builds a replicator of the kind the options ask for.
pub fn build(
    kind: ReplicatorKind,
    cfg: MirrorConfig,
    seed: u64,
) -> Result<Box<dyn Replicator>, String> {
    match kind {
        ReplicatorKind::Reference => Ok(Box::new(RefReplicator::new(cfg, seed))),
        ReplicatorKind::Core => Mirror::new(cfg, seed)
            .map(|m| Box::new(m) as Box<dyn Replicator>)
            .map_err(|e| e.to_string()),
    }
}
