//! Reading one HTTP/1.x response: status line and headers with httparse, then a
//! `Content-Length` body read and discarded.
//!
//! Invariant: the generator never pipelines, so after a response the buffer holds nothing of
//! the next one; anything beyond the body is a protocol error.

use std::io::{self, ErrorKind, Read};

use weft::net::TcpStream;

/// Largest response header block accepted.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// What one response was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body_bytes: u64,
    /// The server will close the connection after this response.
    pub close: bool,
}

/// Reads a whole response from `stream`, using `buf` as scratch space.
pub fn read(stream: &TcpStream, buf: &mut [u8]) -> io::Result<Reply> {
    let mut have = 0;
    let (status, length, close, head_len) = loop {
        let n = (&*stream).read(&mut buf[have..])?;
        if n == 0 {
            return Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "connection closed before the response",
            ));
        }
        have += n;
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf[..have]) {
            Ok(httparse::Status::Complete(head_len)) => {
                let status = response.code.unwrap_or(0);
                let mut length = None;
                let mut close = response.version == Some(0);
                for h in response.headers.iter() {
                    if h.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(h.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<u64>().ok());
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        return Err(io::Error::other("chunked responses are not supported"));
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                        close = v.contains("close");
                    }
                }
                // 1xx, 204 and 304 have no body; otherwise no length means "until close".
                let length = match (status, length) {
                    (100..=199 | 204 | 304, _) => Some(0),
                    (_, l) => l,
                };
                break (status, length, close, head_len);
            }
            Ok(httparse::Status::Partial) if have < buf.len().min(MAX_HEADER_BYTES) => {}
            Ok(httparse::Status::Partial) => {
                return Err(io::Error::other("response header block too large"))
            }
            Err(e) => return Err(io::Error::other(format!("bad response: {e}"))),
        }
    };
    let mut body = (have - head_len) as u64;
    match length {
        Some(len) => {
            if body > len {
                return Err(io::Error::other("more bytes than Content-Length"));
            }
            while body < len {
                let want = ((len - body) as usize).min(buf.len());
                let n = (&*stream).read(&mut buf[..want])?;
                if n == 0 {
                    return Err(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        "connection closed inside the body",
                    ));
                }
                body += n as u64;
            }
            Ok(Reply {
                status,
                body_bytes: body,
                close,
            })
        }
        None => {
            loop {
                let n = (&*stream).read(buf)?;
                if n == 0 {
                    break;
                }
                body += n as u64;
            }
            Ok(Reply {
                status,
                body_bytes: body,
                close: true,
            })
        }
    }
}
