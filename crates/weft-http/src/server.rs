//! The listener, the accept loop, the connection limit and graceful shutdown.
//!
//! Shutdown ([`ShutdownHandle::shutdown`], or SIGTERM/SIGINT through
//! [`shutdown_on_signals`]): `draining` is set, the accept fiber is cancelled (the listening
//! socket closes with it), connections waiting idle for a request are cancelled, connections
//! reading or answering a request finish it and then close (their responses say
//! `Connection: close`); [`Server::run`] returns once none is left, or after
//! `shutdown_grace`.
//!
//! Admission ([`crate::admission`]): the accept fiber takes a slot before each `accept` and
//! parks while [`Config::max_unanswered`] accepted connections still wait for the
//! server's answer, so an overload stays in the kernel's listen queue rather than becoming
//! fibers; a burst on an idle server goes in that many at a time. A connection gives its slot
//! back when it first waits for its client.
//!
//! Lock order: `conns` is the only lock here; the accept fiber holds it across `spawn` (which
//! never parks) so a connection cannot deregister before it was registered. A connection
//! fiber takes it once, to deregister. No lock is held across I/O.
//!
//! With [`Config::threads_per_connection`] each connection runs the same [`conn::serve`] on
//! an OS thread of its own (named [`CONNECTION_THREAD_NAME`], the same stack size as a
//! connection fiber), where weft's sockets and files block the thread instead of parking a
//! fiber. A thread cannot be cancelled, so shutdown ends an idle one by shutting the read
//! side of a duplicate of its socket, which the registry holds (a duplicate, so the
//! descriptor shut down is never one a closed connection left for reuse); the idle read then
//! returns end-of-file and the connection sees it was claimed.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};
use weft::JoinHandle;

use crate::access_log::AccessLog;
use crate::admission::{Admission, Slot};
use crate::cache::FileCache;
use crate::config::Config;
use crate::conn::{self, CLOSING, IDLE};
use crate::date::DateCache;
use crate::root::Root;

/// Connections answered 503 at once at most; past that, refused ones are just closed.
const MAX_REFUSING: usize = 64;
/// How long a refused connection's 503 may take to go out.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Stack of a connection fiber, and of a connection thread with `threads_per_connection`.
const CONNECTION_STACK_BYTES: usize = 256 * 1024;
/// The name of a connection's OS thread with `threads_per_connection`.
pub const CONNECTION_THREAD_NAME: &str = "weft-http-conn";

/// State every connection fiber shares.
pub(crate) struct Shared {
    pub config: Config,
    pub root: Arc<Root>,
    pub cache: FileCache,
    pub date: DateCache,
    pub access_log: Option<AccessLog>,
    /// Set once shutdown starts: no new requests are read.
    pub draining: AtomicBool,
    /// Whether accepted sockets come with `TCP_NODELAY` (set on the listener).
    pub accepted_nodelay: bool,
    /// Open connections (the limit counts these).
    active: AtomicUsize,
    /// The most connections open at once so far (for tests and diagnostics).
    peak_active: AtomicUsize,
    /// Connections being answered 503.
    refusing: AtomicUsize,
    /// Slots of accepted connections still waiting for the server (see `admission`).
    admission: Arc<Admission>,
    /// Every open connection's state and fiber, so shutdown can cancel the idle ones.
    conns: Mutex<HashMap<u64, Tracked>>,
    next_id: AtomicU64,
    /// Set by [`ShutdownHandle::shutdown`]; `run` waits on it.
    shutdown_requested: Mutex<bool>,
    shutdown_cv: Condvar,
}

struct Tracked {
    state: Arc<AtomicU8>,
    worker: Worker,
}

/// What runs a connection, as shutdown needs to stop it.
enum Worker {
    Fiber(JoinHandle<()>),
    /// An OS thread, stopped through a duplicate of its socket (see the module docs).
    Thread(TcpStream),
}

impl Worker {
    /// Ends an idle connection's wait for a request.
    fn stop_idle(&self) {
        match self {
            Worker::Fiber(fiber) => fiber.cancel(),
            Worker::Thread(socket) => {
                let _ = socket.shutdown(Shutdown::Read);
            }
        }
    }
}

/// A bound server, ready to [`run`](Server::run).
pub struct Server {
    shared: Arc<Shared>,
    listener: TcpListener,
    cluster: weft::Cluster,
    local_addr: SocketAddr,
}

/// Asks a running server to shut down gracefully; cloneable, usable from any thread.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Starts a graceful shutdown (idempotent); [`Server::run`] returns when it is done.
    pub fn shutdown(&self) {
        *lock(&self.shared.shutdown_requested) = true;
        self.shared.shutdown_cv.notify_all();
    }
}

/// Shuts the server down gracefully on the first SIGTERM or SIGINT.
pub fn shutdown_on_signals(handle: ShutdownHandle) -> io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    std::thread::Builder::new()
        .name("weft-http-signals".into())
        .spawn(move || {
            if signals.forever().next().is_some() {
                handle.shutdown();
            }
        })?;
    Ok(())
}

impl Server {
    /// Checks the root, opens the access log, starts the cluster and binds the listener;
    /// every error names what failed and why.
    pub fn bind(config: Config) -> io::Result<Server> {
        if config.processors == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--processors must be at least 1",
            ));
        }
        if config.max_connections == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "--max-connections must be at least 1",
            ));
        }
        let root = Arc::new(Root::new(&config.root, config.symlinks_may_leave_root)?);
        let access_log = config
            .access_log
            .as_deref()
            .map(AccessLog::open)
            .transpose()?;
        // The limit raised, and the descriptor table grown for every connection and cached
        // file now: growing it while connections arrive would stall the processor
        // (`weft::net::reserve_descriptors`). A failure only means it grows later.
        let _ = weft::net::reserve_descriptors(
            config
                .max_connections
                .saturating_add(config.open_file_cache_entries)
                .saturating_add(OWN_DESCRIPTORS),
        );
        let listener = TcpListener::builder()
            .backlog(4096)
            .bind(config.listen)
            .map_err(|e| {
                let hint = match e.kind() {
                    io::ErrorKind::AddrInUse => {
                        " (another server listens there; pick another --listen port)"
                    }
                    io::ErrorKind::PermissionDenied => " (ports below 1024 need privileges)",
                    io::ErrorKind::AddrNotAvailable => " (no local interface has that address)",
                    _ => "",
                };
                io::Error::new(e.kind(), format!("listen on {}: {e}{hint}", config.listen))
            })?;
        if config.defer_accept_secs > 0 {
            set_tcp_option(
                &listener,
                libc::TCP_DEFER_ACCEPT,
                i32::try_from(config.defer_accept_secs).unwrap_or(i32::MAX),
            )
            .map_err(|e| io::Error::new(e.kind(), format!("TCP_DEFER_ACCEPT: {e}")))?;
        }
        // Accepted sockets inherit TCP_NODELAY from the listener (Linux copies the listener's
        // TCP settings into each child), so no connection pays a setsockopt for it. If the
        // listener refuses, each connection sets it when it first matters (`conn.rs`).
        let accepted_nodelay = set_tcp_option(&listener, libc::TCP_NODELAY, 1).is_ok();
        let local_addr = listener.local_addr()?;
        let mut builder = weft::Cluster::builder()
            .name("http")
            .processors(config.processors)
            .idle_poll(std::time::Duration::from_micros(config.idle_poll_us))
            .keep_tick(std::time::Duration::from_micros(config.keep_tick_us));
        if let Some(s) = &config.scheduler {
            builder = builder.scheduler(s.clone());
        }
        if let Some(io) = config.io {
            builder = builder.io(io);
        }
        let cluster = builder.build()?;
        let admission = Admission::new(config.max_unanswered);
        let shared = Arc::new(Shared {
            cache: FileCache::new(
                config.open_file_cache_entries,
                config.memory_max_bytes,
                config.open_file_cache_valid,
            ),
            config,
            root,
            date: DateCache::new(),
            access_log,
            draining: AtomicBool::new(false),
            accepted_nodelay,
            active: AtomicUsize::new(0),
            peak_active: AtomicUsize::new(0),
            refusing: AtomicUsize::new(0),
            admission,
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            shutdown_requested: Mutex::new(false),
            shutdown_cv: Condvar::new(),
        });
        Ok(Server {
            shared,
            listener,
            cluster,
            local_addr,
        })
    }

    /// The address it listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The served directory, resolved.
    pub fn root(&self) -> &std::path::Path {
        self.shared.root.path()
    }

    /// A handle that stops [`run`](Server::run).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            shared: self.shared.clone(),
        }
    }

    /// Serves until shut down (see the module docs), then stops the cluster.
    pub fn run(self) -> io::Result<()> {
        let Server {
            shared,
            listener,
            cluster,
            ..
        } = self;
        let accept = {
            let shared = shared.clone();
            weft::Builder::new()
                .name("http-accept")
                .cluster(&cluster)
                .spawn(move || accept_loop(&shared, listener))?
        };
        {
            let mut requested = lock(&shared.shutdown_requested);
            while !*requested {
                requested = crate::fatal::wait(&shared.shutdown_cv, requested, "shutdown flag");
            }
        }
        shared.draining.store(true, Ordering::SeqCst);
        accept.cancel();
        let _ = accept.join();
        for tracked in lock(&shared.conns).values() {
            if tracked
                .state
                .compare_exchange(IDLE, CLOSING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                tracked.worker.stop_idle();
            }
        }
        let deadline = Instant::now() + shared.config.shutdown_grace;
        while shared.active.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let left = shared.active.load(Ordering::SeqCst);
        if left > 0 {
            eprintln!("weft http: {left} connection(s) still busy after the shutdown grace period; closing");
        }
        cluster.shutdown();
        Ok(())
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    let mut error_reported = false;
    loop {
        // Parks while too many accepted connections wait for us (module docs, "Admission").
        let Some(slot) = shared.admission.acquire() else {
            return;
        };
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(e) => {
                if shared.draining.load(Ordering::SeqCst) || weft::is_cancelled() {
                    return;
                }
                if !error_reported {
                    eprintln!("weft http: accept failed: {e} (retrying)");
                    error_reported = true;
                }
                if weft::sleep(Duration::from_millis(10)).is_err() {
                    return;
                }
                continue;
            }
        };
        if shared.draining.load(Ordering::SeqCst) {
            return;
        }
        if shared.active.load(Ordering::Relaxed) >= shared.config.max_connections {
            drop(slot);
            refuse(shared, stream);
            weft::yield_now();
            continue;
        }
        admit(shared, stream, peer, slot, &mut error_reported);
    }
}

/// Registers an accepted connection and starts its worker (fiber or thread).
fn admit(
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    error_reported: &mut bool,
) {
    let open = shared.active.fetch_add(1, Ordering::SeqCst) + 1;
    shared.peak_active.fetch_max(open, Ordering::Relaxed);
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let state = Arc::new(AtomicU8::new(conn::BUSY));
    let mut conns = lock(&shared.conns);
    let serve = {
        let shared = shared.clone();
        let state = state.clone();
        move |stream: TcpStream| {
            conn::serve(&shared, stream, peer, &state, slot);
            lock(&shared.conns).remove(&id);
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    };
    let started = if shared.config.threads_per_connection {
        stream.try_clone().and_then(|dup| {
            std::thread::Builder::new()
                .name(CONNECTION_THREAD_NAME.into())
                .stack_size(CONNECTION_STACK_BYTES)
                .spawn(move || serve(stream))
                .map(|_| Worker::Thread(dup))
        })
    } else {
        weft::Builder::new()
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(move || serve(stream))
            .map(Worker::Fiber)
    };
    match started {
        Ok(worker) => {
            conns.insert(id, Tracked { state, worker });
        }
        Err(e) => {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            if !*error_reported {
                eprintln!("weft http: cannot start a connection worker: {e}");
                *error_reported = true;
            }
        }
    }
}

/// Past `--max-connections`: answer 503 and close, in a fiber of its own (at most
/// [`MAX_REFUSING`] at once, beyond which the connection is just closed).
fn refuse(shared: &Arc<Shared>, stream: TcpStream) {
    if shared.refusing.fetch_add(1, Ordering::Relaxed) >= MAX_REFUSING {
        shared.refusing.fetch_sub(1, Ordering::Relaxed);
        return;
    }
    let shared2 = shared.clone();
    let spawned = weft::Builder::new().spawn(move || {
        let mut out = Vec::new();
        let date = shared2.date.now();
        crate::response::simple(&mut out, 503, &date, b"", false, true);
        let _ = stream.set_write_timeout(Some(REFUSE_TIMEOUT));
        let _ = stream.set_read_timeout(Some(REFUSE_TIMEOUT));
        if (&stream).write_all(&out).is_ok() && stream.shutdown(Shutdown::Write).is_ok() {
            let mut sink = [0u8; 1024];
            while matches!((&stream).read(&mut sink), Ok(n) if n > 0) {}
        }
        shared2.refusing.fetch_sub(1, Ordering::Relaxed);
    });
    if spawned.is_err() {
        shared.refusing.fetch_sub(1, Ordering::Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    crate::fatal::lock(m, "server state")
}

/// Sets an `IPPROTO_TCP` int option on the listening socket.
fn set_tcp_option(listener: &TcpListener, option: libc::c_int, value: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let value = value as libc::c_int;
    // SAFETY: setsockopt on a valid socket with an int option that outlives the call.
    let r = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Descriptors the server holds besides connections and cached files: the listener, each
/// processor's ring and eventfds, the access log, a margin.
const OWN_DESCRIPTORS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    /// `max_unanswered` in these tests.
    const UNANSWERED: usize = 32;

    /// Accepted sockets come with the listener's `TCP_NODELAY`, which `Server::bind` relies on
    /// to spare each connection the setsockopt (a kernel that did not copy it would fail here).
    #[test]
    fn accepted_sockets_inherit_nodelay_from_the_listener() {
        for nodelay in [true, false] {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            if nodelay {
                set_tcp_option(&listener, libc::TCP_NODELAY, 1).unwrap();
            }
            let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (accepted, _) = listener.accept().unwrap();
            assert_eq!(accepted.nodelay().unwrap(), nodelay);
            drop(client);
        }
    }

    /// A full listen queue is taken in as fast as the processor answers it, not all at once:
    /// each accepted connection is a fiber holding a stack and buffers, so a server that
    /// accepts every queued connection in one turn of its accept fiber turns an overload into
    /// memory (under a memory limit: a page cache squeezed out, then the OOM killer), where
    /// the kernel's queue costs the server nothing.
    #[test]
    fn a_queued_burst_is_accepted_at_the_pace_of_the_answers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), b"hello").unwrap();
        let mut config = Config::new(dir.path());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.processors = 1;
        config.max_unanswered = UNANSWERED;
        let server = Server::bind(config).unwrap();
        let addr = server.local_addr();
        let shared = server.shared.clone();
        let handle = server.shutdown_handle();
        let cluster = server.cluster.clone();
        let runner = std::thread::spawn(move || server.run());
        let get = b"GET /f.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        // Once, so the file is in the open-file cache and answers need no blocking pool.
        let mut first = std::net::TcpStream::connect(addr).unwrap();
        first.write_all(get).unwrap();
        first.read_to_end(&mut Vec::new()).unwrap();
        // Stop the accept fiber's processor while a burst queues up behind it.
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let (stopped_tx, stopped_rx) = std::sync::mpsc::channel::<()>();
        let blocker = weft::Builder::new()
            .cluster(&cluster)
            .spawn(move || {
                stopped_tx.send(()).unwrap();
                // Blocks the processor's OS thread on purpose, so nothing is accepted.
                stop_rx.recv().unwrap();
            })
            .unwrap();
        stopped_rx.recv().unwrap();
        const BURST: usize = 300;
        let mut clients: Vec<_> = (0..BURST)
            .map(|_| {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(get).unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        stop_tx.send(()).unwrap();
        blocker.join().unwrap();
        for c in &mut clients {
            let mut reply = Vec::new();
            c.read_to_end(&mut reply).unwrap();
            assert!(
                reply.starts_with(b"HTTP/1.1 200"),
                "{:?}",
                String::from_utf8_lossy(&reply)
            );
        }
        let peak = shared.peak_active.load(Ordering::Relaxed);
        handle.shutdown();
        runner.join().unwrap().unwrap();
        assert!(
            peak <= UNANSWERED,
            "{peak} of {BURST} queued connections were open at once"
        );
    }

    /// Starts a server on 127.0.0.1:0 over a root holding `f.txt` (5 bytes) and `big.bin`.
    fn start(
        big_bytes: usize,
    ) -> (
        SocketAddr,
        ShutdownHandle,
        std::thread::JoinHandle<io::Result<()>>,
        tempfile::TempDir,
    ) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), b"hello").unwrap();
        std::fs::write(dir.path().join("big.bin"), vec![7u8; big_bytes]).unwrap();
        let mut config = Config::new(dir.path());
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.processors = 1;
        // Silent clients reach `accept` at once instead of after the kernel's wait for data.
        config.defer_accept_secs = 0;
        config.max_unanswered = UNANSWERED;
        let server = Server::bind(config).unwrap();
        let addr = server.local_addr();
        let handle = server.shutdown_handle();
        let runner = std::thread::spawn(move || server.run());
        (addr, handle, runner, dir)
    }

    fn get_ok(addr: SocketAddr, path: &str) {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = Vec::new();
        c.read_to_end(&mut reply)
            .expect("the server stopped answering");
        assert!(
            reply.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&reply)
        );
    }

    /// Clients that connect and send nothing, or send half a request head, wait for
    /// themselves, not for the server: however many there are, they take no admission slot
    /// and everyone else is still accepted.
    #[test]
    fn silent_and_slow_clients_do_not_stop_admission() {
        let (addr, handle, runner, _dir) = start(16);
        let n = 2 * UNANSWERED;
        let mut idle: Vec<_> = (0..n)
            .map(|i| {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                if i % 2 == 1 {
                    c.write_all(b"GET /f.txt HTTP/1.1\r\nHo").unwrap();
                }
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        get_ok(addr, "/f.txt");
        idle.clear();
        handle.shutdown();
        runner.join().unwrap().unwrap();
    }

    /// Clients that ask for a large body and never read it wait for themselves too.
    #[test]
    fn clients_not_reading_large_bodies_do_not_stop_admission() {
        let (addr, handle, runner, _dir) = start(8 << 20);
        let n = 2 * UNANSWERED;
        let stalled: Vec<_> = (0..n)
            .map(|_| {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
                    .unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        get_ok(addr, "/f.txt");
        drop(stalled);
        handle.shutdown();
        runner.join().unwrap().unwrap();
    }
}
