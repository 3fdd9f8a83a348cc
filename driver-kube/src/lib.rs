//! tidemark-kube (under construction).
