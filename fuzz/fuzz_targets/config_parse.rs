#![no_main]
//! See `tidemark_fuzz::config` for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::config::run(data));
