//! Shared helpers for longhaul benchmarks.
#![forbid(unsafe_code)]
