//! Write-behind sends (`io/behind.rs`): a short write from a fiber on io_uring returns before
//! the kernel has the bytes. These tests check what a caller must still be able to count on, on
//! both backends: bytes arrive in the order written whatever mix of calls wrote them, an error
//! surfaces on a later write or flush, dropping or shutting a stream down delivers everything
//! first, and the handles of one connection stay in order.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft::net::{TcpListener, TcpStream};
use weft::IoBackend;

mod common;
use common::{backends, cluster};

/// A plain-thread peer: accepts one connection, optionally waits (so the sender's socket buffer
/// fills), reads to end of stream and returns what it read.
fn reading_peer(delay: Duration) -> (std::net::SocketAddr, std::thread::JoinHandle<Vec<u8>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        std::thread::sleep(delay);
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        all
    });
    (addr, t)
}

/// A plain-thread peer that accepts one connection and never reads from it; it closes the
/// connection once told to (or after 30 s).
fn silent_peer() -> (
    std::net::SocketAddr,
    std::sync::mpsc::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let peer = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        done_rx.recv_timeout(Duration::from_secs(30)).ok();
        drop(s);
    });
    (addr, done_tx, peer)
}

/// The `i`-th piece of a test stream: `len` bytes that say where they belong.
fn piece(i: u32, len: usize) -> Vec<u8> {
    (0..len).map(|k| (i as usize * 31 + k) as u8).collect()
}

#[test]
fn a_short_write_from_a_fiber_on_io_uring_does_not_switch_it_out() {
    let c = cluster(IoBackend::Uring, 1);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // An echo peer on the same processor.
    c.spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 256];
        while let Ok(n @ 1..) = (&s).read(&mut buf) {
            (&s).write_all(&buf[..n]).unwrap();
        }
    });
    let ticks = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (ticks, stop) = (ticks.clone(), stop.clone());
        c.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                ticks.fetch_add(1, Ordering::Relaxed);
                weft::yield_now();
            }
        })
    };
    let switched = c
        .spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            let mut switched = 0;
            let mut back = [0u8; 64];
            for round in 0..50u8 {
                let before = ticks.load(Ordering::Relaxed);
                s.write_all(&[round; 64]).unwrap();
                if ticks.load(Ordering::Relaxed) != before {
                    switched += 1;
                }
                // Parks: the reply comes once the send went out.
                s.read_exact(&mut back).unwrap();
                assert_eq!(back, [round; 64]);
            }
            stop.store(true, Ordering::Relaxed);
            switched
        })
        .join()
        .unwrap();
    ticker.join().unwrap();
    assert_eq!(
        switched, 0,
        "a 64-byte write after a read switched its fiber out {switched} times in 50"
    );
}

#[test]
fn bytes_arrive_in_order_through_every_kind_of_write() {
    let dir = std::env::temp_dir().join(format!("weft-write-behind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("file");
    let file_bytes = piece(999, 40_000);
    std::fs::write(&path, &file_bytes).unwrap();
    for backend in backends() {
        // The peer starts reading late, so the socket buffer fills and sends come back short.
        let (addr, peer) = reading_peer(Duration::from_millis(200));
        let c = cluster(backend, 2);
        let path2 = path.clone();
        let file_bytes = file_bytes.clone();
        let expected = c
            .spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                let file = weft::fs::File::open(&path2).unwrap();
                let mut expected = Vec::new();
                for i in 0..600u32 {
                    match i % 7 {
                        // Long: the ordinary path, after whatever is behind.
                        3 => {
                            let p = piece(i, 70_000);
                            s.write_all(&p).unwrap();
                            expected.extend_from_slice(&p);
                        }
                        // Vectored, short.
                        4 => {
                            let (a, b) = (piece(i, 100), piece(i + 1, 900));
                            let n = s.write_vectored(&[IoSlice::new(&a), IoSlice::new(&b)]);
                            let n = n.unwrap();
                            let mut both = a;
                            both.extend_from_slice(&b);
                            s.write_all(&both[n..]).unwrap();
                            expected.extend_from_slice(&both);
                        }
                        // From a file, right after short writes.
                        5 if i % 35 == 5 => {
                            let n = weft::fs::send_file(&file, 0, file_bytes.len(), &s).unwrap();
                            assert_eq!(n, file_bytes.len());
                            expected.extend_from_slice(&file_bytes);
                        }
                        6 => {
                            s.flush().unwrap();
                        }
                        _ => {
                            let p = piece(i, 10 + (i as usize * 97) % 16_000);
                            s.write_all(&p).unwrap();
                            expected.extend_from_slice(&p);
                        }
                    }
                }
                let last = piece(7, 33);
                s.write_all(&last).unwrap();
                expected.extend_from_slice(&last);
                // Shut down right after a short write: it must still go first.
                s.shutdown(Shutdown::Write).unwrap();
                expected
            })
            .join()
            .unwrap();
        let got = peer.join().unwrap();
        assert_eq!(got.len(), expected.len(), "{backend}: length");
        assert!(
            got == expected,
            "{backend}: bytes differ or are out of order"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn dropping_a_stream_right_after_writes_delivers_every_byte_then_end_of_stream() {
    for backend in backends() {
        for delay_ms in [0, 300] {
            let (addr, peer) = reading_peer(Duration::from_millis(delay_ms));
            let c = cluster(backend, 2);
            let expected = c
                .spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    let mut expected = Vec::new();
                    // 4 MiB in 10,000-byte writes: more than the socket buffers hold while the
                    // peer sleeps, so the last sends come back short.
                    for i in 0..420u32 {
                        let p = piece(i, 10_000);
                        s.write_all(&p).unwrap();
                        expected.extend_from_slice(&p);
                    }
                    drop(s);
                    expected
                })
                .join()
                .unwrap();
            let got = peer.join().unwrap();
            assert_eq!(got.len(), expected.len(), "{backend}, delay {delay_ms} ms");
            assert!(
                got == expected,
                "{backend}, delay {delay_ms} ms: bytes differ"
            );
        }
    }
}

#[test]
fn writes_through_two_handles_of_one_connection_stay_in_order() {
    for backend in backends() {
        let (addr, peer) = reading_peer(Duration::from_millis(50));
        let c = cluster(backend, 2);
        let expected = c
            .spawn(move || {
                let a = TcpStream::connect(addr).unwrap();
                let b = a.try_clone().unwrap();
                let mut expected = Vec::new();
                for i in 0..2_000u32 {
                    let p = piece(i, 1 + (i as usize * 13) % 3_000);
                    let mut h = if i % 2 == 0 { &a } else { &b };
                    h.write_all(&p).unwrap();
                    expected.extend_from_slice(&p);
                    if i % 3 == 0 {
                        drop(if i % 2 == 0 {
                            a.try_clone().unwrap()
                        } else {
                            b.try_clone().unwrap()
                        });
                    }
                }
                drop(a);
                drop(b);
                expected
            })
            .join()
            .unwrap();
        let got = peer.join().unwrap();
        assert!(
            got == expected,
            "{backend}: bytes differ or are out of order"
        );
    }
}

#[test]
fn the_error_of_a_send_behind_surfaces_on_a_later_write_or_flush() {
    for backend in backends() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let c = cluster(backend, 2);
        let closer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Once the client's connect has surely completed (it sent a byte), close with a
            // reset. (Resetting at once can fail the connect itself with ECONNRESET.)
            s.read_exact(&mut [0u8; 1]).unwrap();
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(s);
        });
        let err = c
            .spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"x").and_then(|()| s.flush()).unwrap();
                closer.join().unwrap();
                for _ in 0..1_000 {
                    let r = s.write_all(&[1u8; 100]).and_then(|()| s.flush());
                    if let Err(e) = r {
                        return e;
                    }
                    weft::sleep(Duration::from_millis(1)).unwrap();
                }
                panic!("{backend}: writes to a reset connection kept succeeding");
            })
            .join()
            .unwrap();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
            ),
            "{backend}: {err}"
        );
    }
}

#[test]
fn a_stream_dropped_on_a_plain_thread_with_a_send_in_flight_still_delivers_it() {
    let (addr, peer) = reading_peer(Duration::ZERO);
    let c = cluster(IoBackend::Uring, 1);
    let (tx, rx) = std::sync::mpsc::channel();
    c.spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&piece(5, 1_000)).unwrap();
        // No switch since the write: its send is still in flight (not even submitted).
        tx.send(s).unwrap();
    })
    .join()
    .unwrap();
    let s = rx.recv().unwrap();
    drop(s);
    let got = peer.join().unwrap();
    assert!(got == piece(5, 1_000), "got {} bytes", got.len());
}

/// A request/response connection whose reply the socket can take only in part: the writer
/// then waits to read the peer's next request, and writes nothing more. The rest of the reply
/// must still go out (the peer answers only once it has all of it), as it would after a
/// blocking `write`. (The rest used to wait for the writer's next write, so both sides waited
/// until a timeout: an HTTP multipart reply's last bytes, seen in CI.)
#[test]
fn a_reply_the_socket_took_in_part_goes_out_while_the_writer_waits_to_read() {
    const PIECE_BYTES: usize = 16_000;
    const PIECES: u32 = 40;
    for backend in backends() {
        for round in 0..3 {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            // Small buffers on both ends (no autotuning), so the last reply is sent short.
            socket2::SockRef::from(&listener)
                .set_recv_buffer_size(4096)
                .unwrap();
            let addr = listener.local_addr().unwrap();
            let peer = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                std::thread::sleep(Duration::from_millis(200));
                let mut got = vec![0u8; PIECE_BYTES * PIECES as usize];
                let read = s.read_exact(&mut got);
                // The next request: only once the whole reply arrived.
                if read.is_ok() {
                    s.write_all(b"?").unwrap();
                }
                (read, got)
            });
            let c = cluster(backend, 1);
            let (expected, answered) = c
                .spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    socket2::SockRef::from(&s)
                        .set_send_buffer_size(4096)
                        .unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut expected = Vec::new();
                    for i in 0..PIECES {
                        let p = piece(i, PIECE_BYTES);
                        s.write_all(&p).unwrap();
                        expected.extend_from_slice(&p);
                    }
                    let mut next = [0u8; 1];
                    let answered = s.read_exact(&mut next).map(|()| next[0]);
                    (expected, answered)
                })
                .join()
                .unwrap();
            let (read, got) = peer.join().unwrap();
            read.unwrap_or_else(|e| {
                panic!("{backend}, round {round}: the peer never got the whole reply: {e}")
            });
            assert!(got == expected, "{backend}, round {round}: bytes differ");
            assert_eq!(answered.unwrap(), b'?', "{backend}, round {round}");
        }
    }
}

/// The rest of a send behind waits for room no longer than the stream's write timeout: with a
/// peer that never reads, a later write fails with `TimedOut` (it would hang if the rest's
/// send waited for room forever).
#[test]
fn the_rest_of_a_send_behind_waits_no_longer_than_the_write_timeout() {
    for backend in backends() {
        let (addr, done_tx, peer) = silent_peer();
        let c = cluster(backend, 1);
        let (tx, rx) = std::sync::mpsc::channel();
        c.spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_write_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let started = std::time::Instant::now();
            let mut written = 0usize;
            let err = loop {
                match s.write_all(&piece(1, 8_000)) {
                    Ok(()) => written += 8_000,
                    Err(e) => break e,
                }
                assert!(written < 1 << 30, "{backend}: writes never failed");
            };
            tx.send((err.kind(), started.elapsed())).unwrap();
        });
        let (kind, took) = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{backend}: a write waited past its timeout"));
        assert_eq!(kind, ErrorKind::TimedOut, "{backend}");
        assert!(took < Duration::from_secs(10), "{backend}: {took:?}");
        done_tx.send(()).unwrap();
        peer.join().unwrap();
    }
}

/// A fiber waiting for the rest of a send behind (its next write settles it, and the peer never
/// reads) stops waiting when cancelled, as a fiber blocked in an ordinary send does.
#[test]
fn a_write_waiting_for_the_rest_of_a_send_behind_returns_when_its_fiber_is_cancelled() {
    for backend in backends() {
        let (addr, done_tx, peer) = silent_peer();
        let c = cluster(backend, 1);
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = c.spawn(move || {
            // No write timeout: only the cancel ends the wait.
            let mut s = TcpStream::connect(addr).unwrap();
            let err = loop {
                if let Err(e) = s.write_all(&piece(2, 8_000)) {
                    break e;
                }
            };
            tx.send(err).unwrap();
        });
        // Long enough for the socket buffers to fill and the writes to block.
        std::thread::sleep(Duration::from_millis(500));
        writer.cancel();
        let err = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{backend}: a cancelled write kept waiting"));
        assert!(
            err.get_ref().is_some_and(|e| e.is::<weft::Cancelled>()),
            "{backend}: {err}"
        );
        done_tx.send(()).unwrap();
        peer.join().unwrap();
    }
}

/// Bytes in a TCP socket's send queue that were not sent yet (`SIOCOUTQNSD`).
fn unsent_bytes(fd: i32) -> i32 {
    const SIOCOUTQNSD: libc::c_ulong = 0x894B;
    let mut n: libc::c_int = -1;
    // SAFETY: an ioctl that writes one int through a valid pointer.
    let r = unsafe { libc::ioctl(fd, SIOCOUTQNSD, &mut n) };
    assert_eq!(r, 0, "SIOCOUTQNSD: {}", std::io::Error::last_os_error());
    n
}

/// `write_vectored_more` goes after every earlier write (one sent behind included), keeps its
/// short tail in the socket (`MSG_MORE`) instead of sending it at once, and the shutdown that
/// follows sends it (with the FIN): the peer reads every byte in order, then end of stream.
#[test]
fn write_vectored_more_keeps_the_tail_back_until_the_shutdown() {
    use std::os::fd::AsRawFd;
    let mut contexts: Vec<Option<IoBackend>> = backends().into_iter().map(Some).collect();
    contexts.push(None);
    for context in contexts {
        let (addr, peer) = reading_peer(Duration::ZERO);
        let (first, second, third) = (piece(1, 300), piece(2, 1000), piece(3, 50));
        let want: Vec<u8> = [&first[..], &second[..], &third[..]].concat();
        let (a, b, c) = (first.clone(), second.clone(), third.clone());
        let send = move || {
            let s = TcpStream::connect(addr).unwrap();
            // Without Nagle a plain write would leave at once: only `MSG_MORE` keeps it back.
            s.set_nodelay(true).unwrap();
            (&s).write_all(&a).unwrap(); // behind the fiber, on io_uring
            let mut slices = [IoSlice::new(&b), IoSlice::new(&c)];
            let mut left: &mut [IoSlice<'_>] = &mut slices;
            while !left.is_empty() {
                let n = s.write_vectored_more(left).unwrap();
                IoSlice::advance_slices(&mut left, n);
            }
            let kept = unsent_bytes(s.as_raw_fd());
            s.shutdown(Shutdown::Write).unwrap();
            let after = unsent_bytes(s.as_raw_fd());
            (kept, after)
        };
        let (kept, after) = match context {
            Some(backend) => cluster(backend, 1).spawn(send).join().unwrap(),
            None => send(),
        };
        assert_eq!(kept, 1050, "{context:?}: the tail was not kept back");
        assert_eq!(after, 0, "{context:?}: the shutdown did not send the tail");
        assert!(peer.join().unwrap() == want, "{context:?}: bytes differ");
    }
}
