//! The veth bed reads each node's UDP receive-buffer drops from that node's own namespace (the
//! counter every offered-load point records): datagrams dropped at a full socket in the edge's
//! namespace count there and nowhere else.
//!
//! Needs root (network namespaces) and `ip`; skips loudly otherwise, and fails instead of
//! skipping when LONGHAUL_REQUIRE_NETNS=1.

mod common;

use longhaul_benches::bed::{Bed, Node, VethBed};
use std::net::UdpSocket;

const SENT: u64 = 2000;
const NODES: [Node; 4] = [Node::Client, Node::Edge, Node::Remote, Node::Origin];

#[test]
fn drops_at_a_full_socket_count_in_that_node_only() {
    let test = "drops_at_a_full_socket_count_in_that_node_only";
    if !common::is_root() {
        return common::skip(test, "not root (network namespaces need CAP_NET_ADMIN)");
    }
    if !std::path::Path::new("/usr/sbin/ip").exists() && !std::path::Path::new("/sbin/ip").exists()
    {
        return common::skip(test, "ip (iproute2) is not installed");
    }
    let bed = VethBed::up().expect("veth bed");
    let count = |n: Node| {
        bed.udp_receive_buffer_errors(n)
            .unwrap_or_else(|| panic!("no UDP drop count for {n:?}"))
    };
    let before: Vec<u64> = NODES.iter().map(|&n| count(n)).collect();

    // A socket in the edge's namespace that never reads, and a sender beside it on loopback:
    // the receive buffer (kernel default, well under SENT datagrams of 1000 bytes) fills and
    // the kernel drops the rest as it delivers them.
    let sent = bed
        .run_in(Node::Edge, || {
            let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = rx.local_addr().unwrap();
            let mut sent = 0u64;
            for _ in 0..SENT {
                if tx.send_to(&[7u8; 1000], to).is_ok() {
                    sent += 1;
                }
            }
            drop(rx);
            sent
        })
        .expect("running in the edge's namespace");
    assert_eq!(sent, SENT, "loopback sends failed");

    let after: Vec<u64> = NODES.iter().map(|&n| count(n)).collect();
    for (i, n) in NODES.iter().enumerate() {
        let grew = after[i] - before[i];
        if *n == Node::Edge {
            assert!(
                grew >= SENT / 2,
                "edge counted {grew} drops of {SENT} datagrams sent to a socket that never read"
            );
        } else {
            assert_eq!(grew, 0, "{n:?} counted the edge's drops");
        }
    }
}
