//! A connection's last response (the client sent `Connection: close`, or HTTP/1.0) leaves
//! with the FIN in one segment, as nginx's does: the moment its last byte can be read, so can
//! the end of the stream. And closing that way loses nothing: bytes the client sends after
//! its last request do not cost it the response.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use common::{get, read_response, tree, TestServer};

/// After `s` read one whole response, whether the end of the stream is already there
/// (checked without waiting).
fn end_of_stream_is_already_there(s: &mut std::net::TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let r = s.read(&mut b);
    s.set_nonblocking(false).unwrap();
    match r {
        Ok(0) => true,
        Ok(_) => panic!("bytes after the last response"),
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("reading after the last response: {e}"),
    }
}

#[test]
fn the_last_response_and_the_fin_arrive_together() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    let requests = [
        // A cached body, a simple answer, a HEAD, HTTP/1.0, two pipelined.
        get("/photo.jpg", "Connection: close\r\n"),
        get("/missing.txt", "Connection: close\r\n"),
        get("/a.txt", "Connection: close\r\n").replacen("GET", "HEAD", 1),
        "GET /style.css HTTP/1.0\r\n\r\n".to_owned(),
        format!(
            "{}{}",
            get("/a.txt", ""),
            get("/image.png", "Connection: close\r\n")
        ),
    ];
    let mut separate = Vec::new();
    for round in 0..10 {
        for request in &requests {
            let mut s = server.connect();
            s.write_all(request.as_bytes()).unwrap();
            let head_only = request.starts_with("HEAD");
            let mut last = read_response(&mut s, head_only).expect("a response");
            if request.matches("GET ").count() == 2 {
                last = read_response(&mut s, false).expect("the second response");
            }
            assert_eq!(last.header("connection"), Some("close"));
            if !end_of_stream_is_already_there(&mut s) {
                separate.push(format!(
                    "round {round}: {}",
                    request.lines().next().unwrap()
                ));
            }
        }
    }
    assert!(
        separate.is_empty(),
        "the FIN came after the last response, in a segment of its own: {separate:?}"
    );
}

#[test]
fn bytes_sent_after_the_last_request_do_not_cost_the_response() {
    let dir = tree();
    let server = TestServer::serve(dir.path());
    for round in 0..20 {
        let mut s = server.connect();
        s.write_all(get("/photo.jpg", "Connection: close\r\n").as_bytes())
            .unwrap();
        // A client that breaks the rule (RFC 9112 §9.6) and sends more, at different moments
        // around the server's close.
        if round % 2 == 1 {
            std::thread::sleep(Duration::from_micros(50 * round));
        }
        let _ = s.write_all(get("/a.txt", "").as_bytes());
        let r =
            read_response(&mut s, false).unwrap_or_else(|| panic!("round {round}: no response"));
        assert_eq!((r.status, r.body.len()), (200, 5000), "round {round}");
    }
}
