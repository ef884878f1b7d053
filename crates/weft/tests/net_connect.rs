//! Connecting, accepting and closing over loopback on both I/O backends: a refused connect,
//! several acceptors on one listener, a burst of queued connections, and a close with a reset.

use std::io::{ErrorKind, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft::net::{TcpListener, TcpStream};

mod common;
use common::{backends, cluster};

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

/// A burst of connections waiting in the kernel's accept queue is taken in one turn of the
/// accepting fiber, not one connection per pass of the run queue: with 64 other fibers
/// runnable all the time (semaphore ping-pong, like busy connections), accepting 256 queued
/// connections must not cost the others hundreds of passes. Counts, not times: the ping-pong
/// fibers count their rounds while the burst is accepted. (On io_uring every accept used to
/// be a ring round trip, so the accept fiber went to the back of the queue after each one:
/// 1,000 new wrk connections then waited up to a second for their first reply.)
#[test]
fn a_burst_of_queued_connections_is_accepted_in_few_passes_of_the_run_queue() {
    use weft::sync::Semaphore;
    const BURST: usize = 256;
    const PAIRS: usize = 32;
    for backend in backends() {
        let c = cluster(backend, 1);
        let passes = c
            .spawn(move || {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                // Plain connects: the handshakes complete in the kernel, the connections wait
                // in the accept queue.
                let clients: Vec<_> = (0..BURST)
                    .map(|_| std::net::TcpStream::connect(addr).unwrap())
                    .collect();
                let stop = Arc::new(AtomicBool::new(false));
                let rounds = Arc::new(AtomicUsize::new(0));
                let mut busy = Vec::new();
                for _ in 0..PAIRS {
                    let (sa, sb) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
                    let (stop_a, rounds_a) = (stop.clone(), rounds.clone());
                    let (sa2, sb2) = (sa.clone(), sb.clone());
                    busy.push(weft::spawn(move || loop {
                        let stopping = stop_a.load(Ordering::SeqCst);
                        sb2.release();
                        if stopping {
                            break;
                        }
                        sa2.acquire().unwrap();
                        rounds_a.fetch_add(1, Ordering::Relaxed);
                    }));
                    let (stop_b, rounds_b) = (stop.clone(), rounds.clone());
                    busy.push(weft::spawn(move || loop {
                        sb.acquire().unwrap();
                        rounds_b.fetch_add(1, Ordering::Relaxed);
                        let stopping = stop_b.load(Ordering::SeqCst);
                        sa.release();
                        if stopping {
                            break;
                        }
                    }));
                }
                // Let the ping-pong get going, then take the whole burst.
                while rounds.load(Ordering::Relaxed) < 2 * 2 * PAIRS {
                    weft::yield_now();
                }
                let before = rounds.load(Ordering::Relaxed);
                let accepted: Vec<_> = (0..BURST).map(|_| listener.accept().unwrap()).collect();
                let after = rounds.load(Ordering::Relaxed);
                stop.store(true, Ordering::SeqCst);
                for b in busy {
                    b.join().unwrap();
                }
                assert_eq!(accepted.len(), clients.len());
                // Every fiber counts once per round, so one pass of the queue is 2 * PAIRS.
                (after - before) / (2 * PAIRS)
            })
            .join()
            .unwrap();
        println!(
            "{backend}: {passes} passes of the run queue while {BURST} connections were accepted"
        );
        assert!(
            passes < BURST / 8,
            "{backend}: the other fibers ran {passes} passes while {BURST} queued connections \
             were accepted; a burst should take a few turns of the accepting fiber"
        );
    }
}

#[test]
fn a_stream_set_to_linger_zero_resets_the_connection_when_dropped() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (linger_before, linger_after) = c
            .spawn(move || {
                let s = TcpStream::connect(addr).unwrap();
                let before = s.linger().unwrap();
                s.set_linger(Some(Duration::ZERO)).unwrap();
                let after = s.linger().unwrap();
                drop(s);
                (before, after)
            })
            .join()
            .unwrap();
        assert_eq!(linger_before, None);
        assert_eq!(linger_after, Some(Duration::ZERO));
        let (mut accepted, _) = listener.accept().unwrap();
        accepted
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 1];
        let err = accepted.read(&mut buf).unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::ConnectionReset,
            "{backend:?}: a reset, not an end of file"
        );
    }
}
