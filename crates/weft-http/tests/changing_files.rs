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

/// With `open_file_cache_valid` above zero (nginx's `open_file_cache_valid`, the operator's
/// choice) a file changed within the window is served as it was: from memory, the old bytes
/// under the old length; from the descriptor after it shrank in place, the old length and a
/// short body, then the connection ends (never a hang, never another response's bytes).
/// Other connections are served all along; after the window the change shows.
#[test]
fn within_the_valid_window_a_changed_file_is_served_as_it_was_or_ends_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (big, small) = (dir.path().join("big.bin"), dir.path().join("small.txt"));
    std::fs::write(&big, content(100_000, 1)).unwrap();
    std::fs::write(&small, content(5_000, 1)).unwrap();
    let mut config = common::config(dir.path());
    // Long enough that a loaded test machine does the steps inside it.
    config.open_file_cache_valid = std::time::Duration::from_millis(4000);
    let server = TestServer::start(config);
    let mut s = server.connect();
    assert!(fetch(&mut s, "/big.bin").body == content(100_000, 1));
    assert!(fetch(&mut s, "/small.txt").body == content(5_000, 1));

    rewrite_in_place(&small, &content(5_000, 2));
    assert!(
        fetch(&mut s, "/small.txt").body == content(5_000, 1),
        "from memory within the window: the bytes as they were"
    );

    std::fs::OpenOptions::new()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(50_000)
        .unwrap();
    s.write_all(get("/big.bin", "").as_bytes()).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let announced = read_head_content_length(&mut s);
    let got = read_to_eof(&mut s);
    assert_eq!(announced, 100_000);
    assert_eq!(got, 50_000, "the bytes the file still has, then the end");

    let mut other = server.connect();
    assert!(fetch(&mut other, "/small.txt").body == content(5_000, 1));

    // Past the window (4 s and the coarse clock's tick, from the last check): both show.
    std::thread::sleep(std::time::Duration::from_millis(4500));
    assert!(fetch(&mut other, "/small.txt").body == content(5_000, 2));
    let r = fetch(&mut other, "/big.bin");
    assert!(r.body == content(100_000, 1)[..50_000]);
}
