//! Files and file sending on both I/O backends, and from plain threads.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use weft::fs::{send_file, send_file_after, send_file_with, File, SendFileMethod};
use weft::net::{TcpListener, TcpStream, UnixStream};
use weft::{Cluster, IoBackend};

fn backends() -> Vec<IoBackend> {
    match std::env::var("WEFT_TEST_IO") {
        Ok(list) => list.split(',').map(|b| b.parse().unwrap()).collect(),
        Err(_) => vec![IoBackend::Uring, IoBackend::Epoll],
    }
}

fn cluster(backend: IoBackend) -> Cluster {
    let c = Cluster::builder()
        .name(format!("fs-{backend}"))
        .processors(2)
        .io(backend)
        .build()
        .unwrap();
    assert_eq!(c.io_backend(), backend);
    c
}

fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("weft-fs-{}-{tag}", std::process::id()))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 253) as u8).collect()
}

/// Writes, reads back (hot and after dropping the page cache), stats.
fn file_round_trip(tag: &str) {
    let path = temp_path(tag);
    let data = pattern(300_000);
    {
        let f = File::create(&path).unwrap();
        f.write_all_at(&data[..1000], 0).unwrap();
        f.write_all_at(&data[1000..], 1000).unwrap();
        f.sync_all().unwrap();
    }
    let f = File::open(&path).unwrap();
    let md = f.metadata().unwrap();
    assert_eq!(md.len(), data.len() as u64);
    assert!(md.is_file() && !md.is_dir());
    assert_eq!(md.ino(), std::fs::metadata(&path).unwrap().ino_compat());
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == data, "{tag}: hot read differs");
    // Evict the pages: the epoll path's RWF_NOWAIT read now fails over to the blocking pool.
    // SAFETY: advice on our own descriptor.
    unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    let mut part = vec![0u8; 5000];
    f.read_exact_at(&mut part, 123_456).unwrap();
    assert!(
        part[..] == data[123_456..128_456],
        "{tag}: cold read differs"
    );
    assert_eq!(f.read_at(&mut part, data.len() as u64).unwrap(), 0, "EOF");
    // The cursor API.
    let mut g = File::options().read(true).write(true).open(&path).unwrap();
    g.seek(SeekFrom::Start(10)).unwrap();
    let mut four = [0u8; 4];
    g.read_exact(&mut four).unwrap();
    assert_eq!(four[..], data[10..14]);
    g.seek(SeekFrom::End(0)).unwrap();
    g.write_all(b"tail").unwrap();
    assert_eq!(g.metadata().unwrap().len(), data.len() as u64 + 4);
    drop((f, g));
    std::fs::remove_file(&path).unwrap();
    assert!(File::open(&path).is_err());
}

trait InoCompat {
    fn ino_compat(&self) -> u64;
}

impl InoCompat for std::fs::Metadata {
    fn ino_compat(&self) -> u64 {
        std::os::unix::fs::MetadataExt::ino(self)
    }
}

#[test]
fn files_on_both_backends_and_plain_threads() {
    for backend in backends() {
        cluster(backend)
            .spawn(move || file_round_trip(&format!("rt-{backend}")))
            .join()
            .unwrap();
    }
    file_round_trip("thread");
}

fn receive_all(listener: TcpListener) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    })
}

#[test]
fn send_file_sends_the_exact_bytes_every_way() {
    let path = temp_path("send");
    let data = pattern(1_048_576 + 3);
    std::fs::write(&path, &data).unwrap();
    let methods = [
        SendFileMethod::Auto,
        SendFileMethod::Sendfile,
        SendFileMethod::Splice,
        SendFileMethod::ReadSend,
    ];
    for backend in backends() {
        let c = cluster(backend);
        for method in methods {
            for (offset, len) in [
                (0usize, 4096usize),
                (5, 65_536),
                (0, data.len()),
                (100, 1 << 30),
            ] {
                let listener = TcpListener::bind("127.0.0.1:0").unwrap();
                let addr = listener.local_addr().unwrap();
                let peer = receive_all(listener);
                let p = path.clone();
                let sent = c
                    .spawn(move || {
                        let f = File::open(&p).unwrap();
                        let s = TcpStream::connect(addr).unwrap();
                        let n = send_file_with(method, &f, offset as u64, len, &s).unwrap();
                        s.shutdown(std::net::Shutdown::Write).unwrap();
                        n
                    })
                    .join()
                    .unwrap();
                let want = &data[offset..(offset + len).min(data.len())];
                assert_eq!(sent, want.len(), "{backend} {method:?} {offset}+{len}");
                let got = peer.join().unwrap();
                assert!(
                    got == want,
                    "{backend} {method:?} {offset}+{len}: bytes differ"
                );
            }
        }
    }
    std::fs::remove_file(&path).unwrap();
}

/// `send_file_after`: the head, then the range, exactly, for ranges sent by `sendfile` and by
/// splice (over 128 KiB on uring), an empty range and one past the end of the file; and a range
/// that ends early still lets the head out while the socket stays open (the bytes kept back
/// for the file's first write are pushed), on every backend and from a plain thread.
#[test]
fn send_file_after_sends_the_head_then_the_range() {
    let path = temp_path("send-after");
    let data = pattern(300_000);
    std::fs::write(&path, &data).unwrap();
    let head: Vec<u8> = b"HTTP/1.1 200 OK\r\nContent-Length: n\r\n\r\n".to_vec();
    let cases = [
        (0usize, 4096usize),
        (7, 200_000),
        (0, 0),
        (299_990, 1000),
        (400_000, 10),
    ];
    let mut contexts: Vec<Option<IoBackend>> = backends().into_iter().map(Some).collect();
    contexts.push(None);
    for context in contexts {
        for (offset, len) in cases {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let want_file = data[offset.min(data.len())..(offset + len).min(data.len())].to_vec();
            let want: Vec<u8> = head.iter().chain(&want_file).copied().collect();
            let expected = want.len();
            // The reader takes exactly what is owed, then tells the sender to close: a head
            // kept back by the kernel would time the read out.
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let reader = std::thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let mut got = vec![0u8; expected];
                let r = s.read_exact(&mut got);
                done_tx.send(()).unwrap();
                r.map(|_| got)
            });
            let (p, h) = (path.clone(), head.clone());
            let send = move || {
                let f = File::open(&p).unwrap();
                let s = TcpStream::connect(addr).unwrap();
                let n = send_file_after(&h, &f, offset as u64, len, &s).unwrap();
                let unsent = unsent_bytes(s.as_raw_fd());
                done_rx.recv().unwrap();
                (n, unsent)
            };
            let (sent, unsent) = match context {
                Some(backend) => cluster(backend).spawn(send).join().unwrap(),
                None => send(),
            };
            let what = format!("{context:?} {offset}+{len}");
            assert_eq!(sent, want_file.len(), "{what}");
            if expected <= 8192 {
                // Small enough for the window: nothing may be kept back once the call returned
                // (a head left corked would go only with the probe timer, 200 ms on).
                assert_eq!(unsent, 0, "{what}: bytes still kept back in the socket");
            }
            let got = reader.join().unwrap();
            let got = got.unwrap_or_else(|e| panic!("{what}: the reader got {e}"));
            assert!(got == want, "{what}: bytes differ");
        }
    }
    std::fs::remove_file(&path).unwrap();
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

/// The running kernel's (major, minor) version.
fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut parts = release.trim().split(['.', '-']);
    let major = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor)
}

/// A file evicted from the page cache is read on the blocking pool before `sendfile` sends it,
/// so the processor never waits for the disk; the bytes are still exact.
#[test]
fn send_file_warms_a_cold_file_on_the_blocking_pool() {
    let path = temp_path("send-cold");
    let data = pattern(3 * 1_048_576 + 17);
    std::fs::write(&path, &data).unwrap();
    for backend in backends() {
        {
            // Evict it: written back first, then dropped from the page cache.
            let f = std::fs::File::open(&path).unwrap();
            f.sync_all().unwrap();
            // SAFETY: plain fadvise on an open descriptor.
            let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            assert_eq!(r, 0);
        }
        let before = weft::fs::cold_ranges_warmed();
        let c = cluster(backend);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = receive_all(listener);
        let p = path.clone();
        let len = data.len();
        let sent = c
            .spawn(move || {
                let f = File::open(&p).unwrap();
                let s = TcpStream::connect(addr).unwrap();
                let n = send_file_with(SendFileMethod::Sendfile, &f, 0, len, &s).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                n
            })
            .join()
            .unwrap();
        assert_eq!(sent, data.len(), "{backend}");
        assert!(peer.join().unwrap() == data, "{backend}: bytes differ");
        let warmed = weft::fs::cold_ranges_warmed() - before;
        if kernel_version() >= (6, 5) {
            assert!(
                warmed > 0,
                "{backend}: the cold file was not read on the blocking pool"
            );
        } else {
            println!("kernel without cachestat(2): cold ranges cannot be detected");
        }
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn send_file_to_a_unix_stream_and_from_a_plain_thread() {
    let path = temp_path("send-unix");
    let data = pattern(200_000);
    std::fs::write(&path, &data).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        (&b).read_to_end(&mut got).unwrap();
        got
    });
    let f = File::open(&path).unwrap();
    assert_eq!(send_file(&f, 0, data.len(), &a).unwrap(), data.len());
    drop(a);
    assert!(reader.join().unwrap() == data);
    std::fs::remove_file(&path).unwrap();
}
