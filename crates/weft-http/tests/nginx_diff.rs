//! Differential tests against nginx (Debian's package, started here on its own port with the
//! project's template as a reference, `weft_load::nginx::reference_config`, serving the same
//! tree): the same requests to both, and the same status, key headers and bodies back (a
//! multipart boundary neutralised). Skips with a note when nginx is not installed, fails
//! instead under `CI=true`.
//!
//! Known, deliberate differences are not sent here; where weft follows the RFC they are tested
//! in rfc.rs (and listed in docs/notes/http-rfc.md): `%2F` in a path (nginx decodes it to `/`;
//! weft refuses it with 400), overlapping or touching ranges (weft coalesces them, RFC 9110
//! §15.3.7.2; nginx sends each) and malformed ones (weft ignores the header, nginx answers
//! 416), `If-Modified-Since` with a date other than the exact `Last-Modified` (nginx's default
//! `if_modified_since exact`), If-Unmodified-Since with If-Match or an invalid date, Hosts
//! outside RFC 3986's grammar that nginx lets through (and `a..b`, which it refuses), the
//! redirect of a Host without the server's port (nginx writes its own port), chunked not the
//! final coding (weft 400, nginx 501), Transfer-Encoding in HTTP/1.0 (nginx 400), symlinks
//! leaving the root (nginx follows them by default), and error page bodies.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::*;
use weft_testkit::{require, ChildGuard};

/// Headers whose values must be equal (when either side sends them).
const KEY_HEADERS: [&str; 6] = [
    "content-type",
    "etag",
    "last-modified",
    "location",
    "content-range",
    "accept-ranges",
];

/// nginx on `root` with the reference configuration, or `None` (see `weft_testkit::missing`)
/// without Debian's MIME table.
fn start_nginx(nginx: &Path, root: &Path, work: &Path) -> Option<(ChildGuard, SocketAddr)> {
    if !Path::new("/etc/nginx/mime.types").exists() {
        weft_testkit::missing("/etc/nginx/mime.types", "apt-get install nginx");
        return None;
    }
    Some(weft_testkit::start_nginx(nginx, work, |port| {
        weft_load::nginx::reference_config(work, port, root)
    }))
}

/// Sends `request` (with `{host}` replaced by the server's address) on a new connection.
fn ask(addr: SocketAddr, request: &str) -> Response {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = request.replace("{host}", &addr.to_string());
    s.write_all(request.as_bytes()).unwrap();
    read_response(&mut s, request.starts_with("HEAD"))
        .unwrap_or_else(|| panic!("no response to {request:?} from {addr}"))
}

fn compare(
    request: &str,
    weft: &Response,
    nginx: &Response,
    weft_addr: SocketAddr,
    nginx_addr: SocketAddr,
) {
    assert_eq!(weft.status, nginx.status, "status for {request:?}");
    for h in KEY_HEADERS {
        let ours = weft
            .header(h)
            .map(|v| v.replace(&weft_addr.to_string(), "ADDR"));
        let theirs = nginx
            .header(h)
            .map(|v| v.replace(&nginx_addr.to_string(), "ADDR"));
        if h == "accept-ranges" && weft.status != 200 {
            continue;
        }
        assert_eq!(ours, theirs, "{h} for {request:?}");
    }
    if matches!(weft.status, 200 | 206 | 304) {
        assert_eq!(
            weft.header("content-length"),
            nginx.header("content-length"),
            "content-length for {request:?}"
        );
        assert!(weft.body == nginx.body, "body for {request:?}");
    }
}

/// A `multipart/byteranges` response with its boundary (a counter in both servers) replaced
/// by `B` repeated to the same length, in the header and the body.
fn without_boundary(mut r: Response) -> Response {
    let Some(boundary) = r
        .header("content-type")
        .and_then(|t| t.strip_prefix("multipart/byteranges; boundary="))
        .map(str::to_owned)
    else {
        return r;
    };
    let neutral = "B".repeat(boundary.len());
    for (name, value) in &mut r.headers {
        if name.eq_ignore_ascii_case("content-type") {
            *value = value.replace(&boundary, &neutral);
        }
    }
    let from = format!("--{boundary}");
    let to = format!("--{neutral}");
    let mut body = Vec::with_capacity(r.body.len());
    let mut rest = r.body.as_slice();
    while let Some(i) = rest.windows(from.len()).position(|w| w == from.as_bytes()) {
        body.extend_from_slice(&rest[..i]);
        body.extend_from_slice(to.as_bytes());
        rest = &rest[i + from.len()..];
    }
    body.extend_from_slice(rest);
    r.body = body;
    r
}

/// weft and nginx serving the same tree; stopped on drop.
struct Both {
    dir: tempfile::TempDir,
    _work: tempfile::TempDir,
    _nginx: ChildGuard,
    nginx: SocketAddr,
    _server: TestServer,
    weft: SocketAddr,
}

impl Both {
    /// Both servers on the test tree, or `None` (a skip note printed) without nginx.
    fn start() -> Option<Both> {
        Both::start_with(tree(), common::config)
    }

    fn start_with(
        dir: tempfile::TempDir,
        config: impl FnOnce(&Path) -> weft_http::Config,
    ) -> Option<Both> {
        let nginx = require("nginx")?;
        let work = tempfile::tempdir().unwrap();
        let (guard, nginx_addr) = start_nginx(&nginx, dir.path(), work.path())?;
        let server = TestServer::start(config(dir.path()));
        let weft = server.addr;
        Some(Both {
            dir,
            _work: work,
            _nginx: guard,
            nginx: nginx_addr,
            _server: server,
            weft,
        })
    }

    /// Sends `request` to both and checks the answers agree; returns weft's.
    fn same(&self, request: &str) -> Response {
        let ours = without_boundary(ask(self.weft, request));
        let theirs = without_boundary(ask(self.nginx, request));
        compare(request, &ours, &theirs, self.weft, self.nginx);
        ours
    }

    /// The status both answer `request` with, checked equal.
    fn same_status(&self, request: &str) -> u16 {
        let ours = ask(self.weft, request);
        let theirs = ask(self.nginx, request);
        assert_eq!(ours.status, theirs.status, "status for {request:?}");
        ours.status
    }
}

#[test]
fn same_answers_as_nginx() {
    let Some(nginx) = require("nginx") else {
        return;
    };
    let dir = tree();
    let work = tempfile::tempdir().unwrap();
    let Some((_nginx_guard, nginx_addr)) = start_nginx(&nginx, dir.path(), work.path()) else {
        return;
    };
    let server = TestServer::serve(dir.path());
    let weft_addr = server.addr;
    eprintln!("weft on {weft_addr}, nginx on {nginx_addr}");

    let etag = ask(weft_addr, "GET /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n")
        .header("etag")
        .unwrap()
        .to_owned();
    let last_modified = ask(weft_addr, "GET /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n")
        .header("last-modified")
        .unwrap()
        .to_owned();
    let mut requests: Vec<String> = Vec::new();
    let paths = [
        "/",
        "/index.html",
        "/a.txt",
        "/style.css",
        "/data.json",
        "/image.png",
        "/photo.jpg",
        "/big.bin",
        "/empty.txt",
        "/with%20space.txt",
        "/docs",
        "/docs/",
        "/docs/page.html",
        "/docs?x=1",
        "/noindex",
        "/noindex/",
        "/missing",
        "/missing/",
        "/deep/er/still/leaf.txt",
        "/docs/../a.txt",
        "/./a.txt",
        "//docs//page.html",
        "/%61.txt",
        "/a.txt?query=1",
        "/../a.txt",
        "/a.txt/",
    ];
    for p in paths {
        for method in ["GET", "HEAD"] {
            requests.push(format!("{method} {p} HTTP/1.1\r\nHost: {{host}}\r\n\r\n"));
        }
        requests.push(format!("GET {p} HTTP/1.0\r\n\r\n"));
    }
    for range in [
        "bytes=0-0",
        "bytes=0-99",
        "bytes=100-",
        "bytes=-100",
        "bytes=299000-299999",
        "bytes=299990-400000",
        "bytes=300000-",
        "bytes=5000000-6000000",
    ] {
        requests.push(format!(
            "GET /big.bin HTTP/1.1\r\nHost: {{host}}\r\nRange: {range}\r\n\r\n"
        ));
    }
    requests.push(format!(
        "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nRange: bytes=0-4\r\nIf-Range: {etag}\r\n\r\n"
    ));
    requests.push(
        "GET /a.txt HTTP/1.1\r\nHost: {host}\r\nRange: bytes=0-4\r\nIf-Range: \"nope\"\r\n\r\n"
            .to_owned(),
    );
    requests.push(format!(
        "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nIf-None-Match: {etag}\r\n\r\n"
    ));
    requests.push(format!(
        "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nIf-None-Match: \"x\", {etag}\r\n\r\n"
    ));
    requests.push("GET /a.txt HTTP/1.1\r\nHost: {host}\r\nIf-None-Match: \"x\"\r\n\r\n".to_owned());
    requests.push(format!(
        "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nIf-Modified-Since: {last_modified}\r\n\r\n"
    ));
    requests.push("DELETE /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n".to_owned());
    requests.push("PUT /a.txt HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n".to_owned());
    requests.push("GET /a.txt HTTP/1.1\r\n\r\n".to_owned());
    requests.push("GET /a%zz HTTP/1.1\r\nHost: {host}\r\n\r\n".to_owned());

    for request in &requests {
        let ours = ask(weft_addr, request);
        let theirs = ask(nginx_addr, request);
        compare(request, &ours, &theirs, weft_addr, nginx_addr);
    }
    eprintln!(
        "{} requests answered alike by weft and nginx",
        requests.len()
    );
}

/// RFC 9110 §13.1.1 (If-Match), §13.1.4 (If-Unmodified-Since) and §13.2.2's order, where nginx
/// does the same. (nginx differs where it ignores the RFC: it checks If-Unmodified-Since even
/// with If-Match, answers 412 to an invalid date, and compares If-Modified-Since exactly;
/// those cases are in rfc.rs.)
#[test]
fn conditionals_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    let a = both.same("GET /a.txt HTTP/1.1\r\nHost: {host}\r\n\r\n");
    let etag = a.header("etag").unwrap().to_owned();
    let lm = a.header("last-modified").unwrap().to_owned();
    let cases = [
        ("If-Match: \"nope\"".to_owned(), 412),
        (format!("If-Match: {etag}"), 200),
        ("If-Match: *".to_owned(), 200),
        (format!("If-Match: \"x\", {etag}"), 200),
        (format!("If-Match: W/{etag}"), 412),
        (
            "If-Unmodified-Since: Sun, 06 Nov 1994 08:49:37 GMT".to_owned(),
            412,
        ),
        (format!("If-Unmodified-Since: {lm}"), 200),
        (
            "If-Unmodified-Since: Fri, 01 Jan 2100 00:00:00 GMT".to_owned(),
            200,
        ),
        (format!("If-Match: \"nope\"\r\nIf-None-Match: {etag}"), 412),
        (format!("If-Match: {etag}\r\nIf-None-Match: {etag}"), 304),
        (format!("If-Match: {etag}\r\nRange: bytes=0-4"), 206),
        ("If-Match: \"nope\"\r\nRange: bytes=0-4".to_owned(), 412),
    ];
    for (headers, status) in cases {
        for method in ["GET", "HEAD"] {
            let request =
                format!("{method} /a.txt HTTP/1.1\r\nHost: {{host}}\r\n{headers}\r\n\r\n");
            assert_eq!(both.same(&request).status, status, "{request:?}");
        }
    }
    // On a missing file the preconditions are ignored (RFC 9110 §13.2.1): 404 from both.
    let request = "GET /missing HTTP/1.1\r\nHost: {host}\r\nIf-Match: *\r\n\r\n";
    assert_eq!(both.same_status(request), 404);
    // The tree is kept until here.
    assert!(both.dir.path().join("a.txt").exists());
}

/// RFC 9112 §3.2: a Host that is not a valid `uri-host [":" port]` gets 400, and nginx agrees
/// on these; the directory redirect names the validated Host.
#[test]
fn hosts_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    for host in ["a b", "a/b", ":80", "", "x/y?z#"] {
        for version in ["1.1", "1.0"] {
            let request = format!("GET /docs HTTP/{version}\r\nHost: {host}\r\n\r\n");
            assert_eq!(both.same_status(&request), 400, "{request:?}");
        }
    }
    for request in [
        "GET /docs HTTP/1.1\r\nHost: {host}\r\n\r\n",
        "GET /docs?x=1&y=%20 HTTP/1.1\r\nHost: {host}\r\n\r\n",
        "GET /deep/er HTTP/1.1\r\nHost: {host}\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: [::1]:1\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: example.com.\r\n\r\n",
        "GET /a.txt HTTP/1.1\r\nHost: 127.0.0.1:\r\n\r\n",
    ] {
        let r = both.same(request);
        assert!(matches!(r.status, 200 | 301), "{request:?}");
    }
}

/// RFC 9112 §6.1 (a transfer coding the server does not decode → 501), §6.3 (Transfer-Encoding
/// with Content-Length → 400) and RFC 9110 §2.5 (HTTP/1.x with a higher minor version is served
/// as 1.1), where nginx does the same.
#[test]
fn framing_and_versions_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    for (te, status) in [
        ("foo", 501),
        ("gzip", 501),
        ("gzip, chunked", 501),
        ("identity", 501),
    ] {
        let request = format!(
            "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nTransfer-Encoding: {te}\r\n\r\n0\r\n\r\n"
        );
        assert_eq!(both.same_status(&request), status, "{request:?}");
    }
    let request = "GET /a.txt HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\
                   Content-Length: 5\r\n\r\n0\r\n\r\n";
    assert_eq!(both.same_status(request), 400);
    let request =
        "GET /a.txt HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(both.same_status(request), 200);
    for version in ["1.2", "1.9"] {
        for path in ["/a.txt", "/big.bin", "/docs"] {
            let request = format!("GET {path} HTTP/{version}\r\nHost: {{host}}\r\n\r\n");
            let r = both.same(&request);
            assert!(matches!(r.status, 200 | 301), "{request:?}");
        }
    }
    for version in ["2.0", "3.1"] {
        let request = format!("GET /a.txt HTTP/{version}\r\nHost: {{host}}\r\n\r\n");
        assert_eq!(both.same_status(&request), 505, "{request:?}");
    }
}

/// The default head limits are at least nginx's: what nginx accepts (hundreds of header lines,
/// an 8000-byte request line) weft accepts; a request line over 8 KiB is 414 and a body over
/// 1 MiB is 413 from both.
#[test]
fn default_limits_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    for n in [65, 100, 500] {
        let lines: String = (0..n).map(|i| format!("X-H{i}: v\r\n")).collect();
        let request = format!("GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\n{lines}\r\n");
        assert_eq!(both.same(&request).status, 200, "{n} lines");
    }
    let line = |n: usize| {
        format!(
            "GET /a.txt?{} HTTP/1.1\r\nHost: {{host}}\r\n\r\n",
            "q".repeat(n)
        )
    };
    assert_eq!(both.same(&line(8000)).status, 200);
    assert_eq!(both.same_status(&line(9000)), 414);
    let cookie = format!(
        "GET /a.txt HTTP/1.1\r\nHost: {{host}}\r\nCookie: {}\r\n\r\n",
        "c".repeat(7000)
    );
    assert_eq!(both.same(&cookie).status, 200);
    let body = "GET /a.txt HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2000000\r\n\r\n";
    assert_eq!(both.same_status(body), 413);
}

/// Several ranges → 206 `multipart/byteranges` (RFC 9110 §14.6), byte for byte as nginx
/// (boundary aside), from memory (small file) and by send_file (big file); unsatisfiable
/// ranges dropped, 416 when none is left.
#[test]
fn multipart_ranges_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    for (path, spec) in [
        ("/a.txt", "bytes=0-1,5-6"),
        ("/a.txt", "bytes=7-,0-0"),
        ("/a.txt", "bytes=-3,0-1"),
        ("/a.txt", "bytes=0-1,3-4,8-9"),
        ("/image.png", "bytes=0-99,1000-1099,2990-"),
        ("/big.bin", "bytes=0-0,100000-199999,299990-"),
        ("/big.bin", "bytes=250000-260000,10-20"),
        ("/big.bin", "bytes=0-1,5000000-6000000"),
        ("/big.bin", "bytes=0-1,3-4,5000000-"),
        ("/style.css", "bytes=0-1,3-4"),
    ] {
        for method in ["GET", "HEAD"] {
            let request =
                format!("{method} {path} HTTP/1.1\r\nHost: {{host}}\r\nRange: {spec}\r\n\r\n");
            let r = both.same(&request);
            assert_eq!(r.status, 206, "{request:?}");
        }
    }
    let request = "GET /a.txt HTTP/1.1\r\nHost: {host}\r\nRange: bytes=100-,200-300\r\n\r\n";
    assert_eq!(both.same(request).status, 416);
    // Keep-alive across a multipart answer by send_file.
    let mut s = TcpStream::connect(both.weft).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let two = "GET /big.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9,200000-200009\r\n\r\n";
    s.write_all(format!("{two}{two}").as_bytes()).unwrap();
    for _ in 0..2 {
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 206);
    }
}

/// A file truncated, grown, rewritten, replaced or deleted between requests (no pause, so
/// within the second weft's open-file cache used to trust) is answered as nginx answers it:
/// the same status, length, validators and bytes.
#[test]
fn changing_files_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    let p = both.dir.path().join("changing.bin");
    let bytes = |len: usize, seed: u8| -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    };
    let request = "GET /changing.bin HTTP/1.1\r\nHost: {host}\r\n\r\n";
    let ranged = "GET /changing.bin HTTP/1.1\r\nHost: {host}\r\nRange: bytes=10-20,-5\r\n\r\n";
    std::fs::write(&p, bytes(100_000, 1)).unwrap();
    assert_eq!(both.same(request).status, 200);
    let open = || std::fs::OpenOptions::new().write(true).open(&p).unwrap();
    open().set_len(50_000).unwrap();
    assert_eq!(both.same(request).body.len(), 50_000);
    both.same(ranged);
    open().write_all(&bytes(120_000, 2)).unwrap();
    assert_eq!(both.same(request).body.len(), 120_000);
    open().set_len(3_000).unwrap();
    assert_eq!(both.same(request).body.len(), 3_000);
    both.same(ranged);
    let tmp = both.dir.path().join("changing.tmp");
    std::fs::write(&tmp, bytes(70_000, 3)).unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    assert_eq!(both.same(request).body.len(), 70_000);
    std::fs::remove_file(&p).unwrap();
    assert_eq!(both.same_status(request), 404);
}

/// A file truncated while its body is in flight: neither server can keep the promised length;
/// both end the connection early (nginx: "file was truncated").
#[test]
fn truncated_in_flight_like_nginx() {
    let Some(both) = Both::start() else {
        return;
    };
    let len = 32usize << 20;
    for addr in [both.weft, both.nginx] {
        let p = both.dir.path().join("huge.bin");
        std::fs::write(&p, pattern(len)).unwrap();
        let (got, announced) = truncate_in_flight(addr, &p, "/huge.bin");
        assert_eq!(announced, len, "{addr}");
        assert!(got < len, "{addr}: got {got} of {len}");
    }
}
