//! Transparent interception with a real iptables REDIRECT rule, inside a private network
//! namespace (root, or an unprivileged user namespace): port 80 is parsed as HTTP, another
//! port is tunnelled, a Host header naming another address is refused, and a real WebSocket
//! client (python3-websockets) reaches a WebSocket echo server on port 80 through the
//! interception: the upgrade is relayed and the connection becomes a tunnel (RFC 9110 §7.8).

mod common;

use std::process::Command;

const SCRIPT: &str = r#"
set -eu
cd "$WORK"
ip link set lo up
ip addr add 10.99.0.1/32 dev lo
ip addr add 10.99.0.2/32 dev lo
ip addr add 10.99.0.3/32 dev lo
# Connections from the "client" address to ports 80 and 8080 go to the edge's interception port.
iptables -t nat -A OUTPUT -s 10.99.0.2 -p tcp -m multiport --dports 80,8080 -j REDIRECT --to-ports 3129
mkdir -p www tmp
head -c 300000 /dev/urandom > www/file
cat > nginx.conf <<EOF
user root root;
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 64; }
http {
    access_log off;
    client_body_temp_path $WORK/tmp; proxy_temp_path $WORK/tmp; fastcgi_temp_path $WORK/tmp;
    uwsgi_temp_path $WORK/tmp; scgi_temp_path $WORK/tmp;
    server { listen 10.99.0.1:80; listen 10.99.0.1:8080; root $WORK/www; }
}
EOF
nginx -e "$WORK/nginx-error.log" -p "$WORK" -c "$WORK/nginx.conf" > nginx.out 2>&1 &
NGINX=$!
"$PYTHON" "$WS_DIR/ws_echo.py" 10.99.0.3 80 > ws-echo.out 2>&1 &
WS=$!
"$REMOTE_BIN" > remote.log 2>&1 &
REMOTE=$!
"$EDGE_BIN" --transparent 127.0.0.1:3129 > edge.log 2>&1 &
EDGE=$!
trap 'kill $EDGE $REMOTE $NGINX $WS 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  grep -q "pool connected" edge.log && break
  sleep 0.1
done
grep -q "pool connected" edge.log
curl -sS --max-time 20 --interface 10.99.0.2 -o got80 http://10.99.0.1/file
cmp got80 www/file
curl -sS --max-time 20 --interface 10.99.0.2 -o got8080 http://10.99.0.1:8080/file
cmp got8080 www/file
code=$(curl -sS --max-time 20 --interface 10.99.0.2 -o /dev/null -w '%{http_code}' -H 'Host: 10.99.0.9' http://10.99.0.1/file)
test "$code" = 403
grep -q 'method="GET" target="/file"' edge.log
grep -q 'method="TUNNEL" target="10.99.0.1:8080"' edge.log
for _ in $(seq 1 100); do grep -q READY ws-echo.out && break; sleep 0.1; done
"$PYTHON" "$WS_DIR/ws_client.py" 10.99.0.3 80 ws://10.99.0.3/chat origin 10.99.0.2 | grep -q WS-OK
grep -q 'method="GET" target="/chat" status=101' edge.log
echo TRANSPARENT-OK
"#;

#[test]
fn redirected_connections_are_proxied() {
    let usable = Command::new("unshare")
        .args([
            "--net",
            "--map-root-user",
            "--",
            "iptables",
            "-t",
            "nat",
            "-S",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !usable {
        if std::env::var("LONGHAUL_REQUIRE_NETNS").as_deref() == Ok("1") {
            panic!("network namespaces with iptables are required (LONGHAUL_REQUIRE_NETNS=1) but unavailable");
        }
        eprintln!("SKIP redirected_connections_are_proxied: no network namespace with iptables available (needs root or user namespaces)");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let o = Command::new("unshare")
        .args(["--net", "--map-root-user", "--", "bash", "-c", SCRIPT])
        .env("WORK", work.path())
        .env("EDGE_BIN", common::edge_bin())
        .env("REMOTE_BIN", common::remote_bin())
        .env(
            "PYTHON",
            if std::path::Path::new("/usr/bin/python3").exists() {
                "/usr/bin/python3"
            } else {
                "python3"
            },
        )
        .env(
            "WS_DIR",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/websocket"),
        )
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let log = |f: &str| std::fs::read_to_string(work.path().join(f)).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("TRANSPARENT-OK"),
        "stdout: {}\nstderr: {}\nedge.log:\n{}\nremote.log:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        log("edge.log"),
        log("remote.log")
    );
}
