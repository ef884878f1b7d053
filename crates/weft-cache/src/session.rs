//! One connection: read into one buffer, run every complete request in it, collect the
//! replies in one [`Output`] and send them with one write, then read again.
//!
//! Invariants and limits:
//! - On weft's sockets a read with nothing pending goes into a buffer the processor lends
//!   (`weft::io::Lent`) and its requests run there; the connection's own input buffer exists
//!   only while an incomplete request is pending, so an idle connection holds none.
//! - The own buffer starts at [`READ_BUFFER_MIN_BYTES`], doubles only when a read filled it,
//!   grows at once to hold a storage command's whole data block once its line has arrived,
//!   and shrinks back when reads are small again (and is freed once empty where the
//!   connection lends), so ten thousand idle connections cost little.
//! - Replies are written before more input is read; if they pile up past
//!   [`OUTPUT_FLUSH_BYTES`] mid-batch they are written first, and a multi-get writes as it
//!   goes the same way (between keys). So a connection holds at most
//!   `OUTPUT_FLUSH_BYTES` of output plus one value (values are copied out of the store)
//!   whatever one request asks for, and gives a grown output buffer back once written. A
//!   client that does not read therefore blocks only its own fiber, and is disconnected
//!   when a write makes no progress for the write-stall timeout. Small pipelined batches
//!   still go out in one write at the end of the batch.
//! - Input bytes of a data block that cannot be stored are discarded as they arrive.
//! - After `-R` requests of one read the fiber yields (memcached's `conn_yields`), so a long
//!   pipeline does not starve the other connections of its processor; the replies still go
//!   out together.
//! - With `-Y`, requests are answered by `auth_step` until the connection authenticates.

use std::io::{self, Read, Write};

use crate::exec::{execute, Context, Flow};
use crate::output::Output;
use crate::protocol::{incomplete_request_bytes, parse, Parse, Tokens};
use crate::stats::{add, bump};
use weft::io::Lent;

/// Initial (and idle) input buffer size.
pub const READ_BUFFER_MIN_BYTES: usize = 4 * 1024;
/// Largest input buffer kept while reads keep filling it (data blocks may need more, briefly).
pub const READ_BUFFER_MAX_BYTES: usize = 64 * 1024;
/// Pending output that is written before parsing further requests of the same batch (and,
/// inside one multi-get, before looking up further keys).
pub const OUTPUT_FLUSH_BYTES: usize = crate::output::FLUSH_BYTES;

/// A connection the session serves: bytes in and out and, where the runtime lends receive
/// buffers (weft's sockets), receives into one of those.
pub trait Connection: Read + Write {
    /// Receives into a buffer the runtime lends ([`Lent`]; empty at end of stream), or
    /// `None` when this connection cannot and the session reads into its own buffer.
    fn recv_lent(&mut self) -> Option<io::Result<Lent>> {
        None
    }
}

impl Connection for &weft::net::TcpStream {
    fn recv_lent(&mut self) -> Option<io::Result<Lent>> {
        Some(weft::net::TcpStream::recv_lent(self))
    }
}

impl Connection for &weft::net::UnixStream {
    fn recv_lent(&mut self) -> Option<io::Result<Lent>> {
        Some(weft::net::UnixStream::recv_lent(self))
    }
}

impl<C: Connection + ?Sized> Connection for &mut C {
    fn recv_lent(&mut self) -> Option<io::Result<Lent>> {
        (**self).recv_lent()
    }
}

/// Serves one client until it quits, closes, errs, or sends what memcached would close on.
///
/// Where the connection lends buffers, a read that starts with nothing pending goes into a
/// lent buffer, whose requests run in place; only an incomplete request left at its end is
/// copied into the session's own buffer, which the following reads fill until it is used up
/// and freed again. So a connection holds no input buffer between requests.
pub fn serve<S>(mut stream: S, ctx: &Context, conn_id: i32) -> io::Result<()>
where
    S: Connection,
{
    let mut state = Requests {
        verbose: ctx.verbose() > 1,
        conn_id,
        swallow: 0,
        authenticated: ctx.settings.auth.is_none(),
        auth_reply: None,
    };
    let mut lends = true;
    let mut buf: Vec<u8> = Vec::new();
    let mut len = 0;
    let mut out = Output::new();
    loop {
        let lent = match (len, lends) {
            (0, true) => match stream.recv_lent() {
                Some(r) => Some(r?),
                None => {
                    lends = false;
                    None
                }
            },
            _ => None,
        };
        let (n, filled) = match &lent {
            Some(l) => (l.len(), l.filled()),
            None => {
                if len == buf.len() {
                    let grown = (buf.len() * 2).max(READ_BUFFER_MIN_BYTES);
                    buf.resize(grown, 0);
                }
                let n = stream.read(&mut buf[len..])?;
                (n, len + n == buf.len())
            }
        };
        if n == 0 {
            return Ok(());
        }
        add(&ctx.store.stats.bytes_read, n as u64);
        out.take_spare();
        if lent.is_none() {
            len += n;
        }
        let input: &[u8] = match &lent {
            Some(l) => l,
            None => &buf[..len],
        };
        let now = ctx.store.clock.now();
        if state.authenticated && state.swallow == 0 {
            crate::lookahead::prefetch(input, &ctx.store);
        }
        let end = state.run(input, &mut out, &mut stream, ctx, now)?;
        if end == End::CloseNow {
            return Ok(());
        }
        flush(&mut out, &mut stream, ctx)?;
        out.give_back();
        state.auth_reply = None;
        let End::Consumed(pos) = end else {
            return Ok(());
        };
        match lent {
            Some(l) => {
                buf.clear();
                buf.extend_from_slice(&l[pos..]);
                len = buf.len();
            }
            None => {
                buf.copy_within(pos..len, 0);
                len -= pos;
            }
        }
        if lends && len == 0 {
            buf = Vec::new();
        } else {
            resize_input(&mut buf, len, filled);
        }
    }
}

/// How a batch of input ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Requests ran up to this many bytes; the rest is an incomplete request.
    Consumed(usize),
    /// Close once the replies are written.
    Close,
    /// Close without writing them.
    CloseNow,
}

/// The request state a connection carries from one batch of input to the next.
struct Requests {
    verbose: bool,
    conn_id: i32,
    /// Input bytes of a data block still to discard.
    swallow: usize,
    authenticated: bool,
    /// memcached answers every not-yet-authenticated request of one read in the same reply
    /// slot, so only the last of them is sent: this marks where that slot starts.
    auth_reply: Option<crate::output::Mark>,
}

impl Requests {
    /// Runs every complete request in `input`, collecting the replies in `out` (written to
    /// `stream` early when they pile up).
    fn run<S: Write>(
        &mut self,
        input: &[u8],
        out: &mut Output,
        stream: &mut S,
        ctx: &Context,
        now: u32,
    ) -> io::Result<End> {
        let len = input.len();
        let mut pos = 0;
        let mut ran = 0usize;
        loop {
            if self.swallow > 0 {
                let k = self.swallow.min(len - pos);
                pos += k;
                self.swallow -= k;
                if self.swallow > 0 {
                    return Ok(End::Consumed(pos));
                }
            }
            if !self.authenticated {
                let users = ctx.settings.auth.as_deref().unwrap_or(&[]);
                match auth_step(&input[pos..], users) {
                    AuthStep::NeedMore => return Ok(End::Consumed(pos)),
                    AuthStep::Close => return Ok(End::Close),
                    AuthStep::Reply { consumed, line, ok } => {
                        pos += consumed;
                        if let Some(m) = self.auth_reply {
                            out.rollback(m);
                        }
                        self.auth_reply = Some(out.mark());
                        out.line(line);
                        if ok.is_some() {
                            bump(&ctx.store.stats.auth_cmds);
                        }
                        if ok == Some(false) {
                            bump(&ctx.store.stats.auth_errors);
                        }
                        self.authenticated = ok == Some(true);
                        continue;
                    }
                }
            }
            let mut tokens = Tokens::EMPTY;
            match parse(&input[pos..], &ctx.limits, &mut tokens) {
                Parse::NeedMore => return Ok(End::Consumed(pos)),
                Parse::Close => return Ok(End::Close),
                Parse::Ready { consumed, command } => {
                    if self.verbose {
                        log_command(self.conn_id, &input[pos..pos + consumed]);
                    }
                    pos += consumed;
                    let mut drain = |o: &mut Output| flush(o, stream, ctx);
                    match execute(command, ctx, out, now, &mut drain)? {
                        Flow::Continue => {}
                        Flow::Swallow(n) => self.swallow = n,
                        Flow::Flush => flush(out, stream, ctx)?,
                        Flow::Close => return Ok(End::Close),
                        Flow::CloseNow => return Ok(End::CloseNow),
                    }
                    if out.len() >= OUTPUT_FLUSH_BYTES {
                        flush(out, stream, ctx)?;
                    }
                    ran += 1;
                    if ran == ctx.settings.reqs_per_event {
                        // memcached's -R: a long pipeline lets other connections run.
                        ran = 0;
                        bump(&ctx.store.stats.conn_yields);
                        weft::yield_now();
                    }
                }
            }
        }
    }
}

/// What a request does on a connection that has not authenticated yet (`-Y`).
#[derive(Debug, PartialEq, Eq)]
enum AuthStep {
    NeedMore,
    /// No newline in 2048 bytes, or a credentials block over [`AUTH_BLOCK_MAX_BYTES`].
    Close,
    /// Answer `line` after consuming `consumed` bytes; `ok` is the outcome of a credentials
    /// check (`None` when the request was not one).
    Reply {
        consumed: usize,
        line: &'static str,
        ok: Option<bool>,
    },
}

/// Largest credentials block accepted (memcached reads it into its fixed read buffer).
const AUTH_BLOCK_MAX_BYTES: usize = READ_BUFFER_MAX_BYTES;

/// memcached's `try_read_command_asciiauth`: the only request accepted is
/// `set <any key> <any> <any> <n>\r\n<user> <password>\r\n`; anything else gets
/// `CLIENT_ERROR unauthenticated`.
fn auth_step(buf: &[u8], users: &[(Vec<u8>, Vec<u8>)]) -> AuthStep {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > crate::protocol::LINE_WITHOUT_NEWLINE_MAX_BYTES {
            AuthStep::Close
        } else {
            AuthStep::NeedMore
        };
    };
    let line_len = nl + 1;
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let t = Tokens::new(line);
    let size = if t.count() >= 5 && t.get(0) == b"set" {
        crate::protocol::number::strtoul32(t.get(4))
    } else {
        None
    };
    let Some(size) = size else {
        return AuthStep::Reply {
            consumed: line_len,
            line: "CLIENT_ERROR unauthenticated",
            ok: None,
        };
    };
    let block = size as usize + 2;
    if block > AUTH_BLOCK_MAX_BYTES {
        return AuthStep::Close;
    }
    if buf.len() < line_len + block {
        return AuthStep::NeedMore;
    }
    let data = &buf[line_len..line_len + block];
    let consumed = line_len + block;
    let Some(payload) = data.strip_suffix(b"\r\n") else {
        return AuthStep::Reply {
            consumed,
            line: "CLIENT_ERROR bad command line termination",
            ok: None,
        };
    };
    let cut = payload
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(payload.len());
    let words = Tokens::new(&payload[..cut]);
    if words.count() < 2 {
        return AuthStep::Reply {
            consumed,
            line: "CLIENT_ERROR bad authentication token format",
            ok: None,
        };
    }
    let (user, pass) = (words.get(0), words.get(1));
    if users.iter().any(|(u, p)| u == user && p == pass) {
        AuthStep::Reply {
            consumed,
            line: "STORED",
            ok: Some(true),
        }
    } else {
        AuthStep::Reply {
            consumed,
            line: "CLIENT_ERROR authentication failure",
            ok: Some(false),
        }
    }
}

fn flush(out: &mut Output, stream: &mut impl Write, ctx: &Context) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    add(&ctx.store.stats.bytes_written, out.len() as u64);
    out.write_to(stream)
}

/// Grows the buffer for a busy client, shrinks it back for a quiet one, and always keeps
/// room for the partial request it holds.
fn resize_input(buf: &mut Vec<u8>, len: usize, last_read_filled: bool) {
    // A storage command waiting for its data block gets room for it at once (so a large
    // value arrives in as few reads as the network allows), but never more than
    // READ_BUFFER_MAX_BYTES ahead of the bytes that came: a header alone cannot make the
    // server allocate a megabyte. Rounded to a power of two like the other sizes: buffers of
    // every size in between, grown and shrunk around each value, fragment the heap the items
    // share (the free holes then push RSS further past -m; docs/BENCHMARKS.md, "Memory").
    let pending_request = incomplete_request_bytes(&buf[..len])
        .unwrap_or(0)
        .min(len + READ_BUFFER_MAX_BYTES);
    let want = if last_read_filled {
        (buf.len() * 2).min(READ_BUFFER_MAX_BYTES)
    } else {
        READ_BUFFER_MIN_BYTES
    }
    .max(len.next_power_of_two())
    .max(pending_request.next_power_of_two())
    .max(READ_BUFFER_MIN_BYTES);
    if want > buf.len() {
        buf.resize(want, 0);
    } else if want < buf.len() && len <= want {
        buf.truncate(want);
        buf.shrink_to(want);
    }
}

fn log_command(conn_id: i32, raw: &[u8]) {
    let line_end = raw.iter().position(|&b| b == b'\n').unwrap_or(raw.len());
    let line = String::from_utf8_lossy(&raw[..line_end]);
    eprintln!("<{conn_id} {}", line.trim_end_matches('\r'));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    /// An in-memory duplex: reads come from `input` in chunks, writes collect in `output`.
    struct Script {
        input: Vec<u8>,
        at: usize,
        chunk: usize,
        output: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            let n = self.chunk.min(b.len()).min(self.input.len() - self.at);
            b[..n].copy_from_slice(&self.input[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    impl Write for Script {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Plain reads into the session's own buffer.
    impl Connection for Script {}

    /// The same script, received in lent buffers of at most `chunk` bytes (as weft's sockets
    /// do), falling back to plain reads while a request is pending.
    struct Lending(Script);

    impl Read for Lending {
        fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
            self.0.read(b)
        }
    }

    impl Write for Lending {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.write(b)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Connection for Lending {
        fn recv_lent(&mut self) -> Option<io::Result<Lent>> {
            let mut b = vec![0; self.0.chunk.min(weft::io::LENT_BUFFER_BYTES)];
            let n = self.0.read(&mut b).unwrap();
            b.truncate(n);
            Some(Ok(Lent::from(b)))
        }
    }

    /// The script's output, which must be the same whether the session reads into its own
    /// buffer or into lent ones.
    fn run(input: &[u8], chunk: usize) -> Vec<u8> {
        let script = || Script {
            input: input.to_vec(),
            at: 0,
            chunk,
            output: Vec::new(),
        };
        let mut plain = script();
        serve(&mut plain, &Context::new(Settings::default()), 1).unwrap();
        let mut lending = Lending(script());
        serve(&mut lending, &Context::new(Settings::default()), 1).unwrap();
        assert!(
            plain.output == lending.0.output,
            "chunk {chunk}: lent reads answered differently"
        );
        plain.output
    }

    #[test]
    fn pipelined_requests_in_any_chunking() {
        let input = b"set a 0 0 5\r\nhello\r\nget a b\r\nincr a 1\r\ndelete a\r\nget a\r\n";
        let want = b"STORED\r\nVALUE a 0 5\r\nhello\r\nEND\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\nDELETED\r\nEND\r\n";
        for chunk in [1, 2, 7, 1000] {
            assert_eq!(run(input, chunk), want, "chunk {chunk}");
        }
    }

    #[test]
    fn oversized_block_is_swallowed() {
        let mut input = b"set big 0 0 2000000\r\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 2_000_000));
        input.extend_from_slice(b"\r\nversion\r\n");
        let out = run(&input, 65536);
        assert_eq!(
            out,
            b"SERVER_ERROR object too large for cache\r\nVERSION 1.6.18\r\n"
        );
    }

    #[test]
    fn large_value_round_trip() {
        let value = vec![b'v'; 500_000];
        let mut input = b"set big 7 0 500000\r\n".to_vec();
        input.extend_from_slice(&value);
        input.extend_from_slice(b"\r\nget big\r\n");
        let out = run(&input, 8192);
        let mut want = b"STORED\r\nVALUE big 7 500000\r\n".to_vec();
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(out, want);
    }
}
