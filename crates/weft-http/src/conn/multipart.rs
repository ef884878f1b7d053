//! A 206 answer with a `multipart/byteranges` body (RFC 9110 §14.6), one part per span: the
//! parts' heads, then each span from the cached bytes or by `send_file`.

use std::io;
use std::sync::Arc;

use super::{report_truncated, Conn};
use crate::cache::CachedFile;
use crate::range::Span;
use crate::request::{Method, Request};
use crate::response;

impl Conn<'_> {
    /// Answers 206 with a `multipart/byteranges` body, one part per span (RFC 9110 §14.6).
    /// Returns false when the connection must close (the file shrank under us).
    pub(super) fn send_multipart(
        &mut self,
        req: &Request<'_>,
        file: &Arc<CachedFile>,
        spans: &[Span],
        keep_alive: bool,
        date: &[u8; crate::date::DATE_BYTES],
    ) -> io::Result<bool> {
        let boundary = response::next_boundary();
        let part_heads: Vec<Vec<u8>> = spans
            .iter()
            .map(|s| response::part_head(&boundary, file.content_type, s.start, s.len, file.len))
            .collect();
        let end = response::multipart_end(&boundary);
        let body_len = part_heads.iter().map(|h| h.len() as u64).sum::<u64>()
            + spans.iter().map(|s| s.len).sum::<u64>()
            + end.len() as u64;
        response::start(&mut self.out, 206, date);
        self.out
            .extend_from_slice(b"Content-Type: multipart/byteranges; boundary=");
        self.out.extend_from_slice(&boundary);
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(file.validator_lines());
        response::content_length(&mut self.out, body_len);
        response::finish(&mut self.out, keep_alive);
        if req.method == Method::Head {
            self.log(Some(req), 206, 0);
            return Ok(true);
        }
        if file.body.is_some() {
            for (head, s) in part_heads.iter().zip(spans) {
                self.out.extend_from_slice(head);
                self.push_body(Arc::clone(file), s.start as usize, s.len as usize);
            }
            self.out.extend_from_slice(&end);
            self.log(Some(req), 206, body_len);
            return Ok(true);
        }
        self.ensure_nodelay();
        let mut sent_total = 0u64;
        for (head, s) in part_heads.iter().zip(spans) {
            self.out.extend_from_slice(head);
            self.flush()?;
            self.slot.release();
            let sent = weft::fs::send_file(&file.file, s.start, s.len as usize, &self.stream)?;
            sent_total += head.len() as u64 + sent as u64;
            if sent as u64 != s.len {
                self.log(Some(req), 206, sent_total);
                report_truncated(req, sent_total, body_len);
                return Ok(false);
            }
        }
        self.out.extend_from_slice(&end);
        self.log(Some(req), 206, body_len);
        Ok(true)
    }
}
