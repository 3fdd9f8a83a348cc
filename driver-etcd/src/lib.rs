//! tidemark-etcd (under construction).
