//! Helpers of the TCP tests (`net.rs`, `net_child.rs`): the backends to run on, a cluster per
//! backend, an echo server, a higher descriptor limit.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{Read, Write};

use weft::net::TcpListener;
use weft::{Cluster, IoBackend};

/// Both backends, or the ones listed in `WEFT_TEST_IO` (`uring,epoll`), e.g. to strace one.
pub fn backends() -> Vec<IoBackend> {
    match std::env::var("WEFT_TEST_IO") {
        Ok(list) => list.split(',').map(|b| b.parse().unwrap()).collect(),
        Err(_) => vec![IoBackend::Uring, IoBackend::Epoll],
    }
}

pub fn cluster(backend: IoBackend, processors: usize) -> Cluster {
    cluster_with(
        backend,
        Cluster::builder()
            .name(format!("net-{backend}"))
            .processors(processors),
    )
}

/// Builds `builder` on `backend`, which this machine must support.
pub fn cluster_with(backend: IoBackend, builder: weft::ClusterBuilder) -> Cluster {
    let c = builder.io(backend).build().unwrap();
    assert_eq!(
        c.io_backend(),
        backend,
        "this machine should support {backend}"
    );
    c
}

/// A cluster of `processors` on `backend` and a listener on a free port of 127.0.0.1.
pub fn listening(
    backend: IoBackend,
    processors: usize,
) -> (Cluster, TcpListener, std::net::SocketAddr) {
    let c = cluster(backend, processors);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (c, listener, addr)
}

pub fn raise_nofile(want: u64) {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur < want {
            r.rlim_cur = want.min(r.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

pub fn echo_server(c: &Cluster) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let c2 = c.clone();
    c.spawn(move || loop {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        c2.spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match (&stream).read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        if (&stream).write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                }
            }
        });
    });
    addr
}

/// CPU time (user and system) this process has used so far.
pub fn process_cpu() -> std::time::Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let usage = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        u
    };
    let t =
        |tv: libc::timeval| std::time::Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
    t(usage.ru_utime) + t(usage.ru_stime)
}
