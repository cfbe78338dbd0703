//! What this process may do with namespaces, and the gate tests use before needing them.

use std::process::Command;

/// How the test bed can run here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privileges {
    /// `CAP_SYS_ADMIN` and `CAP_NET_ADMIN` in the current user namespace (root, or root
    /// inside a user namespace): namespaces can be created directly.
    Root,
    /// Unprivileged, but user namespaces are available: re-run under
    /// `unshare --user --map-root-user` to become root in a new user namespace.
    UserNamespace,
    /// Neither: the test bed cannot run.
    None,
}

/// Environment variable set on a process re-executed inside a user namespace.
pub const IN_USERNS_ENV: &str = "LONGHAUL_TESTBED_IN_USERNS";
/// When set to `1`, tests needing namespaces fail instead of skipping without them.
pub const REQUIRE_ENV: &str = "LONGHAUL_REQUIRE_NETNS";

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// Detects the privileges available (spawns `unshare` once when not root).
pub fn privileges() -> Privileges {
    let caps = effective_caps();
    if caps & (1 << CAP_SYS_ADMIN) != 0 && caps & (1 << CAP_NET_ADMIN) != 0 {
        return Privileges::Root;
    }
    let ok = Command::new("unshare")
        .args(["--user", "--map-root-user", "--net", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        Privileges::UserNamespace
    } else {
        Privileges::None
    }
}

/// Gate for a test that needs network namespaces; `test_path` is the test's full name
/// as the test harness knows it (e.g. `rtt_matches_profile`). Returns `true` when the
/// caller should run the test body here (privileged). Otherwise:
/// * with [`Privileges::UserNamespace`], re-runs just this test inside a new user
///   namespace (as its root) and panics if it fails there, then returns `false`;
/// * with [`Privileges::None`], prints a loud SKIP line and returns `false`, or panics
///   if `LONGHAUL_REQUIRE_NETNS=1`.
pub fn netns_test_gate(test_path: &str) -> bool {
    match privileges() {
        Privileges::Root => true,
        Privileges::UserNamespace if std::env::var_os(IN_USERNS_ENV).is_none() => {
            let exe = std::env::current_exe().expect("current test executable");
            // Output goes to files, not pipes: a process the test leaks cannot hang us.
            let log = std::env::temp_dir().join(format!(
                "longhaul-userns-test-{}-{}.log",
                std::process::id(),
                test_path.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            ));
            let file = std::fs::File::create(&log).expect("creating the test log");
            let status = Command::new("unshare")
                .args(["--user", "--map-root-user", "--"])
                .arg(exe)
                .args([test_path, "--exact", "--nocapture", "--test-threads", "1"])
                .env(IN_USERNS_ENV, "1")
                .stdout(file.try_clone().expect("log file"))
                .stderr(file)
                .status()
                .expect("spawning unshare");
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = std::fs::remove_file(&log);
            assert!(
                status.success() && output.contains("1 passed"),
                "{test_path} inside a user namespace failed ({status}):\n{output}"
            );
            eprintln!("{test_path}: passed inside an unprivileged user namespace");
            false
        }
        _ => {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{test_path}: network namespaces unavailable (not root, no user namespaces) and {REQUIRE_ENV}=1");
            }
            eprintln!(
                "SKIP {test_path}: needs network namespaces (root or unprivileged user namespaces)"
            );
            false
        }
    }
}
