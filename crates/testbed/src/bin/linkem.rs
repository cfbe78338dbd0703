//! `linkem`: brings the test bed's emulated long link up, runs commands inside its
//! namespaces, calibrates it against a profile, and takes it down.
//!
//! Without root it re-executes itself inside a new user namespace (where it is root)
//! and records how to enter it, so `linkem exec` from another shell works unprivileged.
#![forbid(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use serde::{Deserialize, Serialize};
use testbed::calibrate::{self, DEFAULT_RTT_SAMPLES};
use testbed::topology::ns_command;
use testbed::{privileges, Node, Privileges, Profile, ProfileSpec, Topology};

/// Environment variable carrying the run directory into the user-namespace child.
const RUN_DIR_ENV: &str = "LINKEM_RUN_DIR";
/// Set on the child `linkem` re-executes inside a new user namespace.
const REEXEC_ENV: &str = "LINKEM_IN_USERNS";
/// How long `linkem down` waits for the holder to finish tearing down.
const DOWN_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Parser)]
#[command(
    name = "linkem",
    version,
    about = "Emulated long link between network namespaces"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Brings a topology up and holds it until `linkem down`, Ctrl-C or SIGTERM.
    Up {
        #[command(flatten)]
        profile: ProfileArgs,
        /// Instance name (several instances may run side by side).
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Runs a command inside a namespace (client, edge, remote, origin) of a running instance.
    Exec {
        /// client, edge, remote or origin.
        namespace: String,
        /// Instance name.
        #[arg(long, default_value = "default")]
        name: String,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Brings a topology up, measures RTT, goodput and loss across the long link, tears down.
    Calibrate {
        #[command(flatten)]
        profile: ProfileArgs,
        /// One JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Ping-pong samples (median reported).
        #[arg(long, default_value_t = DEFAULT_RTT_SAMPLES)]
        rtt_samples: usize,
        /// UDP probes for the loss rate (default: 10 000, more when loss is rare so
        /// that about 200 losses are expected).
        #[arg(long)]
        loss_packets: Option<u32>,
    },
    /// Takes a running instance down.
    Down {
        /// Instance name.
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Lists the named profiles.
    Profiles,
}

#[derive(Args, Clone)]
struct ProfileArgs {
    /// Named profile: us-nz-1999, pacific, satellite, lossy, lossy-3.
    #[arg(long, default_value = "pacific")]
    profile: String,
    /// TOML profile file (its `base` replaces --profile); flags below override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Long-link RTT, ms.
    #[arg(long)]
    rtt_ms: Option<f64>,
    /// Long-link rate both ways, Mbit/s.
    #[arg(long)]
    rate_mbit: Option<f64>,
    /// Rate remote → edge, Mbit/s.
    #[arg(long)]
    down_rate_mbit: Option<f64>,
    /// Rate edge → remote, Mbit/s.
    #[arg(long)]
    up_rate_mbit: Option<f64>,
    /// Drop-tail queue per direction, bytes (default one BDP).
    #[arg(long)]
    queue_bytes: Option<u64>,
    /// Loss: probability, `none`, or `ge:p,r,loss_good,loss_bad`.
    #[arg(long)]
    loss: Option<String>,
    /// Jitter bound, ms.
    #[arg(long)]
    jitter_ms: Option<f64>,
    /// Access link one-way delay, ms.
    #[arg(long)]
    access_delay_ms: Option<f64>,
    /// Origin link one-way delay, ms.
    #[arg(long)]
    origin_delay_ms: Option<f64>,
    /// Congestion control of every namespace.
    #[arg(long)]
    congestion: Option<String>,
    /// Seed of loss and jitter.
    #[arg(long)]
    seed: Option<u64>,
}

impl ProfileArgs {
    fn resolve(&self) -> anyhow::Result<Profile> {
        let base = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Profile::from_toml(&text).with_context(|| format!("in {}", path.display()))?
            }
            None => Profile::named(&self.profile).with_context(|| {
                format!(
                    "unknown profile {:?}; known: {}",
                    self.profile,
                    Profile::names().join(", ")
                )
            })?,
        };
        let spec = ProfileSpec {
            rtt_ms: self.rtt_ms,
            rate_mbit: self.rate_mbit,
            down_rate_mbit: self.down_rate_mbit,
            up_rate_mbit: self.up_rate_mbit,
            queue_bytes: self.queue_bytes,
            loss: self.loss.clone(),
            jitter_ms: self.jitter_ms,
            access_delay_ms: self.access_delay_ms,
            origin_delay_ms: self.origin_delay_ms,
            congestion_control: self.congestion.clone(),
            seed: self.seed,
            ..Default::default()
        };
        let custom = spec != ProfileSpec::default();
        let mut p = base.apply(&spec)?;
        if custom && self.config.is_none() {
            p.name = format!("{}+custom", p.name);
        }
        Ok(p)
    }
}

/// What `linkem up` records for `exec` and `down`.
#[derive(Serialize, Deserialize)]
struct State {
    pid: u32,
    /// Enter this user namespace first (unprivileged mode).
    userns: Option<PathBuf>,
    hosts: PathBuf,
    profile: String,
    netns: Vec<(String, PathBuf)>,
}

fn run_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(RUN_DIR_ENV) {
        return PathBuf::from(d);
    }
    if privileges() == Privileges::Root && initial_user_namespace() {
        return PathBuf::from("/run/linkem");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("linkem"),
        None => std::env::temp_dir().join(format!("linkem-{}", uid())),
    }
}

/// Whether this process is in the initial user namespace (identity uid map).
fn initial_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .map(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"])
        .unwrap_or(false)
}

fn uid() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn state_path(name: &str) -> anyhow::Result<PathBuf> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        bail!("instance name must be 1..=64 of [A-Za-z0-9_-], got {name:?}");
    }
    Ok(run_dir().join(format!("{name}.json")))
}

fn read_state(name: &str) -> anyhow::Result<State> {
    let path = state_path(name)?;
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no running instance {name:?} ({} missing)", path.display()))?;
    let st: State = serde_json::from_str(&text).context("corrupt state file")?;
    if !running(st.pid) {
        let _ = std::fs::remove_file(&path);
        bail!(
            "instance {name:?} is gone (pid {} not running); stale state removed",
            st.pid
        );
    }
    Ok(st)
}

/// Re-executes this command as root of a new user namespace and waits for it,
/// forwarding SIGINT/SIGTERM/SIGHUP to it; returns its exit code.
fn reexec_in_userns() -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("locating the linkem executable")?;
    let signals = testbed::signals::SIGNALS;
    netsys::block_signals(&signals)?;
    // The child starts with an empty signal mask (std resets it before exec).
    let mut child = Command::new("unshare")
        .args(["--user", "--map-root-user", "--"])
        .arg(exe)
        .args(std::env::args_os().skip(1))
        .env(REEXEC_ENV, "1")
        .env(RUN_DIR_ENV, run_dir())
        .spawn()
        .context("running unshare --user --map-root-user")?;
    let pid = i32::try_from(child.id()).context("child pid")?;
    std::thread::spawn(move || {
        while let Ok(sig) = netsys::wait_signal(&signals) {
            if netsys::send_signal(pid, sig).is_err() {
                break;
            }
        }
    });
    let status = child
        .wait()
        .context("waiting for the user-namespace child")?;
    Ok(ExitCode::from(
        status.code().unwrap_or(1).clamp(0, 255) as u8
    ))
}

fn needs_reexec() -> anyhow::Result<bool> {
    match privileges() {
        Privileges::Root => Ok(false),
        Privileges::UserNamespace => Ok(std::env::var_os(REEXEC_ENV).is_none()),
        Privileges::None => bail!(
            "cannot create network namespaces: not root and unprivileged user namespaces are unavailable \
             (check /proc/sys/user/max_user_namespaces and kernel.unprivileged_userns_clone)"
        ),
    }
}

fn up(args: &ProfileArgs, name: &str) -> anyhow::Result<ExitCode> {
    let profile = args.resolve()?;
    let path = state_path(name)?;
    if needs_reexec()? {
        return reexec_in_userns();
    }
    if path.exists() && read_state(name).is_ok() {
        bail!(
            "instance {name:?} is already up ({}); `linkem down --name {name}` first",
            path.display()
        );
    }
    // Block before any thread starts so every thread inherits the mask.
    let signals = testbed::signals::SIGNALS;
    netsys::block_signals(&signals)?;
    let topo = Topology::up(&profile)?;
    let dir = path.parent().context("state path has no parent")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Recorded only when this process made its own user namespace: `exec` from
    // outside must enter it first.
    let userns = std::env::var_os(REEXEC_ENV)
        .map(|_| PathBuf::from(format!("/proc/{}/ns/user", std::process::id())));
    let state = State {
        pid: std::process::id(),
        userns,
        hosts: topo.hosts_path(),
        profile: profile.name.clone(),
        netns: Node::ALL
            .iter()
            .map(|n| (n.name().to_string(), topo.netns_path(*n)))
            .collect(),
    };
    std::fs::write(&path, serde_json::to_string_pretty(&state)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let rate =
        |r: Option<u64>| r.map_or("unlimited".into(), |r| format!("{} Mbit/s", r as f64 / 1e6));
    eprintln!(
        "linkem: {name} up, profile {} (RTT {:?}, down {}, up {}); client 10.77.1.2, edge 10.77.1.1/10.77.2.1, \
         remote 10.77.2.2/10.77.3.1, origin 10.77.3.2\n  linkem exec client -- curl http://origin/   (host names: client edge remote origin)\n  linkem down",
        profile.name,
        profile.rtt(),
        rate(profile.down.rate_bps),
        rate(profile.up.rate_bps)
    );
    let sig = netsys::wait_signal(&signals)?;
    tracing::info!(signal = sig, "tearing down");
    let _ = std::fs::remove_file(&path);
    topo.down()?;
    eprintln!("linkem: {name} down");
    Ok(ExitCode::SUCCESS)
}

fn exec(namespace: &str, name: &str, command: &[String]) -> anyhow::Result<ExitCode> {
    let node: Node = namespace.parse()?;
    let st = read_state(name)?;
    let netns = st
        .netns
        .iter()
        .find(|(n, _)| n == node.name())
        .map(|(_, p)| p.clone())
        .context("state file lacks the namespace")?;
    // Entering the user namespace we are already in is an error (EINVAL): skip it.
    let same = |p: &PathBuf| match (
        std::fs::read_link(p),
        std::fs::read_link("/proc/self/ns/user"),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    let userns = st.userns.as_ref().filter(|p| !same(p));
    let mut cmd = ns_command(&netns, userns.map(PathBuf::as_path), &st.hosts, &command[0]);
    cmd.args(&command[1..]);
    let err = cmd.exec();
    bail!("running nsenter: {err}")
}

/// Whether `pid` is alive (an exited process waiting to be reaped is not).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        // The state follows the parenthesised command name: `pid (comm) S ...`.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
    }
}

fn down(name: &str) -> anyhow::Result<ExitCode> {
    let st = read_state(name)?;
    netsys::send_signal(st.pid as i32, libc::SIGTERM)
        .with_context(|| format!("signalling linkem pid {}", st.pid))?;
    let t = Instant::now();
    while running(st.pid) {
        if t.elapsed() > DOWN_TIMEOUT {
            bail!("linkem pid {} did not exit within {DOWN_TIMEOUT:?}", st.pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(ExitCode::SUCCESS)
}

fn calibrate_cmd(
    args: &ProfileArgs,
    json: bool,
    rtt_samples: usize,
    loss_packets: Option<u32>,
) -> anyhow::Result<ExitCode> {
    let profile = args.resolve()?;
    let loss_packets = loss_packets.unwrap_or_else(|| calibrate::default_loss_packets(&profile));
    if !(1..=10_000).contains(&rtt_samples) || !(1..=10_000_000).contains(&loss_packets) {
        bail!("--rtt-samples must be 1..=10000 and --loss-packets 1..=10000000");
    }
    if needs_reexec()? {
        return reexec_in_userns();
    }
    // Ctrl-C: the namespaces and devices die with the process (nothing runs inside
    // during a calibration); only the hosts file's directory needs removing.
    let signals = testbed::signals::SIGNALS;
    netsys::block_signals(&signals)?;
    let topo = Topology::up(&profile)?;
    if let Some(dir) = topo.hosts_path().parent().map(PathBuf::from) {
        std::thread::spawn(move || {
            if let Ok(sig) = netsys::wait_signal(&signals) {
                let _ = std::fs::remove_dir_all(&dir);
                eprintln!("linkem: calibration interrupted");
                std::process::exit(128 + sig);
            }
        });
    }
    let c = calibrate::calibrate(&topo, rtt_samples, loss_packets)?;
    topo.down()?;
    if json {
        println!("{}", serde_json::to_string(&c)?);
        return Ok(ExitCode::SUCCESS);
    }
    let e = &c.profile;
    println!(
        "profile {}: RTT {:.1} ms, rate {} down / {} up Mbit/s, loss {}, queue {} B, {}",
        e.name,
        e.rtt_ms,
        e.rate_mbps.map_or("unlimited".into(), |r| format!("{r}")),
        e.up_rate_mbps
            .map_or("unlimited".into(), |r| format!("{r}")),
        e.loss_rate,
        e.queue_bytes,
        e.congestion_control
    );
    println!(
        "  rtt      {:.2} ms  (median of {}; min {:.2}; profile {:.2}; {:+.2} ms)",
        c.rtt_ms,
        c.rtt_samples_ms.len(),
        c.rtt_min_ms,
        e.rtt_ms,
        c.rtt_ms - e.rtt_ms
    );
    if let Some(r) = &c.saturated {
        println!(
            "  rate     {:.2} Mbit/s  (UDP payload offered at {:.0} % of the rate; ceiling {:.2} = rate x 1472/1500; {:+.1} %; {} dropped by a full receive buffer)",
            r.payload_bps / 1e6,
            testbed::calibrate::SATURATE_OVERLOAD * 100.0,
            r.ceiling_bps / 1e6,
            (r.payload_bps / r.ceiling_bps - 1.0) * 100.0,
            r.receiver_drops
        );
    }
    match e.goodput_ceiling_mbps {
        Some(ceil) => println!(
            "  goodput  {:.2} Mbit/s  ({} after slow start; ceiling {:.2} = rate x 1448/1500; {:+.1} %)",
            c.goodput_mbps,
            c.goodput_cc,
            ceil,
            (c.goodput_mbps / ceil - 1.0) * 100.0
        ),
        None => println!("  goodput  {:.2} Mbit/s  ({})", c.goodput_mbps, c.goodput_cc),
    }
    println!(
        "  loss     {:.4}  ({} of {} lost on the link; profile {:.4}; {} dropped by a full receive buffer, not counted)",
        c.loss_rate,
        c.loss.lost(),
        c.loss.sent,
        e.loss_rate,
        c.loss.receiver_drops
    );
    println!(
        "  emulator lateness p99 {:.0} us, max {:.0} us; queue drops {}, loss-model drops {}",
        c.emulator.late_p99_us,
        c.emulator.late_max_us,
        c.emulator.dropped_queue,
        c.emulator.dropped_loss
    );
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Up { profile, name } => up(profile, name),
        Cmd::Exec {
            namespace,
            name,
            command,
        } => exec(namespace, name, command),
        Cmd::Calibrate {
            profile,
            json,
            rtt_samples,
            loss_packets,
        } => calibrate_cmd(profile, *json, *rtt_samples, *loss_packets),
        Cmd::Down { name } => down(name),
        Cmd::Profiles => {
            for n in Profile::names() {
                if let Some(p) = Profile::named(n) {
                    println!(
                        "{n:12} rtt {:>4} ms  down {:>8.3} Mbit/s  up {:>8.3} Mbit/s  loss {:.3}  queue {} B",
                        p.rtt().as_millis(),
                        p.down.rate_bps.unwrap_or(0) as f64 / 1e6,
                        p.up.rate_bps.unwrap_or(0) as f64 / 1e6,
                        p.down.loss.mean_loss(),
                        p.down.queue_bytes
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("linkem: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
