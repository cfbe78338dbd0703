//! WebSocket through the pair with a real client and server (python3-websockets, installed by
//! scripts/install-deps): the opening handshake in absolute-form to the explicit proxy, the
//! origin's `101` relayed, then text and binary messages and a clean close over the byte
//! tunnel the stream became (RFC 9110 §7.8, RFC 6455). Interception on port 80 is covered by
//! `transparent.rs`, which runs the same client from inside a network namespace.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use common::*;

/// Debian's interpreter, where python3-websockets installs (a PATH `python3` may be another).
pub fn python() -> &'static str {
    if std::path::Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/websocket")
        .join(name)
}

/// The echo server, killed on drop.
struct Echo(Child, u16);

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn echo_server() -> Echo {
    let mut child = Command::new(python())
        .arg(script("ws_echo.py"))
        .args(["127.0.0.1", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .strip_prefix("READY ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!("the echo server did not start ({line:?}); is python3-websockets installed? (scripts/install-deps)")
        });
    Echo(child, port)
}

#[test]
fn websocket_through_the_explicit_proxy() {
    let echo = echo_server();
    let pair = start_pair("", &[]);
    let uri = format!("ws://127.0.0.1:{}/chat", echo.1);
    // `ws://` in absolute-form, and the same request with an `http://` target.
    for form in ["absolute".to_string(), uri.replacen("ws://", "http://", 1)] {
        let out = Command::new(python())
            .arg(script("ws_client.py"))
            .args(["127.0.0.1", &pair.edge_addr.port().to_string(), &uri, &form])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("WS-OK"),
            "{form}: {stdout}{}\nedge log:\n{}\nremote log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            pair.edge.log_text(),
            pair.remote.log_text()
        );
    }
    wait_log(&pair.edge, "status=101");
    wait_log(&pair.remote, "status=101");
}
