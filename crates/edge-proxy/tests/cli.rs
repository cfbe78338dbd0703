//! The edge's command line: the flags other tools rely on, `--check-config`, and clear
//! failures for bad input.

use std::process::Command;

fn edge() -> Command {
    Command::new(env!("CARGO_BIN_EXE_edge-proxy"))
}

#[test]
fn contract_flags_are_accepted() {
    let o = edge()
        .args(["--listen", "10.77.1.1:3128", "--remote", "10.77.2.2:4443"])
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
    let o = edge()
        .args(["--config", example, "--check-config"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
