//! File sending: `weft::fs::send_file_with` by method and file size, over loopback TCP.
//!
//! One process: the server is a one-processor weft cluster pinned to CPU 0, serving one file
//! (warm in the page cache) per request byte it reads; the clients are plain threads pinned to
//! CPU 1, each in a closed loop (send one byte, read the whole file). Server CPU is the
//! process's CPU time over the window minus the client threads' own.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use weft::fs::{send_file_with, File, SendFileMethod};
use weft::net::TcpListener;
use weft::IoBackend;

use crate::echo::cpu;

/// What to measure.
#[derive(Debug, Clone)]
pub struct FilesParams {
    pub backend: IoBackend,
    pub method: SendFileMethod,
    pub size_bytes: usize,
    pub connections: usize,
    pub duration: Duration,
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct FilesReport {
    pub backend: &'static str,
    pub method: String,
    pub size_bytes: usize,
    pub connections: usize,
    pub requests: u64,
    pub seconds: f64,
    pub requests_per_sec: f64,
    pub gbit_per_sec: f64,
    pub server_cpu_us_per_request: f64,
}

const WARMUP: Duration = Duration::from_millis(300);

/// Runs one measurement.
pub fn run(p: &FilesParams) -> io::Result<FilesReport> {
    let path = std::env::temp_dir().join(format!(
        "weft-bench-file-{}-{}",
        std::process::id(),
        p.size_bytes
    ));
    let data: Vec<u8> = (0..p.size_bytes).map(|i| (i % 251) as u8).collect();
    // Written back before measuring: dirty pages being flushed mid-run would skew whichever
    // method runs first.
    {
        let mut f = std::fs::File::create(&path)?;
        f.write_all(&data)?;
        f.sync_all()?;
    }
    let file = Arc::new(std::fs::File::open(&path).map(File::from)?);
    std::fs::remove_file(&path)?;

    // Server and load on the lowest two CPUs the mask allows (none pinned with one CPU).
    let (server_cpu, load_cpu) = crate::process::server_and_load_cpus();
    if let Some(c) = server_cpu {
        cpu::pin_current_thread(c)?;
    }
    let cluster = weft::Cluster::builder()
        .name("files")
        .processors(1)
        .io(p.backend)
        .build()?;
    if let Some(c) = load_cpu {
        cpu::pin_current_thread(c)?;
    }
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (method, size) = (p.method, p.size_bytes);
    cluster.spawn(move || loop {
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let file = file.clone();
        weft::spawn(move || {
            let mut req = [0u8; 1];
            while matches!((&stream).read(&mut req), Ok(1)) {
                if send_file_with(method, &file, 0, size, &stream).is_err() {
                    return;
                }
            }
        });
    });

    let stop = Arc::new(AtomicBool::new(false));
    let counted = Arc::new(AtomicU64::new(0));
    let window_start = Instant::now() + WARMUP;
    let clients: Vec<_> =
        (0..p.connections)
            .map(|_| {
                let (stop, counted) = (stop.clone(), counted.clone());
                std::thread::spawn(move || -> io::Result<f64> {
                    let mut s = std::net::TcpStream::connect(addr)?;
                    s.set_nodelay(true)?;
                    let mut buf = vec![0u8; size];
                    let mut cpu_at_start = None;
                    while !stop.load(Ordering::Relaxed) {
                        s.write_all(b"g")?;
                        s.read_exact(&mut buf)?;
                        if Instant::now() >= window_start {
                            if cpu_at_start.is_none() {
                                cpu_at_start = Some(cpu::thread_cpu_seconds());
                            } else {
                                counted.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Ok(cpu::thread_cpu_seconds()
                        - cpu_at_start.unwrap_or_else(cpu::thread_cpu_seconds))
                })
            })
            .collect();
    std::thread::sleep(window_start.saturating_duration_since(Instant::now()));
    let cpu_start = cpu::process_cpu_seconds(std::process::id())?;
    let t0 = Instant::now();
    std::thread::sleep(p.duration);
    let requests = counted.load(Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_end = cpu::process_cpu_seconds(std::process::id())?;
    stop.store(true, Ordering::Relaxed);
    let mut client_cpu = 0.0;
    for c in clients {
        client_cpu += c
            .join()
            .map_err(|_| io::Error::other("client panicked"))??;
    }
    let server_cpu = (cpu_end - cpu_start - client_cpu).max(0.0);
    Ok(FilesReport {
        backend: p.backend.name(),
        method: format!("{:?}", p.method).to_lowercase(),
        size_bytes: p.size_bytes,
        connections: p.connections,
        requests,
        seconds,
        requests_per_sec: requests as f64 / seconds,
        gbit_per_sec: requests as f64 * size as f64 * 8.0 / seconds / 1e9,
        server_cpu_us_per_request: server_cpu * 1e6 / requests.max(1) as f64,
    })
}
