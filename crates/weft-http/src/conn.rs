//! One connection: read request heads into one buffer, answer every complete head in it
//! (pipelining), batch the answers of one read into one write, repeat until the client or a
//! limit ends it. Runs in its own fiber.
//!
//! Invariants:
//! - the input buffer never grows past `max_head_bytes` plus one read's slack: a head that
//!   does not fit is answered 431 (or 414) instead;
//! - a response head is always followed by exactly the body bytes its `Content-Length`
//!   promises, or the connection is closed (a file that shrank while being sent, reported on
//!   stderr); the length is the one the open-file cache checked on the descriptor just before
//!   the head was written (see `cache.rs`);
//! - the connection is marked [`IDLE`] only while it waits for (more of) a request head, when
//!   nothing is owed to the client; graceful shutdown cancels only idle connections, so a
//!   response in flight is never cut (see `server.rs`);
//! - a connection's last response is written with `MSG_MORE` and followed at once by
//!   `shutdown(SHUT_WR)` (or the linger's), never by anything that waits, so the response
//!   and the FIN leave in one segment and the tail is never held back for long.

use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::io::arrival::Arrival;
use weft::net::TcpStream;

use crate::access_log;
use crate::admission::Slot;
use crate::buffers;
use crate::cache::{CachedFile, Lookup};
use crate::conditional::{self, Conditions, Outcome, Validators};
use crate::range::{self, RangeAnswer};
use crate::request::{self, HeadError, HeadLimits, Method, Parsed, Request};
use crate::response;
use crate::root::OpenError;
use crate::server::Shared;
use crate::target::{parse_target, push_directory_uri};

mod multipart;

/// Waiting for (more of) a request head, nothing owed to the client: shutdown may cancel it.
pub const IDLE: u8 = 0;
/// Reading a request or answering it: shutdown lets it finish.
pub const BUSY: u8 = 1;
/// Shutdown claimed it while idle and cancelled its fiber.
pub const CLOSING: u8 = 2;

/// First size of the input buffer.
const INITIAL_BUF_BYTES: usize = buffers::INPUT_BYTES;
/// Slices of a vectored write kept on the stack (four bodies with their heads).
const STACK_SLICES: usize = 9;
/// Output buffered past this is written before answering the next pipelined request.
const OUT_FLUSH_BYTES: usize = 64 * 1024;
/// Writes at most this long go out without waiting for the client (the socket's send buffer
/// takes them; on io_uring weft sends them behind the fiber), so they keep the admission slot.
const SHORT_WRITE_BYTES: usize = 16 * 1024;
/// How long a closing connection keeps reading (and discarding) what the client still sends,
/// so that closing does not reset the connection before the client read our answer.
const LINGER: Duration = Duration::from_secs(2);
/// At most this much is discarded while lingering.
const LINGER_MAX_BYTES: usize = 1 << 20;

/// A cached body owed to the client: `len` bytes of `file.body` from `start`, after the first
/// `at` bytes of the connection's `out`.
struct OwedBody {
    at: usize,
    file: Arc<CachedFile>,
    start: usize,
    len: usize,
}

impl OwedBody {
    fn bytes(&self) -> &[u8] {
        let body = self.file.body.as_deref().unwrap_or_default();
        &body[self.start..self.start + self.len]
    }
}

/// What answering one request decided.
struct Answered {
    /// Keep the connection open for another request.
    keep_alive: bool,
    /// Request body bytes still to read and discard.
    discard_bytes: u64,
    /// When closing, linger: the client may still be sending a body we did not read.
    linger: bool,
}

/// Serves `stream` until it closes; errors just end the connection.
///
/// `slot` is the connection's admission slot, given back when it first waits for the client
/// (see `admission`).
pub fn serve(shared: &Shared, stream: TcpStream, peer: SocketAddr, state: &AtomicU8, slot: Slot) {
    let _ = stream.set_write_timeout(Some(shared.config.send_timeout));
    let mut conn = Conn {
        shared,
        stream,
        peer,
        state,
        out: buffers::take_output(),
        bodies: Vec::new(),
        body_bytes: 0,
        nodelay: shared.accepted_nodelay,
        answered: 0,
        slot,
        read_once: false,
        arrival: Arrival::now(),
    };
    let mut input = buffers::take_input();
    match conn.run(&mut input) {
        Ok(Ending::Linger) => conn.linger(),
        // The FIN joins the last response, held back by `MSG_MORE` (`flush_last`). Shut
        // before the close: a close that finds bytes the client sent after its last request
        // resets the connection and drops what is still unsent, the response with it.
        Ok(Ending::Finished) => {
            let _ = conn.stream.shutdown(Shutdown::Write);
        }
        Ok(Ending::Close) | Err(_) => {}
    }
    buffers::give_input(input);
    buffers::give_output(std::mem::take(&mut conn.out));
}

/// What a cancellable read got.
enum Got {
    Bytes(usize),
    /// The deadline passed.
    TimedOut,
    /// Shutdown claimed the connection: close without answering.
    Closing,
}

/// How a connection ends once `run` returns.
enum Ending {
    /// Just close.
    Close,
    /// Write our side's end, then read and discard for a while before closing.
    Linger,
    /// Our last response was written with `MSG_MORE` (`Conn::flush_last`): shut our side
    /// (its FIN leaves with the response), then close.
    Finished,
}

struct Conn<'a> {
    shared: &'a Shared,
    stream: TcpStream,
    peer: SocketAddr,
    state: &'a AtomicU8,
    /// Responses not yet written, except the cached bodies in `bodies`.
    out: Vec<u8>,
    /// Cached bodies owed after parts of `out`, in order: written from the cache with the
    /// heads around them (one vectored write), not copied into `out` first. At thousands of
    /// connections `out` is cold, and copying a 4 KiB body into it cost more than the write
    /// (`docs/notes/scale.md`, "Kept: cached bodies written from the cache").
    bodies: Vec<OwedBody>,
    /// The bytes of `bodies`, in all.
    body_bytes: usize,
    /// Whether `TCP_NODELAY` is set. Accepted sockets inherit it from the listener
    /// (`Shared::accepted_nodelay`); where the listener refused it, it is set once it
    /// matters, as nginx does: before a body goes out by `send_file` and before a second
    /// request, so a one-request connection answered in one write never pays the system call.
    nodelay: bool,
    /// Requests answered on this connection.
    answered: u64,
    /// Admission slot, held until the connection first waits for its client.
    slot: Slot,
    /// Whether a read was made (the first read with a request waiting keeps the slot).
    read_once: bool,
    /// The arrival ticket of the latest read (`weft::io::arrival`): every request in the
    /// buffer was in before it, so the open-file cache may answer one on a check that began
    /// after it.
    arrival: Arrival,
}

impl Conn<'_> {
    /// Serves requests read into `buf` (a pooled input buffer of `INITIAL_BUF_BYTES`, its
    /// contents left from an earlier connection: only what was read since is looked at).
    fn run(&mut self, buf: &mut Vec<u8>) -> io::Result<Ending> {
        let config = &self.shared.config;
        let limits = HeadLimits {
            max_request_line_bytes: config.max_request_line_bytes,
            max_head_bytes: config.max_head_bytes,
            max_header_lines: config.max_header_lines,
        };
        let max_buf_bytes = config.max_head_bytes + INITIAL_BUF_BYTES;
        debug_assert_eq!(buf.len(), INITIAL_BUF_BYTES);
        let (mut start, mut end) = (0usize, 0usize);
        // When the head being read was first found unfinished: read off the clock only then,
        // not for every request (a complete head, the usual case, never needs it).
        let mut head_started: Option<Instant> = None;
        loop {
            // Answer every complete head in the buffer.
            while start < end {
                let parsed = request::parse(&mut buf[start..end], &limits);
                let (answered, used) = match parsed {
                    Ok(Parsed::Complete(req, used)) => (self.answer(&req)?, used),
                    Ok(Parsed::Partial) => {
                        head_started.get_or_insert_with(Instant::now);
                        break;
                    }
                    Err(e) => {
                        self.answer_head_error(e);
                        self.flush_last()?;
                        return Ok(Ending::Linger);
                    }
                };
                start += used;
                let mut discard = answered.discard_bytes;
                let take = discard.min((end - start) as u64);
                start += take as usize;
                discard -= take;
                if discard > 0 {
                    self.flush()?;
                    let deadline = Instant::now() + config.header_timeout;
                    while discard > 0 {
                        let n = self.read_within(buf, left_until(deadline))?;
                        if n == 0 {
                            return Ok(Ending::Close);
                        }
                        let take = discard.min(n as u64) as usize;
                        discard -= take as u64;
                        (start, end) = (take, n);
                    }
                }
                head_started = None;
                if !answered.keep_alive {
                    self.flush_last()?;
                    return Ok(if start < end || answered.linger {
                        Ending::Linger
                    } else {
                        Ending::Finished
                    });
                }
                if self.queued_bytes() >= OUT_FLUSH_BYTES {
                    self.flush()?;
                }
            }
            self.flush()?;
            if start == end {
                (start, end) = (0, 0);
            } else if start > 0 {
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
            }
            if end == buf.len() {
                buf.resize((buf.len() * 2).min(max_buf_bytes), 0);
            }
            let n = if end == 0 {
                if self.answered > 0 {
                    self.ensure_nodelay();
                }
                match self.read_cancellable(buf, config.keepalive_timeout)? {
                    Got::Bytes(n) => n,
                    Got::TimedOut | Got::Closing => return Ok(Ending::Close),
                }
            } else {
                let started = *head_started.get_or_insert_with(Instant::now);
                let left = left_until(started + config.header_timeout);
                match self.read_cancellable(&mut buf[end..], left)? {
                    Got::Bytes(n) => n,
                    Got::TimedOut => {
                        self.answer_simple(408, false, None);
                        self.flush_last()?;
                        return Ok(Ending::Linger);
                    }
                    Got::Closing => return Ok(Ending::Close),
                }
            };
            if n == 0 {
                return Ok(Ending::Close);
            }
            end += n;
        }
    }

    /// Reads more of a request (its first bytes, or the rest of a head) for at most `left`,
    /// marked [`IDLE`] meanwhile: nothing is owed to the client yet, so shutdown may cancel
    /// the read.
    fn read_cancellable(&mut self, buf: &mut [u8], left: Duration) -> io::Result<Got> {
        self.state.store(IDLE, Ordering::SeqCst);
        // Pairs with shutdown's store of `draining` then scan for IDLE (both SeqCst): either
        // we see the flag here, or shutdown sees us idle and cancels the read below.
        if self.shared.draining.load(Ordering::SeqCst) {
            return Ok(Got::Closing);
        }
        let got = self.read_within(buf, left);
        if self
            .state
            .compare_exchange(IDLE, BUSY, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(Got::Closing);
        }
        match got {
            Ok(n) => Ok(Got::Bytes(n)),
            Err(e) if is_timeout(&e) => Ok(Got::TimedOut),
            Err(e) => Err(e),
        }
    }

    /// Reads for at most `left` (a zero `left` is a deadline already passed). Takes a duration,
    /// not a deadline: the wait between keep-alive requests, the usual read, then reads the
    /// clock only where the runtime arms its timer (`docs/notes/scale.md`).
    fn read_within(&mut self, buf: &mut [u8], left: Duration) -> io::Result<usize> {
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        if self.slot.is_held() {
            // The first read takes the request sent with the connection without waiting (and
            // without a round trip through the ring); any wait for the client gives the
            // admission slot back first.
            if !std::mem::replace(&mut self.read_once, true) {
                match self.stream.try_read(buf) {
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    r => {
                        // The bytes are in: a ticket taken now comes after them.
                        self.arrival = Arrival::now();
                        return r;
                    }
                }
            }
            self.slot.release();
        }
        self.stream.set_read_timeout(Some(left))?;
        loop {
            match self.stream.read_arrived(buf) {
                Ok((n, arrival)) => {
                    self.arrival = arrival;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn ensure_nodelay(&mut self) {
        if !self.nodelay {
            let _ = self.stream.set_nodelay(true);
            self.nodelay = true;
        }
    }

    /// Writes what is buffered. A write too long for the socket to take at once may wait for
    /// a slow reader, so the admission slot is given back before it (short ones go out without
    /// waiting for the client: the slot stays until the connection reads or closes).
    fn flush(&mut self) -> io::Result<()> {
        self.write_out(false)
    }

    /// [`Conn::flush`] before the connection closes (or shuts its side): the last bytes are
    /// written with `MSG_MORE`, so the FIN the close sends next leaves in the same segment
    /// instead of one of its own (nginx's last response and FIN share one with `TCP_CORK`);
    /// and, sent now rather than behind the fiber, the close need not wait for a send in
    /// flight. The caller closes or shuts down the write side next, without waiting first.
    fn flush_last(&mut self) -> io::Result<()> {
        self.write_out(true)
    }

    /// Writes what is owed, with `MSG_MORE` if `more`.
    fn write_out(&mut self, more: bool) -> io::Result<()> {
        if self.queued_bytes() > SHORT_WRITE_BYTES {
            self.slot.release();
        }
        let r = if self.bodies.is_empty() {
            if self.out.is_empty() {
                return Ok(());
            }
            if more {
                write_all_vectored(&self.stream, &mut [IoSlice::new(&self.out)], true)
            } else {
                (&self.stream).write_all(&self.out)
            }
        } else {
            self.write_with_bodies(more)
        };
        self.out.clear();
        self.bodies.clear();
        self.body_bytes = 0;
        r
    }

    /// Bytes answered and not written yet.
    fn queued_bytes(&self) -> usize {
        self.out.len() + self.body_bytes
    }

    /// Owes `len` bytes of `file`'s cached body from `start`, after what `out` holds now.
    fn push_body(&mut self, file: Arc<CachedFile>, start: usize, len: usize) {
        self.bodies.push(OwedBody {
            at: self.out.len(),
            file,
            start,
            len,
        });
        self.body_bytes += len;
    }

    /// Writes `out` with the owed bodies in their places, in one vectored write (the usual
    /// case, one response: head, body, nothing after); with `MSG_MORE` if `more`.
    fn write_with_bodies(&self, more: bool) -> io::Result<()> {
        // At most two slices per body and one after; on the stack for a few bodies.
        let most = 2 * self.bodies.len() + 1;
        let mut on_stack = [IoSlice::new(&[]); STACK_SLICES];
        let mut on_heap = Vec::new();
        let slices: &mut [IoSlice<'_>] = if most <= STACK_SLICES {
            &mut on_stack
        } else {
            on_heap.resize(most, IoSlice::new(&[]));
            &mut on_heap
        };
        let mut n = 0;
        let mut from = 0;
        for owed in &self.bodies {
            if owed.at > from {
                slices[n] = IoSlice::new(&self.out[from..owed.at]);
                n += 1;
            }
            slices[n] = IoSlice::new(owed.bytes());
            n += 1;
            from = owed.at;
        }
        if self.out.len() > from {
            slices[n] = IoSlice::new(&self.out[from..]);
            n += 1;
        }
        write_all_vectored(&self.stream, &mut slices[..n], more)
    }

    /// Closes our side, then reads and discards what the client still sends (for at most
    /// [`LINGER`] and [`LINGER_MAX_BYTES`]), so our last response is not lost to a reset.
    fn linger(&mut self) {
        if self.stream.shutdown(Shutdown::Write).is_err() {
            return;
        }
        let deadline = Instant::now() + LINGER;
        let mut sink = [0u8; 4096];
        let mut discarded = 0;
        while discarded < LINGER_MAX_BYTES {
            match self.read_within(&mut sink, left_until(deadline)) {
                Ok(0) | Err(_) => return,
                Ok(n) => discarded += n,
            }
        }
    }

    fn date(&self) -> [u8; crate::date::DATE_BYTES] {
        self.shared.date.now()
    }

    /// A simple (HTML body) response; returns its body length.
    fn answer_simple(&mut self, status: u16, keep_alive: bool, req: Option<&Request<'_>>) -> u64 {
        let date = self.date();
        let with_body = req.map_or(true, |r| r.method != Method::Head);
        let extra: &[u8] = if status == 405 {
            b"Allow: GET, HEAD\r\n"
        } else {
            b""
        };
        let n = response::simple(&mut self.out, status, &date, extra, keep_alive, with_body);
        self.log(req, status, n);
        n
    }

    fn answer_head_error(&mut self, e: HeadError) {
        self.answer_simple(e.status(), false, None);
    }

    fn log(&self, req: Option<&Request<'_>>, status: u16, body_bytes: u64) {
        let Some(log) = &self.shared.access_log else {
            return;
        };
        log.record(&access_log::Entry {
            peer: self.peer,
            method: req.map_or("-", |r| r.method_raw),
            target: req.map_or(b"-", |r| r.target),
            minor_version: req.map_or(1, |r| r.minor_version),
            status,
            body_bytes,
            referer: req.and_then(|r| r.referer),
            user_agent: req.and_then(|r| r.user_agent),
        });
    }

    /// Answers one request (into `out`, or by writing it when the body goes by `send_file`).
    fn answer(&mut self, req: &Request<'_>) -> io::Result<Answered> {
        self.answered += 1;
        let draining = self.shared.draining.load(Ordering::Relaxed);
        let mut keep_alive = req.keep_alive && !draining;
        let body_bytes = req.content_length.unwrap_or(0);
        if body_bytes > self.shared.config.max_body_bytes {
            self.answer_simple(413, false, Some(req));
            return Ok(Answered {
                keep_alive: false,
                discard_bytes: 0,
                linger: true,
            });
        }
        let mut answered = Answered {
            keep_alive,
            discard_bytes: body_bytes,
            // A body in a transfer coding is not read (keep_alive is false then).
            linger: req.has_transfer_encoding,
        };
        if req.method == Method::Other {
            self.answer_simple(405, keep_alive, Some(req));
            return Ok(answered);
        }
        let target = match parse_target(req.target) {
            Ok(t) => t,
            Err(_) => {
                self.answer_simple(400, false, Some(req));
                answered.keep_alive = false;
                return Ok(answered);
            }
        };
        let root = &self.shared.root;
        let cache = &self.shared.cache;
        let found = if target.trailing_slash {
            let mut index = target.relative.clone();
            if !index.is_empty() {
                index.push(b'/');
            }
            index.extend_from_slice(b"index.html");
            match cache.lookup(root, &index, self.arrival) {
                Ok(Lookup::File(f)) => Ok(f),
                Ok(Lookup::Directory) => Err(403),
                Err(OpenError::NotFound) => {
                    match cache.lookup(root, &target.relative, self.arrival) {
                        // A directory without an index: listing is off.
                        Ok(Lookup::Directory) => Err(403),
                        Ok(Lookup::File(_)) => Err(404),
                        Err(e) => Err(status_of(e, &target.relative)),
                    }
                }
                Err(e) => Err(status_of(e, &target.relative)),
            }
        } else {
            match cache.lookup(root, &target.relative, self.arrival) {
                Ok(Lookup::File(f)) => Ok(f),
                Ok(Lookup::Directory) => {
                    // Absolute, like nginx: the authority the client named (the target's
                    // in absolute-form, else Host; both validated by the parsers), else our
                    // own address.
                    let mut location = b"Location: ".to_vec();
                    let local;
                    let authority = match target.authority.or(req.host) {
                        Some(a) => a,
                        None => {
                            local = self.stream.local_addr()?.to_string();
                            local.as_bytes()
                        }
                    };
                    push_directory_uri(&mut location, authority, target.raw_path, target.query);
                    location.extend_from_slice(b"\r\n");
                    let date = self.date();
                    let with_body = req.method != Method::Head;
                    let n = response::simple(
                        &mut self.out,
                        301,
                        &date,
                        &location,
                        keep_alive,
                        with_body,
                    );
                    self.log(Some(req), 301, n);
                    return Ok(answered);
                }
                Err(e) => Err(status_of(e, &target.relative)),
            }
        };
        let file = match found {
            Ok(f) => f,
            Err(status) => {
                if status >= 500 {
                    keep_alive = false;
                    answered.keep_alive = false;
                }
                self.answer_simple(status, keep_alive, Some(req));
                return Ok(answered);
            }
        };
        if !self.send_file_response(req, file, keep_alive)? {
            answered.keep_alive = false;
        }
        Ok(answered)
    }

    /// Answers with `file` (200, 206, 304 or 416). Returns false when the connection must
    /// close (the file shrank under us).
    fn send_file_response(
        &mut self,
        req: &Request<'_>,
        file: Arc<CachedFile>,
        keep_alive: bool,
    ) -> io::Result<bool> {
        let date = self.date();
        let validators = Validators {
            etag: &file.etag,
            mtime_secs: file.mtime_secs,
            last_modified: &file.last_modified,
        };
        let conditions = Conditions {
            if_match: req.if_match.lines(),
            if_none_match: req.if_none_match.lines(),
            if_modified_since: req.if_modified_since,
            if_unmodified_since: req.if_unmodified_since,
        };
        match conditional::evaluate(&conditions, &validators) {
            Outcome::Proceed => {}
            Outcome::NotModified => {
                response::start(&mut self.out, 304, &date);
                self.out.extend_from_slice(b"Last-Modified: ");
                self.out.extend_from_slice(&file.last_modified);
                self.out.extend_from_slice(b"\r\nETag: ");
                self.out.extend_from_slice(&file.etag);
                self.out.extend_from_slice(b"\r\n");
                response::finish(&mut self.out, keep_alive);
                self.log(Some(req), 304, 0);
                return Ok(true);
            }
            Outcome::Failed => {
                self.answer_simple(412, keep_alive, Some(req));
                return Ok(true);
            }
        }
        let answer = match req.range {
            Some(r)
                if req
                    .if_range
                    .map_or(true, |v| conditional::if_range_holds(v, &validators)) =>
            {
                range::parse_range(r, file.len, self.shared.config.max_ranges)
            }
            _ => RangeAnswer::Whole,
        };
        let (status, start, len) = match answer {
            RangeAnswer::Whole => (200, 0, file.len),
            RangeAnswer::Part { start, len } => (206, start, len),
            RangeAnswer::Parts(spans) => {
                return self.send_multipart(req, &file, &spans, keep_alive, &date);
            }
            RangeAnswer::Unsatisfiable => {
                let mut extra = b"Content-Range: bytes */".to_vec();
                response::push_decimal(&mut extra, file.len);
                extra.extend_from_slice(b"\r\n");
                let with_body = req.method != Method::Head;
                let n = response::simple(&mut self.out, 416, &date, &extra, keep_alive, with_body);
                self.log(Some(req), 416, n);
                return Ok(true);
            }
        };
        response::start(&mut self.out, status, &date);
        self.out.extend_from_slice(&file.header_lines);
        response::content_length(&mut self.out, len);
        if status == 206 {
            response::content_range(&mut self.out, start, len, file.len);
        }
        response::finish(&mut self.out, keep_alive);
        if req.method == Method::Head || len == 0 {
            self.log(Some(req), status, 0);
            return Ok(true);
        }
        if file.body.is_some() {
            self.push_body(file, start as usize, len as usize);
            self.log(Some(req), status, len);
            return Ok(true);
        }
        self.ensure_nodelay();
        // A body of any length may wait for a slow reader: give the admission slot back.
        self.slot.release();
        let sent = if self.bodies.is_empty() {
            // Only heads are queued (this one and any before it): they go with the file's
            // first bytes, in one segment and without waiting for a send of their own.
            let r =
                weft::fs::send_file_after(&self.out, &file.file, start, len as usize, &self.stream);
            self.out.clear();
            r?
        } else {
            self.flush()?;
            weft::fs::send_file(&file.file, start, len as usize, &self.stream)?
        };
        self.log(Some(req), status, sent as u64);
        if (sent as u64) < len {
            report_truncated(req, sent as u64, len);
            return Ok(false);
        }
        Ok(true)
    }
}

/// `Write::write_all_vectored` (not stable yet): writes every byte of `slices`, retrying short
/// writes and interruptions.
fn write_all_vectored(
    mut stream: &TcpStream,
    mut slices: &mut [IoSlice<'_>],
    more: bool,
) -> io::Result<()> {
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        let written = if more {
            stream.write_vectored_more(slices)
        } else {
            stream.write_vectored(slices)
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A body cut short because the file shrank while it was being sent: the head promised more,
/// so the connection closes; said on stderr as nginx's error log says "file was truncated".
fn report_truncated(req: &Request<'_>, sent: u64, promised: u64) {
    // Not eprintln!, which panics when stderr is closed.
    let _ = writeln!(
        io::stderr(),
        "weft http: {:?} was truncated while being sent: {sent} of {promised} bytes; \
         closing the connection",
        String::from_utf8_lossy(req.target)
    );
}

/// The status for a failed open; unexpected errors (500) are also reported on stderr.
fn status_of(e: OpenError, relative: &[u8]) -> u16 {
    if let OpenError::Other(err) = &e {
        eprintln!("weft http: /{}: {err}", String::from_utf8_lossy(relative));
    }
    e.status()
}

/// Time left until `deadline` (zero once it has passed).
fn left_until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}
