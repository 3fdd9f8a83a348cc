//! `tidemark-mirror`: the standalone mirror agent (under construction).
fn main() {}
