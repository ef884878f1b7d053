//! Where weft follows RFC 9110 / RFC 9112 and nginx does not (or where there is nothing to
//! compare with): each test cites the section it checks. The cases where nginx is right are in
//! nginx_diff.rs.

mod common;

use std::io::Write;

use common::*;

fn validators(server: &TestServer, path: &str) -> (String, String) {
    let r = server.get(&get(path, ""));
    (
        r.header("etag").unwrap().to_owned(),
        r.header("last-modified").unwrap().to_owned(),
    )
}

/// RFC 9110 §13.1.4: "A recipient MUST ignore If-Unmodified-Since if the request contains an
/// If-Match header field" and "if the received field value is not a valid HTTP-date" (nginx
/// answers 412 to both).
#[test]
fn rfc9110_13_1_4_if_unmodified_since_ignored_with_if_match_or_invalid() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let (etag, _) = validators(&server, "/a.txt");
    let past = "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
    assert_eq!(server.get(&get("/a.txt", past)).status, 412);
    let r = server.get(&get("/a.txt", &format!("If-Match: {etag}\r\n{past}")));
    assert_eq!(r.status, 200);
    let r = server.get(&get("/a.txt", "If-Unmodified-Since: yesterday\r\n"));
    assert_eq!(r.status, 200);
    // Two lines: not a single HTTP-date, ignored.
    let r = server.get(&get("/a.txt", &format!("{past}{past}")));
    assert_eq!(r.status, 200);
}

/// RFC 9110 §13.1.1: If-Match uses the strong comparison; `*` matches a current
/// representation; several field lines are one list (§5.3).
#[test]
fn rfc9110_13_1_1_if_match() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let (etag, _) = validators(&server, "/big.bin");
    for (headers, status) in [
        ("If-Match: \"nope\"\r\n".to_owned(), 412),
        ("If-Match: *\r\n".to_owned(), 200),
        (format!("If-Match: W/{etag}\r\n"), 412),
        (format!("If-Match: \"x\"\r\nIf-Match: {etag}\r\n"), 200),
        ("If-Match: not-a-tag\r\n".to_owned(), 412),
    ] {
        let r = server.get(&get("/big.bin", &headers));
        assert_eq!(r.status, status, "{headers:?}");
        if status == 412 {
            assert!(r.body.starts_with(b"<html>"));
        }
    }
    // A 412 keeps the connection usable.
    let mut s = server.connect();
    s.write_all(get("/a.txt", "If-Match: \"nope\"\r\n").as_bytes())
        .unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 412);
    s.write_all(get("/a.txt", "").as_bytes()).unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
}

/// RFC 9110 §13.1.2: If-None-Match uses the weak comparison (W/"x" matches "x"); §13.1.3:
/// If-Modified-Since is compared as a date (nginx's default `if_modified_since exact` wants
/// the exact Last-Modified), ignored when If-None-Match is present or the date is invalid.
#[test]
fn rfc9110_13_1_2_and_13_1_3_none_match_and_modified_since() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let (etag, lm) = validators(&server, "/a.txt");
    let r = server.get(&get("/a.txt", &format!("If-None-Match: W/{etag}\r\n")));
    assert_eq!(r.status, 304);
    let r = server.get(&get(
        "/a.txt",
        &format!("If-None-Match: \"a\"\r\nIf-None-Match: {etag}\r\n"),
    ));
    assert_eq!(r.status, 304);
    let later = "If-Modified-Since: Fri, 01 Jan 2100 00:00:00 GMT\r\n";
    assert_eq!(server.get(&get("/a.txt", later)).status, 304);
    let r = server.get(&get(
        "/a.txt",
        &format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n"),
    ));
    assert_eq!(r.status, 200);
    let r = server.get(&get("/a.txt", "If-Modified-Since: yesterday\r\n"));
    assert_eq!(r.status, 200);
    // A matching If-None-Match decides alone (nginx lets the older date answer 200).
    let r = server.get(&get(
        "/a.txt",
        &format!("If-None-Match: {etag}\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"),
    ));
    assert_eq!(r.status, 304);
}

/// RFC 9110 §13.2.2: If-Match is evaluated first (412 even when If-None-Match would give 304),
/// then If-None-Match, and If-Range last.
#[test]
fn rfc9110_13_2_2_precedence() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let (etag, lm) = validators(&server, "/a.txt");
    let r = server.get(&get(
        "/a.txt",
        &format!("If-Match: \"nope\"\r\nIf-Modified-Since: {lm}\r\n"),
    ));
    assert_eq!(r.status, 412);
    let r = server.get(&get(
        "/a.txt",
        &format!("If-Unmodified-Since: {lm}\r\nIf-None-Match: {etag}\r\n"),
    ));
    assert_eq!(r.status, 304);
    let r = server.get(&get(
        "/a.txt",
        &format!("If-None-Match: {etag}\r\nRange: bytes=0-1\r\nIf-Range: {etag}\r\n"),
    ));
    assert_eq!(r.status, 304);
}

/// RFC 9110 §13.1.5: If-Range needs a strong match; a weak tag never lets the range through.
#[test]
fn rfc9110_13_1_5_if_range_is_strong() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let (etag, lm) = validators(&server, "/a.txt");
    let range = "Range: bytes=0-4\r\n";
    let r = server.get(&get("/a.txt", &format!("{range}If-Range: W/{etag}\r\n")));
    assert_eq!(r.status, 200);
    let r = server.get(&get("/a.txt", &format!("{range}If-Range: {lm}\r\n")));
    assert_eq!(r.status, 206);
}

/// RFC 9112 §3.2 / RFC 9110 §7.2 (uri-host is RFC 3986's reg-name, IP-literal or IPv4): a Host
/// with a character outside that grammar is 400, also where nginx lets it through.
#[test]
fn rfc9112_3_2_invalid_host_is_400() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for host in [
        "a\\b", "a\"b", "u@h", "h:8x", "h:80:90", "<x>", "a{b}", "[::1",
    ] {
        let r = server.get(&format!("GET /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 400, "{host:?}");
        assert_eq!(r.header("connection"), Some("close"));
    }
    for host in ["localhost", "[::1]:8080", "[v1.x]", "a%41", "x:", "a..b"] {
        let r = server.get(&format!("GET /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"));
        assert_eq!(r.status, 200, "{host:?}");
    }
}

/// RFC 9112 §3.2.2: with an absolute-form target the server ignores Host and uses the
/// target's authority (which must be valid, RFC 9110 §4.2.1: non-empty, no userinfo, §4.2.4).
#[test]
fn rfc9112_3_2_2_absolute_form_authority_names_the_redirect() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let r = server.get("GET http://example.com:8080/docs?q HTTP/1.1\r\nHost: other\r\n\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(
        r.header("location"),
        Some("http://example.com:8080/docs/?q")
    );
    for target in [
        "http:///docs",
        "http://u@h/docs",
        "http://h:x/docs",
        "http://a\"b/docs",
    ] {
        let r = server.get(&format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"));
        assert_eq!(r.status, 400, "{target}");
    }
}

/// RFC 3986 §3.3/§3.4 (what a Location URI may hold, RFC 9110 §10.2.2): bytes of the request
/// path and query that may not appear in a URI are percent-encoded in the redirect, and a
/// fragment is not copied (nginx copies them as sent).
#[test]
fn rfc3986_redirect_location_is_a_valid_uri() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let r = server.get("GET /docs?a\"b<c>#frag HTTP/1.1\r\nHost: h\r\n\r\n");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://h/docs/?a%22b%3Cc%3E"));
    // No Host (HTTP/1.0): the server's own address.
    let r = server.get("GET /docs HTTP/1.0\r\n\r\n");
    assert_eq!(
        r.header("location"),
        Some(format!("http://{}/docs/", server.addr).as_str())
    );
}

/// RFC 9112 §6.3: "If a Transfer-Encoding header field is present in a request and the chunked
/// transfer coding is not the final encoding, ... the server MUST respond with the 400 (Bad
/// Request) status code and then close the connection"; §7: chunked is applied at most once.
/// (nginx answers 501.)
#[test]
fn rfc9112_6_3_chunked_not_final_is_400_and_close() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for te in [
        "chunked, gzip",
        "chunked, chunked",
        "chunked\r\nTransfer-Encoding: gzip",
    ] {
        let mut s = server.connect();
        let request = format!("GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {te}\r\n\r\n");
        s.write_all(request.as_bytes()).unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 400, "{te:?}");
        assert_eq!(r.header("connection"), Some("close"));
        assert!(closed_by_server(&mut s), "{te:?}");
    }
}

/// RFC 9112 §6.1: a transfer coding the server does not decode is 501, and the connection
/// closes (the body's end is unknown).
#[test]
fn rfc9112_6_1_unknown_coding_is_501_and_close() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.header("connection")), (501, Some("close")));
    assert!(closed_by_server(&mut s));
}

/// RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing: it is
/// processed and the connection closed afterwards (nginx answers 400).
#[test]
fn rfc9112_6_1_http10_with_transfer_encoding_is_answered_then_closed() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    s.write_all(
        b"GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.header("connection")), (200, Some("close")));
    assert!(closed_by_server(&mut s));
}

/// RFC 9110 §2.5: a request with a higher minor version than the server's (HTTP/1.2) is served
/// as HTTP/1.1: keep-alive by default, pipelining works.
#[test]
fn rfc9110_2_5_higher_minor_version_served_as_1_1() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    s.write_all(b"GET /a.txt HTTP/1.2\r\nHost: x\r\n\r\nHEAD /a.txt HTTP/1.7\r\nHost: x\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello, world\n"[..]));
    assert_eq!(r.header("connection"), Some("keep-alive"));
    let r = read_response(&mut s, true).unwrap();
    assert_eq!(r.status, 200);
    // Split so the version arrives in pieces.
    let mut s = server.connect();
    s.write_all(b"GET /a.txt HTTP/1.").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    s.write_all(b"3\r\nHost: x\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
}

/// RFC 6585 §5: header fields too large → 431 Request Header Fields Too Large (nginx answers
/// 400 "Request Header Or Cookie Too Large").
#[test]
fn rfc6585_5_head_too_large_is_431() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    let cookie = "c".repeat(weft_http::DEFAULT_MAX_HEAD_BYTES);
    s.write_all(get("/a.txt", &format!("Cookie: {cookie}\r\n")).as_bytes())
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.header("connection")), (431, Some("close")));
}

/// RFC 9110 §14.6: several ranges → 206 `multipart/byteranges`, each part with its
/// Content-Type and Content-Range, the whole framed by Content-Length.
#[test]
fn rfc9110_14_6_multipart_byteranges() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let whole = std::fs::read(dir.path().join("big.bin")).unwrap();
    let r = server.get(&get("/big.bin", "Range: bytes=0-9,200000-200009\r\n"));
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
    assert!(r.header("content-range").is_none());
    let mut expected = Vec::new();
    for (start, end) in [(0usize, 9usize), (200_000, 200_009)] {
        expected.extend_from_slice(
            format!(
                "\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\
                 Content-Range: bytes {start}-{end}/300000\r\n\r\n"
            )
            .as_bytes(),
        );
        expected.extend_from_slice(&whole[start..=end]);
    }
    expected.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    assert!(r.body == expected);
}

/// RFC 9110 §14.2 (a server MAY ignore a Range with many or overlapping ranges) and
/// §15.3.7.2 (MAY coalesce overlapping ones): overlapping and touching ranges are merged, so
/// asking for the same bytes many times never multiplies the response (range amplification);
/// more than `max_ranges` ranges and the header is ignored. nginx instead sends every range
/// unless they add up to more than the file.
#[test]
fn rfc9110_14_2_overlapping_ranges_coalesce_and_too_many_are_ignored() {
    let dir = tree();
    let mut c = config(dir.path());
    c.max_ranges = 5;
    let server = TestServer::start(c);
    let whole = std::fs::read(dir.path().join("big.bin")).unwrap();
    let r = server.get(&get("/big.bin", "Range: bytes=0-99,50-149,150-199\r\n"));
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-199/300000"));
    assert!(r.body == whole[..200]);
    let r = server.get(&get("/big.bin", "Range: bytes=0-,0-,0-,0-,0-\r\n"));
    assert_eq!((r.status, r.body.len()), (206, 300_000));
    let r = server.get(&get("/big.bin", "Range: bytes=10-19,0-4,3-9\r\n"));
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 0-19/300000"));
    let six = "Range: bytes=0-0,2-2,4-4,6-6,8-8,10-10\r\n";
    let r = server.get(&get("/big.bin", six));
    assert_eq!((r.status, r.body.len()), (200, 300_000));
    let five = "Range: bytes=0-0,2-2,4-4,6-6,8-8\r\n";
    let r = server.get(&get("/big.bin", five));
    assert_eq!(r.status, 206);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("multipart/byteranges"));
}
