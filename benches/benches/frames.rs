//! Frame encode/decode throughput, and the session's send/receive path end to
//! end (framing, credit, buffering) without any I/O.
// criterion's macros generate undocumented public functions.
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mux::frame::{Data, Frame, Window, MAX_PAYLOAD_LEN};
use mux::{Config, Kind, Policy, Read, Role, Session};

const FRAME: usize = 16 * 1024;
const FRAMES: usize = 64;

fn encode_decode(c: &mut Criterion) {
    let payload = vec![0xa5u8; FRAME];
    let mut g = c.benchmark_group("frames");
    g.throughput(Throughput::Bytes((FRAME * FRAMES) as u64));
    g.bench_function("encode_data_16k", |b| {
        let mut out = Vec::with_capacity((FRAME + 16) * FRAMES);
        b.iter(|| {
            out.clear();
            for i in 0..FRAMES as u64 {
                Data::encode_parts(&mut out, 100 + i, black_box(&payload), false);
            }
            black_box(out.len())
        })
    });
    let mut wire = BytesMut::new();
    for i in 0..FRAMES as u64 {
        Data::encode_parts(&mut wire, 100 + i, &payload, false);
    }
    g.bench_function("decode_data_16k", |b| {
        b.iter(|| {
            let mut buf = wire.clone();
            let mut n = 0;
            while let Ok(Some(f)) = Frame::decode(&mut buf, MAX_PAYLOAD_LEN) {
                if let Frame::Data(d) = f {
                    n += d.data.len();
                }
            }
            black_box(n)
        })
    });
    g.finish();

    let mut g = c.benchmark_group("control_frames");
    const N: u64 = 1024;
    g.throughput(Throughput::Elements(N));
    g.bench_function("encode_window", |b| {
        let mut out = Vec::with_capacity(16 * N as usize);
        b.iter(|| {
            out.clear();
            for i in 0..N {
                Window {
                    stream: 1000 + i,
                    increment: 65536,
                }
                .encode(&mut out);
            }
            black_box(out.len())
        })
    });
    let mut wire = BytesMut::new();
    for i in 0..N {
        Window {
            stream: 1000 + i,
            increment: 65536,
        }
        .encode(&mut wire);
    }
    g.bench_function("decode_window", |b| {
        b.iter(|| {
            let mut buf = wire.clone();
            let mut n = 0u64;
            while let Ok(Some(Frame::Window(w))) = Frame::decode(&mut buf, MAX_PAYLOAD_LEN) {
                n += u64::from(w.increment);
            }
            black_box(n)
        })
    });
    g.finish();
}

/// Edge writes, frames, remote parses and the application reads: bytes per
/// second through both sessions, for several write sizes.
fn session_path(c: &mut Criterion) {
    let mut g = c.benchmark_group("session_path");
    const TOTAL: usize = 1 << 20;
    g.throughput(Throughput::Bytes(TOTAL as u64));
    for write in [1024usize, 16 * 1024, 64 * 1024] {
        g.bench_with_input(
            BenchmarkId::new("send_transmit_input_read", write),
            &write,
            |b, &write| {
                let t = Instant::now();
                let cfg = Config::for_link(Duration::from_millis(130), 100_000_000);
                let mut edge = Session::new(Role::Edge, 5, cfg.clone(), Policy::LeastOutstanding);
                let mut remote = Session::new(Role::Remote, 5, cfg, Policy::LeastOutstanding);
                let e = edge.add_connection(t);
                let r = remote.add_connection(t);
                let mut wire = Vec::new();
                edge.poll_transmit(e, usize::MAX, &mut wire);
                remote.handle_input(r, &wire, t);
                wire.clear();
                remote.poll_transmit(r, usize::MAX, &mut wire);
                edge.handle_input(e, &wire, t);
                let chunk = vec![7u8; write];
                let mut rbuf = vec![0u8; 64 * 1024];
                b.iter(|| {
                    let id = edge.open(Kind::Tunnel, "bench:1", b"", false).unwrap();
                    let mut sent = 0;
                    let mut got = 0;
                    while got < TOTAL {
                        while sent < TOTAL {
                            let n = edge.send(id, &chunk[..write.min(TOTAL - sent)]).unwrap();
                            if n == 0 {
                                break;
                            }
                            sent += n;
                        }
                        wire.clear();
                        edge.poll_transmit(e, 256 * 1024, &mut wire);
                        remote.handle_input(r, &wire, t);
                        while let Read::Data(n) = remote.read(id, &mut rbuf).unwrap() {
                            got += n;
                        }
                        // Credit back to the edge.
                        wire.clear();
                        remote.poll_transmit(r, usize::MAX, &mut wire);
                        edge.handle_input(e, &wire, t);
                    }
                    edge.reset(id, mux::ErrorCode::CANCEL);
                    edge.release(id);
                    wire.clear();
                    edge.poll_transmit(e, usize::MAX, &mut wire);
                    remote.handle_input(r, &wire, t);
                    remote.release(id);
                    while edge.poll_event().is_some() {}
                    while remote.poll_event().is_some() {}
                    black_box(got)
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, encode_decode, session_path);
criterion_main!(benches);
