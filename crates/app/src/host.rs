//! Host settings the pool depends on, checked once at start-up by both proxies.
//!
//! What it does: reads `net.ipv4.tcp_slow_start_after_idle` of the process's network
//! namespace from `/proc/sys` ([`read_slow_start_after_idle`]), decides what it means for the
//! configured pool carrier and congestion control ([`slow_start_after_idle_finding`], a pure
//! function the tests feed with values), logs the finding and sets the
//! `longhaul_host_tcp_slow_start_after_idle` gauge ([`check`]).
//!
//! Why: with the sysctl at 1 (the Linux default) the kernel shrinks the congestion window of a
//! TCP connection that sat idle longer than its retransmission timeout back towards the
//! initial window (`tcp_cwnd_restart`, RFC 2861/7661 style; `net/ipv4/tcp.c`
//! `tcp_slow_start_after_idle_check`, and the application-limited decay in
//! `tcp_cwnd_validate`): after a quiet period every pool connection slow-starts again, which
//! is what the warm pool exists to avoid. Linux skips both for a congestion control with its
//! own `cong_control` hook (BBR, which restarts from idle at its bandwidth estimate), so with
//! `congestion = "bbr"` in force the setting does not touch the pool connections.
//!
//! It also reads the kernel's count of UDP datagrams dropped at a full socket receive buffer
//! ([`read_udp_receive_buffer_errors`], the `longhaul_host_udp_receive_buffer_errors_total`
//! counter at every scrape): a QUIC pool counts those as loss on the path. The benchmark
//! runner reads the same count in each test bed namespace
//! ([`read_udp_receive_buffer_errors_in`]).
//!
//! What it does NOT do: change the sysctl (the process should not need the privilege; the
//! deploy/sysctl.d drop-in or `sysctl -w` does it), re-read it later (a change takes effect
//! for the kernel at once, but the gauge shows the value at start), or check the QUIC carrier:
//! quinn keeps its congestion window across idle periods (deploy/README.md §4, "No slow start
//! after idle").

use std::io;
use std::path::Path;

use crate::config::CarrierName;

/// The sysctl, as `sysctl` names it.
pub const SLOW_START_AFTER_IDLE: &str = "net.ipv4.tcp_slow_start_after_idle";
/// Where the process reads it (its own network namespace's value).
pub const SLOW_START_AFTER_IDLE_PATH: &str = "/proc/sys/net/ipv4/tcp_slow_start_after_idle";

/// UDP datagrams dropped at a full socket receive buffer in this process's network namespace
/// since boot: `RcvbufErrors` of `/proc/net/snmp` (IPv4) plus `Udp6RcvbufErrors` of
/// `/proc/net/snmp6` where IPv6 is on.
pub fn read_udp_receive_buffer_errors() -> io::Result<u64> {
    read_udp_receive_buffer_errors_in(Path::new("/proc/self/net"))
}

/// The same count for the network namespace whose `/proc/.../net` directory is `net`:
/// `/proc/thread-self/net` for the calling thread's namespace (a thread that entered another
/// namespace with `setns`, as the test bed's do), `/proc/PID/net` for a process's.
pub fn read_udp_receive_buffer_errors_in(net: &Path) -> io::Result<u64> {
    let v4 = std::fs::read_to_string(net.join("snmp"))?;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "no Udp RcvbufErrors in snmp");
    let mut n = udp_rcvbuf_errors_v4(&v4).ok_or_else(bad)?;
    if let Ok(v6) = std::fs::read_to_string(net.join("snmp6")) {
        n += udp_rcvbuf_errors_v6(&v6).unwrap_or(0);
    }
    Ok(n)
}

/// `RcvbufErrors` of the `Udp:` lines of `/proc/net/snmp` (a header line of names, then one
/// of values).
fn udp_rcvbuf_errors_v4(snmp: &str) -> Option<u64> {
    let mut lines = snmp.lines().filter(|l| l.starts_with("Udp: "));
    let names = lines.next()?;
    let values = lines.next()?;
    let at = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(at)?.parse().ok()
}

/// `Udp6RcvbufErrors` of `/proc/net/snmp6` (one `name value` per line).
fn udp_rcvbuf_errors_v6(snmp6: &str) -> Option<u64> {
    snmp6.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next()? == "Udp6RcvbufErrors").then(|| w.next()?.parse().ok())?
    })
}

/// Reads `net.ipv4.tcp_slow_start_after_idle` of this process's network namespace.
pub fn read_slow_start_after_idle() -> io::Result<bool> {
    read_bool(Path::new(SLOW_START_AFTER_IDLE_PATH))
}

/// Reads a boolean sysctl file (`0` or `1`, a newline after it).
fn read_bool(path: &Path) -> io::Result<bool> {
    let text = std::fs::read_to_string(path)?;
    parse_bool(&text).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: expected 0 or 1, got {:?}", path.display(), text.trim()),
        )
    })
}

/// `0` → false, any other integer → true (the kernel treats the sysctl as a boolean).
fn parse_bool(text: &str) -> Option<bool> {
    text.trim().parse::<i64>().ok().map(|v| v != 0)
}

/// What `tcp_slow_start_after_idle` means for this process's pool connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowStartAfterIdle {
    /// 0: idle pool connections keep their congestion windows.
    Off,
    /// 1 with TCP pool connections on a loss-based congestion control (cubic, reno): after an
    /// idle period longer than the RTO their windows fall back towards the initial window.
    Harmful,
    /// 1, but the pool connections use BBR, which Linux exempts; it would matter if BBR
    /// were not available and the sockets fell back to the host's default.
    ExemptBbr,
    /// 1, but the pool runs over QUIC, which does not use the kernel's TCP.
    NotTcp,
}

/// The finding for sysctl value `on`, the pool's `carrier` and its TCP `congestion` control.
pub fn slow_start_after_idle_finding(
    on: bool,
    carrier: CarrierName,
    congestion: &str,
) -> SlowStartAfterIdle {
    if !on {
        SlowStartAfterIdle::Off
    } else if carrier == CarrierName::Quic {
        SlowStartAfterIdle::NotTcp
    } else if congestion == "bbr" || congestion == crate::config::RATE_CONGESTION {
        // `rate` is QUIC's; the pool's TCP connections (auto's fallback) then run bbr.
        SlowStartAfterIdle::ExemptBbr
    } else {
        SlowStartAfterIdle::Harmful
    }
}

/// Reads the sysctl, logs what it means for the pool (a warning when it undoes the warm pool)
/// and sets the `longhaul_host_tcp_slow_start_after_idle` gauge. A value that cannot be read
/// (no `/proc`, another kernel) is logged at debug level and leaves the gauge absent.
pub fn check(carrier: CarrierName, congestion: &str) {
    match read_slow_start_after_idle() {
        Ok(on) => {
            crate::metrics::global().set_host_slow_start_after_idle(on);
            log_finding(
                slow_start_after_idle_finding(on, carrier, congestion),
                congestion,
            );
        }
        Err(e) => {
            tracing::debug!(sysctl = SLOW_START_AFTER_IDLE, error = %e, "cannot read the sysctl")
        }
    }
}

const FIX: &str = "install deploy/sysctl.d/90-longhaul.conf in /etc/sysctl.d/ and run \
                   `sysctl --system`, or `sysctl -w net.ipv4.tcp_slow_start_after_idle=0`";

fn log_finding(finding: SlowStartAfterIdle, congestion: &str) {
    match finding {
        SlowStartAfterIdle::Off => {
            tracing::debug!(
                sysctl = SLOW_START_AFTER_IDLE,
                value = 0,
                "warm windows kept"
            )
        }
        SlowStartAfterIdle::Harmful => tracing::warn!(
            sysctl = SLOW_START_AFTER_IDLE,
            value = 1,
            congestion,
            fix = FIX,
            "{SLOW_START_AFTER_IDLE} = 1: the kernel shrinks a pool connection's congestion \
             window back towards the initial window after it has been idle longer than its \
             retransmission timeout, so the first reply after a quiet period pays several \
             round trips of slow start again and the warm pool loses its purpose; fix: {FIX}"
        ),
        SlowStartAfterIdle::ExemptBbr => tracing::info!(
            sysctl = SLOW_START_AFTER_IDLE,
            value = 1,
            congestion,
            "{SLOW_START_AFTER_IDLE} = 1 does not reset bbr pool connections (Linux exempts \
             BBR), but it would reset them if bbr were unavailable and they fell back to the \
             default congestion control; to be safe: {FIX}"
        ),
        SlowStartAfterIdle::NotTcp => tracing::debug!(
            sysctl = SLOW_START_AFTER_IDLE,
            value = 1,
            "not used by the QUIC carrier"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_receive_buffer_errors_are_read_by_name() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
            Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
            Udp: 85876 0 1220 16025 1219 0\n\
            UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors\n\
            UdpLite: 0 0 0 0 7\n";
        assert_eq!(udp_rcvbuf_errors_v4(snmp), Some(1219));
        assert_eq!(udp_rcvbuf_errors_v4("Udp: InDatagrams\nUdp: 5\n"), None);
        let snmp6 = "Udp6InDatagrams                 \t12\nUdp6RcvbufErrors                \t3\n";
        assert_eq!(udp_rcvbuf_errors_v6(snmp6), Some(3));
        assert_eq!(udp_rcvbuf_errors_v6("Udp6InDatagrams 1\n"), None);
        // This process's namespace has the counter (it exists on every Linux since 2.6.x).
        assert!(read_udp_receive_buffer_errors().is_ok());
        assert!(read_udp_receive_buffer_errors_in(Path::new("/proc/thread-self/net")).is_ok());
    }

    #[test]
    fn a_namespace_s_count_adds_ipv6_to_ipv4_where_it_has_both() {
        let dir = std::env::temp_dir().join(format!("longhaul-host-net-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let snmp = "Udp: InDatagrams RcvbufErrors\nUdp: 100 7\n";
        std::fs::write(dir.join("snmp"), snmp).unwrap();
        assert_eq!(read_udp_receive_buffer_errors_in(&dir).unwrap(), 7);
        std::fs::write(dir.join("snmp6"), "Udp6RcvbufErrors 5\n").unwrap();
        assert_eq!(read_udp_receive_buffer_errors_in(&dir).unwrap(), 12);
        // Without the IPv4 counter there is no count, rather than a wrong one.
        std::fs::write(dir.join("snmp"), "Ip: Forwarding\nIp: 1\n").unwrap();
        let e = read_udp_receive_buffer_errors_in(&dir).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(read_udp_receive_buffer_errors_in(&dir).is_err());
    }

    #[test]
    fn only_a_loss_based_tcp_pool_is_harmed() {
        use SlowStartAfterIdle::*;
        let f = slow_start_after_idle_finding;
        assert_eq!(f(false, CarrierName::Tcp, "cubic"), Off);
        assert_eq!(f(false, CarrierName::Quic, "bbr"), Off);
        assert_eq!(f(true, CarrierName::Tcp, "cubic"), Harmful);
        assert_eq!(f(true, CarrierName::Tcp, "reno"), Harmful);
        assert_eq!(f(true, CarrierName::Tcp, "bbr"), ExemptBbr);
        // `rate` is QUIC's: the TCP+TLS fallback of auto runs bbr.
        assert_eq!(f(true, CarrierName::Auto, "rate"), ExemptBbr);
        assert_eq!(f(true, CarrierName::Quic, "cubic"), NotTcp);
    }

    #[test]
    fn sysctl_text_is_parsed_as_the_kernel_does() {
        assert_eq!(parse_bool("1\n"), Some(true));
        assert_eq!(parse_bool("0\n"), Some(false));
        assert_eq!(parse_bool(" 2 "), Some(true));
        assert_eq!(parse_bool(""), None);
        assert_eq!(parse_bool("yes"), None);
    }

    #[test]
    fn a_file_that_is_not_a_number_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("longhaul-host-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (one, bad) = (dir.join("one"), dir.join("bad"));
        std::fs::write(&one, "1\n").unwrap();
        std::fs::write(&bad, "x\n").unwrap();
        assert!(read_bool(&one).unwrap());
        let e = read_bool(&bad).unwrap_err();
        assert!(e.to_string().contains("bad"), "{e}");
        assert!(read_bool(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_gauge_shows_the_value() {
        crate::metrics::global().set_host_slow_start_after_idle(true);
        let text = crate::metrics::global().render().await;
        assert!(
            text.contains("longhaul_host_tcp_slow_start_after_idle{} 1\n"),
            "{text}"
        );
        crate::metrics::global().set_host_slow_start_after_idle(false);
        let text = crate::metrics::global().render().await;
        assert!(
            text.contains("longhaul_host_tcp_slow_start_after_idle{} 0\n"),
            "{text}"
        );
    }
}
