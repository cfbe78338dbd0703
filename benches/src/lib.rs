//! longhaul's benchmarks: criterion micro-benchmarks (in `benches/benches/`) and the `pageload`
//! runner, which loads the seeds' page models through longhaul and its peers over emulated long
//! links and reports medians, p95 and ratios measured side by side in one run; and the `cost`
//! runner ([`cost`]), which measures what the proxy chains cost end to end on loopback
//! (latency added, CPU per byte, memory per client).
//!
//! The pure parts (workload generation, statistics, the analytic floor, the split-proxy model,
//! the results schema, the shuffled schedule) are unit-tested here. The runner itself needs root
//! and the test bed; it is never run from `cargo test`.
#![forbid(unsafe_code)]

pub mod bed;
pub mod checkpoint;
pub mod chromium;
pub mod clients;
pub mod cost;
pub mod floor;
pub mod host;
pub mod http3;
pub mod load;
pub mod model;
pub mod origin;
pub mod pacing;
pub mod pacing_plot;
pub mod pagemodel;
pub mod plots;
pub mod replay;
pub mod results;
pub mod runner;
pub mod schedule;
pub mod settle;
pub mod shipped;
pub mod stats;
pub mod suites;
pub mod systems;
pub mod workload;
