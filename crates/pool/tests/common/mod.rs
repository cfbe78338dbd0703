//! Helpers shared by the pool's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pool::tls::TlsFiles;
use pool::{MuxStream, Server};
use tokio::io::AsyncWriteExt;
use tokio::net::UdpSocket;

/// Copies a stream back to its sender until the edge's FIN, then finishes it.
pub async fn echo(stream: MuxStream) {
    let (mut r, mut w) = tokio::io::split(stream);
    let _ = tokio::io::copy(&mut r, &mut w).await;
    let _ = w.shutdown().await;
}

/// Echoes every stream the server accepts ([`echo`]).
pub fn spawn_echo(server: Arc<Server>) {
    tokio::spawn(async move {
        while let Some(inc) = server.accept().await {
            tokio::spawn(echo(inc.stream));
        }
    });
}

/// `side`'s certificate and key and the CA, as `pool::tls::gen_keys` writes them in `dir`.
pub fn tls_files(dir: &Path, side: &str) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{side}.pem")),
        key: dir.join(format!("{side}.key")),
        ca: vec![dir.join("ca.pem")],
    }
}

/// Relays the UDP datagrams `sock` receives to `to`, one upstream socket per client address,
/// and the replies back, while `forward` is true; datagrams that arrive while it is false are
/// dropped in both directions (a black hole that can be switched on and off).
pub fn relay_udp(sock: Arc<UdpSocket>, to: SocketAddr, forward: Arc<AtomicBool>) {
    let f = forward;
    tokio::spawn(async move {
        let mut ups: std::collections::HashMap<SocketAddr, Arc<UdpSocket>> = Default::default();
        let mut buf = vec![0u8; 65536];
        loop {
            let Ok((n, from)) = sock.recv_from(&mut buf).await else {
                return;
            };
            if !f.load(Ordering::Relaxed) {
                continue;
            }
            let up = match ups.get(&from) {
                Some(u) => u.clone(),
                None => {
                    let u = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
                    u.connect(to).await.unwrap();
                    let (u2, s2, f2) = (u.clone(), sock.clone(), f.clone());
                    tokio::spawn(async move {
                        let mut b = vec![0u8; 65536];
                        while let Ok(n) = u2.recv(&mut b).await {
                            if f2.load(Ordering::Relaxed) {
                                let _ = s2.send_to(&b[..n], from).await;
                            }
                        }
                    });
                    ups.insert(from, u.clone());
                    u
                }
            };
            let _ = up.send(&buf[..n]).await;
        }
    });
}
