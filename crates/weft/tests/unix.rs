//! Unix-domain stream sockets on both I/O backends, and from plain threads.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use weft::net::{UnixListener, UnixStream};
use weft::{Cluster, IoBackend};

fn backends() -> Vec<IoBackend> {
    match std::env::var("WEFT_TEST_IO") {
        Ok(list) => list.split(',').map(|b| b.parse().unwrap()).collect(),
        Err(_) => vec![IoBackend::Uring, IoBackend::Epoll],
    }
}

fn cluster(backend: IoBackend) -> Cluster {
    let c = Cluster::builder()
        .name(format!("unix-{backend}"))
        .processors(2)
        .io(backend)
        .build()
        .unwrap();
    assert_eq!(c.io_backend(), backend);
    c
}

fn socket_path(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("weft-{}-{tag}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn unix_echo_on_both_backends() {
    for backend in backends() {
        let c = cluster(backend);
        let path = socket_path(&format!("echo-{backend}"));
        let listener = UnixListener::bind(&path).unwrap();
        assert_eq!(listener.local_addr().unwrap().as_pathname(), Some(&*path));
        let server = c.spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match (&stream).read(&mut buf).unwrap() {
                    0 => return,
                    n => (&stream).write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let p2 = path.clone();
        let got = c
            .spawn(move || {
                let mut s = UnixStream::connect(&p2).unwrap();
                assert_eq!(s.peer_addr().unwrap().as_pathname(), Some(&*p2));
                s.write_all(b"hello ").unwrap();
                let n = s
                    .write_vectored(&[IoSlice::new(b"unix "), IoSlice::new(b"world")])
                    .unwrap();
                assert_eq!(n, 10);
                let mut buf = [0u8; 16];
                s.read_exact(&mut buf).unwrap();
                let big: Vec<u8> = (0..500_000u32).map(|i| (i % 251) as u8).collect();
                let s2 = s.try_clone().unwrap();
                let reader = weft::spawn(move || {
                    let mut back = vec![0u8; 500_000];
                    (&s2).read_exact(&mut back).unwrap();
                    back
                });
                s.write_all(&big).unwrap();
                assert!(reader.join().unwrap() == big, "{backend}: big echo differs");
                s.shutdown(Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
                buf
            })
            .join()
            .unwrap();
        assert_eq!(&got, b"hello unix world");
        server.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn unix_read_timeout_and_pair() {
    for backend in backends() {
        let c = cluster(backend);
        c.spawn(move || {
            let (a, b) = UnixStream::pair().unwrap();
            a.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            assert_eq!(a.read_timeout().unwrap(), Some(Duration::from_millis(50)));
            let start = Instant::now();
            let mut buf = [0u8; 8];
            let e = (&a).read(&mut buf).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{backend}");
            assert!(start.elapsed() >= Duration::from_millis(45));
            (&b).write_all(b"still ok").unwrap();
            (&a).read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"still ok");
        })
        .join()
        .unwrap();
    }
}

#[test]
fn unix_sockets_work_from_plain_threads() {
    let path = socket_path("threads");
    let listener = UnixListener::bind(&path).unwrap();
    let p2 = path.clone();
    let t = std::thread::spawn(move || {
        let mut s = UnixStream::connect(&p2).unwrap();
        s.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    let (mut s, _) = listener.accept().unwrap();
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).unwrap();
    s.write_all(b"pong").unwrap();
    assert_eq!(&t.join().unwrap(), b"pong");
    let _ = std::fs::remove_file(&path);
}
