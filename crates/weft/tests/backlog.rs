//! A backlog is served as it is received. When a processor was held (here a fiber that blocks
//! its thread, standing in for a stopped or descheduled process) while hundreds of its
//! connections got a request, the kernel holds the receives' completion work until the
//! processor asks for it. On io_uring a busy processor takes that work only as fast as the
//! fibers it already woke get their turns, so the woken fibers do not pile up in its run
//! queue: before, every submission of a batch took in about 40 receives while 16 fibers ran,
//! the whole backlog ended up queued, and its replies waited for its receives
//! (`docs/notes/scale.md`, "Injected stalls"). Counts, not times: the scheduling statistics
//! count each task's wait in its processor's rounds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use weft::net::TcpListener;
use weft::{Cluster, IoBackend};

/// Connections that get a request while the processor is held.
const CONNECTIONS: usize = 400;
/// Times the processor is held.
const STALLS: usize = 5;
/// The most rounds a woken fiber may wait. One request of the kernel's pending completion work
/// gives at most a few dozen completions (Linux 6.13 on runs at most 20 items a pass); with
/// the backlog taken all at once, fibers waited for most of the backlog (hundreds of rounds).
const WAIT_ROUNDS_MAX: u64 = CONNECTIONS as u64 / 4;

#[test]
fn a_held_processor_serves_its_backlog_without_queueing_all_of_it() {
    let cluster = Cluster::builder()
        .name("backlog")
        .processors(1)
        .io(IoBackend::Uring)
        .sched_stats(true)
        .build()
        .unwrap();
    if cluster.io_backend() != IoBackend::Uring {
        // The kernel refused io_uring (the runtime said so once); the policy is io_uring's.
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "io_uring is required under CI=true"
        );
        return;
    }
    let listener = cluster
        .spawn(|| TcpListener::bind("127.0.0.1:0").unwrap())
        .join()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = cluster.spawn(move || {
        let mut conns = Vec::with_capacity(CONNECTIONS);
        for _ in 0..CONNECTIONS {
            let (mut stream, _) = listener.accept().unwrap();
            conns.push(weft::spawn(move || {
                let mut byte = [0u8; 1];
                // One byte in, one byte out, until the client closes.
                while stream.read(&mut byte).unwrap() == 1 {
                    stream.write_all(&byte).unwrap();
                }
            }));
        }
        for c in conns {
            c.join().unwrap();
        }
    });
    // One connection at a time, each answering once before the next, so that no burst of
    // spawns or wake-ups other than the stalls' queues fibers.
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        c.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        c.read_exact(&mut byte).unwrap();
        clients.push(c);
    }
    for _ in 0..STALLS {
        // Hold the processor: a fiber that blocks its thread until every request was written.
        let (held_tx, held_rx) = mpsc::channel();
        let (written_tx, written_rx) = mpsc::channel::<()>();
        let hold = cluster.spawn(move || {
            held_tx.send(()).unwrap();
            written_rx.recv().unwrap();
            // Let the last requests reach their sockets before the processor runs again.
            std::thread::sleep(Duration::from_millis(20));
        });
        held_rx.recv().unwrap();
        for c in &mut clients {
            c.write_all(b"x").unwrap();
        }
        written_tx.send(()).unwrap();
        hold.join().unwrap();
        for c in &mut clients {
            let mut byte = [0u8; 1];
            c.read_exact(&mut byte).unwrap();
            assert_eq!(&byte, b"x");
        }
    }
    // Before the clients close: 400 end-of-file reads at once are another burst.
    let stats = cluster.sched_stats().expect("statistics were asked for");
    drop(clients);
    server.join().unwrap();
    let waited = stats.wait_rounds.max();
    assert!(
        waited <= WAIT_ROUNDS_MAX,
        "a woken fiber waited {waited} rounds after a backlog of {CONNECTIONS} (at most {WAIT_ROUNDS_MAX})"
    );
}
