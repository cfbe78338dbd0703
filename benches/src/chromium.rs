//! The real-browser client: headless Chromium from Debian, fresh profile per load.
//!
//! The page load time is the Navigation Timing API's `loadEventEnd − navigationStart`, written
//! into the DOM by the page's own script ([`crate::workload::TIMING_SCRIPT`]) and read back from
//! `--dump-dom`. HTTPS trusts the run's server key through `--ignore-certificate-errors-spki-list`
//! (Chromium's switch for pinning a test key without touching the system trust store).

use anyhow::{bail, Context, Result};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Deadline of one browser load, including browser start.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Chromium's fixed flags (no GPU, no QUIC, no background traffic).
pub const FLAGS: [&str; 8] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Arguments of one load of `url`.
pub fn args(
    url: &str,
    profile_dir: &Path,
    proxy: Option<SocketAddr>,
    resolve: &[(String, IpAddr)],
    spki: Option<&str>,
) -> Vec<String> {
    let mut a: Vec<String> = FLAGS.iter().map(|s| s.to_string()).collect();
    a.push(format!("--user-data-dir={}", profile_dir.display()));
    match proxy {
        Some(p) => a.push(format!("--proxy-server=http://{p}")),
        None => a.push("--no-proxy-server".into()),
    }
    if !resolve.is_empty() {
        let rules: Vec<String> = resolve
            .iter()
            .map(|(h, ip)| format!("MAP {h} {ip}"))
            .collect();
        a.push(format!("--host-resolver-rules={}", rules.join(",")));
    }
    if let Some(s) = spki {
        a.push(format!("--ignore-certificate-errors-spki-list={s}"));
    }
    a.push(format!("--timeout={}", DEFAULT_TIMEOUT.as_millis()));
    a.push("--dump-dom".into());
    a.push(url.into());
    a
}

/// Extracts the page load time the page's script wrote (`<pre id="longhaul-plt">[123]</pre>`).
pub fn parse_plt(dom: &str) -> Result<f64> {
    let marker = "id=\"longhaul-plt\">[";
    let start = dom
        .find(marker)
        .context("page did not report its load time (load event never finished?)")?
        + marker.len();
    let end = dom[start..].find(']').context("truncated load time")? + start;
    let v: f64 = dom[start..end]
        .parse()
        .with_context(|| format!("bad load time {:?}", &dom[start..end]))?;
    if !(v > 0.0 && v.is_finite()) {
        bail!("load time {v} is not positive");
    }
    Ok(v)
}

/// Runs `cmd` (a Chromium invocation prepared by the caller) and returns the page load time.
pub fn run(mut cmd: Command) -> Result<f64> {
    let out = cmd.output().context("starting chromium")?;
    let dom = String::from_utf8_lossy(&out.stdout);
    parse_plt(&dom).with_context(|| {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("ERROR") || l.contains("net::"))
            .take(3)
            .collect();
        format!("chromium exit {}: {}", out.status, tail.join(" | "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plt_is_read_from_the_dumped_dom() {
        let dom = "<html><body><div></div><pre id=\"longhaul-plt\">[1234]</pre></body></html>";
        assert_eq!(parse_plt(dom).unwrap(), 1234.0);
        assert!(parse_plt("<html></html>").is_err());
        assert!(parse_plt("<pre id=\"longhaul-plt\">[0]</pre>").is_err());
        // The script's own source text does not count.
        assert!(parse_plt(crate::workload::TIMING_SCRIPT).is_err());
    }

    #[test]
    fn arguments_pick_the_proxy_or_the_resolver_rules() {
        let a = args(
            "http://a.test/",
            Path::new("/tmp/p"),
            Some("10.77.1.1:3128".parse().unwrap()),
            &[],
            None,
        );
        assert!(a.contains(&"--proxy-server=http://10.77.1.1:3128".to_string()));
        assert!(a.contains(&"--disable-quic".to_string()));
        let a = args(
            "https://a.test/",
            Path::new("/tmp/p"),
            None,
            &[("a.test".into(), "10.77.3.10".parse().unwrap())],
            Some("abc="),
        );
        assert!(a.contains(&"--host-resolver-rules=MAP a.test 10.77.3.10".to_string()));
        assert!(a.contains(&"--ignore-certificate-errors-spki-list=abc=".to_string()));
        assert_eq!(a.last().unwrap(), "https://a.test/");
    }
}
