//! `TcpStream::try_read`: what is waiting, at once; `WouldBlock` when nothing is; and the
//! ordinary reads after it still wait for readiness correctly (the epoll driver's edges).

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use weft::net::TcpListener;

mod common;
use common::{backends, cluster};

#[test]
fn try_read_takes_what_is_waiting_and_later_reads_still_wake() {
    for backend in backends() {
        let c = cluster(backend, 1);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            go_rx.recv().unwrap();
            s.write_all(b"ab").unwrap();
            go_rx.recv().unwrap();
            // Arrives while the server fiber waits in an ordinary read after `try_read`
            // emptied the socket.
            std::thread::sleep(Duration::from_millis(50));
            s.write_all(b"c").unwrap();
            go_rx.recv().unwrap();
        });
        let got = c
            .spawn(move || {
                let (s, _) = listener.accept().unwrap();
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut buf = [0u8; 64];
                let e = s.try_read(&mut buf).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::WouldBlock, "{backend}: {e}");
                go_tx.send(()).unwrap();
                let mut got = Vec::new();
                while got.len() < 2 {
                    match s.try_read(&mut buf) {
                        Ok(n) => {
                            assert!(n > 0, "{backend}: early end of stream");
                            got.extend_from_slice(&buf[..n]);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            weft::sleep(Duration::from_millis(1)).unwrap();
                        }
                        Err(e) => panic!("{backend}: {e}"),
                    }
                }
                go_tx.send(()).unwrap();
                let n = (&s)
                    .read(&mut buf)
                    .unwrap_or_else(|e| panic!("{backend}: the read after try_read: {e}"));
                got.extend_from_slice(&buf[..n]);
                go_tx.send(()).unwrap();
                // End of stream through try_read too, once the client is gone.
                loop {
                    match s.try_read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => panic!("{backend}: {n} unexpected bytes"),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                            weft::sleep(Duration::from_millis(1)).unwrap();
                        }
                        Err(e) => panic!("{backend}: {e}"),
                    }
                }
                got
            })
            .join()
            .unwrap();
        client.join().unwrap();
        assert_eq!(got, b"abc", "{backend}");
    }
}
