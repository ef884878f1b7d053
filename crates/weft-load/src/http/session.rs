//! One httperf-style session: connect, send its requests one after another on that
//! connection (waiting `think` between a reply and the next request), close.
//!
//! Latency of a request runs from its intended send time: the session's scheduled start for
//! the first, the previous reply plus the think time for the others. Every blocking call is
//! bounded by that request's deadline (intended + timeout).

use std::io::{self, ErrorKind, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use serde::{Deserialize, Serialize};
use weft::net::TcpStream;

use super::names::Names;
use super::reply;
use crate::latency::Recorder;

/// Receive buffer of one session: room for a response head (`reply::MAX_HEADER_BYTES`);
/// bodies stream through it. Small, because thousands of sessions may be open at once.
const SESSION_BUFFER_BYTES: usize = reply::MAX_HEADER_BYTES;

/// Errors by kind, as `--json` prints them.
#[derive(Debug, Default)]
pub struct ErrorCounters {
    pub timeout: AtomicU64,
    pub refused: AtomicU64,
    pub reset: AtomicU64,
    pub bad_status: AtomicU64,
    pub fd_unavailable: AtomicU64,
    pub other: AtomicU64,
}

/// A snapshot of [`ErrorCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    pub timeout: u64,
    pub refused: u64,
    pub reset: u64,
    pub bad_status: u64,
    pub fd_unavailable: u64,
    pub other: u64,
}

impl Errors {
    /// All kinds together.
    pub fn total(&self) -> u64 {
        self.timeout
            + self.refused
            + self.reset
            + self.bad_status
            + self.fd_unavailable
            + self.other
    }
}

impl ErrorCounters {
    /// The counts now.
    pub fn snapshot(&self) -> Errors {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Errors {
            timeout: l(&self.timeout),
            refused: l(&self.refused),
            reset: l(&self.reset),
            bad_status: l(&self.bad_status),
            fd_unavailable: l(&self.fd_unavailable),
            other: l(&self.other),
        }
    }

    /// Counts one failed request by the kind of `e`.
    pub fn count(&self, e: &io::Error) {
        let counter = match e.kind() {
            ErrorKind::TimedOut | ErrorKind::WouldBlock => &self.timeout,
            ErrorKind::ConnectionRefused => &self.refused,
            ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
            | ErrorKind::UnexpectedEof => &self.reset,
            _ if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                &self.fd_unavailable
            }
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// What every session of a run shares.
#[derive(Debug)]
pub struct SessionPlan {
    pub addr: SocketAddr,
    pub host: String,
    pub names: Names,
    pub requests_per_session: usize,
    /// The session's last request does not carry `Connection: close`: the client closes
    /// after its reply (httperf's sessions).
    pub client_closes: bool,
    pub think: Duration,
    pub timeout: Duration,
    pub count_from: Instant,
    pub end: Instant,
    pub recorder: Recorder,
    pub errors: ErrorCounters,
    pub bytes: AtomicU64,
}

impl SessionPlan {
    /// Whether a request intended at `t` is inside the measurement window.
    pub fn counts(&self, t: Instant) -> bool {
        t >= self.count_from && t < self.end
    }
}

/// Runs one session intended to start at `start`.
pub fn run(plan: &SessionPlan, start: Instant, rng: &mut SmallRng) {
    let counted = plan.counts(start);
    let mut conn = Connection::new();
    let mut intended = start;
    for i in 0..plan.requests_per_session {
        let last = i + 1 == plan.requests_per_session;
        if i > 0 && Instant::now() >= plan.end {
            // The window is over: the session's later requests are never sent.
            if counted {
                let left = (plan.requests_per_session - i) as u64;
                plan.recorder.with(|t| t.unsent += left);
            }
            return;
        }
        if !conn.request(plan, rng, intended, counted, last && !plan.client_closes) {
            return;
        }
        if !last && !plan.think.is_zero() {
            let _ = weft::sleep(plan.think);
        }
        intended = Instant::now();
    }
    // Dropping `conn` closes the connection: with `client_closes`, the client's FIN is how
    // the server learns the session is over.
}

/// Closed loop on one keep-alive connection: each request is intended the moment the
/// previous reply ends; a failed connection is counted and replaced.
pub fn run_closed(plan: &SessionPlan, rng: &mut SmallRng) {
    let mut conn = Connection::new();
    loop {
        let intended = Instant::now();
        if intended >= plan.end {
            return;
        }
        if !conn.request(plan, rng, intended, plan.counts(intended), false) {
            // Do not spin on a server that refuses.
            let _ = weft::sleep(Duration::from_millis(10));
        }
    }
}

/// Open loop over one persistent keep-alive connection (depth 1): sends each arrival the
/// dispatcher hands it, reads the reply, then takes the next; an arrival that finds the
/// previous request unanswered waits, its latency still running from its intended time. Stops
/// when the dispatcher closes the channel; arrivals left after the window are `unsent`. A
/// failed exchange is counted and the connection reopened for the next arrival.
pub fn run_fed(
    plan: &SessionPlan,
    stream: TcpStream,
    arrivals: weft::sync::channel::Receiver<Instant>,
    rng: &mut SmallRng,
) {
    let mut conn = Connection::new();
    conn.stream = Some(stream);
    while let Ok(intended) = arrivals.recv() {
        if Instant::now() >= plan.end {
            let mut unsent = u64::from(plan.counts(intended));
            while let Ok(at) = arrivals.try_recv() {
                unsent += u64::from(plan.counts(at));
            }
            plan.recorder.with(|t| t.unsent += unsent);
            return;
        }
        conn.request(plan, rng, intended, plan.counts(intended), false);
    }
}

/// A client connection (opened on first use, reopened after the server closes it) and its
/// buffers.
struct Connection {
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    request: Vec<u8>,
}

impl Connection {
    fn new() -> Connection {
        Connection {
            stream: None,
            buf: vec![0u8; SESSION_BUFFER_BYTES],
            request: Vec::with_capacity(256),
        }
    }

    /// Sends one GET for a drawn name (asking the server to close when `last`), reads the
    /// reply and, when `counted`, tallies it. Returns false when the exchange failed (the
    /// connection is then dropped).
    fn request(
        &mut self,
        plan: &SessionPlan,
        rng: &mut SmallRng,
        intended: Instant,
        counted: bool,
        last: bool,
    ) -> bool {
        self.request.clear();
        let path = plan.names.sample(rng);
        let _ = write!(
            self.request,
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: weft-load\r\n{}\r\n",
            plan.host,
            if last { "Connection: close\r\n" } else { "" }
        );
        let deadline = intended + plan.timeout;
        match exchange(
            plan,
            &mut self.stream,
            &self.request,
            &mut self.buf,
            deadline,
        ) {
            Ok(r) => {
                // What the server delivered inside the window, whenever it was asked for.
                if (200..400).contains(&r.status) && plan.counts(Instant::now()) {
                    plan.recorder.with(|t| t.in_window += 1);
                }
                if counted {
                    plan.bytes.fetch_add(r.body_bytes, Ordering::Relaxed);
                    if (200..400).contains(&r.status) {
                        let latency = intended.elapsed();
                        plan.recorder.with(|t| t.record(latency));
                    } else {
                        plan.errors.bad_status.fetch_add(1, Ordering::Relaxed);
                    }
                }
                if r.close {
                    self.stream = None;
                }
                true
            }
            Err(e) => {
                if counted {
                    plan.errors.count(&e);
                }
                self.stream = None;
                false
            }
        }
    }
}

fn exchange(
    plan: &SessionPlan,
    stream: &mut Option<TcpStream>,
    request: &[u8],
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<reply::Reply> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(ErrorKind::TimedOut, "client timeout"))
    };
    if stream.is_none() {
        let s = TcpStream::connect_timeout(&plan.addr, left()?)?;
        s.set_nodelay(true)?;
        *stream = Some(s);
    }
    let s = stream.as_ref().expect("connected above");
    s.set_write_timeout(Some(left()?))?;
    (&*s).write_all(request)?;
    s.set_read_timeout(Some(left()?))?;
    reply::read(s, buf)
}
