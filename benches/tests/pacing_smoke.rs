//! End-to-end check of the `pacing` runner at tiny scale on the emulated link: one bed, two
//! initial windows bursty and paced, the warm-connection part with all three senders. Asserts
//! that every cell was measured as often as asked, that no flow completed faster than the round
//! trip, that the sender used the route's initial window, CUBIC and (only when asked) a pacing
//! cap, that the receive window never capped the initial window, and that the output files
//! exist. Timings are not asserted beyond the physical lower bound.
//!
//! Needs network namespaces (root, or an unprivileged user namespace); skips loudly otherwise.

use longhaul_benches::pacing::{self, BedSpec, FillRule, Options, PoolOptions, Sender};
use std::time::Duration;

#[test]
fn pacing_runner_measures_every_cell() {
    if !testbed::netns_test_gate("pacing_runner_measures_every_cell") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let spec = BedSpec {
        rtt_ms: 20,
        rate_mbit: 20,
        queue_bdp: 1.0,
    };
    let o = Options {
        beds: vec![spec.clone()],
        iws: vec![10, 50],
        reps: 2,
        short_bytes: pacing::SHORT_FLOW_BYTES,
        pool: PoolOptions {
            rates_mbit: vec![20],
            reps: 1,
            sizes: vec![pacing::SHORT_FLOW_BYTES],
            senders: Sender::ALL.to_vec(),
            warm_bytes: 300_000,
            idle: Duration::from_millis(200),
        },
        fill: FillRule {
            min_wait: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            ..FillRule::default()
        },
        seed: 1,
    };
    let res = pacing::run(&o, out.path(), &|m: &str| eprintln!("{m}")).unwrap();
    assert_eq!(res.beds.len(), 1);
    let bed = &res.beds[0];
    assert!(
        bed.elephant.mean_rate_measuring_mbit > 0.0,
        "the elephant ran"
    );
    assert_eq!(bed.short.len(), 4, "2 IWs x bursty/paced");
    let rtt_ms = f64::from(spec.rtt_ms);
    for c in &bed.short {
        assert!(
            c.failures.is_empty(),
            "IW{} {:?}: {:?}",
            c.iw,
            c.sender,
            c.failures
        );
        assert_eq!(c.samples.len(), 2, "IW{} {:?}", c.iw, c.sender);
        let s = c.fct_ms.as_ref().expect("summary");
        assert_eq!(s.n, 2);
        for x in &c.samples {
            assert!(x.fct_ms >= rtt_ms, "FCT {} ms below the RTT", x.fct_ms);
            assert!(x.first_byte_ms <= x.fct_ms);
            assert_eq!(x.sender.congestion, "cubic");
            assert_eq!(x.sender.cwnd_before, c.iw, "the route's initcwnd");
            assert!(
                u64::from(x.sender.snd_wnd) >= u64::from(c.iw) * pacing::MSS,
                "receive window {} caps IW{}",
                x.sender.snd_wnd,
                c.iw
            );
            assert_eq!(
                x.sender.max_pacing_rate.is_some(),
                c.sender == Sender::CubicPaced
            );
        }
    }
    assert_eq!(bed.pool.len(), 3);
    for c in &bed.pool {
        assert!(c.failures.is_empty(), "{:?}: {:?}", c.sender, c.failures);
        assert_eq!(c.samples.len(), 1);
        let x = &c.samples[0];
        assert!(x.fct_ms >= rtt_ms);
        assert_eq!(x.sender.congestion, c.sender.congestion());
    }
    for f in ["results.json", "summary.md", "fct.svg"] {
        assert!(out.path().join(f).exists(), "{f} written");
    }
    let md = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(md.contains(&spec.label()));
    let back: pacing::Results =
        serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(back.beds[0].short.len(), 4);
}
