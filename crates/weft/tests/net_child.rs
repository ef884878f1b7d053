//! TCP tests that change process-wide state (a seccomp filter refusing io_uring, a low
//! descriptor limit, `WEFT_IO`), so each runs its body in a child process: this test binary
//! re-executed with `WEFT_NET_CHILD=mode` for that one test.

use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

use weft::net::{TcpListener, TcpStream};
use weft::{Cluster, IoBackend};

mod common;
use common::{backends, cluster, echo_server};

/// Runs test `name` alone in a child process with `WEFT_NET_CHILD=mode`, for tests that
/// change process-wide state (seccomp filters, descriptor limits). Returns its stderr.
fn run_child(name: &str, mode: &str) -> String {
    run_child_with(name, mode, None)
}

fn run_child_with(name: &str, mode: &str, weft_io: Option<&str>) -> String {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("WEFT_NET_CHILD", mode)
        .env_remove("WEFT_IO");
    if let Some(v) = weft_io {
        cmd.env("WEFT_IO", v);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child {mode} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "child {mode} ran nothing:\n{stdout}"
    );
    stderr
}

fn child_mode() -> Option<String> {
    std::env::var("WEFT_NET_CHILD").ok()
}

/// Makes `io_uring_setup` fail with EPERM for this thread and the threads it starts, as a
/// container's seccomp profile would.
fn refuse_io_uring() {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    let filter = [
        // Load the syscall number (offset 0 of seccomp_data).
        libc::sock_filter {
            code: LD_W_ABS,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: JEQ_K,
            jt: 0,
            jf: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: prctl with a valid filter program that outlives the call.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(libc::PR_SET_SECCOMP, 2, &prog as *const libc::sock_fprog),
            0
        );
    }
}

#[test]
fn falls_back_to_epoll_with_one_clear_line_when_io_uring_is_refused() {
    if child_mode().as_deref() == Some("no-uring") {
        refuse_io_uring();
        let c = Cluster::builder().processors(1).build().unwrap();
        assert_eq!(c.io_backend(), IoBackend::Epoll);
        let again = Cluster::builder().processors(1).build().unwrap();
        assert_eq!(again.io_backend(), IoBackend::Epoll);
        let addr = echo_server(&c);
        let got = again
            .spawn(move || {
                assert_eq!(weft::io::backend(), Some(IoBackend::Epoll));
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"fallback").unwrap();
                let mut b = [0u8; 8];
                s.read_exact(&mut b).unwrap();
                b
            })
            .join()
            .unwrap();
        assert_eq!(&got, b"fallback");
        return;
    }
    if child_mode().is_some() {
        return;
    }
    let stderr = run_child(
        "falls_back_to_epoll_with_one_clear_line_when_io_uring_is_refused",
        "no-uring",
    );
    assert_eq!(
        stderr.matches("io_uring unavailable").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("kernel.io_uring_disabled"), "{stderr}");
}

/// The descriptor limit that leaves exactly `room` descriptors free, holes included
/// (descriptors above a lowered limit stay open and usable).
fn limit_leaving(room: u64) -> u64 {
    // The listing's own descriptor takes the lowest free number, which is free again after.
    // SAFETY: F_GETFD only asks whether a descriptor number is open.
    let listing = (0..).find(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1);
    let mut open: std::collections::HashSet<u64> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .collect();
    if let Some(fd) = listing {
        open.remove(&(fd as u64));
    }
    let (mut limit, mut free) = (0, 0);
    while free < room {
        if !open.contains(&limit) {
            free += 1;
        }
        limit += 1;
    }
    limit
}

/// For a test that runs its body once per backend, each in a child process (mode
/// `{prefix}-{backend}`): in the parent, runs the children and returns each one's stderr; in
/// one of those children, runs `body` on its backend and returns nothing.
fn per_backend_in_child(name: &str, prefix: &str, body: fn(IoBackend)) -> Vec<(IoBackend, String)> {
    match child_mode() {
        Some(mode) => {
            for backend in [IoBackend::Uring, IoBackend::Epoll] {
                if mode == format!("{prefix}-{backend}") {
                    body(backend);
                }
            }
            Vec::new()
        }
        None => backends()
            .into_iter()
            .map(|backend| (backend, run_child(name, &format!("{prefix}-{backend}"))))
            .collect(),
    }
}

#[test]
fn accept_survives_running_out_of_descriptors() {
    let children = per_backend_in_child(
        "accept_survives_running_out_of_descriptors",
        "emfile",
        emfile_child,
    );
    for (backend, stderr) in children {
        assert_eq!(
            stderr.matches("weft: accept on").count(),
            1,
            "{backend}: {stderr}"
        );
    }
}

fn emfile_child(backend: IoBackend) {
    const CLIENTS: usize = 8;
    const ROOM: u64 = 3;
    let c = cluster(backend, 1);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Every client connects (the kernel queues them) before the server may open more than
    // ROOM descriptors.
    let mut clients: Vec<_> = (0..CLIENTS)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    set_nofile_limit(limit_leaving(ROOM));
    let c2 = c.clone();
    c.spawn(move || loop {
        let (mut s, _) = listener.accept().unwrap();
        c2.spawn(move || {
            let mut b = [0u8; 1];
            while s.read_exact(&mut b).is_ok() {
                if s.write_all(&b).is_err() {
                    return;
                }
            }
        });
    });
    // The first ROOM connections are served while accept keeps hitting EMFILE...
    for (i, s) in clients.iter_mut().enumerate().take(ROOM as usize) {
        s.write_all(&[i as u8]).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8);
    }
    std::thread::sleep(Duration::from_millis(150));
    for s in clients.iter_mut().take(ROOM as usize) {
        s.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
    }
    // ...and as connections close, the rest are accepted and served.
    let mut served = ROOM as usize;
    clients.drain(..ROOM as usize);
    for (i, mut s) in clients.into_iter().enumerate() {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(&[i as u8]).unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8);
        served += 1;
    }
    assert_eq!(served, CLIENTS);
}

/// Sets the soft descriptor limit; returns the old one.
fn set_nofile_limit(limit: u64) -> u64 {
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        let old = r.rlim_cur;
        r.rlim_cur = limit;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        old
    }
}

#[test]
fn build_fails_with_the_reason_when_a_processor_cannot_start_its_driver() {
    per_backend_in_child(
        "build_fails_with_the_reason_when_a_processor_cannot_start_its_driver",
        "nodriver",
        nodriver_child,
    );
}

/// `build` makes one eventfd per processor before any processor starts; each processor then
/// needs one more descriptor for its ring or epoll. With room for the eventfds and `spare`
/// more, `processors - spare` drivers cannot start: `build` must say why, stop the processors
/// that did start, and leave nothing behind that breaks the next cluster.
fn nodriver_child(backend: IoBackend) {
    for (processors, spare) in [(1, 0), (2, 0), (2, 1)] {
        let old = set_nofile_limit(limit_leaving(processors as u64 + spare));
        let built = Cluster::builder()
            .processors(processors)
            .io(backend)
            .build();
        set_nofile_limit(old);
        let err = built.expect_err("a cluster whose processors have no driver");
        let msg = err.to_string();
        assert!(
            msg.contains("cannot start its") && msg.contains("Too many open files"),
            "{processors} processors, {spare} spare: {msg}"
        );
        let c = Cluster::builder()
            .processors(processors)
            .io(backend)
            .build()
            .unwrap();
        assert_eq!(c.spawn(|| 7).join().unwrap(), 7);
    }
}

#[test]
fn weft_io_selects_the_backend_of_clusters_built_without_one() {
    match child_mode().as_deref() {
        Some("env-epoll") => {
            let c = Cluster::builder().processors(1).build().unwrap();
            assert_eq!(c.io_backend(), IoBackend::Epoll);
            // The builder's choice wins over the environment.
            let c = Cluster::builder()
                .processors(1)
                .io(IoBackend::Uring)
                .build()
                .unwrap();
            assert_eq!(c.io_backend(), IoBackend::Uring);
        }
        Some("env-bogus") => {
            let err = Cluster::builder().processors(1).build().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
            assert!(err.to_string().contains("WEFT_IO"), "{err}");
        }
        Some(_) => {}
        None => {
            let name = "weft_io_selects_the_backend_of_clusters_built_without_one";
            let stderr = run_child_with(name, "env-epoll", Some("epoll"));
            assert!(!stderr.contains("io_uring unavailable"), "{stderr}");
            run_child_with(name, "env-bogus", Some("kqueue"));
        }
    }
}
