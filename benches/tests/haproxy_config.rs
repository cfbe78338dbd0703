//! The HAProxy chain's generated configurations are accepted by the installed HAProxy
//! (`haproxy -c`), and both halves log abnormal requests only.
//!
//! Needs haproxy (scripts/install-deps); skips loudly otherwise, and fails instead of skipping
//! when LONGHAUL_REQUIRE_NETNS=1 (CI).

mod common;

use longhaul_benches::systems::{haproxy_edge_conf, haproxy_remote_conf};
use std::path::Path;
use std::process::Command;

#[test]
fn both_halves_pass_haproxy_check() {
    let bin = Path::new("/usr/sbin/haproxy");
    if !bin.exists() {
        return common::skip(
            "haproxy_config",
            "haproxy is not installed (scripts/install-deps)",
        );
    }
    let dir = std::env::temp_dir().join(format!("longhaul-haproxy-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let edge = haproxy_edge_conf(
        &dir,
        "127.0.0.1:3130".parse().unwrap(),
        "127.0.0.1:8443".parse().unwrap(),
        3_250_000,
    );
    let hosts = [
        ("www.yahoo.test".to_string(), "127.0.0.10".parse().unwrap()),
        ("l.yimg.test".to_string(), "127.0.0.11".parse().unwrap()),
    ];
    let remote = haproxy_remote_conf(&dir, "127.0.0.1:8443".parse().unwrap(), &hosts, 3_250_000);
    for (name, conf) in [("edge", &edge), ("remote", &remote)] {
        assert!(conf.contains("option dontlog-normal"), "{name}:\n{conf}");
        assert!(conf.contains("log stderr"), "{name}:\n{conf}");
        let path = dir.join(format!("{name}.cfg"));
        std::fs::write(&path, conf).unwrap();
        let out = Command::new(bin)
            .arg("-c")
            .arg("-f")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "haproxy -c refused the {name} half:\n{conf}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
