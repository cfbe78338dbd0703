//! What the cost runner reads about processes from `/proc`: the processes a system started
//! (descendants of the runner), their CPU time (`utime + stime` of `/proc/PID/stat`, every
//! thread of the process, in clock ticks) and their resident memory (`VmRSS`).
//!
//! Reading only: nothing here starts, signals or stops a process.

use std::collections::{BTreeMap, BTreeSet};

/// One process of a system, as the results name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// What it is: the program and, where the command line says, its side (`haproxy-edge`,
    /// `squid-parent`, `edge-proxy`, `nginx`).
    pub label: String,
}

/// Parent pid and CPU ticks (`utime + stime`) from the text of `/proc/PID/stat`. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses itself, so the fields
/// are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<(u32, u64)> {
    let tail = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = tail.split_whitespace().collect();
    // f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// Resident memory in KiB from the text of `/proc/PID/status`.
pub fn parse_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// CPU ticks used so far by process `pid` (all its threads), `None` once it is gone.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&s).map(|(_, t)| t)
}

/// Resident memory of `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    parse_rss_kib(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// Context switches (voluntary and involuntary) of every thread of `pid` so far: how often
/// the process went to sleep and was woken, or was preempted.
pub fn context_switches(pid: u32) -> Option<u64> {
    let mut total = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        total += parse_context_switches(&s);
    }
    Some(total)
}

/// Voluntary plus involuntary context switches from the text of a `status` file.
pub fn parse_context_switches(status: &str) -> u64 {
    status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<u64>().ok())
        .sum()
}

/// Clock ticks per second (`getconf CLK_TCK`; 100, Linux's value on every common
/// architecture, if that cannot run).
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .filter(|t| *t > 0)
        .unwrap_or(100)
}

/// Every live descendant of `root` (children, their children, …), in pid order.
pub fn descendants(root: u32) -> Vec<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if let Some((ppid, _)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(p) = todo.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if out.insert(*c) {
                todo.push(*c);
            }
        }
    }
    out.into_iter().collect()
}

/// The side names the systems' directories carry, which a command line may include (a
/// configuration file's path).
const SIDES: [&str; 6] = [
    "haproxy-edge",
    "haproxy-remote",
    "squid-child",
    "squid-parent",
    "longhaul-edge",
    "longhaul-remote",
];

/// Label of a process from its command name and command line (NUL-separated, as
/// `/proc/PID/cmdline` holds it).
pub fn label_of(comm: &str, cmdline: &str) -> String {
    let comm = comm.trim();
    if comm == "edge-proxy" || comm == "remote-proxy" {
        return comm.to_string();
    }
    SIDES
        .iter()
        .find(|s| cmdline.contains(*s))
        .map(|s| s.to_string())
        .unwrap_or_else(|| comm.to_string())
}

/// The process `pid` with its label.
pub fn describe(pid: u32) -> Proc {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    Proc {
        pid,
        label: label_of(&comm, &cmdline),
    }
}

/// The descendants of this process that are not in `known`.
pub fn new_descendants(known: &[u32]) -> Vec<Proc> {
    descendants(std::process::id())
        .into_iter()
        .filter(|p| !known.contains(p))
        .map(describe)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let s = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 1 2 3";
        assert_eq!(parse_stat(s), Some((17, 325)));
        assert_eq!(parse_stat("1 (x) S"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn rss_from_status() {
        let s = "Name:\tedge-proxy\nVmPeak:\t  9000 kB\nVmRSS:\t    5120 kB\nThreads:\t3\n";
        assert_eq!(parse_rss_kib(s), Some(5120));
        assert_eq!(parse_rss_kib("Name:\tx\n"), None);
        let c = "voluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n";
        assert_eq!(parse_context_switches(c), 157);
    }

    #[test]
    fn labels_name_the_side_from_the_configuration_path() {
        let hp = "haproxy\0-db\0-f\0/run/x/haproxy-remote/haproxy.cfg\0";
        assert_eq!(label_of("haproxy\n", hp), "haproxy-remote");
        let sq = "squid\0-N\0-n\0squidchild\0-f\0/run/x/squid-child/squid.conf\0";
        assert_eq!(label_of("squid", sq), "squid-child");
        assert_eq!(label_of("edge-proxy\n", "/x/longhaul-edge-0"), "edge-proxy");
        assert_eq!(label_of("nginx", "nginx: worker process"), "nginx");
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        assert!(cpu_ticks(std::process::id()).is_some());
        assert!(rss_kib(std::process::id()).unwrap() > 0);
        assert!(context_switches(std::process::id()).is_some());
        assert!(clock_ticks_per_second() > 0);
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let d = descendants(std::process::id());
        let _ = c.kill();
        let _ = c.wait();
        assert!(d.contains(&c.id()), "{d:?}");
    }
}
