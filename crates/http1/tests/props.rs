//! Property tests of the HTTP/1 framing: for generated request streams (several requests with
//! tricky framing fields, chunked or fixed bodies, line-ending and version variants, then a few
//! random byte mutations), the requests an origin parses from what the edge forwards are exactly
//! the requests the edge parsed (same heads, bodies and boundaries); heads re-encode to
//! themselves; bodies re-chunk to the same bytes. The invariants are the fuzz targets'
//! (`fuzz/src/checks.rs`).

#[path = "../fuzz/src/checks.rs"]
mod checks;

use proptest::prelude::*;

/// Header lines that decide or disturb framing, valid and not.
const FIELDS: &[&[u8]] = &[
    b"Content-Length: {n}",
    b"Content-Length: {n}, {n}",
    b"Content-Length: +{n}",
    b"Content-Length: {n}\r\nContent-Length: {n}",
    b"Transfer-Encoding: chunked",
    b"Transfer-Encoding: Chunked ",
    b"Transfer-Encoding: gzip, chunked",
    b"Transfer-Encoding: chunked, gzip",
    b"Transfer-Encoding: \xffchunked",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
    b"Transfer-Encoding:",
    b"Connection: close, content-length",
    b"Connection: transfer-encoding",
    b"Connection: keep-alive, upgrade\r\nUpgrade: websocket",
    b"Expect: 100-continue",
    b"X-A: b",
    b"X-Obs: caf\xe9",
    b"Host: a.example",
];

fn request() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(vec!["GET", "POST", "PUT", "HEAD", "OPTIONS", "TRACE"]),
        prop::sample::select(vec!["http://a.example/x", "/y?z", "ws://a/chat", "*"]),
        prop::sample::select(vec!["1.1", "1.0", "1.2"]),
        any::<bool>(),
        prop::collection::vec(prop::sample::select(FIELDS.to_vec()), 0..4),
        prop::collection::vec(any::<u8>(), 0..40),
        prop::collection::vec(1usize..12, 0..4),
        prop::sample::select(vec!["", ";e=1", " ;e", "+", " "]),
    )
        .prop_map(|(method, target, version, lf, fields, body, splits, ext)| {
            let eol: &[u8] = if lf { b"\n" } else { b"\r\n" };
            let n = body.len().to_string();
            let mut r = format!("{method} {target} HTTP/{version}").into_bytes();
            r.extend_from_slice(eol);
            let mut chunked = false;
            for f in &fields {
                let f = replace_n(f, n.as_bytes());
                chunked |= f.to_ascii_lowercase().windows(7).any(|w| w == b"chunked");
                r.extend_from_slice(&f);
                r.extend_from_slice(eol);
            }
            r.extend_from_slice(eol);
            if chunked {
                let mut rest = &body[..];
                for s in splits {
                    let s = s.min(rest.len());
                    if s == 0 {
                        break;
                    }
                    let (piece, tail) = rest.split_at(s);
                    let (pre, post) = if ext == "+" || ext == " " {
                        (ext, "")
                    } else {
                        ("", ext)
                    };
                    r.extend_from_slice(format!("{pre}{s:x}{post}\r\n").as_bytes());
                    r.extend_from_slice(piece);
                    r.extend_from_slice(b"\r\n");
                    rest = tail;
                }
                if !rest.is_empty() {
                    r.extend_from_slice(format!("{:x}\r\n", rest.len()).as_bytes());
                    r.extend_from_slice(rest);
                    r.extend_from_slice(b"\r\n");
                }
                r.extend_from_slice(b"0\r\n\r\n");
            } else {
                r.extend_from_slice(&body);
            }
            r
        })
}

/// `template` with every `{n}` replaced by `n`, byte for byte (non-UTF-8 bytes kept).
fn replace_n(template: &[u8], n: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < template.len() {
        if template[i..].starts_with(b"{n}") {
            out.extend_from_slice(n);
            i += 3;
        } else {
            out.push(template[i]);
            i += 1;
        }
    }
    out
}

/// Requests back to back, then up to three byte mutations (replace, insert, delete).
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(request(), 1..4),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 0..3),
    )
        .prop_map(|(reqs, muts)| {
            let mut bytes = reqs.concat();
            for (at, op, b) in muts {
                if bytes.is_empty() {
                    break;
                }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] = b,
                    1 => bytes.insert(i, b),
                    _ => {
                        bytes.remove(i);
                    }
                }
            }
            bytes
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_origin_sees_the_requests_the_edge_parsed(bytes in stream()) {
        checks::request_stream(&bytes);
    }

    #[test]
    fn heads_re_encode_to_themselves(bytes in stream()) {
        checks::request_head(&bytes);
        let mut res = b"HTTP/1.1 200 OK\r\n".to_vec();
        res.extend_from_slice(bytes.splitn(2, |&b| b == b'\n').nth(1).unwrap_or_default());
        checks::response_head(&res);
    }

    #[test]
    fn bodies_re_chunk_to_the_same_bytes(selector in any::<u8>(), bytes in stream()) {
        // The part after the first head: chunked or fixed bodies and what follows them.
        let body = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(&bytes[..], |p| &bytes[p + 4..]);
        let mut input = vec![selector];
        input.extend_from_slice(body);
        checks::body(&input);
    }
}
