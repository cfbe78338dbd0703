//! Fuzz target: see `checks::body` (src/checks.rs) for the invariant.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../src/checks.rs"]
#[allow(dead_code)] // each target uses one check
mod checks;

fuzz_target!(|data: &[u8]| checks::body(data));
