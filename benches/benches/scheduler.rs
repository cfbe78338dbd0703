//! Cost of one scheduling decision against the number of pool connections:
//! the bare policy over N loads, and a whole stream open (which binds the
//! direction through the policy) plus its release, in a session with N
//! connections (framing of the queued OPEN/RESET is amortized every 256).
// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use mux::frame::{Hello, VERSION};
use mux::{Config, Kind, Load, Policy, Role, Session};

const SIZES: [usize; 5] = [1, 4, 16, 64, 256];

fn loads(n: usize) -> Vec<Load> {
    // Deterministic, distinct-looking loads.
    (0..n as u64)
        .map(|i| Load {
            outstanding: (i * 7919 + 13) % 1_000_003,
            streams: (i % 17) as u32,
            window: (i * 104_729 + 14_480) % 2_000_003,
            rate: (i * 15_485_863 + 125_000) % 12_500_000,
            rtt_us: 20_000 + (i * 7_727) % 600_000,
            rate_is_floor: i % 5 == 0,
            bulk: i % 3 == 0,
        })
        .collect()
}

fn policy_choose(c: &mut Criterion) {
    let mut g = c.benchmark_group("policy_choose");
    for policy in Policy::ALL {
        for n in SIZES {
            let l = loads(n);
            let mut cursor = 0usize;
            g.bench_with_input(BenchmarkId::new(format!("{policy:?}"), n), &l, |b, l| {
                b.iter(|| black_box(policy.choose(black_box(l), &mut cursor)))
            });
        }
    }
    g.finish();
}

fn session_with(n: usize, policy: Policy) -> (Session, Vec<mux::ConnId>) {
    let t = Instant::now();
    let cfg = Config::for_link(Duration::from_millis(130), 100_000_000);
    let mut s = Session::new(Role::Edge, 3, cfg, policy);
    let mut hello = Vec::new();
    Hello {
        version: VERSION,
        role: Role::Remote,
        session: 3,
        max_frame_size: 16384,
        initial_window: 1 << 20,
        max_streams: 1_000_000,
        // The largest connection credit: the bench never waits for a WINDOW.
        conn_window: Some(i32::MAX as u32),
        features: None,
    }
    .encode(&mut hello);
    let ids: Vec<_> = (0..n)
        .map(|i| {
            let c = s.add_connection(t);
            s.handle_input(c, &hello, t);
            s.set_kernel_outstanding(c, (i as u64 * 7919) % 100_000);
            s.set_path_estimate(
                c,
                mux::PathEstimate {
                    delivery_rate: 1_000_000 + (i as u64 * 15_485_863) % 12_500_000,
                    rtt: Duration::from_millis(130),
                    unsent: 0,
                    in_flight: (i as u64 * 7919) % 100_000,
                    app_limited: false,
                },
                t,
            );
            c
        })
        .collect();
    while s.poll_event().is_some() {}
    (s, ids)
}

fn open_bind(c: &mut Criterion) {
    let mut g = c.benchmark_group("open_and_bind");
    for policy in [
        Policy::LeastOutstanding,
        Policy::ExpectedCompletion,
        Policy::RoundRobin,
    ] {
        for n in SIZES {
            let (mut s, conns) = session_with(n, policy);
            let mut out = Vec::new();
            let mut k = 0u32;
            g.bench_function(BenchmarkId::new(format!("{policy:?}"), n), |b| {
                b.iter(|| {
                    let id = s
                        .open(
                            Kind::Http,
                            "example.org:80",
                            b"GET / HTTP/1.1\r\n\r\n",
                            true,
                        )
                        .unwrap();
                    // Dropped at once; its OPEN and a RESET leave on the next drain.
                    s.release(id);
                    k += 1;
                    if k % 256 == 0 {
                        // Keep queues short so each decision sees the same state.
                        for c in &conns {
                            out.clear();
                            s.poll_transmit(*c, usize::MAX, &mut out);
                        }
                        while s.poll_event().is_some() {}
                    }
                    black_box(id)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, policy_choose, open_bind);
criterion_main!(benches);
