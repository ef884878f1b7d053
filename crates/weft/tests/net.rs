//! TCP over loopback on both I/O backends: every test runs once per backend, each on its own
//! cluster built with `ClusterBuilder::io`.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};
use weft::IoBackend;

mod common;
use common::{backends, cluster, echo_server, raise_nofile};

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

/// Connections that open and close one after another reuse descriptor numbers all the time,
/// sometimes through a `dup` that outlives the original (the epoll entry for the old file then
/// stays): each new socket must still be woken (the epoll backend adds every socket to a
/// processor's epoll once, edge-triggered, and remembers that in the socket, not by number).
#[test]
fn reused_descriptor_numbers_still_wake_their_new_sockets() {
    for backend in backends() {
        let c = cluster(backend, 2);
        let addr = echo_server(&c);
        let rounds = c
            .spawn(move || {
                let mut kept = Vec::new();
                for i in 0..2_000u32 {
                    let s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let reader = s.try_clone().unwrap();
                    reader
                        .set_read_timeout(Some(Duration::from_secs(10)))
                        .unwrap();
                    // Every other round the original closes first and the clone lives on a
                    // while; the rest close both at once.
                    let msg = i.to_le_bytes();
                    (&s).write_all(&msg).unwrap();
                    if i % 2 == 0 {
                        drop(s);
                        let mut back = [0u8; 4];
                        (&reader).read_exact(&mut back).unwrap();
                        assert_eq!(back, msg, "{backend}: round {i}");
                        kept.push(reader);
                        if kept.len() > 8 {
                            kept.remove(0);
                        }
                    } else {
                        let mut back = [0u8; 4];
                        (&reader).read_exact(&mut back).unwrap();
                        assert_eq!(back, msg, "{backend}: round {i}");
                    }
                    if i % 16 == 0 {
                        weft::yield_now();
                    }
                }
                2_000u32
            })
            .join()
            .unwrap();
        assert_eq!(rounds, 2_000);
    }
}

/// After a short receive a stream waits for the next read edge instead of trying (epoll) or
/// polls first (uring). Data that arrives while nobody waits (the readiness report comes and
/// goes with no waiter) must still be read, and end of stream must keep reading as 0.
#[test]
fn data_arriving_while_nobody_waits_is_read_and_end_of_stream_repeats() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"a").unwrap();
            std::thread::sleep(Duration::from_millis(20));
            // Arrives while the server fiber sleeps, not waiting on the socket.
            s.write_all(b"b").unwrap();
            std::thread::sleep(Duration::from_millis(200));
            s.write_all(b"c").unwrap();
            // Then end of stream.
        });
        let got = c
            .spawn(move || {
                let (s, _) = listener.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 64];
                let mut got = Vec::new();
                let n = (&s).read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                // The processor idles in its driver meanwhile and sees "b" arrive.
                weft::sleep(Duration::from_millis(100)).unwrap();
                while got.len() < 3 {
                    let n = (&s)
                        .read(&mut buf)
                        .unwrap_or_else(|e| panic!("{backend}: {e}"));
                    assert!(n > 0, "{backend}: early end of stream");
                    got.extend_from_slice(&buf[..n]);
                }
                for _ in 0..3 {
                    assert_eq!((&s).read(&mut buf).unwrap(), 0, "{backend}: end of stream");
                }
                got
            })
            .join()
            .unwrap();
        client.join().unwrap();
        assert_eq!(got, b"abc", "{backend}");
    }
}

/// A fiber whose socket always has data never has to park (on epoll every receive succeeds
/// at once); it must still be made to yield now and then, or the other fibers of its processor
/// (here one waiting on timers) would starve.
#[test]
fn a_reader_whose_socket_never_runs_dry_does_not_starve_its_processor() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flooder = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                let block = [7u8; 64 * 1024];
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&block).is_err() {
                        return;
                    }
                }
            })
        };
        let ticker_done = Arc::new(AtomicBool::new(false));
        let ticker = {
            let done = ticker_done.clone();
            c.spawn(move || {
                for _ in 0..20 {
                    weft::sleep(Duration::from_millis(1)).unwrap();
                }
                done.store(true, Ordering::Relaxed);
            })
        };
        let reads_cap = 3_000_000u64;
        let reads = {
            let done = ticker_done.clone();
            c.spawn(move || {
                let (s, _) = listener.accept().unwrap();
                let mut byte = [0u8; 1];
                let mut reads = 0u64;
                // One byte at a time: the flooder keeps the socket full.
                while !done.load(Ordering::Relaxed) && reads < reads_cap {
                    assert_eq!((&s).read(&mut byte).unwrap(), 1);
                    reads += 1;
                }
                reads
            })
            .join()
            .unwrap()
        };
        stop.store(true, Ordering::Relaxed);
        ticker.join().unwrap();
        flooder.join().unwrap();
        assert!(
            reads < reads_cap,
            "{backend}: the timer fiber never ran while the reader read {reads} times"
        );
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
    const ROUNDS: usize = 16;
    for backend in backends() {
        let c = cluster(backend, 2);
        // Several rounds. In odd ones a spinning fiber occupies the reader's processor when the
        // cancel comes, so the reader resumes on the other one and must forward its cancel to
        // the processor that owns the operation; in even ones the spinner occupies the other
        // processor, so the cancel is local. The test checks both happened.
        let (mut stayed, mut moved) = (0, 0);
        for round in 0..ROUNDS {
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
            let reader_thread = Arc::new(std::sync::Mutex::new(None));
            let reader = {
                let (client, returned, peer_wrote, in_read) = (
                    client.clone(),
                    returned.clone(),
                    peer_wrote.clone(),
                    in_read.clone(),
                );
                let reader_thread = reader_thread.clone();
                // Migratable, so the cancel can resume it on the other processor (a started
                // fiber otherwise stays on its own).
                // SAFETY: the reader holds nothing thread-bound across its blocking calls (a
                // `ThreadId` is a plain value; the stream and flags are `Send + Sync`).
                let builder = unsafe { weft::Builder::new().cluster(&c).migratable() };
                builder
                    .spawn(move || {
                        let mut buf = [SENTINEL; 64];
                        *reader_thread.lock().unwrap() = Some(std::thread::current().id());
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
                    .unwrap()
            };
            while !in_read.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            let on_reader_thread = round % 2 == 1;
            let reader_thread = reader_thread.lock().unwrap().unwrap();
            // Spinners that land on the unwanted processor hold it until one lands on the
            // wanted one (processors wake LIFO, so the next spinner goes elsewhere).
            let found = Arc::new(AtomicBool::new(false));
            let mut spinners = Vec::new();
            for _ in 0..8 {
                let flag = found.clone();
                spinners.push(c.spawn(move || {
                    let t = Instant::now();
                    if (std::thread::current().id() == reader_thread) == on_reader_thread {
                        let base = weft::io::forwarded_cancels();
                        flag.store(true, Ordering::SeqCst);
                        // On the reader's processor, hold it until the reader (resumed
                        // elsewhere) has forwarded its cancel here, however slowly the
                        // machine gets there; elsewhere, just long enough to be in the way.
                        let hold = if on_reader_thread {
                            Duration::from_secs(5)
                        } else {
                            Duration::from_millis(30)
                        };
                        while t.elapsed() < hold
                            && !(on_reader_thread && weft::io::forwarded_cancels() > base)
                        {
                            std::hint::spin_loop();
                        }
                    } else {
                        while !flag.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(2) {
                            std::hint::spin_loop();
                        }
                    }
                }));
                let t = Instant::now();
                while !found.load(Ordering::SeqCst) && t.elapsed() < Duration::from_millis(20) {
                    std::thread::yield_now();
                }
                if found.load(Ordering::SeqCst) {
                    break;
                }
            }
            assert!(
                found.load(Ordering::SeqCst),
                "a spinner lands on the wanted processor"
            );
            // Let an unwanted spinner give its processor back.
            std::thread::sleep(Duration::from_millis(2));
            let forwarded_before = weft::io::forwarded_cancels();
            reader.cancel();
            while !returned.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            (&peer).write_all(b"after the cancel").unwrap();
            peer_wrote.store(true, Ordering::SeqCst);
            let (err, buf) = reader.join().unwrap();
            // Other tests may forward cancels too, so only "it happened" can be checked.
            if weft::io::forwarded_cancels() > forwarded_before {
                moved += 1;
            } else {
                stayed += 1;
            }
            if on_reader_thread {
                assert!(
                    weft::io::forwarded_cancels() > forwarded_before,
                    "{backend} round {round}: the cancel was not forwarded"
                );
            }
            for h in spinners {
                h.join().unwrap();
            }
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
        println!("{backend}: cancelled on the owning processor {stayed} times, elsewhere {moved}");
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
fn a_processor_kept_busy_by_yielding_fibers_still_does_io() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = {
            let stop = stop.clone();
            c.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    weft::yield_now();
                }
            })
        };
        let reader = {
            let stop = stop.clone();
            c.spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                let mut b = [0u8; 3];
                s.read_exact(&mut b).unwrap();
                stop.store(true, Ordering::SeqCst);
                b
            })
        };
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"hey").unwrap();
        assert_eq!(&reader.join().unwrap(), b"hey", "{backend}");
        spinner.join().unwrap();
    }
}

#[test]
fn write_timeout_is_timed_out_when_the_peer_does_not_read() {
    for backend in backends() {
        let c = cluster(backend, 2);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = c.spawn(move || listener.accept().unwrap().0);
        c.spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let peer = peer.join().unwrap();
            s.set_write_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let chunk = vec![7u8; 1 << 20];
            let t = Instant::now();
            let mut sent = 0usize;
            let err = loop {
                match s.write(&chunk) {
                    Ok(n) => sent += n,
                    Err(e) => break e,
                }
                assert!(
                    t.elapsed() < Duration::from_secs(10),
                    "{backend}: never blocked"
                );
            };
            assert_eq!(err.kind(), ErrorKind::TimedOut, "{backend}: {err}");
            // Everything reported as sent arrives, nothing more: a cancelled send sent nothing.
            s.shutdown(Shutdown::Write).unwrap();
            let mut got = 0usize;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match (&peer).read(&mut buf).unwrap() {
                    0 => break,
                    n => got += n,
                }
            }
            assert_eq!(got, sent, "{backend}");
        })
        .join()
        .unwrap();
    }
}

/// A lone processor leaves its batched submissions to the sleep that follows an empty run
/// queue; when a due timer or a woken fiber keeps it from sleeping, it must submit them anyway.
/// Clients, server and a ticker whose timer is due every few rounds share one processor; every
/// round trip must complete (a stranded submission would show as a read timing out).
#[test]
fn a_lone_processor_with_timers_always_due_never_strands_a_submission() {
    const CLIENTS: usize = 8;
    const ROUND_TRIPS: usize = 300;
    for backend in backends() {
        let c = cluster(backend, 1);
        let addr = echo_server(&c);
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let stop = stop.clone();
            c.spawn(move || {
                let mut ticks = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    weft::sleep(Duration::from_micros(20)).unwrap();
                    ticks += 1;
                }
                ticks
            })
        };
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                c.spawn(move || {
                    let s = TcpStream::connect(addr).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                    let mut rng = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut buf = [0u8; 8];
                    for n in 0..ROUND_TRIPS as u64 {
                        (&s).write_all(&n.to_le_bytes()).unwrap();
                        (&s).read_exact(&mut buf).map_err(|e| (n, e)).unwrap();
                        assert_eq!(u64::from_le_bytes(buf), n);
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        match rng % 4 {
                            0 => weft::sleep(Duration::from_micros(rng % 100)).unwrap(),
                            1 => weft::yield_now(),
                            _ => {}
                        }
                    }
                })
            })
            .collect();
        for client in clients {
            client
                .join()
                .unwrap_or_else(|_| panic!("{backend}: a client failed"));
        }
        stop.store(true, Ordering::SeqCst);
        assert!(ticker.join().unwrap() > 0, "{backend}");
    }
}
