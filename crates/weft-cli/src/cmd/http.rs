//! `weft http`: serve a directory over HTTP/1.1 (the weft-http crate) until SIGTERM/SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::builder::TypedValueParser;
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IoArg {
    /// io_uring (falls back to epoll, with one log line, when the kernel refuses it).
    Uring,
    /// epoll.
    Epoll,
}

/// Serve static files: GET/HEAD, keep-alive, pipelining, conditional and range requests.
///
/// Prints "listening on ADDR" to stderr once bound; on SIGTERM or SIGINT it stops accepting,
/// finishes the responses in flight and exits 0.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// The directory to serve [default: the current directory].
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,

    /// Address and port to listen on.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Processors (OS threads running connection fibers).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    processors: u16,

    /// Scheduling policy of the server's cluster (chosen by measurement: docs/SCHEDULERS.md).
    #[arg(long, default_value = weft_http::DEFAULT_SCHEDULER, value_parser = parse_scheduler)]
    scheduler: String,

    /// I/O backend [default: uring, epoll if unavailable].
    #[arg(long, value_enum)]
    io: Option<IoArg>,

    /// How long an idle processor polls for the next request before it sleeps, in
    /// microseconds (0, the default: sleep at once). Polling spares a request the wake-up of
    /// a sleeping thread (tens of microseconds on a virtual machine) and costs the CPU it
    /// spends; a processor polls only while at least half of its recent idle periods ended
    /// within the window, and keeps at least 10 % of its time asleep.
    #[arg(long, default_value_t = weft::DEFAULT_IDLE_POLL.as_micros() as u64, value_parser = clap::value_parser!(u64).range(0..=weft::MAX_IDLE_POLL.as_micros() as u64))]
    idle_poll_us: u64,

    /// While serving, each processor keeps a timer armed when it sleeps, due at the kernel's
    /// next tick or this many microseconds from now if that is sooner (0: none), so that the
    /// kernel keeps the CPU's tick running and a request that wakes the server does not pay for
    /// restarting it (a trap to the hypervisor on a virtual machine, 4-5 microseconds here).
    /// Due with the tick it shares the tick's interrupt; a period shorter than the tick (1000,
    /// the first default) adds an interrupt of its own each period. After 4 periods with
    /// nothing to do the processor stops arming it.
    #[arg(long, default_value_t = weft::DEFAULT_KEEP_TICK.as_micros() as u64, value_parser = clap::value_parser!(u64).range(0..=weft::MAX_KEEP_TICK.as_micros() as u64))]
    keep_tick_us: u64,

    /// Most connections open at once; more are answered 503 and closed.
    #[arg(long, default_value_t = 16_384, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,

    /// Most accepted connections whose request waits for the server (CPU, disk) at once;
    /// past it new connections wait in the kernel's listen queue instead of in memory.
    #[arg(long, value_name = "N", default_value_t = weft_http::DEFAULT_MAX_UNANSWERED as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    max_unanswered: u64,

    /// Append one line per response (combined log format) to FILE.
    #[arg(long, value_name = "FILE")]
    access_log: Option<PathBuf>,

    /// Seconds a client may take to send a whole request head (then 408 and close).
    #[arg(long, default_value_t = 30, value_name = "S")]
    header_timeout: u64,

    /// Seconds an idle kept-alive connection stays open.
    #[arg(long, default_value_t = 75, value_name = "S")]
    keepalive_timeout: u64,

    /// Largest request body read and discarded (larger: 413).
    #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
    max_body_bytes: u64,

    /// Longest request line (method, target, version; longer: 414).
    #[arg(long, default_value_t = weft_http::DEFAULT_MAX_REQUEST_LINE_BYTES, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(16..).map(|v| v as usize))]
    max_request_line_bytes: usize,

    /// Largest request head, request line and header fields together (larger: 431).
    #[arg(long, default_value_t = weft_http::DEFAULT_MAX_HEAD_BYTES, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(64..).map(|v| v as usize))]
    max_header_bytes: usize,

    /// Most header field lines in one request (more: 431).
    #[arg(long, default_value_t = weft_http::DEFAULT_MAX_HEADER_LINES, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    max_header_lines: usize,

    /// Most ranges in one Range header; with more the header is ignored (200, whole file).
    #[arg(long, default_value_t = weft_http::DEFAULT_MAX_RANGES, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..).map(|v| v as usize))]
    max_ranges: usize,

    /// Files up to this size are kept in memory and sent with the head in one write
    /// (0: always send_file).
    #[arg(long, default_value_t = weft_http::DEFAULT_MEMORY_MAX_BYTES, value_name = "BYTES")]
    memory_max_bytes: u64,

    /// Most files kept open in the open-file cache.
    #[arg(long, default_value_t = 8192, value_name = "N")]
    open_files: usize,

    /// How long a cached open file is served without looking at the file again, in
    /// milliseconds (nginx's open_file_cache_valid, 60 s there). 0, the default: every
    /// request is answered on a check made after it arrived (its own, or one shared with the
    /// requests that came before it), so a file changed, replaced or deleted before a request
    /// was sent is never served to it as it was.
    /// Above 0 a change shows at the first request after the window; until then the old
    /// bytes are served, or a response from a file that shrank in place ends early.
    #[arg(long, default_value_t = 0, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    open_file_cache_valid_ms: u64,

    /// Serve symlinks that point outside the root (refused with 403 by default).
    #[arg(long)]
    allow_symlinks_outside_root: bool,

    /// TCP_DEFER_ACCEPT seconds (0: off): the kernel hands a connection over once its first
    /// request bytes arrived (or after this long), so the first read never waits; measured to
    /// cut server CPU per short-lived connection by about a third.
    #[arg(long, default_value_t = 1, value_name = "S")]
    defer_accept: u32,

    /// Serve each connection on an OS thread of its own instead of a fiber: the same
    /// connection code, whose socket and file calls then block the thread (the accept loop
    /// stays a fiber). For comparing fibers with OS threads (`weft experiment threads`).
    #[arg(long)]
    threads_per_connection: bool,
}

fn parse_scheduler(s: &str) -> Result<String, String> {
    if weft::sched::names().contains(&s) {
        Ok(s.to_owned())
    } else {
        Err(weft::sched::UnknownPolicy(s.to_owned()).to_string())
    }
}

pub fn run(args: HttpArgs) -> anyhow::Result<()> {
    let root = match args.root {
        Some(r) => r,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mut config = weft_http::Config::new(root);
    config.listen = args.listen;
    config.processors = usize::from(args.processors);
    config.scheduler = Some(args.scheduler);
    config.io = args.io.map(|b| match b {
        IoArg::Uring => weft::IoBackend::Uring,
        IoArg::Epoll => weft::IoBackend::Epoll,
    });
    config.idle_poll_us = args.idle_poll_us;
    config.keep_tick_us = args.keep_tick_us;
    config.max_connections = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
    config.max_unanswered = usize::try_from(args.max_unanswered).unwrap_or(usize::MAX);
    config.access_log = args.access_log;
    config.header_timeout = Duration::from_secs(args.header_timeout.max(1));
    config.keepalive_timeout = Duration::from_secs(args.keepalive_timeout.max(1));
    config.max_body_bytes = args.max_body_bytes;
    config.max_request_line_bytes = args.max_request_line_bytes;
    config.max_head_bytes = args.max_header_bytes;
    config.max_header_lines = args.max_header_lines;
    config.max_ranges = args.max_ranges;
    config.memory_max_bytes = args.memory_max_bytes;
    config.open_file_cache_entries = args.open_files.max(1);
    config.open_file_cache_valid = Duration::from_millis(args.open_file_cache_valid_ms);
    config.symlinks_may_leave_root = args.allow_symlinks_outside_root;
    config.defer_accept_secs = args.defer_accept;
    config.threads_per_connection = args.threads_per_connection;
    let server = weft_http::Server::bind(config)?;
    weft_http::shutdown_on_signals(server.shutdown_handle())
        .context("cannot install the SIGTERM handler")?;
    eprintln!("listening on {}", server.local_addr());
    server.run()?;
    Ok(())
}
