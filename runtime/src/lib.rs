//! tidemark-runtime (under construction).
