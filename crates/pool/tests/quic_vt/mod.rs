//! Crypto set-up shared by the virtual-time QUIC tests: a client and a server configuration
//! with one self-signed certificate, TLS 1.3 and the pool's ALPN, both on the given transport.

use std::sync::Arc;

use pool::tls::{ALPN, DEFAULT_SERVER_NAME};
use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{ClientConfig, ServerConfig, TransportConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Client and server configurations sharing the transport `t`; the server does not migrate.
pub fn configs(t: Arc<TransportConfig>) -> (ClientConfig, ServerConfig) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    let mut params =
        rcgen::CertificateParams::new(vec![DEFAULT_SERVER_NAME.to_string()]).expect("params");
    params.serial_number = Some(rcgen::SerialNumber::from(1u64));
    let cert = params.self_signed(&key).expect("certificate");
    let der: CertificateDer<'static> = cert.der().clone();
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.clone()).expect("root");
    let mut client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![ALPN.to_vec()];
    let mut cc = ClientConfig::new(Arc::new(
        QuicClientConfig::try_from(client).expect("QUIC client crypto"),
    ));
    cc.transport_config(t.clone());

    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_no_client_auth()
        .with_single_cert(vec![der], PrivateKeyDer::Pkcs8(key.serialize_der().into()))
        .expect("server certificate");
    server.alpn_protocols = vec![ALPN.to_vec()];
    let mut sc = ServerConfig::with_crypto(Arc::new(
        QuicServerConfig::try_from(server).expect("QUIC server crypto"),
    ));
    sc.transport_config(t);
    sc.migration(false);
    (cc, sc)
}
