//! One test per feature, over loopback against a server in this process.

mod common;

use std::io::Write;
use std::os::unix::fs::symlink;
use std::time::Duration;

use common::*;

#[test]
fn get_and_head_serve_files_with_their_headers() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for (path, ctype) in [
        ("/a.txt", "text/plain"),
        ("/style.css", "text/css"),
        ("/image.png", "image/png"),
        ("/photo.jpg", "image/jpeg"),
        ("/big.bin", "application/octet-stream"),
        ("/with%20space.txt", "text/plain"),
    ] {
        let disk = dir.path().join(path[1..].replace("%20", " "));
        let expected = std::fs::read(&disk).unwrap();
        let r = server.get(&get(path, ""));
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body, expected, "{path}");
        assert_eq!(r.header("content-type"), Some(ctype), "{path}");
        assert_eq!(r.header("server"), Some("weft"));
        assert!(r.header("date").unwrap().ends_with(" GMT"));
        let meta = std::fs::metadata(&disk).unwrap();
        let mtime = meta
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert_eq!(
            r.header("etag").unwrap(),
            format!("\"{mtime:x}-{:x}\"", meta.len())
        );
        assert_eq!(
            r.header("last-modified").unwrap(),
            httpdate::fmt_http_date(meta.modified().unwrap())
        );
        let h = server.get(&get(path, "").replacen("GET", "HEAD", 1));
        assert_eq!(h.status, 200);
        assert_eq!(h.header("content-length"), r.header("content-length"));
        assert_eq!(h.header("etag"), r.header("etag"));
    }
    let empty = server.get(&get("/empty.txt", ""));
    assert_eq!((empty.status, empty.body.len()), (200, 0));
}

#[test]
fn small_and_large_files_both_ways() {
    let dir = tree();
    for memory_max_bytes in [0, 1 << 20] {
        let mut c = config(dir.path());
        c.memory_max_bytes = memory_max_bytes;
        let server = TestServer::start(c);
        for path in ["/a.txt", "/image.png", "/big.bin"] {
            let r = server.get(&get(path, ""));
            let expected = std::fs::read(dir.path().join(&path[1..])).unwrap();
            assert_eq!(
                r.body, expected,
                "{path} memory_max_bytes={memory_max_bytes}"
            );
        }
    }
}

#[test]
fn directories_index_redirect_and_forbidden() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let r = server.get(&get("/", ""));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"<html><body>root index</body></html>\n");
    let r = server.get(&get("/docs/", ""));
    assert_eq!((r.status, r.body.as_slice()), (200, &b"<p>docs</p>\n"[..]));
    let r = server.get(&get("/docs", ""));
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("http://localhost/docs/"));
    let r = server.get(&get("/docs?x=1", ""));
    assert_eq!(r.header("location"), Some("http://localhost/docs/?x=1"));
    let r = server.get("GET /docs HTTP/1.0\r\n\r\n");
    let expected = format!("http://{}/docs/", server.addr);
    assert_eq!(r.header("location"), Some(expected.as_str()));
    assert_eq!(server.get(&get("/noindex/", "")).status, 403);
    assert_eq!(server.get(&get("/missing/", "")).status, 404);
    assert_eq!(server.get(&get("/a.txt/", "")).status, 404);
    assert_eq!(server.get(&get("/nope.txt", "")).status, 404);
    assert_eq!(
        server.get(&get("/deep/er/still/leaf.txt", "")).body,
        b"leaf\n"
    );
}

#[test]
fn methods_other_than_get_and_head_are_405_with_allow() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH", "BREW"] {
        let r = server.get(&format!(
            "{method} /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        ));
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method}");
    }
}

#[test]
fn conditional_requests() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let r = server.get(&get("/a.txt", ""));
    let etag = r.header("etag").unwrap().to_owned();
    let lm = r.header("last-modified").unwrap().to_owned();
    let hit = server.get(&get("/a.txt", &format!("If-None-Match: {etag}\r\n")));
    assert_eq!(hit.status, 304);
    assert_eq!(hit.header("etag"), Some(etag.as_str()));
    assert!(hit.body.is_empty());
    let list = server.get(&get("/a.txt", &format!("If-None-Match: \"x\", {etag}\r\n")));
    assert_eq!(list.status, 304);
    let miss = server.get(&get("/a.txt", "If-None-Match: \"other\"\r\n"));
    assert_eq!(miss.status, 200);
    let ims = server.get(&get("/a.txt", &format!("If-Modified-Since: {lm}\r\n")));
    assert_eq!(ims.status, 304);
    let old = server.get(&get(
        "/a.txt",
        "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n",
    ));
    assert_eq!(old.status, 200);
    // If-None-Match wins over If-Modified-Since.
    let both = server.get(&get(
        "/a.txt",
        &format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n"),
    ));
    assert_eq!(both.status, 200);
}

#[test]
fn ranges() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let whole = std::fs::read(dir.path().join("big.bin")).unwrap();
    let len = whole.len();
    for (spec, start, end) in [
        ("bytes=0-99", 0, 99),
        ("bytes=1000-", 1000, len - 1),
        ("bytes=-500", len - 500, len - 1),
        ("bytes=299990-400000", 299_990, len - 1),
    ] {
        let r = server.get(&get("/big.bin", &format!("Range: {spec}\r\n")));
        assert_eq!(r.status, 206, "{spec}");
        assert_eq!(
            r.header("content-range").unwrap(),
            format!("bytes {start}-{end}/{len}")
        );
        assert_eq!(r.body, &whole[start..=end], "{spec}");
    }
    // A small file from memory too.
    let r = server.get(&get("/a.txt", "Range: bytes=7-11\r\n"));
    assert_eq!((r.status, r.body.as_slice()), (206, &b"world"[..]));
    let r = server.get(&get("/big.bin", "Range: bytes=300000-\r\n"));
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */300000"));
    // Nonsense: the whole file.
    let r = server.get(&get("/big.bin", "Range: bytes=0-1,x\r\n"));
    assert_eq!((r.status, r.body.len()), (200, len));
    // If-Range: honoured only when it matches.
    let etag = server
        .get(&get("/big.bin", ""))
        .header("etag")
        .unwrap()
        .to_owned();
    let r = server.get(&get(
        "/big.bin",
        &format!("Range: bytes=0-9\r\nIf-Range: {etag}\r\n"),
    ));
    assert_eq!(r.status, 206);
    let r = server.get(&get(
        "/big.bin",
        "Range: bytes=0-9\r\nIf-Range: \"old\"\r\n",
    ));
    assert_eq!(r.status, 200);
}

#[test]
fn keep_alive_pipelining_and_connection_close() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    // Three pipelined requests in one write, answered in order on one connection.
    let mut s = server.connect();
    let batch = format!(
        "{}{}{}",
        get("/a.txt", ""),
        get("/style.css", "").replacen("GET", "HEAD", 1),
        get("/big.bin", "Range: bytes=0-3\r\n")
    );
    s.write_all(batch.as_bytes()).unwrap();
    let r1 = read_response(&mut s, false).unwrap();
    let r2 = read_response(&mut s, true).unwrap();
    let r3 = read_response(&mut s, false).unwrap();
    assert_eq!(r1.body, b"hello, world\n");
    assert_eq!(r1.header("connection"), Some("keep-alive"));
    assert_eq!(r2.status, 200);
    assert_eq!((r3.status, r3.body.len()), (206, 4));
    // Many requests on the same connection.
    for _ in 0..50 {
        s.write_all(get("/image.png", "").as_bytes()).unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().body.len(), 3000);
    }
    // Connection: close is honoured.
    s.write_all(get("/a.txt", "Connection: close\r\n").as_bytes())
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_by_server(&mut s));
    // HTTP/1.0 closes by default, keeps alive when asked.
    let mut s = server.connect();
    s.write_all(b"GET /a.txt HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        read_response(&mut s, false).unwrap().header("connection"),
        Some("close")
    );
    assert!(closed_by_server(&mut s));
    let mut s = server.connect();
    for _ in 0..3 {
        s.write_all(b"GET /a.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.header("connection"), Some("keep-alive"));
    }
}

/// Pipelined answers whose bodies come from the cache (whole, a range, several ranges) and
/// from the file (`big.bin`, past the memory limit), more than one write-behind buffer (16 KiB)
/// in all: each body sits right after its own head, in request order. Cached bodies are
/// written from the cache around the heads, so this checks the stitching.
#[test]
fn pipelined_cached_and_file_bodies_stay_in_order() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    let mut batch = String::new();
    for _ in 0..4 {
        batch += &get("/photo.jpg", "");
        batch += &get("/image.png", "Range: bytes=10-19\r\n");
        batch += &get("/a.txt", "").replacen("GET", "HEAD", 1);
        batch += &get("/photo.jpg", "Range: bytes=0-1,4990-4999\r\n");
    }
    batch += &get("/big.bin", "");
    batch += &get("/image.png", "");
    s.write_all(batch.as_bytes()).unwrap();
    let photo = pattern(5000);
    let image = pattern(3000);
    for _ in 0..4 {
        let r = read_response(&mut s, false).unwrap();
        assert_eq!((r.status, r.body == photo), (200, true));
        let r = read_response(&mut s, false).unwrap();
        assert_eq!((r.status, &r.body[..]), (206, &image[10..20]));
        let r = read_response(&mut s, true).unwrap();
        assert_eq!((r.status, r.header("content-length")), (200, Some("13")));
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 206);
        // Each part's bytes follow its own part head.
        for (range, bytes) in [("0-1", &photo[0..2]), ("4990-4999", &photo[4990..5000])] {
            let head = format!("Content-Range: bytes {range}/5000\r\n\r\n");
            let at = r
                .body
                .windows(head.len())
                .position(|w| w == head.as_bytes())
                .expect("a part head");
            let from = at + head.len();
            assert_eq!(&r.body[from..from + bytes.len()], bytes);
        }
    }
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.body == pattern(300_000)), (200, true));
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.body == image), (200, true));
}

#[test]
fn a_request_split_into_many_writes_is_reassembled() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let mut s = server.connect();
    s.set_nodelay(true).unwrap();
    for b in get("/a.txt", "X-Filler: 1234567890\r\n").bytes() {
        s.write_all(&[b]).unwrap();
    }
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
}

#[test]
fn paths_cannot_leave_the_root() {
    let dir = tree();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    symlink(
        outside.path().join("secret.txt"),
        dir.path().join("leak.txt"),
    )
    .unwrap();
    symlink(outside.path(), dir.path().join("leakdir")).unwrap();
    symlink("a.txt", dir.path().join("alias.txt")).unwrap();
    symlink(dir.path().join("docs"), dir.path().join("docs-abs")).unwrap();
    let server = TestServer::serve(dir.path());
    assert_eq!(server.get(&get("/leak.txt", "")).status, 403);
    assert_eq!(server.get(&get("/leakdir/secret.txt", "")).status, 403);
    // Symlinks that stay inside work, however they are written.
    assert_eq!(server.get(&get("/alias.txt", "")).body, b"hello, world\n");
    assert_eq!(server.get(&get("/docs-abs/page.html", "")).status, 200);
    for (target, status) in [
        ("/../a.txt", 400),
        ("/docs/../../a.txt", 400),
        ("/%2e%2e/a.txt", 400),
        ("/docs%2f..%2f..%2fa.txt", 400),
        ("/a%00.txt", 400),
        ("/a%zz", 400),
        ("/docs/../a.txt", 200),
        ("/docs/./page.html", 200),
        ("//docs//page.html", 200),
        ("/%61.txt", 200),
    ] {
        let r = server.get(&get(target, ""));
        assert_eq!(r.status, status, "{target}");
    }
    // With the operator's consent, symlinks may leave.
    let mut c = config(dir.path());
    c.symlinks_may_leave_root = true;
    let open = TestServer::start(c);
    assert_eq!(open.get(&get("/leak.txt", "")).body, b"secret");
}

#[test]
fn permission_denied_is_403() {
    // Root ignores file permissions (CAP_DAC_OVERRIDE), and CI runs as root: there, this
    // test runs itself again in a child process as `nobody`, which they do apply to.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        rerun_as_nobody("permission_denied_is_403");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tree();
    let p = dir.path().join("a.txt");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let server = TestServer::serve(dir.path());
    assert_eq!(server.get(&get("/a.txt", "")).status, 403);
}

/// Runs the test `name` of this test binary in a child process with the user and group
/// `nobody` (65534, no supplementary groups) and fails if it did not run and pass. The
/// binary is copied to /tmp first, as `nobody` may not be able to reach it where cargo
/// built it (under /root, say); the child's temporary files go to /tmp too.
fn rerun_as_nobody(name: &str) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    const NOBODY: u32 = 65534;
    let bin_dir = tempfile::tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("test-bin");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `uid` with no `groups` also clears the supplementary groups (std calls setgroups).
    let out = std::process::Command::new(&bin)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .current_dir("/tmp")
        .env("TMPDIR", "/tmp")
        .gid(NOBODY)
        .uid(NOBODY)
        .output()
        .expect("run the test binary as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name} as nobody: {}\n{stdout}\n{stderr}",
        out.status
    );
}

#[test]
fn a_changed_file_is_noticed() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    assert_eq!(server.get(&get("/a.txt", "")).body, b"hello, world\n");
    let tmp = dir.path().join("a.tmp");
    std::fs::write(&tmp, "replaced contents\n").unwrap();
    std::fs::rename(&tmp, dir.path().join("a.txt")).unwrap();
    // The cache re-checks a path at most once a second.
    std::thread::sleep(Duration::from_millis(1100));
    let r = server.get(&get("/a.txt", ""));
    assert_eq!(r.body, b"replaced contents\n");
    std::fs::remove_file(dir.path().join("a.txt")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(server.get(&get("/a.txt", "")).status, 404);
}

#[test]
fn a_body_on_get_is_discarded_or_refused() {
    let dir = tree();
    let mut c = config(dir.path());
    c.max_body_bytes = 1000;
    let server = TestServer::start(c);
    let mut s = server.connect();
    let body = "x".repeat(900);
    let req = format!(
        "GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 900\r\n\r\n{body}{}",
        get("/style.css", "")
    );
    s.write_all(req.as_bytes()).unwrap();
    assert_eq!(
        read_response(&mut s, false).unwrap().body,
        b"hello, world\n"
    );
    assert_eq!(
        read_response(&mut s, false).unwrap().body,
        b"body { color: red }\n"
    );
    let mut s = server.connect();
    s.write_all(b"GET /a.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.status, 413);
    assert!(closed_by_server(&mut s));
}

#[test]
fn access_log_records_each_response() {
    let dir = tree();
    let log = dir.path().join("access.log");
    let mut c = config(dir.path());
    c.access_log = Some(log.clone());
    let server = TestServer::start(c);
    server.get(&get("/a.txt", "User-Agent: tester/1\r\n"));
    server.get(&get("/nope", ""));
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].contains("\"GET /a.txt HTTP/1.1\" 200 13 \"-\" \"tester/1\""),
        "{text}"
    );
    assert!(lines[1].contains("\"GET /nope HTTP/1.1\" 404 "), "{text}");
}

#[test]
fn epoll_backend_and_several_processors() {
    let dir = tree();
    let mut c = config(dir.path());
    c.io = Some(weft::IoBackend::Epoll);
    c.processors = 2;
    // And the first read waits for the request (no TCP_DEFER_ACCEPT).
    c.defer_accept_secs = 0;
    let server = TestServer::start(c);
    let whole = std::fs::read(dir.path().join("big.bin")).unwrap();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let addr = server.addr;
            let whole = whole.clone();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                for _ in 0..20 {
                    s.write_all(get("/big.bin", "").as_bytes()).unwrap();
                    assert_eq!(read_response(&mut s, false).unwrap().body, whole);
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}
