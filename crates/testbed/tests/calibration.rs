//! Calibration of the emulated long link against its profiles, and the topology's
//! plumbing. These need network namespaces: they run as root, re-run themselves in an
//! unprivileged user namespace, or skip loudly (fail with LONGHAUL_REQUIRE_NETNS=1).
//! The timing tests take a lock so they never compete with each other for the CPU.
//!
//! A timing check gets up to [`ATTEMPTS`] measurements, each on a fresh topology, and passes
//! when one of them is within its bound. A calibration error is systematic: the emulator that
//! adds the wrong delay or rate does so in every attempt, and the failure lists them all. A
//! burst of scheduling delay on a shared two-core host (another process woke on the
//! emulator's core) is not, and does not fail the suite alone.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use testbed::calibrate::{self, GoodputOptions, DEFAULT_LOSS_PACKETS, TCP_PAYLOAD};
use testbed::{netns_test_gate, Node, Profile, ProfileSpec, Topology};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Measurements a timing check may take before it fails.
const ATTEMPTS: usize = 3;

/// Runs `measure` up to [`ATTEMPTS`] times until it returns `Ok`; panics with every
/// attempt's message otherwise.
fn within_bound_in_one_attempt(what: &str, mut measure: impl FnMut() -> Result<(), String>) {
    let mut misses = Vec::new();
    for attempt in 1..=ATTEMPTS {
        match measure() {
            Ok(()) => return,
            Err(miss) => {
                eprintln!("{what}: attempt {attempt} of {ATTEMPTS}: {miss}");
                misses.push(miss);
            }
        }
    }
    panic!("{what}: every attempt missed: {}", misses.join("; "));
}

/// How far a typical (median) round trip may exceed the profile's: the host's own cost of a
/// round trip through two TUN devices and four thread wake-ups, which on a shared virtual
/// machine runs to a millisecond or more and is no error of the emulated delay.
const RTT_MEDIAN_SLACK: Duration = Duration::from_millis(3);

/// The emulator adds the profile's delay: the shortest round trip (the path's propagation
/// time, as ping's minimum or TCP's min RTT) is within 1 ms above the profile's and never
/// below it, and the median within [`RTT_MEDIAN_SLACK`] of it.
fn check_rtt(name: &str) {
    within_bound_in_one_attempt(&format!("{name} RTT"), || {
        let topo = Topology::up(&Profile::named(name).unwrap()).unwrap();
        let samples = calibrate::rtt_samples(&topo, 20).unwrap();
        let want = topo.profile().rtt();
        let late = topo.long_link_stats();
        topo.down().unwrap();
        let median = calibrate::median(&samples);
        let min = calibrate::shortest(&samples);
        eprintln!(
            "{name}: RTT min {min:?} median {median:?} (profile {want:?}), samples {samples:?}; \
             emulator's largest lateness down {} µs, up {} µs",
            late.0.max_late_ns / 1000,
            late.1.max_late_ns / 1000
        );
        if min < want {
            Err(format!(
                "a round trip of {min:?} is shorter than the profile's {want:?}"
            ))
        } else if min - want > Duration::from_millis(1) {
            Err(format!(
                "minimum RTT {min:?} is not within 1 ms of {want:?}"
            ))
        } else if median - want > RTT_MEDIAN_SLACK {
            Err(format!(
                "median RTT {median:?} exceeds {want:?} by more than {RTT_MEDIAN_SLACK:?}"
            ))
        } else {
            Ok(())
        }
    });
}

#[test]
fn rtt_is_profile_rtt_within_1ms() {
    let _g = serial();
    if !netns_test_gate("rtt_is_profile_rtt_within_1ms") {
        return;
    }
    check_rtt("us-nz-1999");
    check_rtt("pacific");
}

/// The least share of the payload ceiling one BBR flow's goodput must reach. The link's own
/// rate is held to 3 % by [`the_link_carries_pacific_s_rate_within_3_percent`]; a TCP flow's
/// goodput depends besides on its sender's control loop, whose delivery-rate samples and
/// pacing timers run on the same shared cores as the emulator. Measured on two-core virtual
/// machines: 0–3 % under the ceiling while the emulator kept time (lateness p99 under 1 ms),
/// 4–8 % under it in every attempt of one CI run, 15–37 % under it in a run here while the
/// hypervisor took about 9 % of the vCPUs' time (lateness p99 over 20 ms, while the
/// saturated link still carried its rate within 0.1 %). What this check catches is a TCP
/// path that cannot fill the link at all: offloads, the MTU, a window or buffer that caps
/// the flow below half the bandwidth-delay product.
const BBR_FLOOR: f64 = 0.5;

#[test]
fn one_bbr_flow_on_pacific_fills_the_link() {
    let _g = serial();
    if !netns_test_gate("one_bbr_flow_on_pacific_fills_the_link") {
        return;
    }
    within_bound_in_one_attempt("pacific BBR goodput", || {
        let topo = Topology::up(&Profile::named("pacific").unwrap()).unwrap();
        let mut opts = GoodputOptions::for_profile(&topo);
        opts.congestion_control = Some("bbr".into());
        let bps = calibrate::goodput(&topo, &opts).unwrap();
        // The rate counts whole 1500-byte IP packets; a TCP flow carries 1448 of them.
        let rate = topo.profile().down.rate_bps.unwrap() as f64;
        let ceiling = rate * TCP_PAYLOAD as f64 / 1500.0;
        let link = topo.long_link_stats().0;
        eprintln!(
            "pacific BBR goodput {:.2} Mbit/s; payload ceiling {:.2}; emulator's lateness \
             p99 {} µs, max {} µs; {:?}",
            bps / 1e6,
            ceiling / 1e6,
            link.late_quantile_ns(0.99) / 1000,
            link.max_late_ns / 1000,
            link.model
        );
        topo.down().unwrap();
        let share = bps / ceiling;
        if share > 1.03 {
            Err(format!(
                "goodput {:.2} Mbit/s exceeds the ceiling {:.2} by more than 3%",
                bps / 1e6,
                ceiling / 1e6
            ))
        } else if share < BBR_FLOOR {
            Err(format!(
                "goodput {:.2} Mbit/s is under {:.0}% of the ceiling {:.2}",
                bps / 1e6,
                BBR_FLOOR * 100.0,
                ceiling / 1e6
            ))
        } else {
            Ok(())
        }
    });
}

#[test]
fn the_link_carries_pacific_s_rate_within_3_percent() {
    let _g = serial();
    if !netns_test_gate("the_link_carries_pacific_s_rate_within_3_percent") {
        return;
    }
    within_bound_in_one_attempt("pacific saturated rate", || {
        let topo = Topology::up(&Profile::named("pacific").unwrap()).unwrap();
        let opts = GoodputOptions::for_profile(&topo);
        let m = calibrate::saturated_rate(&topo, &opts).unwrap();
        let late = topo.long_link_stats().0;
        eprintln!(
            "pacific saturated: {:.2} Mbit/s of payload; ceiling {:.2}; receiver drops {}; \
             emulator's lateness p99 {} µs, max {} µs; {:?}",
            m.payload_bps / 1e6,
            m.ceiling_bps / 1e6,
            m.receiver_drops,
            late.late_quantile_ns(0.99) / 1000,
            late.max_late_ns / 1000,
            late.model
        );
        topo.down().unwrap();
        if (m.payload_bps / m.ceiling_bps - 1.0).abs() <= 0.03 {
            Ok(())
        } else {
            Err(format!(
                "{:.2} Mbit/s not within 3% of {:.2} ({} datagrams dropped by the receiver)",
                m.payload_bps / 1e6,
                m.ceiling_bps / 1e6,
                m.receiver_drops
            ))
        }
    });
}

#[test]
fn window_of_32767_bytes_on_us_nz_1999_plateaus_near_2_2_mbit() {
    let _g = serial();
    if !netns_test_gate("window_of_32767_bytes_on_us_nz_1999_plateaus_near_2_2_mbit") {
        return;
    }
    within_bound_in_one_attempt("us-nz-1999 window-limited goodput", || {
        let topo = Topology::up(&Profile::named("us-nz-1999").unwrap()).unwrap();
        let mut opts = GoodputOptions::for_profile(&topo);
        opts.max_flight_bytes = Some(32_767);
        let bps = calibrate::goodput(&topo, &opts).unwrap();
        topo.down().unwrap();
        eprintln!(
            "us-nz-1999 with a 32767-byte window: {:.3} Mbit/s",
            bps / 1e6
        );
        // Seed 001: 32767 × 8 / 0.120 s = 2.2 Mbit/s.
        if (bps / 2.2e6 - 1.0).abs() <= 0.10 {
            Ok(())
        } else {
            Err(format!("{:.3} Mbit/s is not within 10% of 2.2", bps / 1e6))
        }
    });
}

fn check_loss(profile: Profile) {
    let topo = Topology::up(&profile).unwrap();
    let m = calibrate::loss(&topo, DEFAULT_LOSS_PACKETS).unwrap();
    let want = profile.down.loss.mean_loss();
    eprintln!(
        "{}: lost {} of {} = {:.4} (profile {want}); receiver drops {}",
        profile.name,
        m.lost(),
        m.sent,
        m.rate(),
        m.receiver_drops
    );
    assert!(
        (m.rate() / want - 1.0).abs() <= 0.20,
        "{}: loss {:.4} not within 20% of {want}",
        profile.name,
        m.rate()
    );
    topo.down().unwrap();
}

#[test]
fn loss_over_10000_packets_is_the_profile_rate_within_20_percent() {
    let _g = serial();
    if !netns_test_gate("loss_over_10000_packets_is_the_profile_rate_within_20_percent") {
        return;
    }
    check_loss(Profile::named("lossy").unwrap());
    check_loss(Profile::named("lossy-3").unwrap());
}

#[test]
fn topology_routes_resolves_and_leaves_nothing_behind() {
    let _g = serial();
    if !netns_test_gate("topology_routes_resolves_and_leaves_nothing_behind") {
        return;
    }
    let spec = ProfileSpec {
        rtt_ms: Some(20.0),
        congestion_control: Some("reno".into()),
        ..Default::default()
    };
    let profile = Profile::named("pacific").unwrap().apply(&spec).unwrap();
    let topo = Topology::up(&profile).unwrap();

    // The direct case: client → origin across all three links.
    let extra = Ipv4Addr::new(10, 77, 4, 9);
    topo.add_origin_address(IpAddr::V4(extra)).unwrap();
    for ip in [topo.addr(Node::Origin), IpAddr::V4(extra)] {
        let l = topo
            .run_in(Node::Origin, || TcpListener::bind((ip, 0)))
            .unwrap()
            .unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, peer) = l.accept().unwrap();
            s.write_all(b"hi").unwrap();
            peer.ip()
        });
        let t = Instant::now();
        let mut c = topo
            .run_in(Node::Client, || TcpStream::connect(addr))
            .unwrap()
            .unwrap();
        let mut b = [0u8; 2];
        c.read_exact(&mut b).unwrap();
        // Handshake + reply: two round trips of 10 + 20 + 10 ms at least.
        assert!(
            t.elapsed() >= Duration::from_millis(80),
            "{:?}",
            t.elapsed()
        );
        assert_eq!(&b, b"hi");
        assert_eq!(server.join().unwrap(), topo.addr(Node::Client));
    }

    // Host names every namespace resolves, and per-namespace sysctls.
    topo.set_hosts(&[("www.example.test".into(), topo.addr(Node::Origin))])
        .unwrap();
    let out = topo
        .command(Node::Client, "getent")
        .args(["hosts", "www.example.test"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("10.77.3.2"));
    for (node, forward) in [(Node::Client, "0"), (Node::Edge, "1"), (Node::Remote, "1")] {
        let out = topo
            .command(node, "cat")
            .args([
                "/proc/sys/net/ipv4/ip_forward",
                "/proc/sys/net/ipv4/tcp_congestion_control",
                "/proc/sys/net/ipv4/tcp_slow_start_after_idle",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text, format!("{forward}\nreno\n0\n"), "{node}");
    }

    // initcwnd on every route.
    topo.set_initcwnd(Node::Remote, 20).unwrap();
    let out = topo
        .command(Node::Remote, "ip")
        .args(["-4", "route", "show"])
        .output()
        .unwrap();
    let routes = String::from_utf8_lossy(&out.stdout);
    assert!(routes.lines().count() >= 3, "{routes}");
    assert!(
        routes.lines().all(|l| l.contains("initcwnd 20")),
        "{routes}"
    );

    // A process left running inside is killed on teardown; the namespaces go away.
    let mut child = topo
        .command(Node::Origin, "sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let t = Instant::now();
    while topo.processes().is_empty() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!topo.processes().is_empty());
    let paths: Vec<_> = Node::ALL.iter().map(|n| topo.netns_path(*n)).collect();
    let hosts = topo.hosts_path();
    topo.down().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    for p in paths {
        assert!(!p.exists(), "{} still exists", p.display());
    }
    assert!(!hosts.exists());
}

#[test]
fn bad_input_is_refused_before_anything_is_created() {
    let bad = ProfileSpec {
        congestion_control: Some("no-such-cc!".into()),
        ..Default::default()
    };
    assert!(Profile::named("pacific").unwrap().apply(&bad).is_err());
    let mut p = Profile::named("pacific").unwrap();
    p.tcp_rmem = [0, 1, 2];
    let err = Topology::up(&p).unwrap_err();
    assert!(format!("{err:#}").contains("tcp_rmem"), "{err:#}");
}
