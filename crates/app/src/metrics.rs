//! Prometheus metrics of both proxies and the `/metrics` HTTP endpoint that serves them.
//!
//! What it does: keeps one process-wide set of counters and histograms
//! ([`global`]), fed from the points where streams open ([`stream_opened`]) and from every
//! access-log record ([`record_access`]: bytes each way, requests by status class, errors by
//! cause with the same tags the access log and `X-Longhaul-Error` use, time to first byte);
//! reads the per-pool-connection gauges (state, RTT, `TCP_INFO` cwnd and retransmits,
//! outstanding bytes, reconnects) from registered [`StatsSource`]s, and each edge pool's number
//! of opens waiting for a stream slot from [`WaitingSource`]s, at scrape time, so a scrape
//! always shows the pool as it is now and a connection that went away disappears; counts
//! SIGHUP reloads that failed ([`Metrics::reload_failed`]); serves the text exposition format
//! on `GET /metrics` ([`serve`]).
//!
//! What it does NOT do: push anywhere, authenticate scrapers (the endpoint is off by default
//! and loopback by default when on: put it behind a firewall or a reverse proxy if it must be
//! reached from elsewhere), or keep per-client or per-target series (their number is unbounded).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Address `[metrics] enabled = true` (without `listen`) binds: loopback only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9090";
/// Scrape connections served at once; more wait in the listen backlog.
pub const DEFAULT_METRICS_MAX_CONNECTIONS: usize = 8;
/// A scraper must send its request head within this time.
pub const DEFAULT_METRICS_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Time-to-first-byte histogram buckets: 5 ms doubling 14 times (to about 41 s), which covers
/// loopback through several satellite round trips.
pub const TTFB_BUCKETS: (f64, f64, u16) = (0.005, 2.0, 14);
/// The `what` labels of `longhaul_reload_failures_total`.
pub const RELOAD_FAILURE_KINDS: [&str; 2] = ["config", "tls"];

/// `[metrics]` section of both configuration files. Off unless `enabled` or `listen` is set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve `/metrics` (on `listen`, or [`DEFAULT_METRICS_LISTEN`]).
    pub enabled: bool,
    /// Address of the `/metrics` endpoint; setting it enables metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
}

impl MetricsConfig {
    /// The address to serve on, or `None` when metrics are off.
    pub fn address(&self) -> Option<SocketAddr> {
        match self.listen {
            Some(a) => Some(a),
            None if self.enabled => Some(DEFAULT_METRICS_LISTEN.parse().expect("valid default")),
            None => None,
        }
    }
}

/// Reads the current state of one pool's connections (`Pool::stats` / `Server::stats`).
pub type StatsSource = Arc<dyn Fn() -> Vec<pool::ConnStats> + Send + Sync>;
/// Reads how many opens of one pool wait for a stream slot now (`Pool::open_waiting`).
pub type WaitingSource = Arc<dyn Fn() -> usize + Send + Sync>;
/// Reads an edge pool's carrier now and its switches since start (`Pool::carrier`,
/// `Pool::carrier_switches`).
pub type CarrierSource = Arc<dyn Fn() -> (pool::select::CarrierKind, pool::Switches) + Send + Sync>;
/// Reads a remote's admission of pool connections (`Server::admission`).
pub type AdmissionSource = Arc<dyn Fn() -> pool::AdmissionStats + Send + Sync>;

type Labels1 = [(&'static str, String); 1];
type ConnLabels = [(&'static str, String); 4];

/// The process-wide metric set.
pub struct Metrics {
    registry: Registry,
    streams_opened: Family<Labels1, Counter>,
    bytes: Family<Labels1, Counter>,
    requests: Family<Labels1, Counter>,
    errors: Family<Labels1, Counter>,
    ttfb: Family<Labels1, Histogram, fn() -> Histogram>,
    conn_up: Family<ConnLabels, Gauge>,
    conn_rtt: Family<ConnLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    conn_tcp_rtt: Family<ConnLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    conn_cwnd: Family<ConnLabels, Gauge>,
    conn_outstanding: Family<ConnLabels, Gauge>,
    conn_retrans: Family<ConnLabels, Gauge>,
    conn_streams: Family<ConnLabels, Gauge>,
    conn_credit_held: Family<ConnLabels, Gauge>,
    conn_reconnects: Family<ConnLabels, Gauge>,
    quic_cwnd: Family<ConnLabels, Gauge>,
    quic_lost: Family<ConnLabels, Gauge>,
    quic_sent: Family<ConnLabels, Gauge>,
    quic_congestion: Family<ConnLabels, Gauge>,
    quic_parity_on: Family<ConnLabels, Gauge>,
    quic_parity_sent: Family<ConnLabels, Gauge>,
    quic_parity_rebuilt: Family<ConnLabels, Gauge>,
    open_waiting: Family<Labels1, Gauge>,
    stream_limit: Family<Labels1, Gauge>,
    /// Edge pools whose stream limit is read at scrape time.
    limits: Mutex<Vec<(String, WaitingSource)>>,
    carrier: Family<[(&'static str, String); 2], Gauge>,
    carrier_switches: Family<[(&'static str, String); 3], Counter>,
    /// Edge pools whose carrier is read at scrape time.
    carriers: Mutex<Vec<(String, CarrierSource)>>,
    handshakes_pending: Family<Labels1, Gauge>,
    refused: Family<[(&'static str, String); 2], Gauge>,
    /// `net.ipv4.tcp_slow_start_after_idle` at start (no series until [`crate::host::check`]
    /// could read it).
    host_slow_start_after_idle: Family<[(&'static str, String); 0], Gauge>,
    /// UDP datagrams the kernel dropped at a full socket receive buffer in the proxy's network
    /// namespace, read at scrape time ([`crate::host::read_udp_receive_buffer_errors`]).
    host_udp_rcvbuf_errors: Family<[(&'static str, String); 0], Counter>,
    /// SIGHUP reloads that kept the running configuration or key files, by `what` failed.
    reload_failures: Family<Labels1, Counter>,
    /// Remote pool servers whose admission is read at scrape time.
    admission: Mutex<Vec<(String, AdmissionSource)>>,
    /// Pools whose connections are read at scrape time, with the label that names each.
    sources: Mutex<Vec<(String, StatsSource)>>,
    /// Edge pools whose queue of opens waiting for a stream slot is read at scrape time.
    waiting: Mutex<Vec<(String, WaitingSource)>>,
    /// Serialises scrapes: the per-connection families are cleared and refilled per scrape.
    scrape: tokio::sync::Mutex<()>,
}

fn ttfb_histogram() -> Histogram {
    let (start, factor, n) = TTFB_BUCKETS;
    Histogram::new(exponential_buckets(start, factor, n))
}

impl Metrics {
    fn new() -> Metrics {
        let mut registry = Registry::with_prefix("longhaul");
        let m = Metrics {
            streams_opened: Family::default(),
            bytes: Family::default(),
            requests: Family::default(),
            errors: Family::default(),
            ttfb: Family::new_with_constructor(ttfb_histogram),
            conn_up: Family::default(),
            conn_rtt: Family::default(),
            conn_tcp_rtt: Family::default(),
            conn_cwnd: Family::default(),
            conn_outstanding: Family::default(),
            conn_retrans: Family::default(),
            conn_streams: Family::default(),
            conn_credit_held: Family::default(),
            conn_reconnects: Family::default(),
            quic_cwnd: Family::default(),
            quic_lost: Family::default(),
            quic_sent: Family::default(),
            quic_congestion: Family::default(),
            quic_parity_on: Family::default(),
            quic_parity_sent: Family::default(),
            quic_parity_rebuilt: Family::default(),
            open_waiting: Family::default(),
            stream_limit: Family::default(),
            limits: Mutex::new(Vec::new()),
            carrier: Family::default(),
            carrier_switches: Family::default(),
            carriers: Mutex::new(Vec::new()),
            handshakes_pending: Family::default(),
            refused: Family::default(),
            host_slow_start_after_idle: Family::default(),
            host_udp_rcvbuf_errors: Family::default(),
            reload_failures: Family::default(),
            admission: Mutex::new(Vec::new()),
            sources: Mutex::new(Vec::new()),
            waiting: Mutex::new(Vec::new()),
            scrape: tokio::sync::Mutex::new(()),
            registry: Registry::default(),
        };
        registry.register(
            "streams_opened",
            "Streams opened over the pool, by kind (http, tunnel)",
            m.streams_opened.clone(),
        );
        registry.register(
            "bytes",
            "Body bytes relayed, by direction (up: client to origin, down: origin to client)",
            m.bytes.clone(),
        );
        registry.register(
            "requests",
            "Requests and tunnels finished, by status class (2xx..5xx; none: no status sent)",
            m.requests.clone(),
        );
        registry.register(
            "errors",
            "Requests and tunnels that failed, by cause (the access log's outcome tag)",
            m.errors.clone(),
        );
        registry.register(
            "time_to_first_byte_seconds",
            "From the request head to the reply head, by kind (http, tunnel, socks)",
            m.ttfb.clone(),
        );
        registry.register(
            "pool_connection_up",
            "1 while the pool connection carries streams, 0 otherwise",
            m.conn_up.clone(),
        );
        registry.register(
            "pool_connection_rtt_seconds",
            "Round-trip time of the last mux PING on the pool connection",
            m.conn_rtt.clone(),
        );
        registry.register(
            "pool_connection_tcp_rtt_seconds",
            "Smoothed TCP round-trip time (TCP_INFO)",
            m.conn_tcp_rtt.clone(),
        );
        registry.register(
            "pool_connection_cwnd_segments",
            "TCP congestion window (TCP_INFO)",
            m.conn_cwnd.clone(),
        );
        registry.register(
            "pool_connection_outstanding_bytes",
            "Bytes queued in the process plus the kernel send queue",
            m.conn_outstanding.clone(),
        );
        registry.register(
            "pool_connection_retransmitted_segments",
            "TCP segments retransmitted over the connection's life (TCP_INFO total_retrans)",
            m.conn_retrans.clone(),
        );
        registry.register(
            "pool_connection_streams",
            "Streams bound to the pool connection",
            m.conn_streams.clone(),
        );
        registry.register(
            "pool_connection_credit_held_bytes",
            "TCP carrier: bytes the peer sent on the pool connection that have not been read here \
             yet (connection credit held; edge: replies waiting for clients, remote: uploads \
             waiting for origins); at the connection window, 256 MiB by default, the peer stops \
             sending on it",
            m.conn_credit_held.clone(),
        );
        registry.register(
            "pool_connection_reconnects",
            "Times this pool slot re-dialed after losing or failing a connection",
            m.conn_reconnects.clone(),
        );
        registry.register(
            "pool_connection_quic_cwnd_bytes",
            "QUIC congestion window (carrier = \"quic\")",
            m.quic_cwnd.clone(),
        );
        registry.register(
            "pool_connection_quic_lost_packets",
            "QUIC packets declared lost over the connection's life",
            m.quic_lost.clone(),
        );
        registry.register(
            "pool_connection_quic_sent_packets",
            "QUIC packets sent over the connection's life",
            m.quic_sent.clone(),
        );
        registry.register(
            "pool_connection_quic_congestion_events",
            "QUIC congestion window reductions over the connection's life",
            m.quic_congestion.clone(),
        );
        registry.register(
            "pool_connection_quic_parity_on",
            "1 while parity datagrams protect this QUIC connection's sends (held back while the link is busy)",
            m.quic_parity_on.clone(),
        );
        registry.register(
            "pool_connection_quic_parity_sent",
            "Parity datagrams sent to the peer over the connection's life",
            m.quic_parity_sent.clone(),
        );
        registry.register(
            "pool_connection_quic_parity_rebuilt",
            "Datagrams from the peer rebuilt from its parity over the connection's life",
            m.quic_parity_rebuilt.clone(),
        );
        registry.register(
            "pool_open_waiting",
            "Requests and tunnels waiting for a stream slot because every pool connection is at \
             its stream limit (edge)",
            m.open_waiting.clone(),
        );
        registry.register(
            "pool_stream_limit",
            "Most streams (requests in flight and tunnels) the pool can have open at once now; \
             compare with the sum of pool_connection_streams (edge)",
            m.stream_limit.clone(),
        );
        registry.register(
            "pool_carrier",
            "1 for the carrier (quic, tcp) new streams of the pool go to now, 0 for the other \
             (edge; under carrier = \"auto\" it changes on a switch)",
            m.carrier.clone(),
        );
        registry.register(
            "pool_carrier_switches",
            "Carrier switches of the pool since start, by from and to (edge, carrier = \"auto\")",
            m.carrier_switches.clone(),
        );
        registry.register(
            "pool_handshakes_pending",
            "Pool connections in their TLS or QUIC handshake, before their HELLO (remote)",
            m.handshakes_pending.clone(),
        );
        registry.register(
            "pool_refused_connections",
            "Pool connections closed since start, by reason: handshakes (max_handshakes in \
             their handshake), per-source (max_handshakes_per_source from that address), \
             connections (max_connections up) (remote)",
            m.refused.clone(),
        );
        registry.register(
            "host_tcp_slow_start_after_idle",
            "net.ipv4.tcp_slow_start_after_idle of the proxy's network namespace at start: 1 \
             shrinks idle TCP pool connections' congestion windows (cubic, reno; BBR is exempt), \
             undoing the warm pool; set it to 0 (deploy/sysctl.d)",
            m.host_slow_start_after_idle.clone(),
        );
        registry.register(
            "host_udp_receive_buffer_errors",
            "UDP datagrams the kernel dropped at a full socket receive buffer (RcvbufErrors of \
             /proc/net/snmp and snmp6) in the proxy's network namespace, every socket counted: \
             a rise while the QUIC carrier runs is loss the link did not cause; raise \
             quic.udp_buffer or net.core.rmem_max",
            m.host_udp_rcvbuf_errors.clone(),
        );
        registry.register(
            "reload_failures",
            "SIGHUP reloads that failed and kept what was running, by what did not load: config \
             (the configuration file) or tls (the certificate, key or CA files)",
            m.reload_failures.clone(),
        );
        // Both series from the start, at 0, so that the first failure is an increase.
        for what in RELOAD_FAILURE_KINDS {
            let _created = m.reload_failures.get_or_create(&[("what", what.into())]);
        }
        Metrics { registry, ..m }
    }

    /// Counts a SIGHUP reload whose `what` (one of [`RELOAD_FAILURE_KINDS`]) did not load.
    pub fn reload_failed(&self, what: &'static str) {
        self.reload_failures
            .get_or_create(&[("what", what.into())])
            .inc();
    }

    /// Sets the `host_tcp_slow_start_after_idle` gauge (read by [`crate::host::check`]; the
    /// series has no labels and shows as `{}` in the exposition).
    pub fn set_host_slow_start_after_idle(&self, on: bool) {
        self.host_slow_start_after_idle
            .get_or_create(&[])
            .set(i64::from(on));
    }

    /// Reads the stream limit of `pool` at every scrape (labelled `pool="<name>"`).
    pub fn add_stream_limit(&self, name: impl Into<String>, source: WaitingSource) {
        add_source(&self.limits, name.into(), source);
    }

    /// Reads the carrier of edge pool `pool` at every scrape (labelled `pool="<name>"`).
    pub fn add_carrier(&self, name: impl Into<String>, source: CarrierSource) {
        add_source(&self.carriers, name.into(), source);
    }

    /// Reads the admission of the remote pool server `pool` at every scrape (labelled
    /// `pool="<name>"`).
    pub fn add_admission(&self, name: impl Into<String>, source: AdmissionSource) {
        add_source(&self.admission, name.into(), source);
    }

    /// Reads the pool connections of `pool` at every scrape (labelled `pool="<name>"`).
    pub fn add_pool(&self, name: impl Into<String>, source: StatsSource) {
        add_source(&self.sources, name.into(), source);
    }

    /// Reads the number of opens of `pool` waiting for a stream slot at every scrape
    /// (labelled `pool="<name>"`).
    pub fn add_open_queue(&self, name: impl Into<String>, source: WaitingSource) {
        add_source(&self.waiting, name.into(), source);
    }

    /// The text exposition of every metric, with the pool gauges read now.
    pub async fn render(&self) -> String {
        let _one = self.scrape.lock().await;
        self.refresh_pool_gauges();
        let mut out = String::new();
        if let Err(e) = encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "metrics encoding failed");
        }
        out
    }

    fn refresh_pool_gauges(&self) {
        // The kernel counts; the counter follows.
        if let Ok(n) = crate::host::read_udp_receive_buffer_errors() {
            follow(&self.host_udp_rcvbuf_errors.get_or_create(&[]), n);
        }
        self.conn_up.clear();
        self.conn_rtt.clear();
        self.conn_tcp_rtt.clear();
        self.conn_cwnd.clear();
        self.conn_outstanding.clear();
        self.conn_retrans.clear();
        self.conn_streams.clear();
        self.conn_credit_held.clear();
        self.conn_reconnects.clear();
        self.quic_cwnd.clear();
        self.quic_lost.clear();
        self.quic_sent.clear();
        self.quic_congestion.clear();
        self.quic_parity_on.clear();
        self.quic_parity_sent.clear();
        self.quic_parity_rebuilt.clear();
        self.open_waiting.clear();
        self.handshakes_pending.clear();
        self.refused.clear();
        self.stream_limit.clear();
        set_per_pool(&self.limits, &self.stream_limit);
        set_per_pool(&self.waiting, &self.open_waiting);
        self.carrier.clear();
        for (name, source) in snapshot(&self.carriers) {
            let (now, switches) = source();
            for c in [
                pool::select::CarrierKind::Quic,
                pool::select::CarrierKind::Tcp,
            ] {
                self.carrier
                    .get_or_create(&[("pool", name.clone()), ("carrier", c.name().into())])
                    .set(i64::from(c == now));
            }
            // The pool counts; the counter follows.
            for (from, to, n) in switches {
                let c = self.carrier_switches.get_or_create(&[
                    ("pool", name.clone()),
                    ("from", from.name().into()),
                    ("to", to.name().into()),
                ]);
                follow(&c, n);
            }
        }
        for (name, source) in snapshot(&self.admission) {
            let a = source();
            let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.handshakes_pending
                .get_or_create(&[("pool", name.clone())])
                .set(g(a.handshakes_pending as u64));
            for (reason, n) in [
                ("handshakes", a.refused_handshakes),
                ("per-source", a.refused_per_source),
                ("connections", a.refused_connections),
            ] {
                self.refused
                    .get_or_create(&[("pool", name.clone()), ("reason", reason.into())])
                    .set(g(n));
            }
        }
        for (name, source) in snapshot(&self.sources) {
            for s in source() {
                let l: ConnLabels = [
                    ("pool", name.clone()),
                    ("slot", s.slot.map_or("-".into(), |n| n.to_string())),
                    ("conn", s.id.map_or("-".into(), |n| n.to_string())),
                    ("peer", s.peer.map_or("-".into(), |p| p.to_string())),
                ];
                let up = s.state == pool::LaneState::Up;
                self.conn_up.get_or_create(&l).set(i64::from(up));
                self.conn_reconnects
                    .get_or_create(&l)
                    .set(s.reconnects as i64);
                if s.id.is_none() {
                    continue;
                }
                self.conn_outstanding
                    .get_or_create(&l)
                    .set(s.outstanding as i64);
                self.conn_streams
                    .get_or_create(&l)
                    .set(i64::from(s.streams));
                if let Some(held) = s.credit_held {
                    self.conn_credit_held
                        .get_or_create(&l)
                        .set(i64::try_from(held).unwrap_or(i64::MAX));
                }
                if let Some(rtt) = s.rtt {
                    self.conn_rtt.get_or_create(&l).set(rtt.as_secs_f64());
                }
                if let Some(t) = s.tcp_info {
                    self.conn_tcp_rtt
                        .get_or_create(&l)
                        .set(f64::from(t.rtt_us) / 1e6);
                    self.conn_cwnd.get_or_create(&l).set(i64::from(t.snd_cwnd));
                    self.conn_retrans
                        .get_or_create(&l)
                        .set(i64::from(t.total_retrans));
                }
                if let Some(q) = &s.quic {
                    let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
                    self.quic_cwnd.get_or_create(&l).set(g(q.cwnd));
                    self.quic_lost.get_or_create(&l).set(g(q.lost_packets));
                    self.quic_sent.get_or_create(&l).set(g(q.sent_packets));
                    self.quic_congestion
                        .get_or_create(&l)
                        .set(g(q.congestion_events));
                    self.quic_parity_on
                        .get_or_create(&l)
                        .set(i64::from(q.parity_on));
                    self.quic_parity_sent
                        .get_or_create(&l)
                        .set(g(q.parity_sent));
                    self.quic_parity_rebuilt
                        .get_or_create(&l)
                        .set(g(q.parity_rebuilt));
                }
            }
        }
    }
}

/// Advances `counter` to `count`, a monotonic count kept elsewhere (the kernel's, a
/// pool's). A count below the counter (the source restarted) leaves it where it is: a
/// Prometheus counter never goes down.
fn follow(counter: &Counter, count: u64) {
    let cur = counter.get();
    if count > cur {
        counter.inc_by(count - cur);
    }
}

fn add_source<T>(list: &Mutex<Vec<(String, T)>>, name: String, source: T) {
    list.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((name, source));
}

/// The registered sources, copied out of their lock before they are called.
fn snapshot<T: Clone>(list: &Mutex<Vec<(String, T)>>) -> Vec<(String, T)> {
    list.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets `family{pool="<name>"}` from each source of `list`.
fn set_per_pool(list: &Mutex<Vec<(String, WaitingSource)>>, family: &Family<Labels1, Gauge>) {
    for (name, source) in snapshot(list) {
        family
            .get_or_create(&[("pool", name)])
            .set(i64::try_from(source()).unwrap_or(i64::MAX));
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide metric set.
pub fn global() -> &'static Metrics {
    &METRICS
}

/// Counts a stream opened over the pool (`kind`: `http` or `tunnel`).
pub fn stream_opened(kind: &'static str) {
    global()
        .streams_opened
        .get_or_create(&[("kind", kind.to_string())])
        .inc();
}

/// Status class label: `2xx`..`5xx`, or `none` when no status reached the client.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ => "none",
    }
}

/// Counts one finished request or tunnel (from [`crate::access::Access::log`]).
///
/// `kind` labels the time-to-first-byte histogram (`http`, `tunnel` or `socks`); `failure` is
/// the outcome tag of a failure, `None` for a record of none (`ok`, or an end the client or
/// the edge chose: [`crate::access::Access::is_failure`]).
pub fn record_access(
    kind: &'static str,
    status: u16,
    bytes_up: u64,
    bytes_down: u64,
    failure: Option<&str>,
    ttfb: Option<Duration>,
) {
    let m = global();
    m.bytes
        .get_or_create(&[("direction", "up".into())])
        .inc_by(bytes_up);
    m.bytes
        .get_or_create(&[("direction", "down".into())])
        .inc_by(bytes_down);
    m.requests
        .get_or_create(&[("class", status_class(status).into())])
        .inc();
    if let Some(cause) = failure {
        m.errors
            .get_or_create(&[("cause", cause.to_string())])
            .inc();
    }
    if let Some(t) = ttfb {
        m.ttfb
            .get_or_create(&[("kind", kind.to_string())])
            .observe(t.as_secs_f64());
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped. Other paths get 404, other
/// methods 405; at most [`DEFAULT_METRICS_MAX_CONNECTIONS`] scrapes are served at once.
pub async fn serve(listener: TcpListener) {
    let slots = Arc::new(Semaphore::new(DEFAULT_METRICS_MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (sock, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        tokio::spawn(async move {
            let _permit = permit;
            let io = hyper_util::rt::TokioIo::new(sock);
            let svc = hyper::service::service_fn(answer);
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(DEFAULT_METRICS_HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(io, svc);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "metrics connection failed");
            }
        });
    }
}

async fn answer(req: Request<hyper::body::Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, ctype: &'static str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static(ctype),
        );
        Ok(r)
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain", "try /metrics\n".into());
    }
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    let body = global().render().await;
    reply(
        StatusCode::OK,
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
        body,
    )
}

/// Binds the metrics endpoint (if `cfg` enables it) and serves it in the background. Logs a
/// warning when the address is not loopback.
pub async fn start(cfg: &MetricsConfig) -> anyhow::Result<Option<SocketAddr>> {
    let Some(addr) = cfg.address() else {
        return Ok(None);
    };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (metrics): {e}"))?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() {
        tracing::warn!(listen = %bound, "metrics endpoint is not on loopback: anyone who can reach it can read it");
    }
    tracing::info!(listen = %bound, "metrics on http://{bound}/metrics");
    tokio::spawn(serve(listener));
    Ok(Some(bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes() {
        assert_eq!(status_class(200), "2xx");
        assert_eq!(status_class(403), "4xx");
        assert_eq!(status_class(504), "5xx");
        assert_eq!(status_class(0), "none");
    }

    #[test]
    fn a_followed_counter_moves_up_to_the_count_and_never_down() {
        let c = Counter::default();
        follow(&c, 5);
        assert_eq!(c.get(), 5);
        follow(&c, 5);
        assert_eq!(c.get(), 5);
        follow(&c, 12);
        assert_eq!(c.get(), 12);
        // The source restarted (a new namespace, a rebuilt pool): the counter keeps its value.
        follow(&c, 3);
        assert_eq!(c.get(), 12);
    }

    #[test]
    fn metrics_section_is_off_by_default_and_loopback_when_enabled() {
        let c: MetricsConfig = toml::from_str("").unwrap();
        assert_eq!(c.address(), None);
        let c: MetricsConfig = toml::from_str("enabled = true").unwrap();
        assert!(c.address().unwrap().ip().is_loopback());
        let c: MetricsConfig = toml::from_str("listen = \"127.0.0.1:9191\"").unwrap();
        assert_eq!(c.address().unwrap().port(), 9191);
        assert!(toml::from_str::<MetricsConfig>("lisen = 1").is_err());
    }

    #[tokio::test]
    async fn access_records_move_the_counters() {
        record_access("http", 200, 10, 2000, None, Some(Duration::from_millis(30)));
        record_access("http", 502, 0, 0, Some("dns-failed"), None);
        let text = global().render().await;
        assert!(
            text.contains("longhaul_requests_total{class=\"2xx\"}"),
            "{text}"
        );
        assert!(
            text.contains("longhaul_errors_total{cause=\"dns-failed\"}"),
            "{text}"
        );
        assert!(
            text.contains("longhaul_time_to_first_byte_seconds_bucket{"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn open_queue_depth_is_read_at_scrape_time() {
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(3));
        let src = n.clone();
        global().add_open_queue(
            "queue-test:4443",
            Arc::new(move || src.load(std::sync::atomic::Ordering::Relaxed)),
        );
        let text = global().render().await;
        assert!(
            text.contains("longhaul_pool_open_waiting{pool=\"queue-test:4443\"} 3"),
            "{text}"
        );
        n.store(0, std::sync::atomic::Ordering::Relaxed);
        let text = global().render().await;
        assert!(
            text.contains("longhaul_pool_open_waiting{pool=\"queue-test:4443\"} 0"),
            "{text}"
        );
        global().add_stream_limit("queue-test:4443", Arc::new(|| 330));
        let text = global().render().await;
        assert!(
            text.contains("longhaul_pool_stream_limit{pool=\"queue-test:4443\"} 330"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn pool_admission_is_read_at_scrape_time() {
        global().add_admission(
            "admission-test",
            Arc::new(|| pool::AdmissionStats {
                handshakes_pending: 5,
                refused_handshakes: 0,
                refused_per_source: 7,
                refused_connections: 2,
            }),
        );
        let text = global().render().await;
        for line in [
            "longhaul_pool_handshakes_pending{pool=\"admission-test\"} 5",
            "longhaul_pool_refused_connections{pool=\"admission-test\",reason=\"per-source\"} 7",
            "longhaul_pool_refused_connections{pool=\"admission-test\",reason=\"connections\"} 2",
            "longhaul_pool_refused_connections{pool=\"admission-test\",reason=\"handshakes\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }

    #[tokio::test]
    async fn reload_failures_start_at_zero_and_count_by_what() {
        // No other test reloads: the process-wide counters are this test's.
        let text = global().render().await;
        for what in RELOAD_FAILURE_KINDS {
            let line = format!("longhaul_reload_failures_total{{what=\"{what}\"}} 0\n");
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        global().reload_failed("tls");
        let text = global().render().await;
        assert!(text.contains("longhaul_reload_failures_total{what=\"tls\"} 1\n"));
        assert!(text.contains("longhaul_reload_failures_total{what=\"config\"} 0\n"));
    }

    #[tokio::test]
    async fn pool_carrier_and_switches_are_read_at_scrape_time() {
        use pool::select::CarrierKind::{Quic, Tcp};
        let n = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let m = n.clone();
        global().add_carrier(
            "carrier-test:4443",
            Arc::new(move || {
                let k = m.load(std::sync::atomic::Ordering::Relaxed);
                let now = if k % 2 == 1 { Tcp } else { Quic };
                (now, vec![(Quic, Tcp, k.div_ceil(2)), (Tcp, Quic, k / 2)])
            }),
        );
        let text = global().render().await;
        for line in [
            "longhaul_pool_carrier{pool=\"carrier-test:4443\",carrier=\"tcp\"} 1",
            "longhaul_pool_carrier{pool=\"carrier-test:4443\",carrier=\"quic\"} 0",
            "longhaul_pool_carrier_switches_total{pool=\"carrier-test:4443\",from=\"quic\",to=\"tcp\"} 1",
            "longhaul_pool_carrier_switches_total{pool=\"carrier-test:4443\",from=\"tcp\",to=\"quic\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        n.store(4, std::sync::atomic::Ordering::Relaxed);
        let text = global().render().await;
        for line in [
            "longhaul_pool_carrier{pool=\"carrier-test:4443\",carrier=\"quic\"} 1",
            "longhaul_pool_carrier_switches_total{pool=\"carrier-test:4443\",from=\"quic\",to=\"tcp\"} 2",
            "longhaul_pool_carrier_switches_total{pool=\"carrier-test:4443\",from=\"tcp\",to=\"quic\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
    }
}
