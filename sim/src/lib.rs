//! tidemark-sim (under construction).
