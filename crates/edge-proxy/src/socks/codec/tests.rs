use proptest::prelude::*;

use super::*;

fn req(command: Command, addr: Addr, port: u16) -> Request {
    Request {
        command,
        addr,
        port,
    }
}

#[test]
fn greeting_table() {
    let cases: &[(&[u8], Parsed<Greeting>)] = &[
        (b"", Ok(None)),
        (b"\x05", Ok(None)),
        (b"\x05\x02\x00", Ok(None)),
        (
            b"\x05\x02\x00\x02",
            Ok(Some((
                Greeting {
                    methods: vec![Method::NO_AUTH, Method::USER_PASSWORD],
                },
                4,
            ))),
        ),
        (b"\x04\x01\x00", Err(Malformed::Version(4, 5))),
        // An HTTP request on the SOCKS port.
        (b"GET / HTTP/1.1\r\n", Err(Malformed::Version(b'G', 5))),
        (b"\x05\x00", Err(Malformed::NoMethods)),
    ];
    for (bytes, want) in cases {
        assert_eq!(&parse_greeting(bytes), want, "{bytes:?}");
    }
}

#[test]
fn credentials_table() {
    let ok = Credentials {
        user: b"al".to_vec(),
        password: b"pw!".to_vec(),
    };
    let cases: &[(&[u8], Parsed<Credentials>)] = &[
        (b"", Ok(None)),
        (b"\x01\x02a", Ok(None)),
        (b"\x01\x02al", Ok(None)),
        (b"\x01\x02al\x03pw", Ok(None)),
        (b"\x01\x02al\x03pw!", Ok(Some((ok.clone(), 8)))),
        (b"\x01\x02al\x03pw!extra", Ok(Some((ok, 8)))),
        (b"\x05\x02al\x03pw!", Err(Malformed::Version(5, 1))),
        (b"\x01\x00\x03pw!", Err(Malformed::EmptyField("user name"))),
        (b"\x01\x02al\x00", Err(Malformed::EmptyField("password"))),
    ];
    for (bytes, want) in cases {
        assert_eq!(&parse_credentials(bytes), want, "{bytes:?}");
    }
    // The longest fields a length byte allows are accepted.
    let long = Credentials {
        user: vec![b'u'; 255],
        password: vec![0xff; 255],
    };
    let b = encode_credentials(&long);
    assert_eq!(b.len(), MAX_MESSAGE);
    assert_eq!(parse_credentials(&b), Ok(Some((long, MAX_MESSAGE))));
    // Debug never shows the password.
    assert!(!format!("{:?}", parse_credentials(&b)).contains("\\xff"));
}

#[test]
fn request_table() {
    let v4 = req(Command::CONNECT, Addr::V4(Ipv4Addr::new(192, 0, 2, 7)), 443);
    let v6 = req(
        Command::CONNECT,
        Addr::V6("2001:db8::1".parse().unwrap()),
        80,
    );
    let name = req(Command::CONNECT, Addr::Domain("far-only.test".into()), 8080);
    let cases: &[(&[u8], Parsed<Request>)] = &[
        (b"", Ok(None)),
        (b"\x05\x01\x00", Ok(None)),
        (b"\x05\x01\x00\x01\xc0\x00\x02", Ok(None)),
        (b"\x05\x01\x00\x01\xc0\x00\x02\x07\x01", Ok(None)),
        (
            b"\x05\x01\x00\x01\xc0\x00\x02\x07\x01\xbb",
            Ok(Some((v4, 10))),
        ),
        (
            b"\x05\x01\x00\x04\x20\x01\x0d\xb8\0\0\0\0\0\0\0\0\0\0\0\x01\x00\x50",
            Ok(Some((v6, 22))),
        ),
        (
            b"\x05\x01\x00\x03\x0dFar-Only.TEST\x1f\x90",
            Ok(Some((name, 20))),
        ),
        // A truncated name.
        (b"\x05\x01\x00\x03\x0dfar-only", Ok(None)),
        // BIND and UDP ASSOCIATE parse; the caller answers them.
        (
            b"\x05\x02\x00\x01\x7f\x00\x00\x01\x00\x50",
            Ok(Some((
                req(Command::BIND, Addr::V4(Ipv4Addr::LOCALHOST), 80),
                10,
            ))),
        ),
        (
            b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x35",
            Ok(Some((
                req(Command::UDP_ASSOCIATE, Addr::V4(Ipv4Addr::UNSPECIFIED), 53),
                10,
            ))),
        ),
        (b"\x04\x01\x00\x01", Err(Malformed::Version(4, 5))),
        (b"\x05\x01\x01\x01", Err(Malformed::Reserved(1))),
        (b"\x05\x01\x00\x02", Err(Malformed::AddressType(2))),
        (b"\x05\x01\x00\x05\x00\x00", Err(Malformed::AddressType(5))),
        (
            b"\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x00",
            Err(Malformed::PortZero),
        ),
        (
            b"\x05\x01\x00\x03\x00\x00\x50",
            Err(Malformed::Domain("empty".into())),
        ),
        (
            b"\x05\x01\x00\x03\x04a b.\x00\x50",
            Err(Malformed::Domain(
                "byte 0x20 is not allowed in a host name".into(),
            )),
        ),
    ];
    for (bytes, want) in cases {
        assert_eq!(&parse_request(bytes), want, "{bytes:?}");
    }
}

#[test]
fn over_long_domain_is_refused_and_the_longest_accepted() {
    let at = |n: usize| {
        let mut b = vec![5, 1, 0, atyp::DOMAIN, n as u8];
        b.extend(std::iter::repeat_n(b'a', n));
        b.extend_from_slice(&443u16.to_be_bytes());
        b
    };
    let ok = parse_request(&at(MAX_DOMAIN)).unwrap().unwrap();
    assert_eq!(ok.1, 4 + 1 + MAX_DOMAIN + 2);
    for n in [254, 255] {
        assert_eq!(
            parse_request(&at(n)),
            Err(Malformed::Domain(format!("{n} bytes, at most 253")))
        );
    }
}

#[test]
fn authorities_are_connect_targets() {
    let a = |addr, port| req(Command::CONNECT, addr, port).authority().target();
    assert_eq!(a(Addr::V4(Ipv4Addr::new(10, 1, 2, 3)), 443), "10.1.2.3:443");
    assert_eq!(a(Addr::V6(Ipv6Addr::LOCALHOST), 8443), "[::1]:8443");
    assert_eq!(a(Addr::Domain("a.test".into()), 80), "a.test:80");
}

#[test]
fn replies_and_codes() {
    assert_eq!(
        encode_reply(Reply::SUCCEEDED),
        [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(encode_reply(Reply::TTL_EXPIRED)[1], 6);
    assert_eq!(encode_method(Method::NONE_ACCEPTABLE), [5, 0xff]);
    assert_eq!(encode_auth_status(true), [1, 0]);
    assert_eq!(encode_auth_status(false), [1, 1]);
    assert_eq!(format!("{:?}", Reply(0x42)), "UNKNOWN(66)");
    assert_eq!(
        format!("{}", Reply::HOST_UNREACHABLE),
        "0x04 (host unreachable)"
    );
    assert_eq!(format!("{:?}", Command(9)), "COMMAND(0x09)");
}

fn arb_addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|a| Addr::V4(a.into())),
        any::<[u8; 16]>().prop_map(|a| Addr::V6(a.into())),
        "[a-z0-9_.-]{1,253}".prop_map(Addr::Domain),
    ]
}

fn arb_request() -> impl Strategy<Value = Request> {
    (any::<u8>(), arb_addr(), 1..=u16::MAX).prop_map(|(c, addr, port)| Request {
        command: Command(c),
        addr,
        port,
    })
}

proptest! {
    /// encode then parse gives the message back, using every byte; every strict prefix asks
    /// for more; bytes after the message are left alone.
    #[test]
    fn request_round_trip(r in arb_request(), tail in proptest::collection::vec(any::<u8>(), 0..8)) {
        let b = encode_request(&r);
        prop_assert!(b.len() <= MAX_MESSAGE);
        for n in 0..b.len() {
            prop_assert_eq!(parse_request(&b[..n]), Ok(None));
        }
        let mut with_tail = b.clone();
        with_tail.extend_from_slice(&tail);
        prop_assert_eq!(parse_request(&with_tail), Ok(Some((r, b.len()))));
    }

    #[test]
    fn greeting_round_trip(m in proptest::collection::vec(any::<u8>(), 1..=255)) {
        let g = Greeting { methods: m.into_iter().map(Method).collect() };
        let b = encode_greeting(&g);
        for n in 0..b.len() {
            prop_assert_eq!(parse_greeting(&b[..n]), Ok(None));
        }
        prop_assert_eq!(parse_greeting(&b), Ok(Some((g, b.len()))));
    }

    #[test]
    fn credentials_round_trip(
        user in proptest::collection::vec(any::<u8>(), 1..=255),
        password in proptest::collection::vec(any::<u8>(), 1..=255),
    ) {
        let c = Credentials { user, password };
        let b = encode_credentials(&c);
        for n in 0..b.len() {
            prop_assert_eq!(parse_credentials(&b[..n]), Ok(None));
        }
        prop_assert_eq!(parse_credentials(&b), Ok(Some((c, b.len()))));
    }

    /// Arbitrary bytes never panic any parser, and a complete message never claims more bytes
    /// than it was given or than [`MAX_MESSAGE`].
    #[test]
    fn arbitrary_bytes_are_handled(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        for used in [
            parse_greeting(&b).ok().flatten().map(|m| m.1),
            parse_credentials(&b).ok().flatten().map(|m| m.1),
            parse_request(&b).ok().flatten().map(|m| m.1),
        ].into_iter().flatten() {
            prop_assert!(used <= b.len() && used <= MAX_MESSAGE);
        }
    }
}
