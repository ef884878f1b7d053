//! Real clients against the server: curl, wrk, ab, httperf and headless Chromium loading a
//! page with an image and a stylesheet. Each skips with a note when its program is missing.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use weft_testkit::require;

/// A 1×1 PNG.
const PIXEL_PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xfc, 0xcf, 0xc0, 0x50,
    0x0f, 0x00, 0x04, 0x85, 0x01, 0x80, 0x84, 0xa9, 0x8c, 0x21, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Runs a client to completion (bounded by `timeout`, then killed) and returns its output.
fn run(program: &Path, args: &[&str], timeout: Duration) -> Output {
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(timeout) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on the PID of the child we started and have not reaped yet.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("{} did not finish within {timeout:?}", program.display());
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn curl() {
    let Some(curl) = require("curl") else { return };
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let base = format!("http://{}", server.addr);
    let t = Duration::from_secs(30);
    let out = run(&curl, &["-sS", "--fail", &format!("{base}/big.bin")], t);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        out.stdout,
        std::fs::read(dir.path().join("big.bin")).unwrap()
    );
    // Follows the directory redirect to the index.
    let out = run(&curl, &["-sSL", &format!("{base}/docs")], t);
    assert_eq!(out.stdout, b"<p>docs</p>\n");
    // A range, HTTP/1.0, several URLs on one connection.
    let out = run(&curl, &["-sS", "-r", "7-11", &format!("{base}/a.txt")], t);
    assert_eq!(out.stdout, b"world");
    let out = run(&curl, &["-sS", "--http1.0", &format!("{base}/a.txt")], t);
    assert_eq!(out.stdout, b"hello, world\n");
    let a = format!("{base}/a.txt");
    let out = run(&curl, &["-sSv", &a, &a, &a], t);
    let log = text(&out);
    assert_eq!(log.matches("hello, world").count(), 3, "{log}");
    assert!(log.contains("Re-using existing connection"), "{log}");
    // Conditional download: -z with the file's date gets 304 and keeps the local copy.
    let local = dir.path().join("local-copy.txt");
    std::fs::copy(dir.path().join("a.txt"), &local).unwrap();
    let out = run(
        &curl,
        &[
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-z",
            local.to_str().unwrap(),
            &a,
        ],
        t,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "304");
}

#[test]
fn wrk() {
    let Some(wrk) = require("wrk") else { return };
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let url = format!("http://{}/image.png", server.addr);
    let out = run(
        &wrk,
        &["-t1", "-c16", "-d1s", &url],
        Duration::from_secs(60),
    );
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Requests/sec"), "{log}");
    assert!(!log.contains("Non-2xx"), "{log}");
    assert!(!log.contains("Socket errors"), "{log}");
}

#[test]
fn ab() {
    let Some(ab) = require("ab") else { return };
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let url = format!("http://{}/style.css", server.addr);
    for keep_alive in [false, true] {
        let mut args = vec!["-q", "-n", "2000", "-c", "8"];
        if keep_alive {
            args.push("-k");
        }
        args.push(&url);
        let out = run(&ab, &args, Duration::from_secs(120));
        let log = text(&out);
        assert!(out.status.success(), "{log}");
        assert!(log.contains("Complete requests:      2000"), "{log}");
        assert!(log.contains("Failed requests:        0"), "{log}");
        assert!(!log.contains("Non-2xx"), "{log}");
        if keep_alive {
            assert!(log.contains("Keep-Alive requests:    2000"), "{log}");
        }
    }
}

#[test]
fn httperf() {
    let Some(httperf) = require("httperf") else {
        return;
    };
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let port = server.addr.port().to_string();
    let out = run(
        &httperf,
        &[
            "--server",
            "127.0.0.1",
            "--port",
            &port,
            "--uri",
            "/photo.jpg",
            "--num-conns",
            "200",
            "--num-calls",
            "5",
            "--rate",
            "400",
            "--timeout",
            "10",
        ],
        Duration::from_secs(120),
    );
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("2xx=1000 3xx=0 4xx=0 5xx=0"), "{log}");
    assert!(log.contains("Errors: total 0"), "{log}");
}

#[test]
fn chromium_loads_a_page_with_an_image_and_a_stylesheet() {
    let Some(chromium) = require("chromium") else {
        return;
    };
    let dir = tree();
    std::fs::write(dir.path().join("pixel.png"), PIXEL_PNG).unwrap();
    std::fs::write(
        dir.path().join("docs/site.css"),
        "body { color: rgb(1, 2, 3) }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("docs/page.html"),
        r#"<!DOCTYPE html>
<html><head><title>t</title><link rel="stylesheet" href="site.css"></head>
<body><img id="px" src="/pixel.png"><p id="out">pending</p>
<script>
window.addEventListener('load', function () {
  var img = document.getElementById('px');
  var color = getComputedStyle(document.body).color;
  document.getElementById('out').textContent =
    'img=' + img.naturalWidth + 'x' + img.naturalHeight + ' color=' + color;
});
</script></body></html>
"#,
    )
    .unwrap();
    let log = dir.path().join("access.log");
    let profile = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.access_log = Some(log.clone());
    let server = TestServer::start(c);
    let url = format!("http://{}/docs/page.html", server.addr);
    let out = run(
        &chromium,
        &[
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            &format!("--user-data-dir={}", profile.path().display()),
            "--dump-dom",
            &url,
        ],
        Duration::from_secs(120),
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("img=1x1 color=rgb(1, 2, 3)"),
        "the image or the stylesheet did not load:\n{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(server);
    let seen = std::fs::read_to_string(&log).unwrap();
    for path in ["/docs/page.html", "/pixel.png", "/docs/site.css"] {
        assert!(
            seen.contains(&format!("\"GET {path} HTTP/1.1\" 200 ")),
            "{path}:\n{seen}"
        );
    }
}
