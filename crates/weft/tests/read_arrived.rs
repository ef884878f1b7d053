//! `TcpStream::read_arrived`: the ticket a read returns was taken after its bytes were in
//! (never before a ticket taken before they were sent) and before any ticket taken after the
//! read returned; on io_uring the receives reaped in one batch share one ticket.

use std::io::Write;
use std::sync::mpsc;
use std::time::Duration;

use weft::io::arrival::Arrival;
use weft::net::TcpListener;
use weft::IoBackend;

mod common;
use common::{backends, cluster};

#[test]
fn a_reads_ticket_comes_after_its_bytes_were_sent_and_before_it_returned() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            for _ in 0..3 {
                go_rx.recv().unwrap();
                // The server is (or will soon be) waiting in its read.
                std::thread::sleep(Duration::from_millis(20));
                s.write_all(b"request").unwrap();
            }
        });
        c.spawn(move || {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 64];
            for round in 0..3 {
                let before = Arrival::now();
                go_tx.send(()).unwrap();
                let mut got = 0;
                while got < 7 {
                    let (n, arrival) = s.read_arrived(&mut buf[got..]).unwrap();
                    assert!(n > 0, "{backend}: early end of stream");
                    let after = Arrival::now();
                    assert!(
                        before < arrival && arrival < after,
                        "{backend} round {round}: {before:?} < {arrival:?} < {after:?}"
                    );
                    got += n;
                }
            }
        })
        .join()
        .unwrap();
        client.join().unwrap();
    }
}

/// Two receives completed while the processor was busy are reaped in one batch and share its
/// ticket, so one check can serve both requests (io_uring only: on epoll each receive is a
/// system call of its own fiber, with a ticket of its own).
#[test]
fn receives_reaped_together_share_a_ticket_on_io_uring() {
    if !backends().contains(&IoBackend::Uring) {
        return;
    }
    let c = cluster(IoBackend::Uring, 1);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let clients: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let servers = c
        .spawn(move || {
            (0..2)
                .map(|_| listener.accept().unwrap().0)
                .collect::<Vec<_>>()
        })
        .join()
        .unwrap();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let readers: Vec<_> = servers
        .into_iter()
        .map(|s| {
            let ready_tx = ready_tx.clone();
            c.spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 16];
                ready_tx.send(()).unwrap();
                s.read_arrived(&mut buf).unwrap().1
            })
        })
        .collect();
    ready_rx.recv().unwrap();
    ready_rx.recv().unwrap();
    // Both readers are parked in their receives (or about to be): hold the processor while
    // both requests come in, so one drain reaps both completions.
    let blocker = c.spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        for mut client in clients {
            client.write_all(b"x").unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    blocker.join().unwrap();
    let tickets: Vec<Arrival> = readers.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(tickets[0], tickets[1], "reaped together, ticketed apart");
}
