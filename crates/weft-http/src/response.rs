//! Writing response heads (and the small bodies of error and redirect responses) into the
//! connection's output buffer. Pure.
//!
//! Every response carries `Server`, `Date`, `Content-Length` (except 304) and `Connection`,
//! so a client always knows where it ends without the connection closing.

use crate::date::DATE_BYTES;

/// The reason phrase of the statuses this server sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        413 => "Request Entity Too Large",
        414 => "Request-URI Too Large",
        416 => "Requested Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Temporarily Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The status line, `Server` and `Date`.
pub fn start(out: &mut Vec<u8>, status: u16, date: &[u8; DATE_BYTES]) {
    out.extend_from_slice(b"HTTP/1.1 ");
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
    out.extend_from_slice(b"\r\nServer: weft\r\nDate: ");
    out.extend_from_slice(date);
    out.extend_from_slice(b"\r\n");
}

/// `Content-Length: N`.
pub fn content_length(out: &mut Vec<u8>, len: u64) {
    out.extend_from_slice(b"Content-Length: ");
    push_decimal(out, len);
    out.extend_from_slice(b"\r\n");
}

/// `Content-Range: bytes START-END/TOTAL` (for a non-empty range).
pub fn content_range(out: &mut Vec<u8>, start: u64, len: u64, total: u64) {
    out.extend_from_slice(b"Content-Range: bytes ");
    push_decimal(out, start);
    out.push(b'-');
    push_decimal(out, start + len - 1);
    out.push(b'/');
    push_decimal(out, total);
    out.extend_from_slice(b"\r\n");
}

/// The length of a multipart boundary: 20 digits, as nginx's.
pub const BOUNDARY_BYTES: usize = 20;

/// A fresh boundary for a `multipart/byteranges` response (a process-wide counter, as nginx
/// uses; the boundary only has to be unlikely inside the parts).
pub fn next_boundary() -> [u8; BOUNDARY_BYTES] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut digits = Vec::with_capacity(BOUNDARY_BYTES);
    push_decimal(&mut digits, n);
    let mut out = [b'0'; BOUNDARY_BYTES];
    out[BOUNDARY_BYTES - digits.len()..].copy_from_slice(&digits);
    out
}

/// The delimiter and headers before one part of a `multipart/byteranges` body (RFC 9110
/// §14.6; the same bytes nginx sends: CRLF, `--boundary`, `Content-Type`, `Content-Range`).
pub fn part_head(boundary: &[u8], content_type: &str, start: u64, len: u64, total: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(100);
    out.extend_from_slice(b"\r\n--");
    out.extend_from_slice(boundary);
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\n");
    content_range(&mut out, start, len, total);
    out.extend_from_slice(b"\r\n");
    out
}

/// The close delimiter ending a `multipart/byteranges` body.
pub fn multipart_end(boundary: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(BOUNDARY_BYTES + 8);
    out.extend_from_slice(b"\r\n--");
    out.extend_from_slice(boundary);
    out.extend_from_slice(b"--\r\n");
    out
}

/// `Connection: ...` and the blank line ending the head.
pub fn finish(out: &mut Vec<u8>, keep_alive: bool) {
    out.extend_from_slice(if keep_alive {
        b"Connection: keep-alive\r\n\r\n".as_slice()
    } else {
        b"Connection: close\r\n\r\n".as_slice()
    });
}

/// A complete response with a small HTML body saying the status (as nginx's error pages do);
/// `extra` header lines (CRLF-ended) go before `Connection`. Returns the body length.
pub fn simple(
    out: &mut Vec<u8>,
    status: u16,
    date: &[u8; DATE_BYTES],
    extra: &[u8],
    keep_alive: bool,
    with_body: bool,
) -> u64 {
    let mut body = Vec::with_capacity(160);
    body.extend_from_slice(b"<html>\r\n<head><title>");
    push_status_text(&mut body, status);
    body.extend_from_slice(b"</title></head>\r\n<body>\r\n<center><h1>");
    push_status_text(&mut body, status);
    body.extend_from_slice(
        b"</h1></center>\r\n<hr><center>weft</center>\r\n</body>\r\n</html>\r\n",
    );
    start(out, status, date);
    out.extend_from_slice(b"Content-Type: text/html\r\n");
    content_length(out, body.len() as u64);
    out.extend_from_slice(extra);
    finish(out, keep_alive);
    if with_body {
        out.extend_from_slice(&body);
        body.len() as u64
    } else {
        0
    }
}

fn push_status_text(out: &mut Vec<u8>, status: u16) {
    push_decimal(out, u64::from(status));
    out.push(b' ');
    out.extend_from_slice(reason(status).as_bytes());
}

/// Appends `n` in decimal without allocating.
pub fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &[u8; DATE_BYTES] = b"Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn head_lines() {
        let mut out = Vec::new();
        start(&mut out, 206, DATE);
        content_length(&mut out, 10);
        content_range(&mut out, 90, 10, 100);
        finish(&mut out, true);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 206 Partial Content\r\nServer: weft\r\nDate: Sun, 06 Nov 1994 08:49:37 \
             GMT\r\nContent-Length: 10\r\nContent-Range: bytes 90-99/100\r\nConnection: \
             keep-alive\r\n\r\n"
        );
    }

    #[test]
    fn simple_response_declares_its_body() {
        let mut out = Vec::new();
        let n = simple(&mut out, 404, DATE, b"", false, true);
        let text = String::from_utf8(out).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert_eq!(body.len() as u64, n);
        assert!(head.contains(&format!("Content-Length: {n}")));
        assert!(head.ends_with("Connection: close"));
        assert!(body.contains("404 Not Found"));
        let mut out = Vec::new();
        assert_eq!(
            simple(&mut out, 405, DATE, b"Allow: GET, HEAD\r\n", true, false),
            0
        );
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("keep-alive\r\n\r\n"));
    }

    #[test]
    fn multipart_pieces() {
        let b = next_boundary();
        assert_eq!(b.len(), 20);
        assert!(b.iter().all(u8::is_ascii_digit));
        assert_ne!(b, next_boundary());
        assert_eq!(
            part_head(b"B", "text/plain", 5, 2, 100),
            b"\r\n--B\r\nContent-Type: text/plain\r\nContent-Range: bytes 5-6/100\r\n\r\n"
        );
        assert_eq!(multipart_end(b"B"), b"\r\n--B--\r\n");
    }

    #[test]
    fn decimals() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut out = Vec::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }
}
