//! `TcpStream::recv_lent`: receives into the processor's shared buffers carry every byte,
//! fall back to the heap when every buffer is lent out, and get their buffers back however
//! the `Lent` is dropped (on the processor, or on another thread); end of stream and read
//! timeouts behave as `read`'s. On both backends.

use std::io::{ErrorKind, Read, Write};
use std::sync::mpsc;
use std::time::Duration;

use weft::io::{Lent, LENT_BUFFER_BYTES};
use weft::net::TcpStream;

mod common;
use common::{backends, listening, raise_nofile};

/// Buffers per processor (`io::lend::LENT_BUFFERS`).
const POOL: usize = 256;
/// On io_uring, receives go to the heap once fewer than this many buffers are left in the
/// ring (`io::lend::RING_LOW`).
const RING_LOW: usize = 16;

/// Every connection of `streams` receives once (its client has sent one byte); all the
/// `Lent`s are held together and returned.
fn receive_from_each(streams: &[TcpStream], round: u8) -> Vec<Lent> {
    streams
        .iter()
        .map(|s| {
            let l = s.recv_lent().unwrap();
            assert_eq!(&l[..], &[round], "one byte, the round's");
            l
        })
        .collect()
}

#[test]
fn lent_buffers_run_out_fall_back_and_come_back_from_any_thread() {
    raise_nofile(4096);
    for backend in backends() {
        let (c, listener, addr) = listening(backend, 1);
        let n = POOL + 8;
        let (round_tx, round_rx) = mpsc::channel::<u8>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        let clients = std::thread::spawn(move || {
            let mut socks: Vec<std::net::TcpStream> = (0..n)
                .map(|_| std::net::TcpStream::connect(addr).unwrap())
                .collect();
            while let Ok(round) = round_rx.recv() {
                for s in socks.iter_mut() {
                    s.write_all(&[round]).unwrap();
                }
                ready_tx.send(()).unwrap();
            }
        });
        let (drop_tx, drop_rx) = mpsc::channel::<Vec<Lent>>();
        let (dropped_tx, dropped_rx) = mpsc::channel::<()>();
        let dropper = std::thread::spawn(move || {
            while let Ok(lents) = drop_rx.recv() {
                assert!(lents.iter().all(|l| l.len() == 1));
                drop(lents);
                dropped_tx.send(()).unwrap();
            }
        });
        let pooled = c
            .spawn(move || {
                let streams: Vec<TcpStream> =
                    (0..n).map(|_| listener.accept().unwrap().0).collect();
                let mut pooled = Vec::new();
                for round in 1..=3u8 {
                    round_tx.send(round).unwrap();
                    ready_rx.recv().unwrap();
                    let lents = receive_from_each(&streams, round);
                    pooled.push(lents.iter().filter(|l| l.is_pooled()).count());
                    match round {
                        // Given back on a plain thread: the processor takes them back later.
                        1 => {
                            drop_tx.send(lents).unwrap();
                            dropped_rx.recv().unwrap();
                        }
                        // Given back on the processor.
                        _ => drop(lents),
                    }
                }
                drop(round_tx);
                drop(drop_tx);
                pooled
            })
            .join()
            .unwrap();
        clients.join().unwrap();
        dropper.join().unwrap();
        let lendable = match backend {
            weft::IoBackend::Uring => POOL - RING_LOW + 1,
            weft::IoBackend::Epoll => POOL,
        };
        assert_eq!(
            pooled,
            vec![lendable; 3],
            "{backend}: the first {lendable} receives of each round are pooled, the rest heap"
        );
    }
}

#[test]
fn lent_receives_carry_a_long_stream_in_order_and_end_empty() {
    for backend in backends() {
        let (c, listener, addr) = listening(backend, 2);
        let total = 3 * 1024 * 1024 + 17;
        let sent: Vec<u8> = (0..total).map(|i| (i * 31 % 251) as u8).collect();
        let to_send = sent.clone();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            for chunk in to_send.chunks(1000) {
                s.write_all(chunk).unwrap();
            }
        });
        let (got, sizes) = c
            .spawn(move || {
                let (s, _) = listener.accept().unwrap();
                let mut got = Vec::new();
                let mut largest = 0;
                loop {
                    let l = s.recv_lent().unwrap();
                    if l.is_empty() {
                        break;
                    }
                    largest = largest.max(l.len());
                    got.extend_from_slice(&l);
                    // Sometimes hold it across a switch: the fiber may resume elsewhere.
                    if got.len() % 7 == 0 {
                        weft::yield_now();
                    }
                }
                (got, largest)
            })
            .join()
            .unwrap();
        client.join().unwrap();
        assert!(sizes <= LENT_BUFFER_BYTES, "{backend}");
        assert!(
            got == sent,
            "{backend}: {} of {} bytes, or out of order",
            got.len(),
            sent.len()
        );
    }
}

#[test]
fn a_lent_receive_times_out_like_a_read_and_the_connection_still_works() {
    for backend in backends() {
        let (c, listener, addr) = listening(backend, 1);
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"late").unwrap();
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            assert_eq!(&b, b"ok");
        });
        c.spawn(move || {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            let e = s.recv_lent().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{backend}: {e}");
            go_tx.send(()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let l = s.recv_lent().unwrap();
            assert_eq!(&l[..], b"late", "{backend}");
            (&s).write_all(b"ok").unwrap();
        })
        .join()
        .unwrap();
        client.join().unwrap();
    }
}

#[test]
fn a_plain_thread_receives_into_the_heap() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(b"plain").unwrap();
    });
    let s = TcpStream::connect(addr).unwrap();
    let l = s.recv_lent().unwrap();
    assert_eq!(&l[..], b"plain");
    assert!(!l.is_pooled());
    client.join().unwrap();
}

#[test]
fn dropping_a_stream_that_receives_closes_it_for_the_peer() {
    for backend in backends() {
        let (c, listener, addr) = listening(backend, 1);
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"x").unwrap();
            let mut b = [0u8; 8];
            // The server dropped its stream after one receive: end of stream, not a hang.
            let n = s.read(&mut b).unwrap_or_else(|e| panic!("{backend}: {e}"));
            assert_eq!(n, 0, "{backend}");
        });
        c.spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let l = s.recv_lent().unwrap();
            assert_eq!(&l[..], b"x", "{backend}");
            drop(s);
        })
        .join()
        .unwrap();
        client.join().unwrap();
    }
}

#[test]
fn a_descriptor_given_away_after_lent_receives_gets_the_later_bytes() {
    for backend in backends() {
        let (c, listener, addr) = listening(backend, 1);
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"first").unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"second").unwrap();
        });
        let fd: std::os::fd::OwnedFd = c
            .spawn(move || {
                let (s, _) = listener.accept().unwrap();
                let l = s.recv_lent().unwrap();
                assert_eq!(&l[..], b"first", "{backend}");
                s.into()
            })
            .join()
            .unwrap();
        go_tx.send(()).unwrap();
        // Time for a receive still standing on the server's ring to take the bytes, if one
        // were left.
        std::thread::sleep(Duration::from_millis(100));
        let mut plain = std::net::TcpStream::from(fd);
        plain.set_nonblocking(false).unwrap();
        plain
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut got = Vec::new();
        plain.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"second", "{backend}");
        client.join().unwrap();
    }
}
