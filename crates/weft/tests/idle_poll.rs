//! A cluster whose idle processors poll before sleeping (`ClusterBuilder::idle_poll`) still
//! takes every kind of wake-up (completions, pushes from other threads, timers, the stop), and
//! stops polling once it is idle. One test per binary, so that the process's CPU time is the
//! cluster's.

mod common;
use common::process_cpu;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use weft::net::TcpListener;
use weft::IoBackend;

#[test]
fn a_polling_cluster_takes_every_wake_up_and_goes_quiet_when_idle() {
    let c = weft::Cluster::builder()
        .name("idle-poll")
        .processors(1)
        .io(IoBackend::Uring)
        .idle_poll(Duration::from_micros(50))
        .build()
        .unwrap();
    let listener = c
        .spawn(|| TcpListener::bind("127.0.0.1:0").unwrap())
        .join()
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let server = c.spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 64];
        let mut served = 0u32;
        loop {
            let n = s.read(&mut buf).unwrap();
            if n == 0 {
                return served;
            }
            s.write_all(&buf[..n]).unwrap();
            served += 1;
        }
    });

    // Completions: round trips close together (caught while polling) and apart (after a sleep).
    let mut client = std::net::TcpStream::connect(addr).unwrap();
    client.set_nodelay(true).unwrap();
    let mut buf = [0u8; 16];
    for i in 0..2_000u32 {
        client.write_all(&i.to_le_bytes().repeat(4)).unwrap();
        client.read_exact(&mut buf).unwrap();
        assert_eq!(buf[..4], i.to_le_bytes());
        if i % 200 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    // Pushes from another thread, and a timer, while the processor polls or sleeps.
    for i in 0..200 {
        assert_eq!(c.spawn(move || i * 2).join().unwrap(), i * 2);
    }
    let t = Instant::now();
    c.spawn(|| weft::sleep(Duration::from_millis(5)).unwrap())
        .join()
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(5));
    drop(client);
    assert_eq!(server.join().unwrap(), 2_000);

    // Idle: the window shrinks to nothing after a few long sleeps.
    std::thread::sleep(Duration::from_millis(50));
    let cpu_before = process_cpu();
    let wall = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let share = (process_cpu() - cpu_before).as_secs_f64() / wall.elapsed().as_secs_f64();
    println!("idle polling cluster: {:.3}% of a core", share * 100.0);
    assert!(
        share < 0.05,
        "an idle polling cluster used {:.2}% of a core",
        share * 100.0
    );
    // And the stop still reaches it.
    c.shutdown();
}
