//! One server process holds 15,360 concurrent TCP connections, on each backend, and serves
//! every one of them while all are open. The clients run in a child process (this test binary
//! re-executed with `WEFT_MANY_CLIENT=<addr>`), so each side needs 15,360 descriptors; both
//! raise RLIMIT_NOFILE themselves (the soft limit to the hard one, and the hard one too when
//! the process may).

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::TcpListener;
use weft::{Cluster, IoBackend};

const CONNECTIONS: usize = 15_360;

fn backends() -> Vec<IoBackend> {
    match std::env::var("WEFT_TEST_IO") {
        Ok(list) => list.split(',').map(|b| b.parse().unwrap()).collect(),
        Err(_) => vec![IoBackend::Uring, IoBackend::Epoll],
    }
}

const READY: &str = "WEFT-MANY-CLIENT-READY";

/// Raises the descriptor limit to `want`; false if the process may not.
fn raise_nofile(want: u64) -> bool {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur >= want {
            return true;
        }
        r.rlim_cur = want;
        if r.rlim_max < want {
            r.rlim_max = want;
        }
        libc::setrlimit(libc::RLIMIT_NOFILE, &r) == 0
    }
}

/// The child: opens every connection, echoes one byte on each while all are open, says so,
/// and holds them until its standard input closes.
fn client(addr: &str) {
    assert!(
        raise_nofile(CONNECTIONS as u64 + 256),
        "client: RLIMIT_NOFILE"
    );
    let mut clients = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        let s =
            std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        clients.push(s);
    }
    for (i, s) in clients.iter_mut().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&[i as u8]).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
            .unwrap_or_else(|e| panic!("echo on connection {i}: {e}"));
        assert_eq!(b[0], i as u8);
    }
    println!("{READY}");
    std::io::stdout().flush().unwrap();
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

#[test]
fn one_process_holds_15360_connections() {
    if let Ok(addr) = std::env::var("WEFT_MANY_CLIENT") {
        return client(&addr);
    }
    assert!(
        raise_nofile(CONNECTIONS as u64 + 256),
        "cannot raise RLIMIT_NOFILE to {} (hard limit too low?)",
        CONNECTIONS + 256
    );
    for backend in backends() {
        let start = Instant::now();
        let c = Cluster::builder()
            .name(format!("many-{backend}"))
            .processors(2)
            .stack_size(64 * 1024)
            .io(backend)
            .build()
            .unwrap();
        let listener = TcpListener::builder()
            .backlog(4096)
            .bind("127.0.0.1:0")
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let open = Arc::new(AtomicUsize::new(0));
        let open2 = open.clone();
        c.spawn(move || loop {
            let Ok((s, _)) = listener.accept() else {
                return;
            };
            open2.fetch_add(1, Ordering::Relaxed);
            let open3 = open2.clone();
            weft::spawn(move || {
                let mut buf = [0u8; 16];
                while let Ok(n @ 1..) = (&s).read(&mut buf) {
                    if (&s).write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                open3.fetch_sub(1, Ordering::Relaxed);
            });
        });
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "one_process_holds_15360_connections",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("WEFT_MANY_CLIENT", addr.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // libtest prints `test name ... ` before the test's own output on the same line.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains(READY));
        // Keep reading, or the child's harness fails writing its summary.
        let drain = std::thread::spawn(move || lines.for_each(drop));
        assert!(
            ready,
            "{backend}: the client process failed (see its output above)"
        );
        assert_eq!(open.load(Ordering::Relaxed), CONNECTIONS, "{backend}");
        drop(child.stdin.take());
        assert!(child.wait().unwrap().success());
        drain.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while open.load(Ordering::Relaxed) != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(open.load(Ordering::Relaxed), 0, "{backend}: fibers left");
        println!(
            "{backend}: {CONNECTIONS} connections in {:?}",
            start.elapsed()
        );
    }
}
