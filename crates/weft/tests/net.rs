//! TCP over loopback on both I/O backends: every test runs once per backend, each on its own
//! cluster built with `ClusterBuilder::io`.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};
use weft::{Cluster, IoBackend};

/// Both backends, or the ones listed in `WEFT_TEST_IO` (`uring,epoll`), e.g. to strace one.
fn backends() -> Vec<IoBackend> {
    match std::env::var("WEFT_TEST_IO") {
        Ok(list) => list.split(',').map(|b| b.parse().unwrap()).collect(),
        Err(_) => vec![IoBackend::Uring, IoBackend::Epoll],
    }
}

fn cluster(backend: IoBackend, processors: usize) -> Cluster {
    let c = Cluster::builder()
        .name(format!("net-{backend}"))
        .processors(processors)
        .io(backend)
        .build()
        .unwrap();
    assert_eq!(
        c.io_backend(),
        backend,
        "this machine should support {backend}"
    );
    c
}

fn raise_nofile(want: u64) {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn echo_server(c: &Cluster) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let c2 = c.clone();
    c.spawn(move || loop {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        c2.spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match (&stream).read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if (&stream).write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    });
    addr
}

#[test]
fn echo_round_trip_between_fibers() {
    for backend in backends() {
        let c = cluster(backend, 2);
        let addr = echo_server(&c);
        let got = c
            .spawn(move || {
                assert_eq!(weft::io::backend(), Some(backend));
                if backend == IoBackend::Uring {
                    println!("io_uring flags: {:?}", weft::io::uring_flags());
                    assert!(weft::io::uring_flags().is_some());
                }
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_nodelay(true).unwrap();
                assert!(s.nodelay().unwrap());
                assert_eq!(s.peer_addr().unwrap(), addr);
                assert_eq!(s.local_addr().unwrap().ip(), addr.ip());
                s.write_all(b"hello, ").unwrap();
                let n = s
                    .write_vectored(&[IoSlice::new(b"vectored "), IoSlice::new(b"world")])
                    .unwrap();
                assert_eq!(n, 14);
                let mut buf = [0u8; 21];
                s.read_exact(&mut buf).unwrap();
                // A large message crosses many reads and writes.
                let big: Vec<u8> = (0..1_000_000u32).map(|i| i as u8).collect();
                let reader = {
                    let s2 = s.try_clone().unwrap();
                    weft::spawn(move || {
                        let mut back = vec![0u8; 1_000_000];
                        (&s2).read_exact(&mut back).unwrap();
                        back
                    })
                };
                s.write_all(&big).unwrap();
                let back = reader.join().unwrap();
                assert!(back == big, "{backend}: big echo differs");
                s.shutdown(Shutdown::Write).unwrap();
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                assert!(rest.is_empty());
                buf
            })
            .join()
            .unwrap();
        assert_eq!(&got, b"hello, vectored world", "{backend}");
        assert_eq!(weft::io::backend(), None, "plain threads have no driver");
    }
}

#[test]
fn a_thousand_concurrent_connections_on_two_processors() {
    raise_nofile(8192);
    const CONNECTIONS: usize = 1000;
    const ROUNDS: usize = 5;
    for backend in backends() {
        let c = cluster(backend, 2);
        let addr = echo_server(&c);
        let done = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let clients: Vec<_> = (0..CONNECTIONS)
            .map(|i| {
                let done = done.clone();
                c.spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    for r in 0..ROUNDS {
                        let msg = format!("client {i} round {r}");
                        s.write_all(msg.as_bytes()).unwrap();
                        let mut back = vec![0u8; msg.len()];
                        s.read_exact(&mut back).unwrap();
                        assert_eq!(back, msg.as_bytes());
                        if r == 0 {
                            // Let every connection be open at once before going on.
                            weft::yield_now();
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        for h in clients {
            h.join().unwrap();
        }
        assert_eq!(done.load(Ordering::Relaxed), CONNECTIONS);
        println!(
            "{backend}: {CONNECTIONS} connections x {ROUNDS} round trips in {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn read_timeout_is_timed_out_and_the_stream_still_works() {
    for backend in backends() {
        let c = cluster(backend, 2);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = c.spawn(move || {
            let (s, _) = listener.accept().unwrap();
            s
        });
        c.spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let peer = peer.join().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            assert_eq!(s.read_timeout().unwrap(), Some(Duration::from_millis(100)));
            let t = Instant::now();
            let mut buf = [0u8; 8];
            let err = s.read(&mut buf).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::TimedOut, "{backend}: {err}");
            assert!(t.elapsed() >= Duration::from_millis(100));
            assert!(t.elapsed() < Duration::from_secs(5));
            (&peer).write_all(b"late").unwrap();
            s.read_exact(&mut buf[..4]).unwrap();
            assert_eq!(&buf[..4], b"late");
            assert!(s.set_read_timeout(Some(Duration::ZERO)).is_err());
        })
        .join()
        .unwrap();
    }
}

#[test]
fn cancelling_a_fiber_blocked_in_read_leaves_its_buffer_alone() {
    const SENTINEL: u8 = 0xA5;
    for backend in backends() {
        let c = cluster(backend, 2);
        // Several rounds: the cancelled fiber resumes on either processor, so both the local
        // and the forwarded cancel paths get exercised.
        for round in 0..10 {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = c.spawn(move || listener.accept().unwrap().0);
            let client = Arc::new(
                c.spawn(move || TcpStream::connect(addr).unwrap())
                    .join()
                    .unwrap(),
            );
            let peer = peer.join().unwrap();
            let returned = Arc::new(AtomicBool::new(false));
            let peer_wrote = Arc::new(AtomicBool::new(false));
            let in_read = Arc::new(AtomicBool::new(false));
            let reader = {
                let (client, returned, peer_wrote, in_read) = (
                    client.clone(),
                    returned.clone(),
                    peer_wrote.clone(),
                    in_read.clone(),
                );
                c.spawn(move || {
                    let mut buf = [SENTINEL; 64];
                    in_read.store(true, Ordering::SeqCst);
                    let err = (&*client).read(&mut buf).unwrap_err();
                    returned.store(true, Ordering::SeqCst);
                    // Stay on this stack frame while the peer writes: a read still in flight
                    // would land in `buf` now.
                    while !peer_wrote.load(Ordering::SeqCst) {
                        weft::yield_now();
                    }
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_millis(20) {
                        weft::yield_now();
                    }
                    (err, buf)
                })
            };
            while !in_read.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            reader.cancel();
            while !returned.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            (&peer).write_all(b"after the cancel").unwrap();
            peer_wrote.store(true, Ordering::SeqCst);
            let (err, buf) = reader.join().unwrap();
            assert_eq!(
                err.kind(),
                ErrorKind::Other,
                "{backend} round {round}: {err}"
            );
            assert!(
                err.get_ref().is_some_and(|e| e.is::<weft::Cancelled>()),
                "{backend}: {err:?}"
            );
            assert!(
                buf.iter().all(|&b| b == SENTINEL),
                "{backend} round {round}: buffer written after return"
            );
            // The bytes are still in the socket, and the processors still serve I/O.
            let got = c
                .spawn(move || {
                    let mut buf = [0u8; 16];
                    (&*client).read_exact(&mut buf).unwrap();
                    buf
                })
                .join()
                .unwrap();
            assert_eq!(&got, b"after the cancel");
        }
    }
}

#[test]
fn an_idle_cluster_wakes_for_a_connection_and_for_a_timer() {
    for backend in backends() {
        let c = cluster(backend, 2);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = c.spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).unwrap();
            buf
        });
        // Every processor goes to sleep in the kernel.
        std::thread::sleep(Duration::from_millis(200));
        assert!(!accepted.is_finished());
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"ping").unwrap();
        assert_eq!(&accepted.join().unwrap(), b"ping");

        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        c.spawn(|| weft::sleep(Duration::from_millis(100)).unwrap())
            .join()
            .unwrap();
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(100) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}

#[test]
fn plain_threads_use_blocking_calls() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        assert_eq!(s.peer_addr().unwrap(), peer);
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let err = s.read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TimedOut);
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"plain").unwrap();
    let mut buf = [0u8; 5];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"plain");
    server.join().unwrap();
    // A weft server fiber and a plain-thread client mix freely, on both backends.
    for backend in backends() {
        let c = cluster(backend, 1);
        let addr = echo_server(&c);
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"mixed").unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"mixed");
    }
}

#[test]
fn connect_to_a_closed_port_fails_on_both_backends() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    for backend in backends() {
        let c = cluster(backend, 1);
        let err = c
            .spawn(move || TcpStream::connect(addr).unwrap_err())
            .join()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{backend}: {err}");
    }
    assert_eq!(
        TcpStream::connect(addr).unwrap_err().kind(),
        ErrorKind::ConnectionRefused
    );
}

#[test]
fn several_fibers_accept_on_one_listener() {
    const ACCEPTORS: usize = 4;
    const CONNECTIONS: usize = 40;
    for backend in backends() {
        // One processor: every acceptor waits on the same descriptor of the same driver.
        let c = cluster(backend, 1);
        let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let acceptors: Vec<_> = (0..ACCEPTORS)
            .map(|_| {
                let (listener, accepted) = (listener.clone(), accepted.clone());
                c.spawn(move || {
                    while accepted.load(Ordering::SeqCst) < CONNECTIONS {
                        let (mut s, _) = listener.accept().unwrap();
                        let mut b = [0u8; 1];
                        // The last few connections only release blocked acceptors and may
                        // be gone already.
                        if s.read_exact(&mut b).is_ok() {
                            let _ = s.write_all(&b);
                        }
                        accepted.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for i in 0..CONNECTIONS + ACCEPTORS - 1 {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(&[i as u8]).unwrap();
            if i < CONNECTIONS {
                let mut b = [0u8; 1];
                s.read_exact(&mut b).unwrap();
                assert_eq!(b[0], i as u8);
            }
        }
        for h in acceptors {
            h.join().unwrap();
        }
        assert!(accepted.load(Ordering::SeqCst) >= CONNECTIONS);
    }
}
