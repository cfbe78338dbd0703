//! The real-browser client: headless Chromium from Debian, fresh profile per load.
//!
//! The page load time is the Navigation Timing API's `loadEventEnd − navigationStart`, written
//! into the DOM by the page's own script ([`crate::workload::TIMING_SCRIPT`]) and read back from
//! `--dump-dom`. A load counts only if every object of the page arrived whole: the script also
//! lists each sub-resource's body size (Resource Timing), which [`check_objects`] compares with
//! the workload, because the load event fires even when sub-resources fail (a proxy's 502 page).
//! HTTPS trusts the run's server key through `--ignore-certificate-errors-spki-list` (Chromium's
//! switch for pinning a test key without touching the system trust store; it holds for QUIC
//! too). For the `direct-h3` system QUIC is enabled and forced for the bed's origins
//! (`--origin-to-force-quic-on=HOST:443,…`); otherwise it stays off.
//!
//! Chromium's own service traffic (sign-in, component updates, which the flags do not all stop)
//! bypasses the proxy and fails at once in the client namespace ([`SERVICE_HOSTS`]): the test bed
//! has no Internet, and through a proxy those requests would only add failing tunnels that, for
//! example, make a Squid child mark its parent dead.

use crate::workload::{Workload, MAX_BROWSER_SUBRESOURCES};
use anyhow::{bail, Context, Result};
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Deadline of one browser load, including browser start.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Chromium's fixed flags (no GPU, no QUIC, no background traffic).
pub const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=NetworkTimeServiceQuerying",
];

/// Host patterns of Chromium's own services that still call home with [`FLAGS`] (Chromium 156:
/// `accounts.google.com`, `update.googleapis.com`, `clients2.google.com`): they bypass the proxy
/// and resolve to nothing.
pub const SERVICE_HOSTS: [&str; 2] = ["*.google.com", "*.googleapis.com"];

/// Arguments of one load of `url` through `proxy` (a proxy URL: `http://a:p`, or `https://a:p`
/// for a proxy reached over TLS, to which Chromium speaks HTTP/2); `spki`: comma-separated key
/// pins of the servers (origins, HTTPS proxy) to trust; with `http3`, QUIC to every origin of
/// `resolve` on 443.
pub fn args(
    url: &str,
    profile_dir: &Path,
    proxy: Option<&str>,
    resolve: &[(String, IpAddr)],
    spki: Option<&str>,
    http3: bool,
) -> Vec<String> {
    let mut a: Vec<String> = FLAGS
        .iter()
        .filter(|f| !(http3 && **f == "--disable-quic"))
        .map(|s| s.to_string())
        .collect();
    if http3 {
        a.push("--enable-quic".into());
        let origins: Vec<String> = resolve.iter().map(|(h, _)| format!("{h}:443")).collect();
        a.push(format!("--origin-to-force-quic-on={}", origins.join(",")));
    }
    a.push(format!("--user-data-dir={}", profile_dir.display()));
    match proxy {
        Some(p) => a.push(format!("--proxy-server={p}")),
        None => a.push("--no-proxy-server".into()),
    }
    a.push(format!("--proxy-bypass-list={}", SERVICE_HOSTS.join(";")));
    let rules: Vec<String> = resolve
        .iter()
        .map(|(h, ip)| format!("MAP {h} {ip}"))
        .chain(SERVICE_HOSTS.iter().map(|h| format!("MAP {h} ~NOTFOUND")))
        .collect();
    a.push(format!("--host-resolver-rules={}", rules.join(",")));
    if let Some(s) = spki {
        a.push(format!("--ignore-certificate-errors-spki-list={s}"));
    }
    a.push(format!("--timeout={}", DEFAULT_TIMEOUT.as_millis()));
    a.push("--dump-dom".into());
    a.push(url.into());
    a
}

/// What the page's script reported: the load time and each sub-resource's body size.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// `loadEventEnd − navigationStart`, ms.
    pub plt_ms: f64,
    /// `(URL, body bytes)` per sub-resource fetched, in fetch order.
    pub resources: Vec<(String, u64)>,
}

const MARKER: &str = "<title>longhaul-plt[";

/// Extracts the page load time the page's script wrote (`<title>longhaul-plt[123]…</title>`).
pub fn parse_plt(dom: &str) -> Result<f64> {
    Ok(split_plt(dom)?.0)
}

/// The load time and the rest of the document after its closing `]`.
fn split_plt(dom: &str) -> Result<(f64, &str)> {
    let start = dom
        .find(MARKER)
        .context("page did not report its load time (load event never finished?)")?
        + MARKER.len();
    let end = dom[start..].find(']').context("truncated load time")? + start;
    let v: f64 = dom[start..end]
        .parse()
        .with_context(|| format!("bad load time {:?}", &dom[start..end]))?;
    if !(v > 0.0 && v.is_finite()) {
        bail!("load time {v} is not positive");
    }
    Ok((v, &dom[end + 1..]))
}

/// Extracts the load time and the sub-resources (`URL BYTES`, comma separated) that follow it.
pub fn parse_report(dom: &str) -> Result<Report> {
    let (plt_ms, rest) = split_plt(dom)?;
    let body = &rest[..rest
        .find("</title>")
        .context("unterminated resource list")?];
    let mut resources = Vec::new();
    for line in body.split(',').filter(|l| !l.trim().is_empty()) {
        let (url, bytes) = line
            .trim()
            .rsplit_once(' ')
            .with_context(|| format!("bad resource line {line:?}"))?;
        let bytes = bytes
            .parse()
            .with_context(|| format!("bad resource size in {line:?}"))?;
        resources.push((url.replace("&amp;", "&"), bytes));
    }
    Ok(Report { plt_ms, resources })
}

/// Fails unless every sub-resource of `w` (loaded over `scheme`) is in `r` with its exact size.
/// The error names how many were missing or short, and the first few. An entry of 0 bytes is a
/// fetch that failed before its body (with `Timing-Allow-Origin` sent, a response shows its
/// size): Chromium's net-log names the error. An object may have more than one entry, a failed
/// fetch beside a whole one that followed it, so one entry of the right size suffices.
pub fn check_objects(r: &Report, w: &Workload, scheme: &str) -> Result<()> {
    let expected = w.objects.len().saturating_sub(1);
    if expected > MAX_BROWSER_SUBRESOURCES {
        bail!(
            "{} has {expected} sub-resources, more than the {MAX_BROWSER_SUBRESOURCES} a page's \
             Resource Timing buffer holds: the Chromium client cannot account for them all",
            w.id
        );
    }
    let mut bad = Vec::new();
    for i in 1..w.objects.len() {
        let url = w.url(scheme, i);
        let want = w.objects[i].size;
        let got: Vec<u64> = r
            .resources
            .iter()
            .filter(|(u, _)| *u == url)
            .map(|(_, b)| *b)
            .collect();
        match got.as_slice() {
            [] => bad.push(format!("{url} (not fetched)")),
            g if g.contains(&want) => {}
            g => bad.push(format!("{url} ({g:?} of {want} bytes)")),
        }
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(3);
        bail!(
            "{n} of {expected} objects missing or incomplete although the load event fired: {}",
            bad.join(", ")
        );
    }
    Ok(())
}

/// Runs `cmd` (a Chromium invocation prepared by the caller) loading `w` over `scheme` and
/// returns the page load time, or an error if the page did not load whole.
pub fn run(mut cmd: Command, w: &Workload, scheme: &str) -> Result<f64> {
    let out = cmd.output().context("starting chromium")?;
    let dom = String::from_utf8_lossy(&out.stdout);
    let why = || {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err
            .lines()
            .filter(|l| l.contains("net::") || (l.contains("ERROR") && !l.contains("dbus")))
            .take(4)
            .collect();
        format!("chromium exit {}: {}", out.status, tail.join(" | "))
    };
    let report = parse_report(&dom).with_context(why)?;
    check_objects(&report, w, scheme).with_context(why)?;
    Ok(report.plt_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plt_is_read_from_the_dumped_dom() {
        let dom = "<html><head><title>longhaul-plt[1234]</title></head><body></body></html>";
        assert_eq!(parse_plt(dom).unwrap(), 1234.0);
        assert!(parse_plt("<html></html>").is_err());
        assert!(parse_plt("<title>longhaul-plt[0]</title>").is_err());
        // The script's own source text does not count.
        assert!(parse_plt(crate::workload::TIMING_SCRIPT).is_err());
    }

    fn yahoo() -> Workload {
        crate::workload::generate_all()
            .into_iter()
            .find(|w| w.id == "yahoo")
            .unwrap()
    }

    /// The DOM a whole load of `w` dumps, with `edit` applied to the resource lines.
    fn dom(w: &Workload, edit: impl Fn(&mut Vec<(String, u64)>)) -> String {
        let mut res: Vec<(String, u64)> = (1..w.objects.len())
            .map(|i| (w.url("http", i), w.objects[i].size))
            .collect();
        edit(&mut res);
        let list: Vec<String> = res.iter().map(|(u, b)| format!(" {u} {b}")).collect();
        format!(
            "<head><title>longhaul-plt[1500]{}</title></head>",
            list.join(",")
        )
    }

    #[test]
    fn a_whole_page_passes_and_a_failed_object_fails_the_load() {
        let w = yahoo();
        let r = parse_report(&dom(&w, |_| {})).unwrap();
        assert_eq!(r.plt_ms, 1500.0);
        assert_eq!(r.resources.len(), w.objects.len() - 1);
        check_objects(&r, &w, "http").unwrap();
        // An extra empty entry beside an object's whole fetch does not fail the load.
        let r2 = parse_report(&dom(&w, |res| res.insert(5, (res[5].0.clone(), 0)))).unwrap();
        check_objects(&r2, &w, "http").unwrap();
        // Loaded over the other scheme: every URL differs.
        let e = check_objects(&r, &w, "https").unwrap_err().to_string();
        assert!(e.starts_with("29 of 29 objects"), "{e}");
        // A proxy's 502 page in place of one object (same URL, another size) and one object
        // never fetched; favicon-like extras are ignored.
        let r = parse_report(&dom(&w, |res| {
            res[3].1 = 3409;
            res.remove(7);
            res.push(("http://www.yahoo.test/favicon.ico".into(), 0));
        }))
        .unwrap();
        let e = check_objects(&r, &w, "http").unwrap_err().to_string();
        assert!(
            e.starts_with("2 of 29 objects missing or incomplete"),
            "{e}"
        );
        assert!(
            e.contains(&format!("{} ([3409] of", w.url("http", 4))),
            "{e}"
        );
        assert!(
            e.contains(&format!("{} (not fetched)", w.url("http", 8))),
            "{e}"
        );
        // No resource list at all (an older page) is a failure too, not a pass.
        let r = parse_report("<title>longhaul-plt[900]</title>").unwrap();
        assert!(check_objects(&r, &w, "http").is_err());
        assert!(parse_report("<title>longhaul-plt[900] http://a/x nan</title>").is_err());
    }

    #[test]
    fn pages_beyond_the_resource_timing_buffer_are_refused() {
        let mut w = yahoo();
        let img = w.objects.last().unwrap().clone();
        while w.objects.len() <= MAX_BROWSER_SUBRESOURCES + 1 {
            w.objects.push(img.clone());
        }
        let r = Report {
            plt_ms: 1.0,
            resources: vec![],
        };
        let e = check_objects(&r, &w, "http").unwrap_err().to_string();
        assert!(e.contains("Resource Timing buffer"), "{e}");
    }

    #[test]
    fn arguments_pick_the_proxy_or_the_resolver_rules() {
        let a = args(
            "http://a.test/",
            Path::new("/tmp/p"),
            Some("http://10.77.1.1:3128"),
            &[],
            None,
            false,
        );
        assert!(a.contains(&"--proxy-server=http://10.77.1.1:3128".to_string()));
        assert!(a.contains(&"--disable-quic".to_string()));
        assert!(!a.iter().any(|x| x.contains("force-quic")));
        let a = args(
            "https://a.test/",
            Path::new("/tmp/p"),
            None,
            &[("a.test".into(), "10.77.3.10".parse().unwrap())],
            Some("abc="),
            false,
        );
        assert!(a.contains(
            &"--host-resolver-rules=MAP a.test 10.77.3.10,MAP *.google.com ~NOTFOUND,\
              MAP *.googleapis.com ~NOTFOUND"
                .to_string()
        ));
        assert!(a.contains(&"--proxy-bypass-list=*.google.com;*.googleapis.com".to_string()));
        assert!(a.contains(&"--ignore-certificate-errors-spki-list=abc=".to_string()));
        assert_eq!(a.last().unwrap(), "https://a.test/");
        // direct-h3: QUIC on, forced for every origin, the same key pinned.
        let hosts = [
            ("a.test".to_string(), "10.77.3.10".parse().unwrap()),
            ("b.test".to_string(), "10.77.3.11".parse().unwrap()),
        ];
        let a = args(
            "https://a.test/",
            Path::new("/tmp/p"),
            None,
            &hosts,
            Some("abc="),
            true,
        );
        assert!(!a.contains(&"--disable-quic".to_string()));
        assert!(a.contains(&"--enable-quic".to_string()));
        assert!(a.contains(&"--origin-to-force-quic-on=a.test:443,b.test:443".to_string()));
        assert!(a.contains(&"--ignore-certificate-errors-spki-list=abc=".to_string()));
        assert!(a.contains(&"--no-proxy-server".to_string()));
    }
}
