//! The edge's command line: the flags other tools rely on, `--check-config`, and clear
//! failures for bad input.

use std::process::Command;

fn edge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_edge-proxy"))
}

/// Keys made by `edge-proxy gen-keys` in a temporary directory.
fn keys() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let o = edge()
        .args(["gen-keys", "--out"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    d
}

#[test]
fn contract_flags_are_accepted() {
    let keys = keys();
    let o = edge()
        .args(["--listen", "10.77.1.1:3128", "--remote", "10.77.2.2:4443"])
        .arg("--tls-dir")
        .arg(keys.path())
        .args([
            "--connections",
            "10",
            "--policy",
            "round-robin",
            "--congestion",
            "cubic",
        ])
        .args([
            "--connect-reply",
            "after-connect",
            "--transparent",
            "10.77.1.1:3129",
        ])
        .args([
            "--link-rtt-ms",
            "120",
            "--link-rate-mbit",
            "34",
            "--log-format",
            "json",
        ])
        .args(["--allow-client", "10.77.1.0/24", "--check-config"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("Production"));
}

#[test]
fn no_arguments_means_development_defaults() {
    let o = edge().arg("--check-config").output().unwrap();
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Development"));
}

#[test]
fn bad_input_fails_with_a_reason() {
    let o = edge().args(["--policy", "fastest"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = edge()
        .args(["--connections", "0", "--check-config"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("pool.connections"));
    let o = edge()
        .args(["--config", "/nonexistent/edge.toml", "--check-config"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read"));
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/config/edge.toml");
    // The example's key files live in /etc/longhaul; check it with freshly made ones.
    let keys = keys();
    let o = edge()
        .args(["--config", example, "--check-config", "--tls-dir"])
        .arg(keys.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn production_without_tls_is_refused_and_gen_keys_fixes_it() {
    let o = edge()
        .args(["--remote", "203.0.113.10:4443", "--check-config"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("pool.remote 203.0.113.10:4443 is not a loopback address")
            && err.contains("must run mutual TLS"),
        "{err}"
    );
    let keys = keys();
    let d = keys.path();
    use std::os::unix::fs::PermissionsExt;
    for f in ["ca.key", "edge.key", "remote.key"] {
        let mode = std::fs::metadata(d.join(f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
    let o = edge()
        .args([
            "--remote",
            "203.0.113.10:4443",
            "--check-config",
            "--tls-dir",
        ])
        .arg(d)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("mutual TLS 1.3"));
    // A second gen-keys into the same directory never overwrites keys.
    let o = edge().args(["gen-keys", "--out"]).arg(d).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refusing to overwrite"));
    // Missing key files are reported by --check-config with the file name.
    std::fs::remove_file(d.join("edge.key")).unwrap();
    let o = edge()
        .args([
            "--remote",
            "203.0.113.10:4443",
            "--check-config",
            "--tls-dir",
        ])
        .arg(d)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("edge.key"));
}
