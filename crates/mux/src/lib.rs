//! Sans-IO multiplexing protocol core of longhaul: frames, stream state, credit flow control, scheduling policy.
#![forbid(unsafe_code)]
