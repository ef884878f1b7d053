//! RFC 9112 §6.3 / RFC 9110 §8.6: a response's framing is always true. The open-file cache
//! keeps descriptors and lengths across requests; a file truncated, grown, rewritten, replaced
//! or deleted between two requests (within the same second, when the cache used to trust its
//! entry) must be answered with its new length and bytes, or 404; a file truncated while its
//! body is in flight ends the connection early (the one case no server can complete).

mod common;

use std::io::Write;
use std::path::Path;

use common::*;

/// Bytes that differ for each `seed`, so a stale body is noticed.
fn content(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// GET `path` on `s` (keep-alive), the whole response read by its Content-Length.
fn fetch(s: &mut std::net::TcpStream, path: &str) -> Response {
    s.write_all(get(path, "").as_bytes()).unwrap();
    read_response(s, false).expect("a response")
}

fn rewrite_in_place(p: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(p)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// The case and its relatives, for a file served by send_file (100 KB) and one served
/// from memory (5 KB), on one kept-alive connection and without waiting a second.
#[test]
fn files_changed_between_requests_are_served_as_they_are_now() {
    for (name, big) in [("big.bin", 100_000usize), ("small.txt", 5_000)] {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        let path = format!("/{name}");
        std::fs::write(&p, content(big, 1)).unwrap();
        let server = TestServer::serve(dir.path());
        let mut s = server.connect();
        let r = fetch(&mut s, &path);
        assert!(r.body == content(big, 1), "{name}");

        // Truncated in place (same inode).
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(big as u64 / 2)
            .unwrap();
        let r = fetch(&mut s, &path);
        assert_eq!(
            r.header("content-length"),
            Some((big / 2).to_string().as_str())
        );
        assert!(r.body == content(big, 1)[..big / 2], "{name} truncated");

        // Grown in place.
        rewrite_in_place(&p, &content(big * 2, 2));
        let r = fetch(&mut s, &path);
        assert!(r.body == content(big * 2, 2), "{name} grown");

        // Rewritten in place, same length.
        rewrite_in_place(&p, &content(big * 2, 3));
        let r = fetch(&mut s, &path);
        assert!(r.body == content(big * 2, 3), "{name} rewritten");

        // Replaced by rename.
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, content(big / 3, 4)).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        let r = fetch(&mut s, &path);
        assert!(r.body == content(big / 3, 4), "{name} replaced");

        // Deleted.
        std::fs::remove_file(&p).unwrap();
        assert_eq!(fetch(&mut s, &path).status, 404, "{name} deleted");

        // Created again.
        std::fs::write(&p, content(7, 5)).unwrap();
        let r = fetch(&mut s, &path);
        assert!(r.body == content(7, 5), "{name} recreated");

        // Ranges and validators follow the new file too.
        s.write_all(get(&path, "Range: bytes=5-\r\n").as_bytes())
            .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.header("content-range"), Some("bytes 5-6/7"));
    }
}

/// A file truncated while its body is in flight: the server cannot keep its promise, so it
/// ends the connection (nginx logs "file was truncated" and closes); the client sees fewer
/// bytes than Content-Length and then EOF, never a hang or bytes of another response.
#[test]
fn a_file_truncated_in_flight_ends_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("huge.bin");
    let len = 32 << 20;
    std::fs::write(&p, content(len, 9)).unwrap();
    let server = TestServer::serve(dir.path());
    let (got, announced) = truncate_in_flight(server.addr, &p, "/huge.bin");
    assert_eq!(announced, len);
    assert!(got < len, "got {got} of {len}");
}
