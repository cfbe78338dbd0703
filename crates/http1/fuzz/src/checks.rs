//! Invariants of the HTTP/1 head parser and body framing, checked on arbitrary bytes by the fuzz
//! targets (`fuzz_targets/`) and, with the committed corpus and generated inputs, by the tests of
//! the http1 crate (`tests/fuzz_corpus.rs`, `tests/props.rs`), which include this file.
//!
//! Each check panics when an invariant breaks and returns normally otherwise (rejecting an input
//! is fine; rejecting it inconsistently, or accepting it in a way that changes its meaning
//! when forwarded, is not). The functions are synchronous: in-memory reads and writes never wait,
//! so the parser's futures complete at their first poll.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use http1::{
    BodyDecoder, BodyKind, OutFraming, RequestHead, DEFAULT_MAX_HEADER_BYTES, FORWARD_MAX_HEADERS,
};

/// Runs a future over in-memory I/O to completion.
pub fn run<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1000 {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
    panic!("a future over in-memory I/O did not complete");
}

/// A parsed request head re-encodes to bytes that parse to the same head (what the edge writes
/// is what it read), and its framing can be decided without a panic.
pub fn request_head(data: &[u8]) {
    let mut r = data;
    let mut buf = BytesMut::new();
    let Ok(Some(head)) = run(http1::read_request_head(
        &mut r,
        &mut buf,
        DEFAULT_MAX_HEADER_BYTES,
    )) else {
        return;
    };
    let _ = http1::request_body_kind(&head);
    let encoded = http1::encode_request_head(&head);
    let mut r = &encoded[..];
    let again = run(http1::read_request_head_limited(
        &mut r,
        &mut BytesMut::new(),
        http1::forwarded_head_limit(DEFAULT_MAX_HEADER_BYTES),
        FORWARD_MAX_HEADERS,
    ));
    match again {
        Ok(Some(again)) => assert_eq!(again, head, "re-encoded request head differs"),
        other => panic!("re-encoded request head does not parse: {other:?}"),
    }
}

/// The same for response heads, with every framing decision.
pub fn response_head(data: &[u8]) {
    let mut r = data;
    let mut buf = BytesMut::new();
    let Ok(head) = run(http1::read_response_head(
        &mut r,
        &mut buf,
        DEFAULT_MAX_HEADER_BYTES,
    )) else {
        return;
    };
    for method in ["GET", "HEAD", "CONNECT"] {
        let _ = http1::response_body_kind(method, &head);
    }
    let encoded = http1::encode_response_head(&head);
    let mut r = &encoded[..];
    let again = run(http1::read_response_head_limited(
        &mut r,
        &mut BytesMut::new(),
        http1::forwarded_head_limit(DEFAULT_MAX_HEADER_BYTES),
        FORWARD_MAX_HEADERS,
    ));
    match again {
        Ok(again) => assert_eq!(again, head, "re-encoded response head differs"),
        Err(e) => panic!("re-encoded response head does not parse: {e}"),
    }
}

/// Body framing: the first byte picks the framing (chunked, a length, or until the close), the
/// rest is the body's bytes. A body that decodes re-chunks to bytes that decode to the same data
/// and end exactly where the chunked framing says; a body that fails never leaves output that
/// decodes as complete (no truncated body that looks whole).
pub fn body(data: &[u8]) {
    let Some((&selector, input)) = data.split_first() else {
        return;
    };
    let kind = match selector % 4 {
        0 | 1 => BodyKind::Chunked,
        2 => BodyKind::Length(u64::from(selector / 4) * 3),
        _ => BodyKind::CloseDelimited,
    };
    let mut r = input;
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let result = run(http1::copy_body(
        kind,
        &mut r,
        &mut buf,
        &mut out,
        OutFraming::Chunked,
    ));
    let consumed = input.len() - r.len() - buf.len();
    let mut back = Vec::new();
    let mut rest = &out[..];
    let mut rest_buf = BytesMut::new();
    let decoded = run(http1::copy_body(
        BodyKind::Chunked,
        &mut rest,
        &mut rest_buf,
        &mut back,
        OutFraming::Raw,
    ));
    match result {
        Ok(n) => {
            assert_eq!(decoded.ok(), Some(n), "re-chunked body does not decode");
            assert!(
                rest.is_empty() && rest_buf.is_empty(),
                "bytes after the last chunk"
            );
            assert_eq!(back.len() as u64, n);
            if let BodyKind::Length(len) = kind {
                assert_eq!((n, consumed as u64), (len, len));
                assert_eq!(back, input[..consumed]);
            }
            if kind == BodyKind::CloseDelimited {
                assert_eq!(back, input);
            }
        }
        Err(_) => assert!(decoded.is_err(), "a failed body re-chunked as complete"),
    }
}

/// One request as seen by a parser: method, target, version, decoded body.
type Seen = (String, String, u8, Vec<u8>);

/// Reads requests from `data` the way the edge does and forwards each the way the edge does
/// (hop-by-hop fields and lengths removed, framing re-declared, body re-encoded); returns what
/// it saw and the forwarded bytes. Stops at the first request it would refuse.
fn forward(data: &[u8]) -> (Vec<Seen>, Vec<u8>) {
    let mut r = data;
    let mut buf = BytesMut::new();
    let mut seen = Vec::new();
    let mut forwarded = Vec::new();
    while let Ok(Some(head)) = run(http1::read_request_head(
        &mut r,
        &mut buf,
        DEFAULT_MAX_HEADER_BYTES,
    )) {
        let Ok(kind) = http1::request_body_kind(&head) else {
            break;
        };
        let mut out_head = RequestHead {
            minor: 1,
            ..head.clone()
        };
        http1::strip_hop_by_hop(&mut out_head.headers);
        http1::remove_header(&mut out_head.headers, "content-length");
        out_head.headers.extend(http1::framing_header(kind));
        let framing = match kind {
            BodyKind::Chunked => OutFraming::Chunked,
            _ => OutFraming::Raw,
        };
        let mut body = Vec::new();
        let mut encoded = Vec::new();
        let mut dec = BodyDecoder::new(kind);
        let complete = loop {
            match run(dec.next(&mut r, &mut buf)) {
                Ok(Some(piece)) => {
                    body.extend_from_slice(&piece);
                    run(http1::write_piece(&mut encoded, framing, piece)).expect("Vec write");
                }
                Ok(None) => break true,
                Err(_) => break false,
            }
        };
        if !complete {
            // Never forwarded as a complete request.
            break;
        }
        if framing == OutFraming::Chunked {
            encoded.extend_from_slice(b"0\r\n\r\n");
        }
        forwarded.extend_from_slice(&http1::encode_request_head(&out_head));
        forwarded.extend_from_slice(&encoded);
        seen.push((head.method, head.target, 1, body));
    }
    (seen, forwarded)
}

/// The framing the edge forwards is the framing it parsed: an origin parsing the forwarded bytes
/// sees exactly the requests the edge saw, with the same bodies and boundaries, and nothing
/// more (no input makes the origin see a request the edge did not, or a different body).
pub fn request_stream(data: &[u8]) {
    let (seen, forwarded) = forward(data);
    let mut r = &forwarded[..];
    let mut buf = BytesMut::new();
    let mut origin: Vec<Seen> = Vec::new();
    loop {
        let head = match run(http1::read_request_head_limited(
            &mut r,
            &mut buf,
            http1::forwarded_head_limit(DEFAULT_MAX_HEADER_BYTES),
            FORWARD_MAX_HEADERS,
        )) {
            Ok(Some(h)) => h,
            Ok(None) => break,
            Err(e) => panic!("the origin cannot parse what the edge forwarded: {e}"),
        };
        let kind = http1::request_body_kind(&head).expect("forwarded framing is valid");
        let mut dec = BodyDecoder::new(kind);
        let mut body = Vec::new();
        while let Some(piece) = run(dec.next(&mut r, &mut buf)).expect("forwarded body decodes") {
            body.extend_from_slice(&piece);
        }
        origin.push((head.method, head.target, head.minor, body));
    }
    assert_eq!(
        origin, seen,
        "the origin saw different requests than the edge"
    );
}
