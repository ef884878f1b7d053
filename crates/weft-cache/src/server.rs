//! Listeners, the connection limit, the sweeper, and shutdown.
//!
//! One accept fiber per listener; one fiber per connection ([`crate::session::serve`]); one
//! sweeper fiber that reclaims expired items; one rebalancer fiber that moves slab pages to
//! classes that found none; on glibc one trim fiber that returns the heap's
//! free pages to the kernel every second (`TRIM_INTERVAL_MS`). Over `-c` connections a new
//! client gets memcached's `ERROR Too many open connections` and is closed. [`Server::shutdown`] stops
//! accepting, shuts the read side of every connection (each finishes the requests it has and
//! writes their replies), waits up to a grace period, and stops the cluster.
//!
//! Lock order: the connection registry lock is taken alone (never with a shard lock). A
//! connection removes itself from the registry before its socket is closed, so a descriptor
//! seen in the registry is always still open.
//!
//! With [`Settings::threads_per_connection`] each connection runs the same
//! [`session::serve`] on an OS thread of its own (named [`CONNECTION_THREAD_NAME`], the same
//! stack size as a connection fiber), where weft's sockets block the thread instead of
//! parking a fiber; shutdown reaches it the same way, by shutting the socket's read side.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use weft::{Cluster, JoinHandle};

use crate::config::Settings;
use crate::exec::{ConnInfo, Context};
use crate::session;
use crate::stats::bump;

/// The reply to a client over the connection limit (memcached's words).
const TOO_MANY_CONNECTIONS: &[u8] = b"ERROR Too many open connections\r\n";
/// Stack per connection fiber: parsing and replying need little.
const CONNECTION_STACK_BYTES: usize = 64 * 1024;
/// The name of a connection's OS thread with `threads_per_connection`.
pub const CONNECTION_THREAD_NAME: &str = "weft-mc-conn";

/// A running server.
pub struct Server {
    ctx: Arc<Context>,
    cluster: Cluster,
    tcp_addrs: Vec<SocketAddr>,
    fibers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("tcp_addrs", &self.tcp_addrs)
            .finish_non_exhaustive()
    }
}

/// Descriptors the server holds besides its connections: listeners, each processor's ring and
/// eventfds, the log, a margin.
const OWN_DESCRIPTORS: usize = 64;

impl Server {
    /// Builds the cluster, binds every listener (so clients can connect when this returns),
    /// and starts accepting.
    pub fn start(settings: Settings) -> io::Result<Server> {
        // The limit raised, and the descriptor table grown for `-c` now: growing it while
        // connections arrive would stall the processor (`weft::net::reserve_descriptors`).
        // A failure only means the table grows later, as it would have.
        let _ = weft::net::reserve_descriptors(
            settings.max_connections.saturating_add(OWN_DESCRIPTORS),
        );
        let mut builder = Cluster::builder()
            .name("memcached")
            .processors(settings.processors)
            .scheduler(settings.scheduler.clone())
            .idle_poll(Duration::from_micros(settings.idle_poll_us))
            .keep_tick(Duration::from_micros(settings.keep_tick_us));
        if let Some(io) = settings.io {
            builder = builder.io(io);
        }
        let cluster = builder.build()?;
        let ctx = Arc::new(Context::new(settings));
        let mut fibers = Vec::new();
        let mut tcp_addrs = Vec::new();
        if let Some(path) = ctx.settings.unix_socket.clone() {
            let _ = std::fs::remove_file(&path);
            let listener = UnixListener::bind(&path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot bind Unix socket {}: {e}", path.display()),
                )
            })?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                &path,
                std::fs::Permissions::from_mode(ctx.settings.unix_mask),
            )?;
            register(
                &ctx,
                listener.as_raw_fd(),
                format!("unix:{}", path.display()),
                "",
            );
            let c = ctx.clone();
            fibers.push(spawn_on(&cluster, "accept-unix", move || {
                accept_unix(listener, c)
            })?);
        } else {
            let hosts = if ctx.settings.listen.is_empty() {
                vec!["0.0.0.0".to_owned()]
            } else {
                ctx.settings.listen.clone()
            };
            for host in hosts {
                let addr = format!("{host}:{}", ctx.settings.port);
                let listener = TcpListener::builder()
                    .backlog(i32::try_from(ctx.settings.backlog).unwrap_or(i32::MAX))
                    .bind(addr.as_str())
                    .map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!(
                                "cannot listen on {addr}: {e} (is another memcached running? \
                                 choose another port with -p)"
                            ),
                        )
                    })?;
                let local = listener.local_addr()?;
                tcp_addrs.push(local);
                register(&ctx, listener.as_raw_fd(), format!("tcp:{local}"), "");
                let c = ctx.clone();
                fibers.push(spawn_on(&cluster, "accept", move || {
                    accept_tcp(listener, local, c)
                })?);
            }
        }
        if ctx.settings.sweeper {
            let c = ctx.clone();
            fibers.push(spawn_on(&cluster, "sweeper", move || sweeper(c))?);
        }
        let c = ctx.clone();
        fibers.push(spawn_on(&cluster, "rebalance", move || rebalancer(c))?);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            fibers.push(spawn_on(&cluster, "trim", trimmer)?);
        }
        Ok(Server {
            ctx,
            cluster,
            tcp_addrs,
            fibers,
        })
    }

    /// Whether a stop was asked for (a client's `shutdown` with `-A`, or
    /// [`crate::exec::ShutdownRequest::request`] through [`Server::context`]); the caller then
    /// calls [`Server::shutdown`].
    pub fn shutdown_requested(&self) -> bool {
        self.ctx.shutdown.is_requested()
    }

    /// Blocks until a stop is asked for (see [`Server::shutdown_requested`]) and returns why,
    /// e.g. `shutdown command received.`.
    pub fn wait_shutdown_requested(&self) -> String {
        self.ctx.shutdown.wait()
    }

    /// The TCP addresses listened on (with the real port when `-p 0`).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Graceful stop: no new connections, open ones finish what they have read, then the
    /// cluster stops (after `grace` at most).
    pub fn shutdown(self, grace: Duration) {
        for f in &self.fibers {
            f.cancel();
        }
        {
            let conns = crate::fatal::lock(&self.ctx.conns, "connection registry");
            for (fd, info) in conns.iter() {
                if !info.listen_addr.is_empty() {
                    // SAFETY: the descriptor is open while it is in the registry (connections
                    // unregister before closing, under this lock).
                    unsafe {
                        libc::shutdown(*fd, libc::SHUT_RD);
                    }
                }
            }
        }
        let deadline = Instant::now() + grace;
        while self.ctx.curr_connections.load(Ordering::Relaxed) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        for f in self.fibers {
            let _ = f.join();
        }
        if let Some(path) = &self.ctx.settings.unix_socket {
            let _ = std::fs::remove_file(path);
        }
        self.cluster.shutdown();
    }
}

fn spawn_on<F>(cluster: &Cluster, name: &str, f: F) -> io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    weft::Builder::new().name(name).cluster(cluster).spawn(f)
}

fn register(ctx: &Context, fd: i32, addr: String, listen_addr: &str) {
    crate::fatal::lock(&ctx.conns, "connection registry").insert(
        fd,
        ConnInfo {
            addr,
            listen_addr: listen_addr.to_owned(),
        },
    );
}

fn unregister(ctx: &Context, fd: i32) {
    crate::fatal::lock(&ctx.conns, "connection registry").remove(&fd);
}

/// Admits a connection or refuses it over the limit. Returns false when refused.
fn admit(ctx: &Context, mut refuse: impl FnMut(&[u8])) -> bool {
    bump(&ctx.store.stats.total_connections);
    let curr = ctx.curr_connections.fetch_add(1, Ordering::AcqRel);
    if curr as usize >= ctx.settings.max_connections {
        ctx.curr_connections.fetch_sub(1, Ordering::AcqRel);
        bump(&ctx.store.stats.rejected_connections);
        refuse(TOO_MANY_CONNECTIONS);
        return false;
    }
    true
}

fn accept_tcp(listener: TcpListener, local: SocketAddr, ctx: Arc<Context>) {
    let listen = format!("tcp:{local}");
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(s) => s,
            Err(e) if weft::is_cancelled() || e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => continue,
        };
        if !admit(&ctx, |msg| {
            let _ = (&stream).write_all(msg);
        }) {
            continue;
        }
        let _ = stream.set_nodelay(true);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(
            ctx.settings.write_stall_timeout_ms,
        )));
        if ctx.settings.idle_timeout_secs > 0 {
            let _ =
                stream.set_read_timeout(Some(Duration::from_secs(ctx.settings.idle_timeout_secs)));
        }
        let fd = stream.as_raw_fd();
        register(&ctx, fd, format!("tcp:{peer}"), &listen);
        let c = ctx.clone();
        start_session(&ctx, fd, move || run_tcp(stream, c, fd));
    }
}

fn accept_unix(listener: UnixListener, ctx: Arc<Context>) {
    let path = ctx
        .settings
        .unix_socket
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let listen = format!("unix:{path}");
    loop {
        let (stream, _) = match listener.accept() {
            Ok(s) => s,
            Err(e) if weft::is_cancelled() || e.kind() == io::ErrorKind::Interrupted => return,
            Err(_) => continue,
        };
        if !admit(&ctx, |msg| {
            let _ = (&stream).write_all(msg);
        }) {
            continue;
        }
        let _ = stream.set_write_timeout(Some(Duration::from_millis(
            ctx.settings.write_stall_timeout_ms,
        )));
        if ctx.settings.idle_timeout_secs > 0 {
            let _ =
                stream.set_read_timeout(Some(Duration::from_secs(ctx.settings.idle_timeout_secs)));
        }
        let fd = stream.as_raw_fd();
        register(&ctx, fd, listen.clone(), &listen);
        let c = ctx.clone();
        start_session(&ctx, fd, move || run_unix(stream, c, fd));
    }
}

fn start_session(ctx: &Arc<Context>, fd: i32, f: impl FnOnce() + Send + 'static) {
    if ctx.verbose() > 0 {
        eprintln!("<{fd} new auto-negotiating client connection");
    }
    let spawned = if ctx.settings.threads_per_connection {
        std::thread::Builder::new()
            .name(CONNECTION_THREAD_NAME.into())
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(f)
            .map(drop)
    } else {
        weft::Builder::new()
            .stack_size(CONNECTION_STACK_BYTES)
            .spawn(f)
            .map(drop)
    };
    if let Err(e) = spawned {
        // The closure (and the socket in it) was dropped: undo the admission.
        eprintln!("weft memcached: cannot start a connection worker: {e}");
        unregister(ctx, fd);
        ctx.curr_connections.fetch_sub(1, Ordering::AcqRel);
    }
}

fn finish(ctx: &Context, fd: i32, result: io::Result<()>) {
    unregister(ctx, fd);
    ctx.curr_connections.fetch_sub(1, Ordering::AcqRel);
    if ctx.verbose() > 0 {
        match result {
            Ok(()) => eprintln!("<{fd} connection closed."),
            Err(e) => eprintln!("<{fd} connection closed: {e}"),
        }
    }
}

fn run_tcp(stream: TcpStream, ctx: Arc<Context>, fd: i32) {
    let result = session::serve(&stream, &ctx, fd);
    finish(&ctx, fd, result);
    drop(stream);
}

fn run_unix(stream: UnixStream, ctx: Arc<Context>, fd: i32) {
    let result = session::serve(&stream, &ctx, fd);
    finish(&ctx, fd, result);
    drop(stream);
}

/// How often the trim fiber hands the allocator's free pages back to the kernel.
const TRIM_INTERVAL_MS: u64 = 1000;

/// Every [`TRIM_INTERVAL_MS`], `malloc_trim(0)`: glibc keeps the pages of freed values
/// resident inside its heaps (one heap per thread's arena) until told; this returns every
/// whole free page to the kernel (`MADV_DONTNEED`), so the holes a churn of random value
/// sizes leaves cost address space, not RSS. It changes no allocator setting and `-m` does
/// not depend on it (the store's own count holds `-m`); allocators that purge by themselves
/// (jemalloc, mimalloc) do not need it.
fn trimmer() {
    let interval = Duration::from_millis(TRIM_INTERVAL_MS);
    while weft::sleep(interval).is_ok() {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: malloc_trim takes a byte count and touches only the allocator's own state.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// How often the slab rebalancer looks for classes that found no page.
const REBALANCE_INTERVAL_MS: u64 = 100;

/// Moves pages to classes that found none ([`crate::store::Store::rebalance`]).
fn rebalancer(ctx: Arc<Context>) {
    while weft::sleep(Duration::from_millis(REBALANCE_INTERVAL_MS)).is_ok() {
        ctx.store.rebalance();
    }
}

fn sweeper(ctx: Arc<Context>) {
    let interval = Duration::from_millis(ctx.settings.sweep_interval_ms.max(1));
    while weft::sleep(interval).is_ok() {
        let now = ctx.store.clock.now();
        let budget = match ctx.settings.sweep_budget {
            0 => usize::MAX,
            n => n,
        };
        ctx.store.sweep(budget, now);
    }
}
