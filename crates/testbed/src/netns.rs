//! Anonymous network namespaces held by open file descriptors.
//!
//! A namespace is created by a short-lived thread that unshares its network namespace
//! and opens `/proc/thread-self/ns/net`; the open [`File`] alone keeps the namespace
//! alive. Nothing is mounted and nothing is named globally, so instances never collide
//! and a killed process leaves no namespace behind: the kernel frees it when the last
//! descriptor closes and the last process inside exits.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context};

/// One network namespace.
#[derive(Debug)]
pub struct NetNs {
    /// Role name, for messages.
    name: String,
    /// The namespace's nsfs file; holding it keeps the namespace alive.
    file: File,
}

impl NetNs {
    /// Creates a new, empty network namespace (only `lo`, down).
    pub fn new(name: &str) -> anyhow::Result<NetNs> {
        let file = std::thread::scope(|s| {
            s.spawn(|| -> std::io::Result<File> {
                netsys::unshare_net()?;
                File::open("/proc/thread-self/ns/net")
            })
            .join()
            .map_err(|_| anyhow::anyhow!("namespace thread panicked"))
        })?
        .with_context(|| format!("creating network namespace {name} (needs CAP_SYS_ADMIN)"))?;
        Ok(NetNs {
            name: name.to_string(),
            file,
        })
    }

    /// Role name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A path other processes can open to enter this namespace while it exists
    /// (`/proc/<pid>/fd/<fd>`).
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.file.as_raw_fd()
        ))
    }

    /// The namespace's inode, as in `net:[inode]`.
    pub fn inode(&self) -> anyhow::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.file.metadata()?.ino())
    }

    /// Runs `f` on a fresh thread inside this namespace and returns its result.
    /// Sockets and TUN devices `f` creates belong to this namespace; processes it
    /// spawns start in it.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        std::thread::scope(|s| {
            s.spawn(|| -> anyhow::Result<T> {
                netsys::setns_net(&self.file)
                    .with_context(|| format!("entering namespace {}", self.name))?;
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("thread in namespace {} panicked", self.name))?
        })
    }

    /// Runs a command to completion inside the namespace; fails with its stderr.
    pub fn cmd(&self, program: &str, args: &[&str]) -> anyhow::Result<String> {
        let out = self
            .run(|| Command::new(program).args(args).output())?
            .with_context(|| format!("running {program} in {}", self.name))?;
        if !out.status.success() {
            bail!(
                "{program} {} in namespace {}: {}",
                args.join(" "),
                self.name,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Writes a sysctl under `/proc/sys/` (`key` with dots, e.g. `net.ipv4.ip_forward`)
    /// for this namespace.
    pub fn sysctl(&self, key: &str, value: &str) -> anyhow::Result<()> {
        if key.contains("..") || key.contains('/') {
            bail!("invalid sysctl key {key:?}");
        }
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        self.run(|| std::fs::write(&path, value))?
            .with_context(|| format!("setting {key} = {value} in namespace {}", self.name))
    }

    /// Reads a sysctl of this namespace.
    pub fn read_sysctl(&self, key: &str) -> anyhow::Result<String> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        Ok(self
            .run(|| std::fs::read_to_string(&path))?
            .with_context(|| format!("reading {key} in namespace {}", self.name))?
            .trim()
            .to_string())
    }

    /// Pids of processes (other than this one) whose network namespace is this one.
    pub fn processes(&self) -> Vec<i32> {
        match self.inode() {
            Ok(ino) => processes_in(ino),
            Err(_) => Vec::new(),
        }
    }
}

/// Pids of processes (other than this one) in the network namespace with inode `ino`.
pub fn processes_in(ino: u64) -> Vec<i32> {
    let want = format!("net:[{ino}]");
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/ns/net"))
                .map(|l| l.to_string_lossy() == want)
                .unwrap_or(false)
        })
        .collect()
}

/// SIGKILLs every process in the namespaces with inodes `inodes` until none is left
/// (processes may fork while being killed), at most 50 rounds 10 ms apart; returns the
/// pids still there after the last round.
pub fn kill_processes_in(inodes: &[u64]) -> Vec<i32> {
    let mut left = Vec::new();
    for _ in 0..50 {
        left = inodes.iter().flat_map(|&i| processes_in(i)).collect();
        if left.is_empty() {
            break;
        }
        for pid in &left {
            let _ = netsys::send_signal(*pid, libc::SIGKILL);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    left
}
