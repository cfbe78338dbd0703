//! Helpers shared by the pool's integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::Path;
use std::sync::Arc;

use pool::tls::TlsFiles;
use pool::{MuxStream, Server};
use tokio::io::AsyncWriteExt;

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
