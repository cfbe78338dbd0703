//! The Debian packages: `scripts/package` builds both from the binaries of this build (a debug
//! profile package, for the test only: release packages come from `scripts/package --out DIR`
//! alone), in two revisions; `tests/package/install-check` then installs them into a scratch
//! root (overlays on /etc, /usr and /var in a private mount namespace, no systemd running),
//! runs the installed binaries' `--check-config` on the installed configurations as the
//! packaged service account, `systemd-analyze verify` on the installed units (and checks that
//! verify fails without the binary), edits the configurations, upgrades, removes and purges,
//! and checks that the edits survive upgrade and removal and go on purge.
//!
//! Needs root, `unshare`, dpkg and systemd-analyze; skips without them (fails instead with
//! LONGHAUL_REQUIRE_NETNS=1, as in CI).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn packages_install_check_config_verify_and_keep_edited_configs() {
    let root = is_root();
    let tools = ["dpkg", "dpkg-deb", "unshare", "systemd-analyze", "setpriv"]
        .iter()
        .all(|t| have(t, "--version"));
    if !root || !tools {
        assert!(
            std::env::var("LONGHAUL_REQUIRE_NETNS").as_deref() != Ok("1"),
            "the package test needs root, dpkg, unshare, setpriv and systemd-analyze \
             (LONGHAUL_REQUIRE_NETNS=1)"
        );
        eprintln!("SKIP package test: needs root, dpkg, unshare, setpriv and systemd-analyze");
        return;
    }
    let bins = Path::new(env!("CARGO_BIN_EXE_edge-proxy"))
        .parent()
        .unwrap()
        .to_path_buf();
    assert!(bins.join("remote-proxy").is_file());
    let dir = tempfile::tempdir().unwrap();
    for rev in ["1", "2"] {
        run(Command::new(repo().join("scripts/package"))
            .arg("--out")
            .arg(dir.path().join(format!("v{rev}")))
            .args(["--revision", rev, "--fast", "--bin-dir"])
            .arg(&bins));
    }
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    run(Command::new("unshare")
        .args(["--mount", "--propagation", "private"])
        .arg(repo().join("crates/longhaul/tests/package/install-check"))
        .arg(dir.path().join("v1"))
        .arg(dir.path().join("v2"))
        .arg(&scratch));
}

/// Whether this process runs as root (`id -u`: the test crate has no libc dependency).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}
