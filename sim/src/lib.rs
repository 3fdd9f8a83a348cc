//! tidemark-sim (under construction).
pub mod apiserver;
