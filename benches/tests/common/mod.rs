//! Shared by the `pageload` integration tests: the privilege gate and the loud skip.

use std::process::Command;

/// Skips the test `test` loudly, or fails it when LONGHAUL_REQUIRE_NETNS=1 (CI).
pub fn skip(test: &str, why: &str) {
    if std::env::var("LONGHAUL_REQUIRE_NETNS").as_deref() == Ok("1") {
        panic!("LONGHAUL_REQUIRE_NETNS=1 but {why}");
    }
    eprintln!("SKIP {test}: {why}");
}

/// Whether this process runs as root (network namespaces need CAP_NET_ADMIN).
#[allow(dead_code)] // not every test that shares this module needs it
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
