//! Tokio driver for the longhaul mux: a warm pool of tuned carrier connections with least-outstanding-bytes scheduling.
#![forbid(unsafe_code)]
