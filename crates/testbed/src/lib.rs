//! Network-namespace topologies joined by a user-space long-link emulator over TUN, with the linkem CLI.
#![forbid(unsafe_code)]
