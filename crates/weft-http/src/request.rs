//! Parsing one request head from the front of a buffer (so pipelined requests are parsed one
//! after another from the same buffer). Pure: no I/O.
//!
//! Invariant: a [`Request`] borrows from the buffer it was parsed from and is dropped before
//! the buffer is read into again.

use std::mem::MaybeUninit;

/// The limits a request head must respect.
#[derive(Debug, Clone, Copy)]
pub struct HeadLimits {
    /// Longest request line (method, target, version) in bytes; longer → 414.
    pub max_request_line_bytes: usize,
    /// Largest request head (request line and headers) in bytes; larger → 431.
    pub max_head_bytes: usize,
    /// Most header field lines; more → 431.
    pub max_header_lines: usize,
}

/// Header fields parsed into an array on the stack; a head with more lines is parsed again
/// into one on the heap sized by its line count (up to [`HeadLimits::max_header_lines`]).
const STACK_HEADERS: usize = 64;

/// The request methods the server tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    /// Any other method: answered 405.
    Other,
}

/// The parts of a request head the server uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'b> {
    pub method: Method,
    /// The method as sent (for the access log).
    pub method_raw: &'b str,
    /// The request target as sent.
    pub target: &'b [u8],
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Whether the client wants the connection kept open after this response.
    pub keep_alive: bool,
    pub host: Option<&'b [u8]>,
    pub if_match: FieldLines<'b>,
    pub if_none_match: FieldLines<'b>,
    pub if_modified_since: Option<&'b [u8]>,
    pub if_unmodified_since: Option<&'b [u8]>,
    pub range: Option<&'b [u8]>,
    pub if_range: Option<&'b [u8]>,
    pub referer: Option<&'b [u8]>,
    pub user_agent: Option<&'b [u8]>,
    /// The declared body length (`Content-Length`), if any.
    pub content_length: Option<u64>,
    /// Whether a `Transfer-Encoding` header was sent (the body's end is then unknown to a
    /// server that does not decode it, so the connection is closed after the response).
    pub has_transfer_encoding: bool,
}

/// Every line of a list-valued field (RFC 9110 §5.3: several lines are one comma-separated
/// list), without allocating for the usual single line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldLines<'b> {
    one: Option<&'b [u8]>,
    /// All lines, once there is more than one.
    more: Vec<&'b [u8]>,
}

impl<'b> FieldLines<'b> {
    fn push(&mut self, value: &'b [u8]) {
        match self.one {
            None => self.one = Some(value),
            Some(first) => {
                if self.more.is_empty() {
                    self.more.push(first);
                }
                self.more.push(value);
            }
        }
    }

    /// The lines, or `None` when the field is absent.
    pub fn lines(&self) -> Option<&[&'b [u8]]> {
        match self.one {
            None => None,
            Some(_) if self.more.is_empty() => Some(self.one.as_slice()),
            Some(_) => Some(&self.more),
        }
    }
}

/// Why a request head was refused, with the status it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Malformed, or conflicting framing headers: 400.
    Malformed,
    /// Request line too long: 414.
    RequestLineTooLong,
    /// Head too large: 431.
    HeadTooLarge,
    /// More than [`HeadLimits::max_header_lines`] fields: 431.
    TooManyHeaders,
    /// Not HTTP/1.x: 505.
    BadVersion,
    /// A transfer coding other than `chunked`, which the server does not decode: 501 (RFC 9112
    /// §6.1).
    UnknownCoding,
}

impl HeadError {
    /// The response status for this error.
    pub fn status(self) -> u16 {
        match self {
            HeadError::Malformed => 400,
            HeadError::RequestLineTooLong => 414,
            HeadError::HeadTooLarge | HeadError::TooManyHeaders => 431,
            HeadError::BadVersion => 505,
            HeadError::UnknownCoding => 501,
        }
    }
}

/// The outcome of parsing the front of a buffer.
// The request lives on the stack for the one call that answers it; boxing it would cost an
// allocation per request.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'b> {
    /// A whole head: the request and how many bytes it took.
    Complete(Request<'b>, usize),
    /// More bytes are needed (and the limits allow them).
    Partial,
}

/// Parses the request head at the front of `buf`. A request line ending in `HTTP/1.D` with a
/// minor version D above 1 is rewritten in place to `HTTP/1.1` (RFC 9110 §2.5: a recipient
/// treats a higher minor version as the highest it supports) and keeps D in
/// [`Request::minor_version`].
pub fn parse<'b>(buf: &'b mut [u8], limits: &HeadLimits) -> Result<Parsed<'b>, HeadError> {
    // Clients may send stray CRLFs between requests (RFC 9112 §2.2); skip them.
    let skipped = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let buf = &mut buf[skipped..];
    let higher_minor = lower_minor_version(buf);
    let buf: &'b [u8] = buf;
    let line_end = buf.iter().position(|&b| b == b'\n');
    match line_end {
        Some(i) if i > limits.max_request_line_bytes => return Err(HeadError::RequestLineTooLong),
        None if buf.len() > limits.max_request_line_bytes => {
            return Err(HeadError::RequestLineTooLong)
        }
        _ => {}
    }
    // Left uninitialised: httparse writes the fields it finds and hands back only those (a
    // 2 KiB array set to empty headers was a third of the connection loop's own time at wrk's
    // keep-alive peak, `docs/notes/scale.md`).
    let mut stack_headers =
        [const { MaybeUninit::<httparse::Header<'b>>::uninit() }; STACK_HEADERS];
    let mut heap_headers = Vec::new();
    let mut req = httparse::Request::new(&mut []);
    let mut result = req.parse_with_uninit_headers(
        buf,
        &mut stack_headers[..limits.max_header_lines.min(STACK_HEADERS)],
    );
    if result == Err(httparse::Error::TooManyHeaders) && limits.max_header_lines > STACK_HEADERS {
        // Every field line ends with a newline, so the buffer's count bounds the fields.
        let lines = buf.iter().filter(|&&b| b == b'\n').count();
        heap_headers.resize_with(lines.min(limits.max_header_lines), MaybeUninit::uninit);
        req = httparse::Request::new(&mut []);
        result = req.parse_with_uninit_headers(buf, &mut heap_headers);
    }
    let status = match result {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
        Err(httparse::Error::Version) => return Err(version_error(buf)),
        Err(_) => return Err(HeadError::Malformed),
    };
    let head_bytes = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if buf.len() > limits.max_head_bytes {
                return Err(HeadError::HeadTooLarge);
            }
            return Ok(Parsed::Partial);
        }
    };
    if head_bytes > limits.max_head_bytes {
        return Err(HeadError::HeadTooLarge);
    }
    let method_raw = req.method.ok_or(HeadError::Malformed)?;
    let method = match method_raw {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    let minor_version = higher_minor.unwrap_or(req.version.ok_or(HeadError::Malformed)?);
    let target = req.path.ok_or(HeadError::Malformed)?.as_bytes();
    let mut out = Request {
        method,
        method_raw,
        target,
        minor_version,
        keep_alive: minor_version >= 1,
        host: None,
        if_match: FieldLines::default(),
        if_none_match: FieldLines::default(),
        if_modified_since: None,
        if_unmodified_since: None,
        range: None,
        if_range: None,
        referer: None,
        user_agent: None,
        content_length: None,
        has_transfer_encoding: false,
    };
    let mut codings = Codings::default();
    let mut connection_close = false;
    let mut connection_keep_alive = false;
    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = trim(h.value);
        if name.eq_ignore_ascii_case(b"host") {
            // One Host, a valid `uri-host [":" port]` (RFC 9112 §3.2, RFC 9110 §7.2).
            if out.host.is_some() || !crate::target::valid_authority(value) {
                return Err(HeadError::Malformed);
            }
            out.host = Some(value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',').map(trim) {
                connection_close |= token.eq_ignore_ascii_case(b"close");
                connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"if-match") {
            out.if_match.push(value);
        } else if name.eq_ignore_ascii_case(b"if-none-match") {
            out.if_none_match.push(value);
        } else if name.eq_ignore_ascii_case(b"if-modified-since") {
            set_singleton(&mut out.if_modified_since, value);
        } else if name.eq_ignore_ascii_case(b"if-unmodified-since") {
            set_singleton(&mut out.if_unmodified_since, value);
        } else if name.eq_ignore_ascii_case(b"range") {
            set_singleton(&mut out.range, value);
        } else if name.eq_ignore_ascii_case(b"if-range") {
            set_singleton(&mut out.if_range, value);
        } else if name.eq_ignore_ascii_case(b"referer") {
            out.referer = Some(value);
        } else if name.eq_ignore_ascii_case(b"user-agent") {
            out.user_agent = Some(value);
        } else if name.eq_ignore_ascii_case(b"content-length") {
            let n = parse_decimal(value).ok_or(HeadError::Malformed)?;
            if out.content_length.is_some_and(|m| m != n) {
                return Err(HeadError::Malformed);
            }
            out.content_length = Some(n);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            out.has_transfer_encoding = true;
            codings.add(value);
        }
    }
    if out.has_transfer_encoding {
        codings.check()?;
    }
    // Both framings at once is how requests are smuggled (RFC 9112 §6.3): refuse.
    if out.has_transfer_encoding && out.content_length.is_some() {
        return Err(HeadError::Malformed);
    }
    // HTTP/1.1 requires Host (RFC 9112 §3.2).
    if minor_version >= 1 && out.host.is_none() {
        return Err(HeadError::Malformed);
    }
    out.keep_alive = if minor_version >= 1 {
        !connection_close
    } else {
        connection_keep_alive && !connection_close
    };
    if out.has_transfer_encoding {
        out.keep_alive = false;
    }
    Ok(Parsed::Complete(out, skipped + head_bytes))
}

/// The transfer codings of every `Transfer-Encoding` line, in order (RFC 9112 §6.1).
#[derive(Default)]
struct Codings {
    chunked: usize,
    others: usize,
    last_is_chunked: bool,
}

impl Codings {
    fn add(&mut self, value: &[u8]) {
        for element in value.split(|&b| b == b',') {
            let name = trim(element.split(|&b| b == b';').next().unwrap_or(b""));
            if name.is_empty() && trim(element).is_empty() {
                continue;
            }
            let chunked = name.eq_ignore_ascii_case(b"chunked");
            if chunked {
                self.chunked += 1;
            } else {
                self.others += 1;
            }
            self.last_is_chunked = chunked;
        }
    }

    /// 400 when chunked is not the final coding or is applied twice (RFC 9112 §6.3, §7), or
    /// no coding is named; 501 for any other coding (§6.1): the server decodes none, so it
    /// could not find the body's end.
    fn check(&self) -> Result<(), HeadError> {
        if self.chunked + self.others == 0
            || self.chunked > 1
            || (self.chunked == 1 && !self.last_is_chunked)
        {
            return Err(HeadError::Malformed);
        }
        if self.others > 0 {
            return Err(HeadError::UnknownCoding);
        }
        Ok(())
    }
}

/// If the request line (complete, or all of `buf` so far) ends in ` HTTP/1.D` with D from 2
/// to 9, rewrites D to 1 and returns D.
fn lower_minor_version(buf: &mut [u8]) -> Option<u8> {
    let mut end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    if end > 0 && buf[end - 1] == b'\r' {
        end -= 1;
    }
    let line = &buf[..end];
    let digit = *line.last()?;
    if line.len() < 10 || &line[end - 9..end - 1] != b" HTTP/1." || !(b'2'..=b'9').contains(&digit)
    {
        return None;
    }
    buf[end - 1] = b'1';
    Some(digit - b'0')
}

/// A field that takes one value: a second line makes it invalid (the empty value, which every
/// user of these fields ignores: an invalid date, a range that is not `bytes=`, an `If-Range`
/// that never holds; RFC 9110 §13.1.3, §13.1.4, §14.2).
fn set_singleton<'b>(slot: &mut Option<&'b [u8]>, value: &'b [u8]) {
    *slot = Some(if slot.is_some() { b"" } else { value });
}

/// A version httparse refused: 505 for a well-formed `HTTP/x.y` that is not 1.x, else 400.
fn version_error(buf: &[u8]) -> HeadError {
    let line_end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len());
    let line = trim(&buf[..line_end]);
    let version = line.rsplit(|&b| b == b' ').next().unwrap_or(b"");
    let well_formed = version.len() == 8
        && version.starts_with(b"HTTP/")
        && version[5].is_ascii_digit()
        && version[6] == b'.'
        && version[7].is_ascii_digit();
    if well_formed && version[5] != b'1' {
        HeadError::BadVersion
    } else {
        HeadError::Malformed
    }
}

/// Strips spaces and tabs (and a stray CR) at both ends.
fn trim(v: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\r');
    let start = v.iter().position(|b| !is_space(b)).unwrap_or(v.len());
    let end = v
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    &v[start..end]
}

/// A non-empty run of ASCII digits that fits in a `u64`.
pub fn parse_decimal(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 19 {
        return None;
    }
    v.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadLimits = HeadLimits {
        max_request_line_bytes: 64,
        max_head_bytes: 256,
        max_header_lines: 8,
    };

    /// Parses a copy (the parser may rewrite the version in place).
    fn parse_copy(buf: &[u8], limits: &HeadLimits) -> Result<Parsed<'static>, HeadError> {
        parse(Box::leak(buf.to_vec().into_boxed_slice()), limits)
    }

    fn complete(buf: &[u8]) -> (Request<'static>, usize) {
        let buf: &'static mut [u8] = Box::leak(buf.to_vec().into_boxed_slice());
        match parse(buf, &LIMITS).unwrap() {
            Parsed::Complete(r, n) => (r, n),
            Parsed::Partial => panic!("partial"),
        }
    }

    #[test]
    fn get_with_headers() {
        let buf =
            b"GET /a HTTP/1.1\r\nHost: x\r\nRange: bytes=0-1 \r\nIf-None-Match: \"e\"\r\n\r\n";
        let (r, n) = complete(buf);
        assert_eq!(n, buf.len());
        assert_eq!(r.method, Method::Get);
        assert_eq!(r.target, b"/a");
        assert_eq!(r.range, Some(&b"bytes=0-1"[..]));
        assert_eq!(r.if_none_match.lines(), Some(&[&b"\"e\""[..]][..]));
        assert!(r.keep_alive);
    }

    #[test]
    fn pipelined_requests_parse_one_at_a_time() {
        let buf = b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nHEAD /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3";
        let (r1, n1) = complete(buf);
        assert_eq!(r1.target, b"/1");
        let (r2, n2) = complete(&buf[n1..]);
        assert_eq!((r2.method, r2.target), (Method::Head, &b"/2"[..]));
        assert_eq!(parse_copy(&buf[n1 + n2..], &LIMITS), Ok(Parsed::Partial));
    }

    #[test]
    fn keep_alive_rules() {
        let (r, _) = complete(b"GET / HTTP/1.0\r\n\r\n");
        assert!(!r.keep_alive);
        let (r, _) = complete(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
        assert!(r.keep_alive);
        let (r, _) = complete(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n");
        assert!(!r.keep_alive);
    }

    #[test]
    fn stray_crlf_before_request_is_skipped() {
        let buf = b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
        let (_, n) = complete(buf);
        assert_eq!(n, buf.len());
    }

    #[test]
    fn limits() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(100));
        assert_eq!(
            parse_copy(long.as_bytes(), &LIMITS),
            Err(HeadError::RequestLineTooLong)
        );
        assert_eq!(
            parse_copy(&long.as_bytes()[..80], &LIMITS),
            Err(HeadError::RequestLineTooLong)
        );
        let big = format!("GET / HTTP/1.1\r\nHost: x\r\nX: {}\r\n", "b".repeat(300));
        assert_eq!(
            parse_copy(big.as_bytes(), &LIMITS),
            Err(HeadError::HeadTooLarge)
        );
        let many: String = (0..71).map(|i| format!("H{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        let roomy = HeadLimits {
            max_request_line_bytes: 64,
            max_head_bytes: 1 << 20,
            max_header_lines: 70,
        };
        assert_eq!(
            parse_copy(many.as_bytes(), &roomy),
            Err(HeadError::TooManyHeaders)
        );
        // Exactly at the limit (Host plus 69): parsed on the heap.
        let at: String = (0..69).map(|i| format!("H{i}: v\r\n")).collect();
        let at = format!("GET / HTTP/1.1\r\nHost: x\r\n{at}\r\n");
        assert!(matches!(
            parse_copy(at.as_bytes(), &roomy),
            Ok(Parsed::Complete(..))
        ));
        // Below the stack array's size.
        let few = HeadLimits {
            max_header_lines: 2,
            ..roomy
        };
        let three = b"GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\n\r\n";
        assert_eq!(parse_copy(three, &few), Err(HeadError::TooManyHeaders));
    }

    #[test]
    fn malformed() {
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..], // no Host
            b"GET\x01 / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a/b\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: :80\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost:\r\n\r\n",
            b"GET / HTTP/1.0\r\nHost: x/y?z#\r\n\r\n",
        ] {
            assert_eq!(
                parse_copy(bad, &LIMITS),
                Err(HeadError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_copy(b"GET / HTTP/2.0\r\n\r\n", &LIMITS),
            Err(HeadError::BadVersion)
        );
    }

    #[test]
    fn transfer_codings() {
        for (te, want) in [
            ("chunked", Ok(())),
            ("Chunked ", Ok(())),
            ("chunked, gzip", Err(HeadError::Malformed)),
            (
                "chunked\r\nTransfer-Encoding: chunked",
                Err(HeadError::Malformed),
            ),
            ("chunked, chunked", Err(HeadError::Malformed)),
            ("", Err(HeadError::Malformed)),
            (" , ", Err(HeadError::Malformed)),
            ("gzip, chunked", Err(HeadError::UnknownCoding)),
            (
                "gzip\r\nTransfer-Encoding: chunked",
                Err(HeadError::UnknownCoding),
            ),
            ("foo", Err(HeadError::UnknownCoding)),
            ("identity", Err(HeadError::UnknownCoding)),
        ] {
            let buf = format!("GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {te}\r\n\r\n");
            let got = parse_copy(buf.as_bytes(), &LIMITS).map(|_| ());
            assert_eq!(got, want, "{te:?}");
        }
    }

    #[test]
    fn higher_minor_versions_are_served_as_1_1() {
        let (r, n) = complete(b"GET / HTTP/1.2\r\nHost: x\r\n\r\n");
        assert_eq!((r.minor_version, r.keep_alive, n), (2, true, 27));
        let (r, _) = complete(b"GET / HTTP/1.9\nHost: x\n\n");
        assert_eq!(r.minor_version, 9);
        assert_eq!(parse_copy(b"GET / HTTP/1.2", &LIMITS), Ok(Parsed::Partial));
        for bad in [&b"GET / HTTP/1.10\r\n\r\n"[..], b"GET / HTTP/1.a\r\n\r\n"] {
            assert_eq!(
                parse_copy(bad, &LIMITS),
                Err(HeadError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_copy(b"GET / HTTP/3.0\r\n\r\n", &LIMITS),
            Err(HeadError::BadVersion)
        );
    }

    #[test]
    fn decimal() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"12345"), Some(12345));
        assert_eq!(parse_decimal(b""), None);
        assert_eq!(parse_decimal(b"-1"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
    }
}
