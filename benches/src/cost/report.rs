//! The cost runner's report: the machine it ran on (cores, load, the busiest other programs),
//! issue 26's goals set against what was measured, and `summary.md`.
//!
//! A goal is reported as met, missed or not measured; nothing here assumes a figure.

use super::Results;
use serde::Serialize;
use std::fmt::Write as _;
use std::process::Command;

/// The machine and what else ran on it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Machine {
    /// CPUs the runner may use.
    pub cores: usize,
    /// `model name` of `/proc/cpuinfo`.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// Versions of the peers (`nginx -v`, `haproxy -v`, `squid -v`, first lines).
    pub peers: Vec<String>,
    /// `/proc/loadavg` when the run started.
    pub loadavg_start: String,
    /// `/proc/loadavg` when it ended.
    pub loadavg_end: String,
    /// The busiest processes when the run started (`ps`, %CPU over each one's lifetime).
    pub busiest_start: Vec<String>,
    /// The same when it ended.
    pub busiest_end: Vec<String>,
}

fn first_line(program: &str, arg: &str) -> String {
    Command::new(program)
        .arg(arg)
        .output()
        .map(|o| {
            let mut t = String::from_utf8_lossy(&o.stdout).into_owned();
            t.push_str(&String::from_utf8_lossy(&o.stderr));
            t.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|e| format!("{program}: {e}"))
}

fn busiest() -> Vec<String> {
    Command::new("ps")
        .args(["-eo", "pcpu,etimes,comm", "--sort=-pcpu"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .skip(1)
                .take(10)
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect()
        })
        .unwrap_or_default()
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

impl Machine {
    /// Observes the machine now.
    pub fn observe() -> Machine {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
            peers: vec![
                first_line("nginx", "-v"),
                first_line("haproxy", "-v"),
                first_line("squid", "-v"),
            ],
            loadavg_start: loadavg(),
            busiest_start: busiest(),
            ..Machine::default()
        }
    }

    /// Notes the end of the run.
    pub fn finish(&mut self) {
        self.loadavg_end = loadavg();
        self.busiest_end = busiest();
    }
}

/// Now, UTC, as `date -u +%Y-%m-%dT%H:%M:%SZ` prints it.
pub fn now_rfc3339() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// One goal of issue 26 against this run's figure.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    /// What is asked.
    pub goal: String,
    /// What was measured (with its unit), or why nothing was.
    pub measured: String,
    /// `Some(true)` met, `Some(false)` missed, `None` not measured.
    pub met: Option<bool>,
}

/// The longhaul row's label prefix.
const PAIR: &str = "longhaul-tcp";

/// Issue 26's goals against `r`.
pub fn goals(r: &Results) -> Vec<Goal> {
    let mut g = Vec::new();
    let pair = r.latency.iter().find(|l| l.system.starts_with(PAIR));
    for (what, limit, get) in [
        (
            "added latency at p50 ≤ 100 µs",
            100.0,
            pair.and_then(|l| l.added_p50_us),
        ),
        (
            "added latency at p99 ≤ 1 ms",
            1000.0,
            pair.and_then(|l| l.added_p99_us),
        ),
    ] {
        g.push(Goal {
            goal: what.into(),
            measured: get
                .map(|v| format!("{v:.0} µs"))
                .unwrap_or_else(|| "not measured".into()),
            met: get.map(|v| v <= limit),
        });
    }
    let per_core = |prefix: &str| -> Option<f64> {
        let rows: Vec<_> = r
            .throughput
            .iter()
            .filter(|t| t.system.starts_with(prefix) && t.failures == 0)
            .collect();
        let bytes: u64 = rows.iter().map(|t| t.bytes).sum();
        let cpu: f64 = rows
            .iter()
            .flat_map(|t| &t.processes)
            .map(|p| p.cpu_s)
            .sum();
        (cpu > 0.0).then(|| bytes as f64 / 1e6 / cpu)
    };
    let (lh, hp) = (per_core(PAIR), per_core("haproxy-h2"));
    g.push(Goal {
        goal: "throughput per core ≥ HAProxy's h2 chain".into(),
        measured: match (lh, hp) {
            (Some(a), Some(b)) => format!(
                "{a:.0} MB per CPU second (edge + remote) against {b:.0} (both HAProxies): {:.2} ×",
                a / b
            ),
            _ => "not measured".into(),
        },
        met: lh.zip(hp).map(|(a, b)| a >= b),
    });
    let idle = r.memory.as_ref().and_then(|m| {
        m.idle_bytes_per_client
            .filter(|_| m.idle_clients > 0)
            .map(|b| (b, m.idle_clients))
    });
    g.push(Goal {
        goal: "≤ 4 KiB edge memory per idle client at 10 000 clients".into(),
        measured: match idle {
            Some((b, n)) if n >= 10_000 => format!("{b:.0} bytes per client at {n} clients"),
            // Fewer clients than the goal names: reported, not judged.
            Some((b, n)) => format!("{b:.0} bytes per client at only {n} clients"),
            None => "not measured".into(),
        },
        met: idle.filter(|(_, n)| *n >= 10_000).map(|(b, _)| b <= 4096.0),
    });
    g
}

fn us(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "–".into())
}

/// `summary.md` of a run.
pub fn summary(r: &Results) -> String {
    let c = &r.config;
    let m = &r.machine;
    let mut s = String::new();
    let _ = writeln!(s, "# cost on loopback, {}\n", r.started);
    let _ = writeln!(
        s,
        "Machine: {} cores ({}), kernel {}; load average {} at the start, {} at the end. \
         Peers: {}.\n",
        m.cores,
        m.cpu_model,
        m.kernel,
        m.loadavg_start,
        m.loadavg_end,
        m.peers.join("; ")
    );
    let _ = writeln!(
        s,
        "Busiest processes at the start (%CPU over their lifetime, seconds alive, name): {}.\n",
        m.busiest_start.join("; ")
    );
    let _ = writeln!(
        s,
        "## Goals (issue 26)\n\n| goal | measured | met |\n|---|---|---|"
    );
    for g in &r.goals {
        let met = match g.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "not measured",
        };
        let _ = writeln!(s, "| {} | {} | {met} |", g.goal, g.measured);
    }
    if !r.latency.is_empty() {
        let _ = writeln!(
            s,
            "\n## Latency of a 1 KiB GET (µs)\n\n{} timed requests per system and round on one \
             keep-alive connection ({} untimed first), {} rounds, systems in a shuffled order \
             per round. Added = system − direct at the same percentile.\n\n\
             Context switches and CPU per request are those of the system's processes \
             (every thread).\n\n\
             | system | requests | failures | p50 | p99 | p99.9 | added p50 | added p99 | added p99.9 | round medians | context switches per request | CPU µs per request |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
            c.latency_requests, c.latency_warmup, c.latency_rounds
        );
        for l in &r.latency {
            let rounds: Vec<String> = l.round_p50_us.iter().map(|v| format!("{v:.0}")).collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                l.system,
                l.requests,
                l.failures,
                us(l.p50_us),
                us(l.p99_us),
                us(l.p999_us),
                us(l.added_p50_us),
                us(l.added_p99_us),
                us(l.added_p999_us),
                rounds.join(", "),
                l.context_switches_per_request
                    .map(|v| format!("{v:.1}"))
                    .unwrap_or_else(|| "–".into()),
                us(l.cpu_us_per_request)
            );
        }
    }
    if !r.throughput.is_empty() {
        let _ = writeln!(
            s,
            "\n## Throughput: {} concurrent transfers of {} MB\n\nCPU is user + system time of \
             each process of the system (`/proc/PID/stat`); MB per CPU second is the system's \
             throughput per core. `others` is machine CPU time used meanwhile by programs \
             outside this run.\n",
            c.throughput_clients, c.throughput_mb
        );
        let mut systems: Vec<&str> = Vec::new();
        for t in &r.throughput {
            if !systems.contains(&t.system.as_str()) {
                systems.push(&t.system);
            }
        }
        let _ = writeln!(
            s,
            "Over all rounds (median MB/s of the rounds; CPU and bytes summed over them):\n\n\
             | system | rounds | median MB/s | proxy CPU s/GB | MB per CPU s |\n|---|---:|---:|---:|---:|"
        );
        for name in &systems {
            let rows: Vec<_> = r.throughput.iter().filter(|t| t.system == *name).collect();
            let rates: Vec<f64> = rows.iter().map(|t| t.mb_per_s).collect();
            let bytes: u64 = rows.iter().map(|t| t.bytes).sum();
            let cpu: f64 = rows
                .iter()
                .flat_map(|t| &t.processes)
                .map(|p| p.cpu_s)
                .fold(0.0, |a, b| a + b);
            let proxied = rows.iter().any(|t| !t.processes.is_empty());
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} |",
                rows.len(),
                us(crate::stats::median(&rates)),
                if proxied && bytes > 0 {
                    format!("{:.2}", cpu / (bytes as f64 / 1e9))
                } else {
                    "–".into()
                },
                if proxied && cpu > 0.0 {
                    format!("{:.0}", bytes as f64 / 1e6 / cpu)
                } else {
                    "–".into()
                }
            );
        }
        let _ = writeln!(s, "\nEach run:\n");
        let _ = writeln!(
            s,
            "| system | round | failures | MB/s | proxy CPU s/GB | MB per CPU s | per process (CPU s/GB) | origin CPU s/GB | machine CPU s | others CPU s |\n\
             |---|---:|---:|---:|---:|---:|---|---:|---:|---:|"
        );
        for t in &r.throughput {
            let per: Vec<String> = t
                .processes
                .iter()
                .map(|p| format!("{} {:.2}", p.process, p.cpu_s_per_gb))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.0} | {} | {} | {} | {:.2} | {:.1} | {:.1} |",
                t.system,
                t.round,
                t.failures,
                t.mb_per_s,
                t.proxy_cpu_s_per_gb
                    .map(|v| format!("{v:.2}"))
                    .unwrap_or_else(|| "–".into()),
                t.mb_per_proxy_cpu_s
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "–".into()),
                if per.is_empty() {
                    "–".into()
                } else {
                    per.join(", ")
                },
                t.origin_cpu_s_per_gb,
                t.machine_cpu_s,
                t.other_cpu_s
            );
        }
    }
    if let Some(mem) = &r.memory {
        let _ = writeln!(
            s,
            "\n## longhaul memory (VmRSS deltas)\n\n| what | count | edge before → after (KiB) | \
             edge bytes each | remote before → after (KiB) | remote bytes each |\n|---|---:|---|---:|---|---:|"
        );
        if mem.idle_clients > 0 {
            let _ = writeln!(
                s,
                "| idle keep-alive clients ({} of a sample answered after) | {} | {} → {} | {} | – | – |",
                mem.idle_checked,
                mem.idle_clients,
                mem.idle_edge_before_kib,
                mem.idle_edge_after_kib,
                us(mem.idle_bytes_per_client)
            );
        }
        if mem.active_streams > 0 {
            let _ = writeln!(
                s,
                "| slow transfers held open at {} KiB/s ({} answered 200, {} still flowing after) | {} | {} → {} | {} | {} → {} | {} |",
                c.slow_rate_kib,
                mem.active_streams_answered,
                mem.active_streams_flowing,
                mem.active_streams,
                mem.active_edge_before_kib,
                mem.active_edge_after_kib,
                us(mem.active_edge_bytes_per_stream),
                mem.active_remote_before_kib,
                mem.active_remote_after_kib,
                us(mem.active_remote_bytes_per_stream)
            );
            let half = mem.active_streams / 2;
            let _ = writeln!(
                s,
                "| the second {} of them, with {half} open already | {} | {} → {} | {} | {} → {} | {} |",
                mem.active_streams - half,
                mem.active_streams - half,
                mem.active_edge_half_kib,
                mem.active_edge_after_kib,
                us(mem.active_edge_marginal_bytes_per_stream),
                mem.active_remote_half_kib,
                mem.active_remote_after_kib,
                us(mem.active_remote_marginal_bytes_per_stream)
            );
        }
        for e in &mem.errors {
            let _ = writeln!(s, "\nMemory error: {e}");
        }
    }
    let errs: Vec<String> = r
        .latency
        .iter()
        .flat_map(|l| l.errors.iter().map(move |e| format!("{}: {e}", l.system)))
        .chain(
            r.throughput
                .iter()
                .flat_map(|t| t.errors.iter().map(move |e| format!("{}: {e}", t.system))),
        )
        .chain(r.errors.iter().cloned())
        .collect();
    if !errs.is_empty() {
        let _ = writeln!(s, "\n## Errors\n");
        for e in errs {
            let _ = writeln!(s, "- {e}");
        }
    }
    s
}
