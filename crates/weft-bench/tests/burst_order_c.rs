//! benches/burst_order/burst_order.c, the closed-loop client that says which requests of a
//! connection burst wait longest, built with `cc` and run against small servers in this test:
//! it frames replies by their Content-Length however the bytes arrive, reports every
//! connection's first request, and counts a reply it cannot frame as an error.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use weft_testkit::build_bench_c;

/// Builds burst_order.c into a scratch directory named after `test`; `None` when `cc` is
/// missing (a failure under `CI=true`).
fn build(test: &str) -> Option<PathBuf> {
    build_bench_c(
        "burst_order/burst_order.c",
        "weft-burst-order",
        test,
        &["-Werror"],
        &[],
    )
}

/// A server on 127.0.0.1 whose connection threads answer each request (a head ending in an
/// empty line) with `reply`, written in pieces of at most `piece` bytes.
fn serve(reply: &'static [u8], piece: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            std::thread::spawn(move || answer(stream, reply, piece));
        }
    });
    addr
}

fn answer(mut stream: TcpStream, reply: &[u8], piece: usize) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            for chunk in reply.chunks(piece) {
                if stream.write_all(chunk).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
}

fn run(binary: &PathBuf, addr: SocketAddr, connections: u32) -> Output {
    Command::new(binary)
        .args(["--server", &addr.to_string()])
        .args(["--connections", &connections.to_string()])
        .args(["--duration", "0.5", "--top", "3", "--path", "/f"])
        .output()
        .expect("run burst_order")
}

#[test]
fn replies_split_anywhere_are_framed_and_every_first_request_is_reported() {
    let Some(binary) = build("framed") else {
        return;
    };
    // The head and body arrive in pieces of 7 bytes: the framing must wait for the rest.
    const REPLY: &[u8] =
        b"HTTP/1.1 200 OK\r\nServer: test\r\ncontent-length: 11\r\n\r\nhello world";
    let addr = serve(REPLY, 7);
    let out = run(&binary, addr, 8);
    assert!(
        out.status.success(),
        "burst_order: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("burst_order prints one JSON object");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["connections"], 8, "{report}");
    let requests = report["requests"].as_u64().expect("requests");
    assert!(requests >= 8, "{report}");
    assert_eq!(report["first_requests"]["answered"], 8, "{report}");
    let latency = &report["latency_us"];
    let at = |p: &str| latency[p].as_f64().expect("a latency");
    assert!(at("p50") > 0.0, "{report}");
    assert!(at("p50") <= at("p99") && at("p99") <= at("p999") && at("max") >= at("p9999"));
    let slowest = report["slowest"].as_array().expect("slowest");
    assert_eq!(slowest.len(), 3, "{report}");
    assert_eq!(slowest[0]["latency_us"], latency["max"], "{report}");
    let overtaken = report["first_requests"]["overtaken_max"]
        .as_u64()
        .expect("a count");
    assert!(overtaken < requests, "{report}");
    std::fs::remove_dir_all(binary.parent().expect("its directory")).ok();
}

#[test]
fn a_reply_without_a_length_is_an_error_and_no_reply_fails_the_run() {
    let Some(binary) = build("unframed") else {
        return;
    };
    let addr = serve(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        4096,
    );
    let out = run(&binary, addr, 2);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no reply in 0.5 s (2 errors)"), "{stderr}");

    let usage = Command::new(&binary).output().expect("run burst_order");
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage: burst_order --server"));
    std::fs::remove_dir_all(binary.parent().expect("its directory")).ok();
}
