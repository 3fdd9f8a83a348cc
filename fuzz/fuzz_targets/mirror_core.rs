#![no_main]
//! See `tidemark_fuzz::mirror` for what this target checks.

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidemark_fuzz::mirror::run(data));
