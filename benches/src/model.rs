//! The split-proxy model: the page load time a pair of proxies across the long link could at best
//! reach with the replay client, computed from the page model and the link profile, never
//! measured.
//!
//! The analytic floor ([`crate::floor`]) assumes unlimited parallelism and warm connections; the
//! replay client has neither (six connections per host, one request in flight on each, every page
//! visit starting cold), so a ratio to direct that the floor allows may be out of reach of any
//! proxy. This model replays the client's own schedule (level by level, document order, at most
//! `max_per_host` requests in flight per host, an idle connection reused before a new one is
//! opened) against an ideal split proxy:
//!
//! - every request costs one client-to-origin round trip (the long link is already open, its
//!   window large, and the proxies take no time);
//! - a request on a new client connection first pays that connection's set-up: over HTTP the TCP
//!   handshake with the edge (one access round trip) and the far side's new connection to the
//!   origin (one origin round trip; the runs leave origin connections to expire between visits);
//!   over HTTPS additionally the `CONNECT` answered at the edge (one access round trip) and the
//!   TLS 1.3 handshake, which runs end to end between client and origin (one client-to-origin
//!   round trip);
//! - a response pays slow start on the two short links: one short round trip per doubling of
//!   its connection's window that the body needs beyond the first flight, where a new
//!   connection's window is the initial window and a reused one's has grown by every byte it
//!   delivered before (slow start without loss; the bed keeps windows across idle periods);
//! - bodies share the long link's rate equally while they are in transfer.
//!
//! It ignores loss, jitter, queueing and processing time, so on a lossless link a measured proxy
//! can approach it but not beat it by more than the model's simplifications allow (it counts
//! short-link slow start and long-link serialisation one after the other where they overlap,
//! which overstates pages of large objects by a few per cent); on lossy links it is only a
//! reference.

use crate::clients;
use crate::replay::{ObjectTime, PageLoad};
use crate::results::{best_replay, Params, Row};
use crate::stats;
use crate::systems::{direct, longhaul};
use crate::workload::Workload;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::Path;

/// Linux's initial congestion window in bytes: [`crate::runner::LINUX_INITCWND`] full-sized
/// segments.
pub const INITIAL_WINDOW_BYTES: u64 =
    crate::runner::LINUX_INITCWND as u64 * testbed::calibrate::TCP_PAYLOAD;

/// The link as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitLink {
    /// Client-to-origin round trip in ms (access + long + origin links).
    pub rtt_ms: f64,
    /// Client-to-edge round trip in ms.
    pub access_rtt_ms: f64,
    /// Remote-to-origin round trip in ms.
    pub origin_rtt_ms: f64,
    /// Long link's rate towards the client in bit/s.
    pub rate_bps: f64,
    /// Initial congestion window of the short links' senders, in bytes.
    pub initial_window: u64,
}

impl SplitLink {
    /// The model's view of a built-in or parsed test-bed profile; `None` without a rate.
    pub fn of_profile(p: &testbed::profile::Profile) -> Option<SplitLink> {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        Some(SplitLink {
            rtt_ms: ms(p.path_rtt()),
            access_rtt_ms: ms(p.access_rtt()),
            origin_rtt_ms: ms(p.origin_rtt()),
            rate_bps: p.down.rate_bps? as f64,
            initial_window: INITIAL_WINDOW_BYTES,
        })
    }

    /// Set-up of a new client connection before its first request can leave, in ms.
    fn setup_ms(&self, https: bool) -> f64 {
        let tcp = self.access_rtt_ms + self.origin_rtt_ms;
        if https {
            tcp + self.access_rtt_ms + self.rtt_ms
        } else {
            tcp
        }
    }

    /// Extra short-link round trips slow start costs a body of `bytes` sent with a window of
    /// `window` bytes.
    fn slow_start_ms(&self, window: u64, bytes: u64) -> f64 {
        let w = window.max(1);
        let mut rounds = 0u32;
        // After k extra rounds the sender has had w × (2^(k+1) − 1) bytes of window.
        while rounds < 32 && w.saturating_mul((1u64 << (rounds + 1)) - 1) < bytes {
            rounds += 1;
        }
        f64::from(rounds) * self.access_rtt_ms.max(self.origin_rtt_ms)
    }
}

/// The model's page load time in ms for `w` loaded over `scheme` (`http` or `https`) with at most
/// `max_per_host` connections per host; `None` for a workload without objects or a link without
/// a rate.
pub fn split_proxy_ms(
    w: &Workload,
    link: &SplitLink,
    scheme: &str,
    max_per_host: usize,
) -> Option<f64> {
    if w.objects.is_empty()
        || link.rate_bps.is_nan()
        || link.rate_bps <= 0.0
        || !link.rtt_ms.is_finite()
    {
        return None;
    }
    let mut sim = Sim::new(w, link, scheme == "https", max_per_host);
    let root = sim.host(0);
    sim.queues[root].push_back(0);
    sim.dispatch();
    let bytes_per_ms = link.rate_bps / 8.0 / 1000.0;
    let mut finished = 0;
    while finished < w.objects.len() {
        let next_ready = sim
            .waiting
            .iter()
            .enumerate()
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
        let sharing = sim.transfer.len() as f64;
        let next_done = sim
            .transfer
            .iter()
            .enumerate()
            .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
            .map(|(k, &(_, left))| (k, sim.now + left * sharing / bytes_per_ms));
        let t_ready = next_ready.map_or(f64::INFINITY, |(_, &(t, _))| t);
        let t_done = next_done.map_or(f64::INFINITY, |(_, t)| t);
        let t = t_ready.min(t_done);
        if !t.is_finite() {
            // Objects never referenced from the HTML's tree: the workload validator rejects them.
            return None;
        }
        if sharing > 0.0 {
            let sent = (t - sim.now) * bytes_per_ms / sharing;
            for x in &mut sim.transfer {
                x.1 -= sent;
            }
        }
        sim.now = t;
        if let (Some((k, _)), true) = (next_done, t_done <= t_ready) {
            let (i, _) = sim.transfer.swap_remove(k);
            sim.finish(i);
            finished += 1;
        } else if let Some((k, &(_, i))) = next_ready {
            sim.waiting.swap_remove(k);
            sim.transfer.push((i, w.objects[i].size as f64));
        }
    }
    Some(sim.now)
}

/// State of one modelled page load.
struct Sim<'a> {
    w: &'a Workload,
    link: &'a SplitLink,
    https: bool,
    max: usize,
    now: f64,
    /// Ready objects per host, in the order the client requests them.
    queues: Vec<VecDeque<usize>>,
    /// Requests in flight per host.
    busy: Vec<usize>,
    /// Idle connections per host, as their windows in bytes; the last one returned is reused
    /// first, as the replay client does.
    idle: Vec<Vec<u64>>,
    /// The window of the connection each object's request went on.
    window: Vec<u64>,
    /// Requests on their way: (time the body starts arriving, object).
    waiting: Vec<(f64, usize)>,
    /// Bodies in transfer: (object, bytes left).
    transfer: Vec<(usize, f64)>,
}

impl<'a> Sim<'a> {
    fn new(w: &'a Workload, link: &'a SplitLink, https: bool, max_per_host: usize) -> Sim<'a> {
        let nh = w.hosts.len().max(1);
        Sim {
            w,
            link,
            https,
            max: max_per_host.max(1),
            now: 0.0,
            queues: vec![VecDeque::new(); nh],
            busy: vec![0; nh],
            idle: vec![Vec::new(); nh],
            window: vec![0; w.objects.len()],
            waiting: Vec::new(),
            transfer: Vec::new(),
        }
    }

    /// Index of object `i`'s host.
    fn host(&self, i: usize) -> usize {
        let h = &self.w.objects[i].host;
        self.w.hosts.iter().position(|x| x == h).unwrap_or(0)
    }

    /// Sends every ready request that has a connection, reusing idle ones first.
    fn dispatch(&mut self) {
        for h in 0..self.queues.len() {
            while self.busy[h] < self.max {
                let Some(i) = self.queues[h].pop_front() else {
                    break;
                };
                self.busy[h] += 1;
                let mut latency = self.link.rtt_ms;
                self.window[i] = match self.idle[h].pop() {
                    Some(win) => win,
                    None => {
                        latency += self.link.setup_ms(self.https);
                        self.link.initial_window
                    }
                };
                latency += self
                    .link
                    .slow_start_ms(self.window[i], self.w.objects[i].size);
                self.waiting.push((self.now + latency, i));
            }
        }
    }

    /// Object `i` has arrived: its connection is idle with a window grown by its body, the
    /// objects it references become ready.
    fn finish(&mut self, i: usize) {
        let h = self.host(i);
        self.busy[h] -= 1;
        let grown = self.window[i].saturating_add(self.w.objects[i].size);
        self.idle[h].push(grown);
        for c in self.w.children(i) {
            let hc = self.host(c);
            self.queues[hc].push_back(c);
        }
        self.dispatch();
    }
}

/// The model's figure for one (profile, workload, scheme) of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPoint {
    /// Profile name.
    pub profile: String,
    /// Workload id.
    pub workload: String,
    /// `http` or `https`.
    pub scheme: String,
    /// Modelled page load time in ms.
    pub ms: f64,
}

/// The model for every (profile, workload, scheme) the replay client measured in `rows`, with
/// the page models read from `workloads_dir`; built-in profiles only (a custom or plumbing
/// profile, and the mixed and bulk loads, have no point).
pub fn points(rows: &[Row], workloads_dir: &Path, max_per_host: usize) -> Vec<ModelPoint> {
    let keys: BTreeSet<(&str, &str, &str)> = rows
        .iter()
        .filter(|r| r.client == clients::replay::ID && r.measured)
        // The model is of the HTTP/1.1 client: not of HTTPS cells whose origins offered h2 (or
        // direct-h3's HTTP/3), where the client multiplexes one connection per host.
        .filter(|r| !matches!(r.origin_alpn.as_deref(), Some("h2" | "h3")))
        .map(|r| (r.profile.as_str(), r.workload.as_str(), r.scheme.as_str()))
        .collect();
    let mut out = Vec::new();
    for (profile, workload, scheme) in keys {
        let Some(link) = testbed::profile::Profile::named(profile)
            .as_ref()
            .and_then(SplitLink::of_profile)
        else {
            continue;
        };
        let Ok(w) = Workload::load(workloads_dir, workload) else {
            continue;
        };
        if w.objects.len() < 2 {
            continue;
        }
        if let Some(ms) = split_proxy_ms(&w, &link, scheme, max_per_host) {
            out.push(ModelPoint {
                profile: profile.into(),
                workload: workload.into(),
                scheme: scheme.into(),
                ms,
            });
        }
    }
    out
}

/// The summary's section on the model: per page, the model against direct and the best measured
/// longhaul variant of each carrier against the model (replay client).
pub fn markdown(rows: &[Row], points: &[ModelPoint]) -> String {
    if points.is_empty() {
        return String::new();
    }
    let best = |p: &ModelPoint, system: &str| -> Option<f64> {
        let cell = (p.profile.as_str(), p.workload.as_str(), p.scheme.as_str());
        best_replay(rows, cell, system, |r| r.plt_ms_median)
    };
    let x = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    let mut s = String::from(
        "\n## Split-proxy model (replay client; computed, not measured)\n\n\
         What an ideal proxy pair across the long link could reach with this client: its own \
         schedule (six connections per host, one request in flight on each, cold at every visit), \
         one client-to-origin round trip per request, new connections paying their set-up \
         (HTTPS: CONNECT at the edge and TLS 1.3 end to end) and slow start on the short links, \
         no loss and no processing time (benches/src/model.rs). On a lossless link `model ÷ \
         direct` is about the lowest ratio any such proxy can show with this client; the model \
         counts short-link slow start and long-link serialisation one after the other where they \
         overlap, so on pages of large objects a proxy can come in a few per cent under it. With \
         loss it is only a reference. The longhaul columns are its best measured variant.\n\n\
         | profile | workload | scheme | model ms | model ÷ direct | longhaul-tcp ÷ model | longhaul-quic ÷ model |\n\
         |---|---|---|---:|---:|---:|---:|\n",
    );
    for p in points {
        let ratio = |m: Option<f64>| m.map(|m| m / p.ms);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {} | {} | {} |",
            p.profile,
            p.workload,
            p.scheme,
            p.ms,
            x(best(p, direct::ID).map(|d| p.ms / d)),
            x(ratio(best(p, longhaul::TCP_ID))),
            x(ratio(best(p, longhaul::QUIC_ID))),
        );
    }
    s
}

/// How much longer than the model an object took: its time from request to last byte, less one
/// client-to-origin round trip, the set-up of a new connection, and its bytes at the long link's
/// rate (slow start is not subtracted: it is part of the excess).
pub fn excess_ms(link: &SplitLink, https: bool, o: &ObjectTime) -> f64 {
    let setup = if o.new_connection {
        link.setup_ms(https)
    } else {
        0.0
    };
    let serialise = o.bytes as f64 * 8.0 / link.rate_bps * 1000.0;
    (o.done_ms - o.request_ms) - (link.rtt_ms + setup + serialise)
}

/// One line of a profile's `trials.jsonl`.
#[derive(Debug, Clone, Deserialize)]
pub struct TrialLine {
    /// Workload id.
    pub workload: String,
    /// System id.
    pub system: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Params,
    /// `http` or `https`.
    pub scheme: String,
    /// The page load with its per-object times.
    pub load: PageLoad,
}

/// Per (system, parameters, scheme): the distribution of [`excess_ms`] over every object of every
/// replay load in `trials` on `link`, as a markdown table; the last column counts the objects
/// that took more than one long-link round trip longer than the model.
pub fn excess_markdown(profile: &str, link: &SplitLink, trials: &[TrialLine]) -> String {
    let long_rtt = link.rtt_ms - link.access_rtt_ms - link.origin_rtt_ms;
    let mut by: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    // Page loads on an otherwise idle link only: the model has no competing traffic (mixed) and
    // no page structure to speak of in a single bulk object.
    for t in trials
        .iter()
        .filter(|t| t.workload != "mixed" && t.load.objects.len() > 1)
    {
        let https = t.scheme == "https";
        let label = format!("{} {}", t.system, t.params.label())
            .trim()
            .to_string();
        let v = by.entry((label, t.scheme.clone())).or_default();
        v.extend(t.load.objects.iter().map(|o| excess_ms(link, https, o)));
    }
    let mut s = format!(
        "## {profile}: time per object beyond the split-proxy model\n\n\
         Request to last byte, less one client-to-origin round trip ({:.0} ms), the set-up of a \
         new connection and the bytes at the long link's rate; slow start on the short links is \
         left in. Every object of every replay load of a page in `{profile}/trials.jsonl` (not \
         the bulk transfer, not the mixed load).\n\n\
         | system | scheme | objects | p50 ms | p90 ms | p99 ms | max ms | > one long RTT ({long_rtt:.0} ms) |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        link.rtt_ms
    );
    for ((label, scheme), v) in &by {
        let p = |q| stats::percentile(v, q).map_or_else(|| "-".into(), |x| format!("{x:.0}"));
        let over = v.iter().filter(|&&x| x > long_rtt).count();
        let _ = writeln!(
            s,
            "| {label} | {scheme} | {} | {} | {} | {} | {} | {over} ({:.1} %) |",
            v.len(),
            p(50.0),
            p(90.0),
            p(99.0),
            p(100.0),
            100.0 * over as f64 / v.len().max(1) as f64
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_covers_cells_of_the_http1_client_only() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let row = |alpn: Option<&str>| {
            let mut r = Row::measured(
                "pacific",
                "yahoo",
                "replay",
                "direct",
                Default::default(),
                "https",
                vec![1000.0],
                vec![],
            );
            r.origin_alpn = alpn.map(str::to_string);
            r
        };
        // Results from before h2 (no origin_alpn) and from --origin-alpn h1 have the model.
        assert_eq!(points(&[row(None)], &dir, 6).len(), 1);
        assert_eq!(points(&[row(Some("h1"))], &dir, 6).len(), 1);
        assert!(points(&[row(Some("h2"))], &dir, 6).is_empty());
        assert!(points(&[row(Some("h3"))], &dir, 6).is_empty());
    }
    use crate::workload::{generate_mixed, generate_page, page_specs, Kind, Object};

    fn link() -> SplitLink {
        SplitLink {
            rtt_ms: 150.0,
            access_rtt_ms: 10.0,
            origin_rtt_ms: 10.0,
            rate_bps: 100e6,
            initial_window: INITIAL_WINDOW_BYTES,
        }
    }

    fn page(sizes: &[(u64, u32, Option<usize>)]) -> Workload {
        let mut w = generate_page(&page_specs()[1]);
        w.hosts = vec!["a.test".into()];
        w.objects = sizes
            .iter()
            .enumerate()
            .map(|(i, &(size, level, parent))| Object {
                host: "a.test".into(),
                path: format!("/{i}"),
                kind: if i == 0 { Kind::Html } else { Kind::Image },
                size,
                level,
                parent,
            })
            .collect();
        w
    }

    #[test]
    fn one_small_object_costs_setup_plus_one_round_trip_plus_serialisation() {
        let w = page(&[(12_500, 0, None)]);
        // 12 500 B at 100 Mbit/s = 1 ms; fits the initial window: no slow start.
        let http = split_proxy_ms(&w, &link(), "http", 6).unwrap();
        assert!((http - (20.0 + 150.0 + 1.0)).abs() < 1e-9, "{http}");
        // HTTPS: + CONNECT at the edge (10) + TLS 1.3 end to end (150).
        let https = split_proxy_ms(&w, &link(), "https", 6).unwrap();
        assert!((https - (http + 160.0)).abs() < 1e-9, "{https}");
    }

    #[test]
    fn a_large_first_body_pays_slow_start_on_the_short_links() {
        // 100 000 B takes three flights: iw × (1 + 2 + 4) = 101 360 B, two extra short round
        // trips; 101 361 B takes a fourth.
        let w = page(&[(100_000, 0, None)]);
        let t = split_proxy_ms(&w, &link(), "http", 6).unwrap();
        assert!((t - (20.0 + 20.0 + 150.0 + 8.0)).abs() < 1e-9, "{t}");
        let w = page(&[(101_361, 0, None)]);
        let t = split_proxy_ms(&w, &link(), "http", 6).unwrap();
        assert!((t - (20.0 + 30.0 + 150.0 + 8.10888)).abs() < 1e-9, "{t}");
    }

    #[test]
    fn a_reused_connection_keeps_the_window_it_grew() {
        // One connection: a 14 480 B body (the initial window, one flight), then 50 000 B. On the
        // grown window (28 960 B) the second takes two flights, one extra short round trip; from
        // the initial window it would take three (14 480 × 3 < 50 000).
        let w = page(&[(14_480, 0, None), (50_000, 1, Some(0))]);
        let t = split_proxy_ms(&w, &link(), "http", 1).unwrap();
        let ser = |b: f64| b / 12_500.0;
        let expected = 20.0 + 150.0 + ser(14_480.0) + 150.0 + 10.0 + ser(50_000.0);
        assert!((t - expected).abs() < 1e-6, "{t} vs {expected}");
        let alone = split_proxy_ms(&page(&[(50_000, 0, None)]), &link(), "http", 1).unwrap();
        assert!(
            (alone - (20.0 + 150.0 + 20.0 + ser(50_000.0))).abs() < 1e-6,
            "{alone}"
        );
    }

    #[test]
    fn connections_are_reused_and_limited_per_host() {
        // HTML, then 7 children: six go on new connections at once (one of them the HTML's
        // connection, reused), the seventh waits for the first to finish and reuses it.
        let mut objs = vec![(1_250, 0, None)];
        objs.extend((0..7).map(|_| (1_250, 1, Some(0))));
        let w = page(&objs);
        let t = split_proxy_ms(&w, &link(), "http", 6).unwrap();
        // Each body is 0.1 ms alone; concurrent bodies share the rate.
        let html = 20.0 + 150.0 + 0.1;
        // Level 1: the reused connection's request is first to arrive (no set-up), so the
        // seventh request leaves at html + 150 + 0.1 and costs one round trip more.
        let expected = html + 150.0 + 0.1 + 150.0 + 0.1;
        assert!((t - expected).abs() < 1e-6, "{t} vs {expected}");
        // With one connection per host everything is sequential and reused.
        let t1 = split_proxy_ms(&w, &link(), "http", 1).unwrap();
        assert!((t1 - (20.0 + 8.0 * 150.1)).abs() < 1e-6, "{t1}");
    }

    #[test]
    fn concurrent_bodies_share_the_long_link() {
        // Two 1.25 MB bodies on two connections arrive together: 200 ms of transfer in all.
        let w = page(&[
            (0, 0, None),
            (1_250_000, 1, Some(0)),
            (1_250_000, 1, Some(0)),
        ]);
        let mut l = link();
        l.initial_window = u64::MAX / 4;
        let t = split_proxy_ms(&w, &l, "http", 6).unwrap();
        // The HTML's connection is reused for the first child, which has the link alone until
        // the second (20 ms of set-up later) arrives; from then they share it, and the link is
        // busy without a gap until both are done: 200 ms after the first arrived.
        let html = 170.0;
        let expected = html + 150.0 + 200.0;
        assert!((t - expected).abs() < 1e-6, "{t} vs {expected}");
    }

    #[test]
    fn excess_is_what_an_object_took_beyond_the_model() {
        let o = |new_connection, took: f64| ObjectTime {
            url: "a.test/x".into(),
            discovered_ms: 0.0,
            request_ms: 10.0,
            done_ms: 10.0 + took,
            bytes: 12_500,
            new_connection,
            tls: None,
            alpn: None,
        };
        // 150 ms round trip + 1 ms of bytes; a new connection 20 ms more (HTTP) or 180 (HTTPS).
        assert!((excess_ms(&link(), false, &o(false, 151.0))).abs() < 1e-9);
        assert!((excess_ms(&link(), false, &o(true, 171.0))).abs() < 1e-9);
        assert!((excess_ms(&link(), true, &o(true, 331.0))).abs() < 1e-9);
        assert!((excess_ms(&link(), false, &o(false, 451.0)) - 300.0).abs() < 1e-9);
        let line = |workload: &str, took| TrialLine {
            workload: workload.into(),
            system: "longhaul-tcp".into(),
            params: Params {
                pool_size: Some(10),
                ..Params::default()
            },
            scheme: "http".into(),
            load: PageLoad {
                plt_ms: took,
                connections: 1,
                objects: vec![o(false, took), o(false, took)],
            },
        };
        // The mixed load (a page beside a bulk transfer) is left out.
        let trials = [
            line("google", 151.0),
            line("google", 451.0),
            line("mixed", 9151.0),
        ];
        let md = excess_markdown("pacific", &link(), &trials);
        assert!(
            md.contains("| longhaul-tcp N=10 | http | 4 | 150 | 300 | 300 | 300 | 2 (50.0 %) |"),
            "{md}"
        );
    }

    #[test]
    fn profiles_and_workloads_without_what_the_model_needs() {
        assert_eq!(split_proxy_ms(&generate_mixed(), &link(), "http", 6), None);
        let p = testbed::profile::Profile::named("pacific").unwrap();
        let l = SplitLink::of_profile(&p).unwrap();
        assert!((l.rtt_ms - (130.0 + l.access_rtt_ms + l.origin_rtt_ms)).abs() < 1e-9);
        assert_eq!(l.rate_bps, 100e6);
        let mut none = l;
        none.rate_bps = 0.0;
        assert_eq!(
            split_proxy_ms(&generate_page(&page_specs()[1]), &none, "http", 6),
            None
        );
    }
}
